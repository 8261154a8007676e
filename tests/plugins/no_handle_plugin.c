/* A test plugin with a complete version-1 struct but no handle and no
 * shutdown function. The daemon must refuse it naming both. */
#include <akadzed/plugin.h>

static int test_init(const char* config_json, void** instance, char* error, size_t error_size) {
  (void)config_json;
  (void)error;
  (void)error_size;
  *instance = NULL;
  return 0;
}

static const struct akadzed_plugin plugin = {
    .struct_size = sizeof(struct akadzed_plugin),
    .abi_version = AKADZED_PLUGIN_ABI_VERSION,
    .name = "no_handle",
    .version = NULL,
    .init = test_init,
    .handle = NULL,
    .shutdown = NULL,
};

AKADZED_PLUGIN_EXPORT const struct akadzed_plugin* akadzed_plugin_entry(void) { return &plugin; }
