#include "core/running_floor.h"

#include <algorithm>
#include <charconv>
#include <system_error>

namespace akadzed {

std::optional<SnapshotXids> ParseSnapshot(std::string_view snapshot) {
  auto number = [](std::string_view digits) -> std::optional<std::uint64_t> {
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
    return v;
  };
  const std::size_t first = snapshot.find(':');
  const std::size_t second = first == std::string_view::npos ? first : snapshot.find(':', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  const auto xmin = number(snapshot.substr(0, first));
  const auto xmax = number(snapshot.substr(first + 1, second - first - 1));
  if (!xmin || !xmax || *xmin > *xmax) return std::nullopt;
  SnapshotXids out{*xmin, *xmax, {}};
  std::string_view rest = snapshot.substr(second + 1);
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const auto x = number(rest.substr(0, comma));
    if (!x) return std::nullopt;
    out.in_progress.push_back(*x);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (comma != std::string_view::npos && rest.empty()) return std::nullopt;
  }
  return out;
}

RunningFloor RunningFloorAfter(const SnapshotXids& s, std::vector<std::int64_t> ids) {
  RunningFloor f;
  f.from_xid = s.xmax;
  const std::uint64_t recent = s.xmax > kRunningRangeSlack ? s.xmax - kRunningRangeSlack : 0;
  for (std::uint64_t x : s.in_progress) {
    if (x >= recent) f.from_xid = std::min(f.from_xid, x);
  }
  for (std::uint64_t x : s.in_progress) {
    if (x < f.from_xid) f.points.push_back(x);
  }
  f.ids = std::move(ids);
  return f;
}

std::vector<std::string> XidTexts(const std::vector<std::uint64_t>& xids) {
  std::vector<std::string> out;
  out.reserve(xids.size());
  for (std::uint64_t x : xids) out.push_back(std::to_string(x));
  return out;
}

}  // namespace akadzed
