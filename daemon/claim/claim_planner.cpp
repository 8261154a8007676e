#include "claim/claim_planner.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace akadzed {

namespace {

// States of a (group, stream) cell.
constexpr char kRead = 0;     // the group's rows are read in this stream
constexpr char kSkipped = 1;  // skipped: see ClaimPlanner::Skip
constexpr char kCatchUp = 2;  // a catch-up read was requested and not added yet

constexpr std::int64_t kMaxWindow = std::int64_t{1} << 24;

}  // namespace

bool IndexBefore(const IndexPosition& a, const IndexPosition& b) {
  if (a.priority != b.priority) return a.priority > b.priority;
  if (a.run_at_us != b.run_at_us) return a.run_at_us < b.run_at_us;
  return a.id < b.id;
}

bool ClaimsBefore(const ReadyRow& a, const ReadyRow& b) {
  if (a.effective != b.effective) return a.effective > b.effective;
  if (a.run_at_us != b.run_at_us) return a.run_at_us < b.run_at_us;
  return a.id < b.id;
}

ClaimPlanner::ClaimPlanner(const ClaimPlannerOptions& options) : options_(options) {
  if (options_.slots < 1) throw std::invalid_argument("ClaimPlanner: slots must be >= 1");
  if (options_.stream_count < 1) throw std::invalid_argument("ClaimPlanner: no streams");
  if (options_.first_window <= 0) options_.first_window = std::int64_t{options_.slots} * 4;
  streams_.resize(static_cast<std::size_t>(options_.stream_count));
  for (auto& s : streams_) s.next_window = options_.first_window;
  groups_.push_back(Group{std::nullopt, true, kUnlimited});  // the NULL-key group
  skipped_.assign(static_cast<std::size_t>(options_.stream_count), kRead);
}

void ClaimPlanner::LowerSlots(int slots) {
  if (slots < 1 || slots > options_.slots) {
    throw std::invalid_argument("ClaimPlanner::LowerSlots: slots must be in [1, " +
                                std::to_string(options_.slots) + "]");
  }
  if (!rows_.empty() || planned_) throw std::logic_error("ClaimPlanner::LowerSlots after rows or a plan");
  options_.slots = slots;
}

int ClaimPlanner::GroupFor(const std::optional<std::string>& key) {
  if (!key) return 0;
  auto it = group_by_key_.find(*key);
  if (it != group_by_key_.end()) return it->second;
  int g = static_cast<int>(groups_.size());
  groups_.push_back(Group{key, false, 0});
  group_by_key_.emplace(*key, g);
  skipped_.resize(groups_.size() * streams_.size(), kRead);
  return g;
}

void ClaimPlanner::MergeNewRows(std::size_t first_new) {
  if (first_new == rows_.size()) return;
  auto before = [this](int a, int b) { return ClaimsBefore(rows_[a].data, rows_[b].data); };
  std::size_t old_size = order_.size();
  for (std::size_t i = first_new; i < rows_.size(); ++i) order_.push_back(static_cast<int>(i));
  auto mid = order_.begin() + static_cast<std::ptrdiff_t>(old_size);
  if (!std::is_sorted(mid, order_.end(), before)) std::sort(mid, order_.end(), before);
  if (old_size > 0 && mid != order_.end() && before(*mid, *(mid - 1))) {
    std::inplace_merge(order_.begin(), mid, order_.end(), before);
  }
}

void ClaimPlanner::AddRows(std::span<const ReadyRow> rows) {
  std::size_t first_new = rows_.size();
  for (const ReadyRow& r : rows) {
    if (row_by_id_.contains(r.id)) continue;
    int g = GroupFor(r.limit_key);
    row_by_id_.emplace(r.id, static_cast<int>(rows_.size()));
    rows_.push_back(Row{r, g, false});
  }
  MergeNewRows(first_new);
}

void ClaimPlanner::AddWindow(const WindowRead& read, std::span<const ReadyRow> rows,
                             bool exhausted) {
  Stream& stream = streams_.at(static_cast<std::size_t>(read.stream));
  AddRows(rows);
  if (!rows.empty()) stream.frontier = rows.back();
  if (exhausted) stream.exhausted = true;
}

