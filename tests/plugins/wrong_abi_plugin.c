/* A test plugin built for an ABI version this akadzed does not speak (999);
 * otherwise complete. The daemon must refuse it naming both versions. */
#include <akadzed/plugin.h>

static int test_init(const char* config_json, void** instance, char* error, size_t error_size) {
  (void)config_json;
  (void)error;
  (void)error_size;
  *instance = NULL;
  return 0;
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
    .abi_version = 999,
    .name = "wrong_abi",
    .version = "0",
    .init = test_init,
    .handle = test_handle,
    .shutdown = test_shutdown,
};

AKADZED_PLUGIN_EXPORT const struct akadzed_plugin* akadzed_plugin_entry(void) { return &plugin; }
