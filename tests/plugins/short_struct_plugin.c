/* A test plugin whose struct_size (16 bytes: up to the name) is smaller
 * than ABI version 1's struct, as from a broken or foreign build. The daemon
 * must refuse it naming both sizes. */
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
    .struct_size = offsetof(struct akadzed_plugin, version),
    .abi_version = AKADZED_PLUGIN_ABI_VERSION,
    .name = "short_struct",
    .version = "0",
    .init = test_init,
    .handle = test_handle,
    .shutdown = test_shutdown,
};

AKADZED_PLUGIN_EXPORT const struct akadzed_plugin* akadzed_plugin_entry(void) { return &plugin; }
