/*
 * The akadzed plugin ABI: a shared object that runs jobs inside the daemon
 * (docs/plugins.md). C99 and C++ compatible.
 *
 * A plugin exports one function, akadzed_plugin_entry, returning a static
 * struct akadzed_plugin. The daemon loads the file with
 * dlopen(RTLD_NOW | RTLD_LOCAL) once per process, checks abi_version and
 * struct_size, then for every task configured to use the plugin calls
 * init(config) once, handle(job) for each job of that task, and shutdown()
 * when the task's handler goes away (daemon exit or a SIGHUP reload).
 *
 * Versioning: every struct starts with struct_size, set by whoever fills the
 * struct to sizeof() as that side was compiled. Compatible additions are
 * appended at the end and only grow struct_size; a reader checks
 * AKADZED_HAS_MEMBER before touching a member newer than version 1.
 * AKADZED_PLUGIN_ABI_VERSION changes only on an incompatible change, and the
 * daemon refuses a plugin whose abi_version differs from its own.
 * AKADZED_PLUGIN_ABI_MINOR counts the compatible additions (below, each
 * member says which minor added it): a plugin built against a newer minor
 * loads in an older daemon and finds the new members absent, and one built
 * against an older minor loads in a newer daemon unchanged.
 *
 * Thread-safety: handle() is called concurrently from many daemon threads
 * with the same instance (one job per call); keep per-job state on the stack
 * and guard anything shared. init() and shutdown() are never concurrent with
 * handle() for the same instance. The job and report callbacks may be called
 * from any thread, but only until handle() returns.
 *
 * Ownership: every pointer the daemon passes (strings, structs) is valid only
 * during the call it is passed to; copy what you keep. The daemon copies
 * everything the plugin passes to it before the callback returns. Neither
 * side ever frees the other's memory.
 */
#ifndef AKADZED_PLUGIN_H
#define AKADZED_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header describes. */
#define AKADZED_PLUGIN_ABI_VERSION 1
/* Its compatible additions: 1 on_transition; 2 report_progress and
 * akadzed_job.traceparent. */
#define AKADZED_PLUGIN_ABI_MINOR 2

/* The name of the symbol the daemon looks up with dlsym(). */
#define AKADZED_PLUGIN_ENTRY_SYMBOL "akadzed_plugin_entry"

/* Marks the entry point exported when building with -fvisibility=hidden. */
#if defined(__GNUC__)
#define AKADZED_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define AKADZED_PLUGIN_EXPORT
#endif

/* True when the struct *ptr of type `type` (e.g. struct akadzed_job), filled
 * by the other side, is large enough to contain `member`. */
#define AKADZED_HAS_MEMBER(ptr, type, member) \
  ((ptr)->struct_size >= offsetof(type, member) + sizeof((ptr)->member))

/* What handle() returns: how the job's run ended. The daemon applies the
 * same rules as for shell handlers (docs/handlers.md). */
enum akadzed_outcome {
  /* Done; optional JSON result from set_result(). */
  AKADZED_SUCCESS = 0,
  /* This run failed: attempt+1, queued again after set_delay_ms() or the
   * backoff min(2^(attempt-1), 300) s; failed once attempts are spent. */
  AKADZED_RETRY = 1,
  /* Not now: queued again after set_delay_ms() (required), no attempt spent. */
  AKADZED_SNOOZE = 2,
  /* Permanent failure: failed now, no further attempt. */
  AKADZED_FAIL = 3,
  /* The job cancels itself: state cancelled. */
  AKADZED_CANCEL = 4
};

/* Levels for akadzed_report.log(); the daemon's log filter applies. */
enum akadzed_log_level {
  AKADZED_LOG_TRACE = 0,
  AKADZED_LOG_DEBUG = 1,
  AKADZED_LOG_INFO = 2,
  AKADZED_LOG_WARN = 3,
  AKADZED_LOG_ERROR = 4,
  AKADZED_LOG_CRITICAL = 5
};

/* One claimed job, filled by the daemon for one handle() call. Read-only for
 * the plugin; valid only during that call. */
