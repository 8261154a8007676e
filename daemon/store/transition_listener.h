// What the job store's transitions tell about the jobs they change: the
// finish (running -> ...) and the rescue (running -> ...) call a
// TransitionListener inside their transaction, before its commit, with the
// ids they changed; the claim takes a before_commit callback instead. The
// transition hooks (hooks/transition_hooks.h) are the listener; the store
// knows nothing of them.
//
// Thread-safety: a listener is called from many threads at once, each with
// its own connection.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/job_states.h"
#include "pg/connection.h"

namespace akadzed {

// A hook refused a transition. The transaction it ran in must be rolled
// back (a failed SQL statement has aborted it already).
class HookError : public std::runtime_error {
 public:
  HookError(std::string hook, std::int64_t job_id, JobState from, JobState to,
            const std::string& message);
  const std::string& hook() const { return hook_; }
  std::int64_t job_id() const { return job_id_; }
  // "queued->running"
  std::string transition() const;

 private:
  std::string hook_;
  std::int64_t job_id_;
  JobState from_;
  JobState to_;
};

class TransitionListener {
 public:
  virtual ~TransitionListener() = default;

  // True when a change from `from` may need Fire(): callers without one skip
  // the transaction and the extra reads.
  virtual bool AnyFrom(JobState from) const = 0;

  // Called in the transaction open on `conn` with the jobs it changed from
  // `from`. Throws HookError to refuse one (the caller rolls back), and
  // pg::PgError for database errors of its own.
  virtual void Fire(pg::Connection& conn, JobState from,
                    const std::vector<std::int64_t>& job_ids) const = 0;
};

// Whether `hooks` (null: none) may fire for a change from `from`: the one
// test of whether a write and its hooks share a transaction.
inline bool MayFire(const TransitionListener* hooks, JobState from) {
  return hooks != nullptr && hooks->AnyFrom(from);
}

}  // namespace akadzed