void ClaimPlanner::AddCatchUp(const CatchUpRead& read, std::span<const ReadyRow> rows) {
  AddRows(rows);
  int g = GroupFor(read.limit_key);
  skipped_[static_cast<std::size_t>(g) * streams_.size() + static_cast<std::size_t>(read.stream)] =
      kRead;
}

std::vector<std::string> ClaimPlanner::KeysNeedingState() const {
  std::vector<std::string> keys;
  for (const Group& g : groups_) {
    if (!g.has_state) keys.push_back(*g.key);
  }
  return keys;
}

void ClaimPlanner::SetKeyAllowed(const std::string& key, std::int64_t allowed) {
  int g = GroupFor(key);
  groups_[static_cast<std::size_t>(g)].has_state = true;
  groups_[static_cast<std::size_t>(g)].allowed = std::max<std::int64_t>(allowed, 0);
}

void ClaimPlanner::RemoveRows(std::span<const std::int64_t> ids) {
  for (std::int64_t id : ids) {
    auto it = row_by_id_.find(id);
    if (it != row_by_id_.end()) rows_[static_cast<std::size_t>(it->second)].removed = true;
  }
}

const ReadyRow* ClaimPlanner::Find(std::int64_t id) const {
  auto it = row_by_id_.find(id);
  return it == row_by_id_.end() ? nullptr : &rows_[static_cast<std::size_t>(it->second)].data;
}

std::vector<ReadyRow> ClaimPlanner::KnownRows() const {
  std::vector<ReadyRow> out;
  out.reserve(rows_.size());
  for (const Row& r : rows_) out.push_back(r.data);
  return out;
}

KnownPrefix ClaimPlanner::Known(int stream) const {
  const Stream& st = streams_[static_cast<std::size_t>(stream)];
  KnownPrefix k;
  if (st.exhausted) {
    k.whole = true;
  } else if (st.frontier) {
    k.through = st.frontier->index_position();
  } else {
    return k;
  }
  for (const Skip& skip : skips_) {
    if (skip.stream != stream) continue;
    if (!skip.complete_through) return KnownPrefix{};
    const IndexPosition c = skip.complete_through->index_position();
    if (k.whole || IndexBefore(c, *k.through)) {
      k.whole = false;
      k.through = c;
    }
  }
  return k;
}

bool ClaimPlanner::AtOrBefore(int r, const std::optional<ReadyRow>& bound) const {
  if (!bound) return false;
  return !ClaimsBefore(*bound, rows_[static_cast<std::size_t>(r)].data);
}

void ClaimPlanner::SetStreamStart(int stream, const ReadyRow& first_row) {
  // Just before the first row, in index and in claim order: one id less,
  // or, for id INT64_MIN, the latest position of the microsecond before.
  // (A first row at run_at -infinity with id INT64_MIN has no position
  // before it: the cursor stays on it, and that one row is not read.)
  ReadyRow before = first_row;
  if (before.id != std::numeric_limits<std::int64_t>::min()) {
    before.id -= 1;
  } else if (before.run_at_us != std::numeric_limits<std::int64_t>::min()) {
    before.run_at_us -= 1;
    before.id = std::numeric_limits<std::int64_t>::max();
  }
  streams_.at(static_cast<std::size_t>(stream)).frontier = before;
}

std::vector<WindowRead> ClaimPlanner::FirstReads() {
  std::vector<WindowRead> reads;
  for (int s = 0; s < options_.stream_count; ++s) reads.push_back(MakeRead(s));
  return reads;
}

WindowRead ClaimPlanner::MakeRead(int s) {
  Stream& stream = streams_[static_cast<std::size_t>(s)];
  WindowRead read;
  read.stream = s;
  if (stream.frontier) read.after = stream.frontier->index_position();
  read.limit = stream.next_window;
  stream.next_window = std::min(stream.next_window * 2, kMaxWindow);
  const std::size_t n_streams = streams_.size();
  for (std::size_t g = 0; g < groups_.size() && planned_; ++g) {
    char& cell = skipped_[g * n_streams + static_cast<std::size_t>(s)];
    if (cell == kRead) {
      if (!SkipSafe(g, stream.frontier)) continue;
      cell = kSkipped;
      skips_.push_back(Skip{static_cast<int>(g), s, stream.frontier});
    }
    if (cell != kSkipped) continue;
    if (g == 0) {
      read.skip_null_key = true;
    } else {
      read.skip_keys.push_back(*groups_[g].key);
    }
  }
  return read;
}

