// In-doubt recovery of one queue's claims. A claim whose COMMIT was in doubt
// (the connection broke while it was in flight) may have committed: its
// jobs would then be running under this live worker with nobody running
// them, and no rescue would ever take them. So before its next claim the
// claim loop releases, without spending an attempt, every job of its queue
// running under that worker id that it does not hold; unless the lease was
// lost since: then the rescue takes every job of the old id, some of which
// may have run here and been dropped.
//
// Thread-safety: the claim loop's thread only (and tests).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hooks/transition_hooks.h"
#include "runtime/db_session.h"
#include "worker/lease_keeper.h"

namespace akadzed {

class InDoubtClaims {
 public:
  InDoubtClaims(std::string queue, LeaseKeeper& lease, const TransitionHooks* hooks);

  // A claim under `worker_id` was in doubt (the first one counts until its
  // jobs are released).
  void Note(const std::string& worker_id);
  bool pending() const { return worker_id_.has_value(); }

  // Before a claim: releases what a noted claim may have committed, but for
  // `held` (the jobs the queue holds). A connection error is thrown and
  // keeps it noted for the next round; an SQL error (a row the release
  // cannot write) must not stop the queue's claims: it is logged
  // (release_failed) and the lease keeper releases such jobs once they are
  // heartbeat_ttl old and no runner holds them.
  void ReleaseBeforeClaim(DbSession& session, const std::vector<std::int64_t>& held);
  // When the claim loop stops right after an in-doubt claim: one try, so its
  // jobs need not wait heartbeat_ttl for the rescue (which spends an
  // attempt); any error is logged.
  void ReleaseAtStop(DbSession& session, const std::vector<std::int64_t>& held);

 private:
  // Releases the jobs of the noted claim; returns how many. Throws pg::PgError.
  int Release(DbSession& session, const std::vector<std::int64_t>& held);

  const std::string queue_;
  LeaseKeeper& lease_;
  const TransitionHooks* hooks_;  // may be null
  std::optional<std::string> worker_id_;
};

}  // namespace akadzed
