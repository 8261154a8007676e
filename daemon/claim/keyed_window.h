// KeyedWindow: answers a claim's window read from per-group reads of
// jobs_claim_key_idx (queue, limit_key, priority DESC, run_at, id) instead
// of one filtered walk of jobs_claim_idx.
//
// A WindowRead asks for the next ready rows after a frontier, in claim order,
// skipping some groups (keys at their limit, fair groups that cannot get a
// slot). Through jobs_claim_idx a skipped group's rows are stepped over one by
// one, and a group that owns most of the queue makes that linear. Here each
// group's rows are contiguous: the claim reads, per group that is not
// skipped, its next row (its *head*), then the rows of the groups whose heads
// come first, up to a bound; skipped groups cost nothing. The result is
// always a *prefix* of what the filtered walk would return: every ready row
// of a group not skipped, after the frontier and up to the last row returned
// (docs/claim.md, "Reading around skipped groups"), so the planner sees the
// same rows either way. Without aging only: claim order is index order.
//
// The object is pure (no libpq): the claim transaction reads what it asks
// for and hands it in. It remembers heads across the windows of one claim.
//
// Thread-safety: none; one object belongs to one claim on one thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "claim/claim_planner.h"

namespace akadzed {

// A fair group: a limit key, or nullopt for the NULL-key group.
using GroupKey = std::optional<std::string>;

// One group's rows to read: strictly after the read's frontier, up to and
// including KeyedRowsPlan::through, in claim order, at most `limit`.
struct GroupRowsRead {
  GroupKey key;
  std::int64_t limit = 0;
};

struct KeyedRowsPlan {
  IndexPosition through;
  std::vector<GroupRowsRead> groups;  // in head order
  std::int64_t limit = 0;             // the window's row limit (WindowRead::limit)
};

class KeyedWindow {
 public:
  // `group_starts`: for every group with queued rows in the queue (the
  // claim enumerates them once), its first row in index order, ready or not.
  //
  // A group's *head* is a row of it such that no ready row of the group lies
  // between the frontier it was found for and the head: its first ready row
  // after that frontier, or (a group start) a row at or before it. Either
  // serves; a head that is not ready only costs a read that finds nothing.
  explicit KeyedWindow(std::span<const ReadyRow> group_starts);

  // Groups not skipped by `read` whose head is unknown or not after
  // read.after: read their first ready row after read.after and SetHead()
  // each before PlanRows().
  std::vector<GroupKey> GroupsNeedingHead(const WindowRead& read) const;
  // `head`: the group's first ready row after read.after; nullopt: it has
  // none (it is left out from then on).
  void SetHead(const GroupKey& key, const std::optional<ReadyRow>& head);

  // The rows to read for `read`, once every head it needs is set; nullopt
  // when no group that `read` does not skip has a row left (the stream is
  // exhausted for it). read.after must be set and read.limit >= 1.
  std::optional<KeyedRowsPlan> PlanRows(const WindowRead& read) const;

  // `rows[i]`: what plan.groups[i] returned, in claim order. Returns the
  // window: at most plan.limit rows, every ready row of a group the read
  // does not skip from its frontier up to the last row returned (empty only
  // when rows other claims took meanwhile made every group come back
  // empty); and remembers each group's next head where the rows show it.
  std::vector<ReadyRow> Merge(const KeyedRowsPlan& plan,
                              std::span<const std::vector<ReadyRow>> rows);

 private:
  // Groups with rows possibly left: their known head, or nullopt (unknown).
  std::map<GroupKey, std::optional<ReadyRow>> heads_;
};

}  // namespace akadzed