int ClaimPlanner::KthLiveRow(std::size_t g, std::int64_t k) const {
  if (k == groups_[g].allowed) return kth_allowed_[g];
  if (options_.mode == ClaimMode::kFair && k >= 1 &&
      static_cast<std::size_t>(k) <= first_rows_[g].size()) {
    return first_rows_[g][static_cast<std::size_t>(k - 1)];
  }
  return -1;
}

bool ClaimPlanner::SkipSafe(std::size_t g, const std::optional<ReadyRow>& c) const {
  // With L = live rows of g at or before c, every later row of g is past its
  // key's n (L >= n), or has a turn past the cut (L >= t_cut), or has the
  // cut's turn but lies after the cut row (L >= t_cut - 1, cut row <= c).
  auto rows_through = [&](std::int64_t k) {
    if (k <= 0) return true;
    int r = KthLiveRow(g, k);
    return r >= 0 && AtOrBefore(r, c);
  };
  const std::int64_t allowed = groups_[g].allowed;
  if (options_.mode != ClaimMode::kFair) return rows_through(allowed);
  if (rows_through(std::min(allowed, t_cut_))) return true;
  const bool cut_inside = cut_row_ < 0 || AtOrBefore(cut_row_, c);
  return cut_inside && rows_through(t_cut_ - 1);
}