struct akadzed_job {
  /* sizeof(struct akadzed_job) as the daemon was compiled. */
  uint32_t struct_size;
  /* The job's id in akadze.jobs. */
  int64_t id;
  /* The job's task name (NUL-terminated). */
  const char* task;
  /* The job's queue name (NUL-terminated). */
  const char* queue;
  /* The job's limit key (NUL-terminated), or NULL when it has none. */
  const char* limit_key;
  /* The attempt this run counts as (1 on the first run). */
  int32_t attempt;
  /* The job's max_attempts: a RETRY when attempt >= max_attempts fails it. */
  int32_t max_attempts;
  /* Times the job has been claimed, this run included (1 on the first run;
   * snoozes count, unlike attempt). */
  int32_t run_count;
  /* The job's args as JSON text: args_len bytes, followed by a NUL that
   * args_len does not count. */
  const char* args_json;
  /* Length of args_json in bytes. */
  size_t args_len;
  /* Returns non-zero once the job should stop: it was cancelled, the daemon
   * is shutting down or lost its lease, or the handler's timeout passed.
   * Cheap (no system call beyond reading the clock); poll it every few tens
   * of milliseconds in long work, then return promptly. The daemon cannot
   * interrupt a plugin: a plugin that never polls keeps running. */
  int (*stop_requested)(const struct akadzed_job* job);
  /* The daemon's own data for the callbacks; do not touch. */
  void* host;

  /* Appended in minor 2; check AKADZED_HAS_MEMBER(job, struct akadzed_job,
   * traceparent) before reading. */

  /* The W3C traceparent of the job's meta ("00-<trace-id>-<parent-id>-
   * <flags>", NUL-terminated) when it holds a valid one, else NULL: continue
   * the application's trace with it. */
  const char* traceparent;
};

/* Callbacks through which handle() reports details of its outcome. Every
 * callback copies its arguments; a later call replaces an earlier one. Pass
 * the report handle() received; valid only during that call. */
struct akadzed_report {
  /* sizeof(struct akadzed_report) as the daemon was compiled. */
  uint32_t struct_size;
  /* The result of a SUCCESS: `len` bytes of JSON text (need not be
   * NUL-terminated). Ignored for other outcomes. Text that is not valid JSON
   * turns the run into a retry with error "BadOutcome". */
  void (*set_result)(struct akadzed_report* report, const char* json, size_t len);
  /* The error class (a short word such as "Timeout"; NULL or "" for the
   * default) and a human message (NULL for none) of a RETRY, FAIL or CANCEL.
   * Both NUL-terminated; stored redacted and cut to 500 characters. */
  void (*set_error)(struct akadzed_report* report, const char* error, const char* message);
  /* The delay before the job is ready again, in milliseconds (>= 0): required
   * for SNOOZE, optional for RETRY (replaces the backoff), else ignored. */
  void (*set_delay_ms)(struct akadzed_report* report, int64_t delay_ms);
  /* Logs one line at `level` (enum akadzed_log_level) as
   * "plugin job=<id> task=<task> | <message>"; newlines become spaces and a
   * message is cut to 4096 bytes. Never log secrets or whole job args. */
  void (*log)(struct akadzed_report* report, int level, const char* message);
  /* The daemon's own data for the callbacks; do not touch. */
  void* host;

  /* Appended in minor 2; check AKADZED_HAS_MEMBER(report, struct
   * akadzed_report, report_progress) before calling. */

  /* Reports how far the job got, while handle() runs: `progress` a fraction
   * from 0 to 1 (a negative value for none) and/or `meta_json` a JSON object
   * of `meta_len` bytes (NULL for none) whose keys are merged into the job's
   * meta. Later reports replace earlier values key by key; the daemon writes
   * what is pending at most once per heartbeat interval, and the last of it
   * with the job's finish (docs/handlers.md, "Reporting progress"). Returns 0,
   * or non-zero when the report is refused (progress out of range, meta not
   * an object, or more than 64 KiB pending): the job goes on either way.
   * Cheap: no database call; call it as often as you like. */
  int (*report_progress)(struct akadzed_report* report, double progress, const char* meta_json,
                         size_t meta_len);
};

