/* A test plugin that reports whatever its job's args (a JSON string) say,
 * to exercise the daemon's checks of a plugin's report:
 *   "bad_json"        SUCCESS with a result that is not JSON
 *   "snooze"          SNOOZE without a delay
 *   "negative_delay"  RETRY with a delay of -5 ms
 *   "code"            the unknown outcome code 42
 *   "fail" / "cancel" FAIL / CANCEL without set_error
 *   "retry_after"     RETRY "Busy" after 1500 ms
 *   "slow"            SUCCESS after 300 ms, never polling stop_requested
 *   "overrun"         SUCCESS after 2 s, never polling stop_requested
 *   "crash"           raises SIGSEGV in handle(): the daemon dies with it
 *   "levels"          one log line per level, plus one with newlines
 *   "echo"            SUCCESS with the job's fields as the result
 *   "progress"        reports progress 0.25, then 0.5 with meta {"rows": 10},
 *                     then four refused reports (progress 1.5, meta not an
 *                     object, meta not JSON, nothing), then SUCCESS with the
 *                     report_progress return codes as the result
 *   "trace"           SUCCESS with {"traceparent": the job's or null}
 *   anything else     SUCCESS without a result */
#define _POSIX_C_SOURCE 200809L

#include <akadzed/plugin.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static int test_init(const char* config_json, void** instance, char* error, size_t error_size) {
  (void)config_json;
  (void)error;
  (void)error_size;
  *instance = NULL;
  return 0;
}

static int is(const struct akadzed_job* job, const char* word) {
  size_t len = strlen(word);
  return job->args_len == len + 2 && job->args_json[0] == '"' &&
         memcmp(job->args_json + 1, word, len) == 0;
}

static int test_handle(void* instance, const struct akadzed_job* job,
                       struct akadzed_report* report) {
  (void)instance;
  if (is(job, "bad_json")) {
    report->set_result(report, "{\"unterminated\": ", 17);
    return AKADZED_SUCCESS;
  }
  if (is(job, "snooze")) return AKADZED_SNOOZE;
  if (is(job, "negative_delay")) {
    report->set_delay_ms(report, -5);
    return AKADZED_RETRY;
  }
  if (is(job, "code")) return 42;
  if (is(job, "fail")) return AKADZED_FAIL;
  if (is(job, "cancel")) return AKADZED_CANCEL;
  if (is(job, "retry_after")) {
    report->set_error(report, "Busy", "try again later");
    report->set_delay_ms(report, 1500);
    return AKADZED_RETRY;
  }
  if (is(job, "slow")) {
    struct timespec ts = {0, 300 * 1000000L};
    nanosleep(&ts, NULL);
    return AKADZED_SUCCESS;
  }
  if (is(job, "overrun")) {
    struct timespec ts = {2, 0};
    nanosleep(&ts, NULL);
    return AKADZED_SUCCESS;
  }
  if (is(job, "crash")) {
    raise(SIGSEGV);
    return AKADZED_SUCCESS;
  }
  if (is(job, "levels")) {
    for (int level = AKADZED_LOG_TRACE; level <= AKADZED_LOG_CRITICAL; ++level) {
      report->log(report, level, "at a level");
    }
    report->log(report, AKADZED_LOG_WARN, "two\nlines\n");
    return AKADZED_SUCCESS;
  }
  if (is(job, "progress")) {
    if (!AKADZED_HAS_MEMBER(report, struct akadzed_report, report_progress)) return AKADZED_FAIL;
    int codes[6];
    codes[0] = report->report_progress(report, 0.25, NULL, 0);
    codes[1] = report->report_progress(report, 0.5, "{\"rows\": 10}", 12);
    codes[2] = report->report_progress(report, 1.5, NULL, 0);
    codes[3] = report->report_progress(report, -1, "[1]", 3);
    codes[4] = report->report_progress(report, -1, "{\"rows\": ", 9);
    codes[5] = report->report_progress(report, -1, NULL, 0);
    char result[128];
    int len = snprintf(result, sizeof result, "[%d, %d, %d, %d, %d, %d]", codes[0], codes[1],
                       codes[2], codes[3], codes[4], codes[5]);
    report->set_result(report, result, (size_t)len);
    return AKADZED_SUCCESS;
  }
  if (is(job, "trace")) {
    char result[160];
    const char* tp = AKADZED_HAS_MEMBER(job, struct akadzed_job, traceparent) ? job->traceparent : NULL;
    int len = snprintf(result, sizeof result, "{\"traceparent\": %s%s%s}", tp ? "\"" : "",
                       tp ? tp : "null", tp ? "\"" : "");
    report->set_result(report, result, (size_t)len);
    return AKADZED_SUCCESS;
  }
  if (is(job, "echo")) {
    char result[512];
    int len = snprintf(result, sizeof result,
                       "{\"job_size\": %u, \"report_size\": %u, \"id\": %lld, \"task\": \"%s\", "
                       "\"queue\": \"%s\", \"limit_key\": %s%s%s, \"attempt\": %d, "
                       "\"max_attempts\": %d, \"run_count\": %d, \"args\": %s, "
                       "\"args_len\": %zu, \"stop\": %d}",
                       (unsigned)job->struct_size, (unsigned)report->struct_size,
                       (long long)job->id,
                       job->task, job->queue, job->limit_key ? "\"" : "",
                       job->limit_key ? job->limit_key : "null", job->limit_key ? "\"" : "",
                       (int)job->attempt, (int)job->max_attempts, (int)job->run_count,
                       job->args_json, job->args_len, job->stop_requested(job));
    report->set_result(report, result, (size_t)len);
    return AKADZED_SUCCESS;
  }
  return AKADZED_SUCCESS;
}

static void test_shutdown(void* instance) { (void)instance; }

static const struct akadzed_plugin plugin = {
    .struct_size = sizeof(struct akadzed_plugin),
    .abi_version = AKADZED_PLUGIN_ABI_VERSION,
    .name = "misbehaving",
    .version = "0",
    .init = test_init,
    .handle = test_handle,
    .shutdown = test_shutdown,
};

AKADZED_PLUGIN_EXPORT const struct akadzed_plugin* akadzed_plugin_entry(void) { return &plugin; }
