/*
 * The no-op plugin of the throughput benchmark (bench/throughput/run): every
 * job succeeds at once, without a result, so a burn-down measures the daemon
 * and the database, not the work.
 *
 * Config: {"record": "/path/file"} (optional). With it, every run appends
 * "<job id> <start_us>\n" (CLOCK_REALTIME microseconds when handle() was
 * entered) to that file in one O_APPEND write, for the enqueue-to-start
 * latency. Job args are never read or logged.
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

struct noop_instance {
  int record_fd; /* -1: no record file */
};

static int noop_init(const char* config_json, void** instance, char* error, size_t error_size) {
  struct noop_instance* self = malloc(sizeof *self);
  if (self == NULL) {
    snprintf(error, error_size, "out of memory");
    return 1;
  }
  self->record_fd = -1;
  const char* key = strstr(config_json, "\"record\":\"");
  if (key != NULL) {
    const char* path_start = key + strlen("\"record\":\"");
    const char* path_end = strchr(path_start, '"');
    char path[4096];
    size_t path_len = path_end == NULL ? sizeof path : (size_t)(path_end - path_start);
    if (path_len >= sizeof path || memchr(path_start, '\\', path_len) != NULL) {
      snprintf(error, error_size, "record must be a plain path string");
      free(self);
      return 1;
    }
    memcpy(path, path_start, path_len);
    path[path_len] = '\0';
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

static int noop_handle(void* instance, const struct akadzed_job* job,
                       struct akadzed_report* report) {
  const struct noop_instance* self = instance;
  if (self->record_fd < 0) return AKADZED_SUCCESS;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  char line[64];
  int len = snprintf(line, sizeof line, "%lld %lld\n", (long long)job->id,
                     (long long)now.tv_sec * 1000000LL + now.tv_nsec / 1000);
  if (write(self->record_fd, line, (size_t)len) != len) {
    report->set_error(report, "RecordFailed", "cannot append to the record file");
    return AKADZED_RETRY;
  }
  return AKADZED_SUCCESS;
}

static void noop_shutdown(void* instance) {
  struct noop_instance* self = instance;
  if (self->record_fd >= 0) close(self->record_fd);
  free(self);
}

static const struct akadzed_plugin noop_plugin = {
    .struct_size = sizeof(struct akadzed_plugin),
    .abi_version = AKADZED_PLUGIN_ABI_VERSION,
    .name = "noop",
    .version = "1.0.0",
    .init = noop_init,
    .handle = noop_handle,
    .shutdown = noop_shutdown,
};

AKADZED_PLUGIN_EXPORT const struct akadzed_plugin* akadzed_plugin_entry(void) {
  return &noop_plugin;
}
