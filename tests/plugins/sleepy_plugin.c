/*
 * A test plugin for the fault suite (tests/faults/): sleeps for the job's
 * args member "ms" (a non-negative integer; 0 when absent), polling
 * stop_requested every 5 ms, then succeeds without a result.
 *
 * Config: {"record": "/path/file"} (optional). With it, every run that
 * completes appends one line "<job id> <run_count> <start_us> <end_us>\n"
 * (CLOCK_REALTIME microseconds) to that file in a single O_APPEND write, so
 * lines of concurrent runs and of several daemons never interleave. A run
 * asked to stop returns RETRY "Stopped" and records nothing. Job args are
 * never logged.
 *
 * Thread-safety: the instance (the record fd) is read-only after init, so
 * handle() may run concurrently.
 */
#define _POSIX_C_SOURCE 200809L

#include <akadzed/plugin.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct sleepy_instance {
  int record_fd; /* -1: no record file */
};

/* The value of the first "name": <digits> in `json`, or 0. */
static long long member_int(const char* json, size_t len, const char* name) {
  char needle[64];
  snprintf(needle, sizeof needle, "\"%s\"", name);
  const char* end = json + len;
  const char* p = strstr(json, needle);
  if (p == NULL) return 0;
  p += strlen(needle);
  while (p < end && (*p == ' ' || *p == ':')) ++p;
  long long n = 0;
  while (p < end && *p >= '0' && *p <= '9' && n < 100000000LL) n = n * 10 + (*p++ - '0');
  return n;
}

static long long now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

static int sleepy_init(const char* config_json, void** instance, char* error, size_t error_size) {
  struct sleepy_instance* self = malloc(sizeof *self);
  if (self == NULL) {
    snprintf(error, error_size, "out of memory");
    return 1;
  }
  self->record_fd = -1;
  const char* p = strstr(config_json, "\"record\"");
  if (p != NULL) {
    p += strlen("\"record\"");
    while (*p == ' ' || *p == ':') ++p;
    const char* close = *p == '"' ? strchr(p + 1, '"') : NULL;
    if (close == NULL || memchr(p + 1, '\\', (size_t)(close - p - 1)) != NULL ||
        close - p - 1 >= 4096) {
      snprintf(error, error_size, "record must be a plain path string");
      free(self);
      return 1;
    }
    char path[4096];
    memcpy(path, p + 1, (size_t)(close - p - 1));
    path[close - p - 1] = '\0';
    self->record_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (self->record_fd < 0) {
      snprintf(error, error_size, "cannot open the record file");
      free(self);
      return 1;
    }
  }
  *instance = self;
  return 0;
}

static int sleepy_handle(void* instance, const struct akadzed_job* job,
                         struct akadzed_report* report) {
  const struct sleepy_instance* self = instance;
  long long start = now_us();
  long long ms = member_int(job->args_json, job->args_len, "ms");
  while (ms > 0) {
    if (job->stop_requested(job)) break;
    long long step = ms < 5 ? ms : 5;
    struct timespec ts = {0, (long)(step * 1000000)};
    nanosleep(&ts, NULL);
    ms -= step;
  }
  if (job->stop_requested(job)) {
    report->set_error(report, "Stopped", "asked to stop while sleeping");
    return AKADZED_RETRY;
  }
  if (self->record_fd >= 0) {
    char line[128];
    int len = snprintf(line, sizeof line, "%lld %d %lld %lld\n", (long long)job->id,
                       (int)job->run_count, start, now_us());
    if (write(self->record_fd, line, (size_t)len) != len) {
      report->set_error(report, "RecordFailed", "cannot append to the record file");
      return AKADZED_RETRY;
    }
  }
  return AKADZED_SUCCESS;
}

static void sleepy_shutdown(void* instance) {
  struct sleepy_instance* self = instance;
  if (self->record_fd >= 0) close(self->record_fd);
  free(self);
}

static const struct akadzed_plugin sleepy_plugin = {
    .struct_size = sizeof(struct akadzed_plugin),
    .abi_version = AKADZED_PLUGIN_ABI_VERSION,
    .name = "sleepy",
    .version = "1.0.0",
    .init = sleepy_init,
    .handle = sleepy_handle,
    .shutdown = sleepy_shutdown,
};

AKADZED_PLUGIN_EXPORT const struct akadzed_plugin* akadzed_plugin_entry(void) {
  return &sleepy_plugin;
}