/* One job's state change, filled by the daemon for one on_transition() call
 * (a transition hook, docs/plugins.md). Read-only for the plugin; valid only
 * during that call. String members are NUL-terminated; those marked
 * "or NULL" are NULL when the job's column is NULL. */
struct akadzed_transition {
  /* sizeof(struct akadzed_transition) as the daemon was compiled. */
  uint32_t struct_size;
  int64_t id;
  const char* queue;
  const char* task;
  /* The state before and after: "queued", "running", "succeeded", "failed"
   * or "cancelled". */
  const char* from_state;
  const char* to_state;
  /* The job's columns after the change. */
  int32_t attempt;
  int32_t max_attempts;
  int32_t run_count;
  int32_t priority;
  const char* limit_key;   /* or NULL */
  const char* unique_key;  /* or NULL */
  const char* worker_id;   /* or NULL */
  const char* args_json;   /* never log it */
  const char* result_json; /* or NULL */
  const char* errors_json; /* the last 10 {error, message} entries */
  /* Runs one SQL statement in the transaction that makes this change (the
   * outbox pattern: what it writes commits or rolls back with the change).
   * `params` are n_params text values for $1..$n (NULL elements are SQL
   * NULL). Returns 0; on error writes a one-line message into `error`
   * (error_size bytes) and returns non-zero, and the transaction is then
   * doomed: return non-zero from on_transition too. Only during the call. */
  int (*exec_sql)(const struct akadzed_transition* transition, const char* sql, int n_params,
                  const char* const* params, char* error, size_t error_size);
  /* The daemon's own data for exec_sql; do not touch. */
  void* host;
};

/* What akadzed_plugin_entry() returns: a static description of the plugin. */
struct akadzed_plugin {
  /* sizeof(struct akadzed_plugin) as the plugin was compiled. */
  uint32_t struct_size;
  /* AKADZED_PLUGIN_ABI_VERSION as the plugin was compiled. */
  uint32_t abi_version;
  /* The plugin's name for logs (NUL-terminated, required). */
  const char* name;
  /* The plugin's version for logs (NUL-terminated; NULL for none). */
  const char* version;
  /* Creates one instance for a task: `config_json` is the task's `config:`
   * mapping as a JSON object text ("{}" when absent). Stores the instance in
   * *instance (NULL is allowed) and returns 0; on error writes a one-line,
   * NUL-terminated message of at most error_size bytes into `error` and
   * returns non-zero: the daemon then refuses the config and never calls
   * shutdown for it. Called once per task at startup and on each reload. */
  int (*init)(const char* config_json, void** instance, char* error, size_t error_size);
  /* Runs one job and returns an enum akadzed_outcome value (an int so that
   * any value crosses the ABI; an unknown one makes the run a retry with
   * error "BadOutcome"). Called concurrently from many threads with the same
   * instance. Must not call exit() or longjmp out, nor let a C++ exception
   * escape. */
  int (*handle)(void* instance, const struct akadzed_job* job, struct akadzed_report* report);
  /* Destroys an instance init() created, after its last handle() returned. */
  void (*shutdown)(void* instance);

  /* Appended after version 1's first release; check AKADZED_HAS_MEMBER. */

  /* A transition hook (config `hooks:` with `plugin:`), or NULL. Called in
   * the transaction that changes a job's state, for the transitions the
   * hook's from/to select, concurrently from several daemon threads with the
   * same instance. Returns 0 to let the change commit; non-zero (after
   * writing a one-line message into `error`) rolls it back: the job stays in
   * its old state and the daemon tries again later. A plugin used only as a
   * hook may leave handle NULL. */
  int (*on_transition)(void* instance, const struct akadzed_transition* transition, char* error,
                       size_t error_size);
};

/* The entry point every plugin defines (and exports); the returned struct
 * must stay valid until the library is unloaded. */
typedef const struct akadzed_plugin* (*akadzed_plugin_entry_fn)(void);
AKADZED_PLUGIN_EXPORT const struct akadzed_plugin* akadzed_plugin_entry(void);

#ifdef __cplusplus
}
#endif

#endif /* AKADZED_PLUGIN_H */
