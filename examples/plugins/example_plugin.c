/*
 * The example akadzed plugin (docs/plugins.md), task "checksum": reports the
 * FNV-1a 64-bit hash of a job's args JSON text as
 * {"checksum": "<16 hex digits>", "bytes": N}.
 *
 * Config: {"algorithm": "fnv1a"} (the default and only algorithm).
 * Top-level members of the job's args it obeys, in this order:
 *   "sleep_ms": N     sleep N ms first, polling stop_requested every 10 ms;
 *                     RETRY with error "Stopped" when asked to stop
 *   "fail": true      RETRY with error "ExampleFailure"
 *   "snooze_ms": N    SNOOZE for N ms on the job's first run (run_count 1)
 *
 * Thread-safety: an instance is read-only after init, so handle() may run
 * concurrently on it; all per-job state is on the stack.
 */
#define _POSIX_C_SOURCE 200809L

#include <akadzed/plugin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct checksum_instance {
  int algorithm; /* ALGORITHM_FNV1A, the only one so far */
};

enum { ALGORITHM_FNV1A = 1 };

/* A minimal reader for the top level of a JSON object: enough to find a
 * member by exact name without being fooled by nested values or strings. */

static const char* skip_space(const char* p, const char* end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) ++p;
  return p;
}

/* p at '"': returns the position after the closing quote, or NULL. */
static const char* skip_string(const char* p, const char* end) {
  for (++p; p < end; ++p) {
    if (*p == '\\') ++p;
    else if (*p == '"') return p + 1;
  }
  return NULL;
}

/* Skips one JSON value; returns the position after it, or NULL. */
static const char* skip_value(const char* p, const char* end) {
  int depth = 0;
  p = skip_space(p, end);
  do {
    if (p >= end) return NULL;
    if (*p == '"') {
      p = skip_string(p, end);
      if (p == NULL) return NULL;
      continue;
    }
    if (*p == '{' || *p == '[') {
      ++depth;
    } else if (*p == '}' || *p == ']') {
      if (--depth < 0) return NULL;
    } else if (depth == 0 && (*p == ',' || *p == ':')) {
      return NULL;
    } else if (depth == 0) { /* a scalar: runs to a delimiter */
      while (p < end && strchr(",}] \t\n\r", *p) == NULL) ++p;
      return p;
    }
    ++p;
  } while (depth > 0);
  return p;
}

/* Finds the top-level member `name` (no escapes in it) of the object in
 * [json, end); returns its value's start (at the value) or NULL. */
static const char* find_member(const char* json, const char* end, const char* name) {
  size_t name_len = strlen(name);
  const char* p = skip_space(json, end);
  if (p >= end || *p != '{') return NULL;
  p = skip_space(p + 1, end);
  while (p < end && *p == '"') {
    const char* key = p + 1;
    p = skip_string(p, end);
    if (p == NULL) return NULL;
    int match = (size_t)(p - 1 - key) == name_len && memcmp(key, name, name_len) == 0;
    p = skip_space(p, end);
    if (p >= end || *p != ':') return NULL;
    p = skip_space(p + 1, end);
    if (match) return p;
    p = skip_value(p, end);
    if (p == NULL) return NULL;
    p = skip_space(p, end);
    if (p < end && *p == ',') p = skip_space(p + 1, end);
  }
  return NULL;
}

/* True when member `name` is the literal true. */
static int member_is_true(const char* json, const char* end, const char* name) {
  const char* v = find_member(json, end, name);
  return v != NULL && end - v >= 4 && memcmp(v, "true", 4) == 0 &&
         (end - v == 4 || strchr(",} \t\n\r", v[4]) != NULL);
}

/* Reads member `name` as a non-negative integer into *out; 0 if absent or
 * not one. */
static int member_int(const char* json, const char* end, const char* name, long long* out) {
  const char* v = find_member(json, end, name);
  long long n = 0;
  if (v == NULL || v >= end || *v < '0' || *v > '9') return 0;
  for (; v < end && *v >= '0' && *v <= '9'; ++v) {
    if (n > (0x7fffffffffffffffLL - 9) / 10) return 0;
    n = n * 10 + (*v - '0');
  }
  if (v < end && strchr(",} \t\n\r", *v) == NULL) return 0; /* 1.5, 1e3 */
  *out = n;
  return 1;
}

