/* A hook-only plugin (no handle) for tests/daemon/hooks_test.cpp: records
 * every transition it is given in the table `outbox` through exec_sql, in
 * the transition's transaction, and refuses the transitions of the task
 * named by its config's "refuse_task" (a JSON string; matched as text). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <akadzed/plugin.h>

struct instance {
  char refuse_task[128];
};

static int init(const char* config_json, void** instance, char* error, size_t error_size) {
  struct instance* self = calloc(1, sizeof *self);
  const char* key = strstr(config_json, "\"refuse_task\":\"");
  if (self == NULL) {
    snprintf(error, error_size, "out of memory");
    return 1;
  }
  if (key != NULL) {
    const char* start = key + strlen("\"refuse_task\":\"");
    const char* end = strchr(start, '"');
    size_t n = end ? (size_t)(end - start) : 0;
    if (n >= sizeof self->refuse_task) n = sizeof self->refuse_task - 1;
    memcpy(self->refuse_task, start, n);
  }
  *instance = self;
  return 0;
}

static void shutdown_instance(void* instance) { free(instance); }

static int on_transition(void* instance, const struct akadzed_transition* t, char* error,
                         size_t error_size) {
  const struct instance* self = instance;
  char id[32];
  char attempt[16];
  const char* params[6];
  if (self->refuse_task[0] != '\0' && strcmp(t->task, self->refuse_task) == 0) {
    snprintf(error, error_size, "task %s is refused by this plugin's config", t->task);
    return 1;
  }
  snprintf(id, sizeof id, "%lld", (long long)t->id);
  snprintf(attempt, sizeof attempt, "%d", (int)t->attempt);
  params[0] = id;
  params[1] = t->task;
  params[2] = t->from_state;
  params[3] = t->to_state;
  params[4] = attempt;
  params[5] = t->result_json; /* may be NULL: SQL NULL */
  return t->exec_sql(t,
                     "INSERT INTO outbox (job_id, task, from_state, to_state, attempt, result, source)"
                     " VALUES ($1::int8, $2, $3, $4, $5::int, $6::jsonb, 'plugin')",
                     6, params, error, error_size);
}

static const struct akadzed_plugin kPlugin = {
    sizeof(struct akadzed_plugin), AKADZED_PLUGIN_ABI_VERSION, "hook-test", "1", init, NULL,
    shutdown_instance, on_transition};

AKADZED_PLUGIN_EXPORT const struct akadzed_plugin* akadzed_plugin_entry(void) { return &kPlugin; }
