#include "claim/keyed_window.h"

#include <algorithm>
#include <stdexcept>
#include <string_view>
#include <unordered_set>

namespace akadzed {

KeyedWindow::KeyedWindow(std::span<const ReadyRow> group_starts) {
  for (const ReadyRow& start : group_starts) heads_.emplace(start.limit_key, start);
}

namespace {

// The groups a read skips, for lookups.
class SkipSet {
 public:
  explicit SkipSet(const WindowRead& read)
      : keys_(read.skip_keys.begin(), read.skip_keys.end()), null_(read.skip_null_key) {}
  bool contains(const GroupKey& key) const { return key ? keys_.contains(*key) : null_; }

 private:
  std::unordered_set<std::string_view> keys_;
  bool null_;
};

}  // namespace

std::vector<GroupKey> KeyedWindow::GroupsNeedingHead(const WindowRead& read) const {
  if (!read.after) throw std::logic_error("KeyedWindow: a keyed read needs a frontier");
  const SkipSet skipped(read);
  std::vector<GroupKey> out;
  for (const auto& [key, head] : heads_) {
    if (skipped.contains(key)) continue;
    if (!head || !IndexBefore(*read.after, head->index_position())) out.push_back(key);
  }
  return out;
}

void KeyedWindow::SetHead(const GroupKey& key, const std::optional<ReadyRow>& head) {
  if (!head) {
    heads_.erase(key);
  } else {
    heads_[key] = head;
  }
}

std::optional<KeyedRowsPlan> KeyedWindow::PlanRows(const WindowRead& read) const {
  if (!read.after || read.limit < 1) throw std::logic_error("KeyedWindow::PlanRows: bad read");
  struct Candidate {
    const GroupKey* key;
    IndexPosition head;
  };
  const SkipSet skipped(read);
  std::vector<Candidate> candidates;
  for (const auto& [key, head] : heads_) {
    if (skipped.contains(key)) continue;
    if (!head || !IndexBefore(*read.after, head->index_position())) {
      throw std::logic_error("KeyedWindow::PlanRows: a group's head was not read");
    }
    candidates.push_back(Candidate{&key, head->index_position()});
  }
  if (candidates.empty()) return std::nullopt;
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return IndexBefore(a.head, b.head); });
  // Through the m-th head (m = min(limit, groups)): at least m rows. The
  // group with the j-th head reads at most ceil(limit / j) rows (about
  // limit * ln(m) rows in all, however dense the groups); Merge() returns
  // only what is complete, so any limit is exact, and the first group's
  // `limit` rows guarantee progress.
  const auto m = static_cast<std::size_t>(
      std::min<std::int64_t>(read.limit, static_cast<std::int64_t>(candidates.size())));
  KeyedRowsPlan plan;
  plan.through = candidates[m - 1].head;
  plan.limit = read.limit;
  for (std::size_t j = 0; j < m; ++j) {
    const auto rank = static_cast<std::int64_t>(j + 1);
    plan.groups.push_back(GroupRowsRead{*candidates[j].key, (read.limit + rank - 1) / rank});
  }
  return plan;
}

std::vector<ReadyRow> KeyedWindow::Merge(const KeyedRowsPlan& plan,
                                         std::span<const std::vector<ReadyRow>> rows) {
  if (rows.size() != plan.groups.size()) throw std::logic_error("KeyedWindow::Merge: bad rows");
  // Every group's rows are known from the frontier through `complete`: the
  // plan's bound, or the last row of a group whose read hit its limit.
  IndexPosition complete = plan.through;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& got = rows[i];
    if (!got.empty() && static_cast<std::int64_t>(got.size()) >= plan.groups[i].limit &&
        IndexBefore(got.back().index_position(), complete)) {
      complete = got.back().index_position();
    }
  }
  std::vector<ReadyRow> window;
  for (const auto& got : rows) {
    for (const ReadyRow& r : got) {
      if (!IndexBefore(complete, r.index_position())) window.push_back(r);
    }
  }
  auto before = [](const ReadyRow& a, const ReadyRow& b) {
    return IndexBefore(a.index_position(), b.index_position());
  };
  std::sort(window.begin(), window.end(), before);
  if (static_cast<std::int64_t>(window.size()) > plan.limit) {
    window.resize(static_cast<std::size_t>(plan.limit));
    complete = window.back().index_position();
  }
  // A group's first row after `complete` is its next head (its rows were read
  // without a gap from the frontier); otherwise its head is unknown again.
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& got = rows[i];
    auto next = std::find_if(got.begin(), got.end(), [&](const ReadyRow& r) {
      return IndexBefore(complete, r.index_position());
    });
    heads_[plan.groups[i].key] = next == got.end() ? std::nullopt : std::optional<ReadyRow>(*next);
  }
  return window;
}

}  // namespace akadzed
