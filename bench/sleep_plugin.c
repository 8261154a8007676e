/*
 * The sleep plugin of bench/many_daemons_bench: every job sleeps a time
 * derived from its id alone, then succeeds without a result, so that many
 * daemons can be given work of a known mean length without reading args.
 *
 *   sleep_ms(id) = min_ms + ((uint64) id * 2654435761 mod 2^64) mod (max_ms - min_ms + 1)
 *
 * (Knuth's multiplicative hash: over consecutive ids the times spread about
 * evenly between min_ms and max_ms.) The benchmark computes the mean job time
 * over the jobs it enqueues with the same formula, in SQL.
 *
 * Config: {"min_ms": 20, "max_ms": 100} (those are the defaults; integers,
 * 0 <= min_ms <= max_ms <= 3600000). The sleep runs to an absolute deadline
 * (CLOCK_MONOTONIC), in steps of at most 250 ms between which it polls
 * stop_requested (a job of the default 20-100 ms is one sleep: no wake-ups
 * of its own to add to the daemon's CPU per job); a run asked to stop
 * returns RETRY "Stopped". Job args are never read or logged.
 *
 * Thread-safety: the instance is read-only after init, so handle() may run
 * concurrently.
 */
#define _POSIX_C_SOURCE 200809L

#include <akadzed/plugin.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sleep_instance {
  long long min_ms;
  long long max_ms;
};

/* The sleep of job `id`, in milliseconds (the formula above). */
static long long sleep_ms_of(const struct sleep_instance* self, int64_t id) {
  const uint64_t span = (uint64_t)(self->max_ms - self->min_ms + 1);
  const uint64_t hashed = (uint64_t)id * UINT64_C(2654435761);
  return self->min_ms + (long long)(hashed % span);
}

/* Reads the integer member `name` of the flat JSON object `json` into *out:
 * 0 when absent (then *out is left alone), 1 when read, -1 when it is not a
 * plain non-negative integer. */
static int member_int(const char* json, const char* name, long long* out) {
  char needle[64];
  snprintf(needle, sizeof needle, "\"%s\"", name);
  const char* p = strstr(json, needle);
  if (p == NULL) return 0;
  p += strlen(needle);
  while (*p == ' ' || *p == ':') ++p;
  if (*p < '0' || *p > '9') return -1;
  long long n = 0;
  while (*p >= '0' && *p <= '9') {
    n = n * 10 + (*p++ - '0');
    if (n > 3600000LL) return -1;
  }
  *out = n;
  return 1;
}

static int sleep_init(const char* config_json, void** instance, char* error, size_t error_size) {
  struct sleep_instance config = {20, 100};
  if (member_int(config_json, "min_ms", &config.min_ms) < 0 ||
      member_int(config_json, "max_ms", &config.max_ms) < 0) {
    snprintf(error, error_size, "min_ms and max_ms must be integers from 0 to 3600000");
    return 1;
  }
  if (config.min_ms > config.max_ms) {
    snprintf(error, error_size, "min_ms (%lld) must not exceed max_ms (%lld)", config.min_ms,
             config.max_ms);
    return 1;
  }
  struct sleep_instance* self = malloc(sizeof *self);
  if (self == NULL) {
    snprintf(error, error_size, "out of memory");
    return 1;
  }
  *self = config;
  *instance = self;
  return 0;
}

static int sleep_handle(void* instance, const struct akadzed_job* job,
                        struct akadzed_report* report) {
  const struct sleep_instance* self = instance;
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  const long long ms = sleep_ms_of(self, job->id);
  deadline.tv_sec += (time_t)(ms / 1000);
  deadline.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec += 1;
    deadline.tv_nsec -= 1000000000L;
  }
  for (;;) {
    if (job->stop_requested(job)) {
      report->set_error(report, "Stopped", "asked to stop while sleeping");
      return AKADZED_RETRY;
    }
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const long long left_ns = (long long)(deadline.tv_sec - now.tv_sec) * 1000000000LL +
                              (deadline.tv_nsec - now.tv_nsec);
    if (left_ns <= 0) return AKADZED_SUCCESS;
    /* At most 250 ms a step, to an absolute time: no drift from the steps. */
    struct timespec until = deadline;
    if (left_ns > 250000000LL) {
      until = now;
      until.tv_nsec += 250000000L;
      if (until.tv_nsec >= 1000000000L) {
        until.tv_sec += 1;
        until.tv_nsec -= 1000000000L;
      }
    }
    int rc;
    do {
      rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL);
    } while (rc == EINTR);
  }
}

static void sleep_shutdown(void* instance) { free(instance); }

static const struct akadzed_plugin sleep_plugin = {
    .struct_size = sizeof(struct akadzed_plugin),
    .abi_version = AKADZED_PLUGIN_ABI_VERSION,
    .name = "sleep",
    .version = "1.0.0",
    .init = sleep_init,
    .handle = sleep_handle,
    .shutdown = sleep_shutdown,
};

AKADZED_PLUGIN_EXPORT const struct akadzed_plugin* akadzed_plugin_entry(void) {
  return &sleep_plugin;
}
