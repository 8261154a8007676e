// Transition hooks (SPEC §5, akadze's on_transition): the config's `hooks:`,
// SQL statements or plugin on_transition functions run inside the
// transaction that changes a job's state, so what they write (an outbox row,
// an audit record) commits or rolls back with the change. A hook that fails
// rolls the change back: the job stays in its old state, the failure is
// logged, and the daemon tries the change again later.
//
// The daemon's transitions: the claim (queued -> running), the finish of a
// run (running -> succeeded, failed, cancelled or queued again), the rescue
// of a dead worker's job (running -> queued, failed or cancelled). Each
// calls Fire() with the ids it changed, before its commit.
//
// SQL hooks get the job's fields as typed parameters ($1 id int8, $2 queue,
// $3 task, $4 from_state, $5 to_state, $6 attempt int4, $7 max_attempts
// int4, $8 run_count int4, $9 priority int4, $10 limit_key, $11 unique_key,
// $12 worker_id uuid, $13 args jsonb, $14 result jsonb, $15 errors jsonb);
// a statement may use any of them.
//
// Thread-safety: a TransitionHooks is immutable once built (Add); Fire may
// be called from many threads at once, each with its own connection.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/job_states.h"
#include "hooks/hook_config.h"
#include "pg/connection.h"
#include "store/transition_listener.h"

namespace akadzed {

class PluginHook;

// The transition listener of the store's finish and rescue
// (store/transition_listener.h, which also holds HookError), and what the
// claim's before_commit calls.
class TransitionHooks : public TransitionListener {
 public:
  TransitionHooks();
  ~TransitionHooks();
  TransitionHooks(const TransitionHooks&) = delete;
  TransitionHooks& operator=(const TransitionHooks&) = delete;

  // Appends a hook (a plugin hook is opened and initialised with its
  // config). Only while building, before the object is shared. Throws
  // PluginError.
  void Add(const HookConfig& hook);

  // True when no hook is configured: callers then skip the transaction and
  // the extra reads hooks need.
  bool empty() const { return hooks_.empty(); }

  // True when some hook may fire for a change from `from_state`.
  bool AnyFrom(JobState from_state) const override;

  // Runs, in the transaction open on `conn`, every hook matching each job's
  // change from `from_state` to its current state (the job rows are read
  // back in that transaction, store/job_row.h), jobs in `job_ids` order, hooks in config
  // order. Throws HookError for the first hook that fails (the caller rolls
  // back), and pg::PgError for database errors of its own reads.
  void Fire(pg::Connection& conn, JobState from_state,
            const std::vector<std::int64_t>& job_ids) const override;

 private:
  struct Hook {
    HookConfig config;
    std::unique_ptr<PluginHook> plugin;  // when config.plugin
  };
  std::vector<Hook> hooks_;
};

}  // namespace akadzed
