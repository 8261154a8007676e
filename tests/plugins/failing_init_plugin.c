/* A test plugin whose init always fails with an error text naming the
 * config it was given. */
#include <akadzed/plugin.h>

#include <stdio.h>

static int test_init(const char* config_json, void** instance, char* error, size_t error_size) {
  (void)instance;
  snprintf(error, error_size, "cannot use config %s: missing key 'endpoint'", config_json);
  return 7;
}

static int test_handle(void* instance, const struct akadzed_job* job,
                       struct akadzed_report* report) {
  (void)instance;
  (void)job;
  (void)report;
  return AKADZED_SUCCESS;
}

static void test_shutdown(void* instance) { (void)instance; }

static const struct akadzed_plugin plugin = {
    .struct_size = sizeof(struct akadzed_plugin),
    .abi_version = AKADZED_PLUGIN_ABI_VERSION,
    .name = "failing_init",
    .version = "0",
    .init = test_init,
    .handle = test_handle,
    .shutdown = test_shutdown,
};

AKADZED_PLUGIN_EXPORT const struct akadzed_plugin* akadzed_plugin_entry(void) { return &plugin; }