PlanStep ClaimPlanner::Plan() {
  const bool fair = options_.mode == ClaimMode::kFair;
  const auto slots = static_cast<std::size_t>(options_.slots);
  for (const Group& g : groups_) {
    if (!g.has_state) throw std::logic_error("ClaimPlanner::Plan: key without state: " + *g.key);
  }

  // B: every unread row lies after it. minus_infinity: some stream is unread.
  bool all_exhausted = true;
  bool minus_infinity = false;
  std::optional<ReadyRow> bound;
  for (const Stream& s : streams_) {
    if (s.exhausted) continue;
    all_exhausted = false;
    if (!s.frontier) {
      minus_infinity = true;
    } else if (!bound || ClaimsBefore(*s.frontier, *bound)) {
      bound = s.frontier;
    }
  }
  auto exact = [&](int r) { return all_exhausted || (!minus_infinity && AtOrBefore(r, bound)); };

  // One pass in claim order: ranks (turns), eligibility, candidates.
  const std::size_t n_groups = groups_.size();
  std::vector<std::int64_t> rank(n_groups, 0);
  std::vector<int>& kth_allowed = kth_allowed_;
  std::vector<std::vector<int>>& first_rows = first_rows_;
  kth_allowed.assign(n_groups, -1);
  first_rows.assign(fair ? n_groups : 0, {});
  std::vector<int> plan;            // row indices, result order
  std::vector<std::int64_t> turns;  // turn of each plan entry
  std::vector<std::vector<int>> buckets(fair ? slots + 1 : 0);
  plan.reserve(slots);
  for (int idx : order_) {
    const Row& row = rows_[static_cast<std::size_t>(idx)];
    if (row.removed) continue;
    const auto g = static_cast<std::size_t>(row.group);
    const std::int64_t k = ++rank[g];
    const std::int64_t allowed = groups_[g].allowed;
    if (k == allowed) kth_allowed[g] = idx;
    if (fair && k <= static_cast<std::int64_t>(slots) + 1) first_rows[g].push_back(idx);
    if (k > allowed) continue;  // past its key's n: dropped
    if (!fair) {
      if (plan.size() < slots) {
        plan.push_back(idx);
        turns.push_back(k);
      }
    } else if (k <= static_cast<std::int64_t>(slots)) {
      buckets[static_cast<std::size_t>(k)].push_back(idx);
    }
  }

  // Fair: order by (turn, claim order). The cut (t_cut, cut_row) is the
  // slots-th exact candidate: the result's last entry is never after it.
  // Fewer exact candidates: t_cut = slots + 1 and no cut row.
  std::int64_t t_cut = static_cast<std::int64_t>(slots) + 1;
  int cut_row = -1;
  if (fair) {
    std::size_t exact_seen = 0;
    for (std::size_t t = 1; t <= slots; ++t) {
      for (int idx : buckets[t]) {
        if (plan.size() < slots) {
          plan.push_back(idx);
          turns.push_back(static_cast<std::int64_t>(t));
        }
        if (cut_row < 0 && exact(idx) && ++exact_seen == slots) {
          t_cut = static_cast<std::int64_t>(t);
          cut_row = idx;
        }
      }
      if (plan.size() == slots && cut_row >= 0) break;
    }
  }

  const bool plan_full = plan.size() == slots;
  bool plan_exact = true;
  for (int idx : plan) plan_exact = plan_exact && exact(idx);
  const bool turn_one = !turns.empty() && turns.back() == 1;
  PlanStep step;
  step.settled = all_exhausted || (plan_full && plan_exact && (!fair || turn_one));

  t_cut_ = t_cut;
  cut_row_ = cut_row;
  planned_ = true;

  // Skips that removed rows made unsafe: read what was skipped.
  const std::size_t n_streams = streams_.size();
  for (auto it = skips_.begin(); it != skips_.end();) {
    const auto g = static_cast<std::size_t>(it->group);
    if (SkipSafe(g, it->complete_through)) {
      ++it;
      continue;
    }
    const Stream& stream = streams_[static_cast<std::size_t>(it->stream)];
    char& cell = skipped_[g * n_streams + static_cast<std::size_t>(it->stream)];
    if (stream.frontier || stream.exhausted) {
      CatchUpRead c;
      c.stream = it->stream;
      c.limit_key = groups_[g].key;
      if (it->complete_through) c.after = it->complete_through->index_position();
      if (!stream.exhausted) c.through = stream.frontier->index_position();
      step.catch_ups.push_back(std::move(c));
      cell = kCatchUp;
    } else {
      cell = kRead;  // nothing of that stream was read past the skip point
    }
    it = skips_.erase(it);
  }
  if (!step.catch_ups.empty()) step.settled = false;

  for (int idx : plan) step.plan.push_back(rows_[static_cast<std::size_t>(idx)].data.id);
  if (step.settled) return step;

  // Which streams to read. When the plan is full and only needs its last row
  // to become exact: the streams whose frontier is still before that row.
  // Otherwise (more candidates needed, or fair mode must see every group):
  // the unexhausted streams with the earliest frontiers, one the first time,
  // twice as many each time after, so that many streams cost few rounds.
  std::vector<int> open;
  for (int s = 0; s < options_.stream_count; ++s) {
    if (!streams_[static_cast<std::size_t>(s)].exhausted) open.push_back(s);
  }
  if (plan_full && (!fair || turn_one)) {
    const ReadyRow& target = rows_[static_cast<std::size_t>(plan.back())].data;
    for (int s : open) {
      const Stream& stream = streams_[static_cast<std::size_t>(s)];
      if (stream.frontier && !ClaimsBefore(*stream.frontier, target)) continue;
      step.reads.push_back(MakeRead(s));
    }
  } else {
    auto earlier = [this](int a, int b) {
      const auto& fa = streams_[static_cast<std::size_t>(a)].frontier;
      const auto& fb = streams_[static_cast<std::size_t>(b)].frontier;
      if (!fa || !fb) return !fa && fb;
      return ClaimsBefore(*fa, *fb);
    };
    std::stable_sort(open.begin(), open.end(), earlier);
    const std::size_t width = std::min<std::size_t>(open.size(), read_width_);
    for (std::size_t i = 0; i < width; ++i) step.reads.push_back(MakeRead(open[i]));
    read_width_ *= 2;
  }
  if (step.reads.empty() && step.catch_ups.empty()) {
    throw std::logic_error("ClaimPlanner::Plan: not settled but nothing left to read");
  }
  return step;
}

}  // namespace akadzed