static uint64_t fnv1a64(const char* data, size_t len) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < len; ++i) {
    hash ^= (unsigned char)data[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

static int checksum_init(const char* config_json, void** instance, char* error, size_t error_size) {
  const char* end = config_json + strlen(config_json);
  const char* p = skip_space(config_json, end);
  if (p >= end || *p != '{') {
    snprintf(error, error_size, "config must be a mapping");
    return 1;
  }
  const char* algorithm = find_member(config_json, end, "algorithm");
  if (algorithm != NULL) {
    const char* after = algorithm < end && *algorithm == '"' ? skip_string(algorithm, end) : NULL;
    if (after == NULL) {
      snprintf(error, error_size, "algorithm must be a string");
      return 1;
    }
    int len = (int)(after - algorithm - 2);
    if (len != 5 || memcmp(algorithm + 1, "fnv1a", 5) != 0) {
      snprintf(error, error_size, "unknown algorithm \"%.*s\" (supported: fnv1a)",
               len > 64 ? 64 : len, algorithm + 1);
      return 1;
    }
  }
  struct checksum_instance* self = malloc(sizeof *self);
  if (self == NULL) {
    snprintf(error, error_size, "out of memory");
    return 1;
  }
  self->algorithm = ALGORITHM_FNV1A;
  *instance = self;
  return 0;
}

/* Sleeps `ms` milliseconds in 10 ms steps; returns 0 when stopped early. */
static int sleep_polling(const struct akadzed_job* job, long long ms) {
  while (ms > 0) {
    if (job->stop_requested(job)) return 0;
    long long step = ms < 10 ? ms : 10;
    struct timespec ts = {0, (long)(step * 1000000)};
    nanosleep(&ts, NULL);
    ms -= step;
  }
  return !job->stop_requested(job);
}

static int checksum_handle(void* instance, const struct akadzed_job* job,
                           struct akadzed_report* report) {
  (void)instance; /* fnv1a is the only algorithm */
  const char* args = job->args_json;
  const char* end = args + job->args_len;
  long long n = 0;

  if (member_int(args, end, "sleep_ms", &n) && !sleep_polling(job, n)) {
    report->set_error(report, "Stopped", "asked to stop while sleeping");
    return AKADZED_RETRY;
  }
  if (member_is_true(args, end, "fail")) {
    report->set_error(report, "ExampleFailure", "the job's args asked to fail");
    return AKADZED_RETRY;
  }
  if (member_int(args, end, "snooze_ms", &n) && job->run_count == 1) {
    report->set_delay_ms(report, (int64_t)n);
    return AKADZED_SNOOZE;
  }

  char result[96];
  char line[96];
  uint64_t hash = fnv1a64(args, job->args_len);
  int len = snprintf(result, sizeof result, "{\"checksum\": \"%016llx\", \"bytes\": %llu}",
                     (unsigned long long)hash, (unsigned long long)job->args_len);
  snprintf(line, sizeof line, "fnv1a of %llu bytes: %016llx", (unsigned long long)job->args_len,
           (unsigned long long)hash);
  report->log(report, AKADZED_LOG_INFO, line);
  report->set_result(report, result, (size_t)len);
  return AKADZED_SUCCESS;
}

static void checksum_shutdown(void* instance) { free(instance); }

static const struct akadzed_plugin checksum_plugin = {
    .struct_size = sizeof(struct akadzed_plugin),
    .abi_version = AKADZED_PLUGIN_ABI_VERSION,
    .name = "checksum",
    .version = "1.0.0",
    .init = checksum_init,
    .handle = checksum_handle,
    .shutdown = checksum_shutdown,
};

AKADZED_PLUGIN_EXPORT const struct akadzed_plugin* akadzed_plugin_entry(void) {
  return &checksum_plugin;
}
