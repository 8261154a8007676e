/* Test plugins the daemon must refuse at startup, built from this one source
 * (tests/plugins/CMakeLists.txt sets the variant):
 *   WRONG_ABI     abi_version 999: refused naming both versions;
 *   SHORT_STRUCT  struct_size ends before `version` (16 bytes), as from a
 *                 broken or foreign build: refused naming both sizes;
 *   FAILING_INIT  init fails with an error text naming the config it got.
 * Otherwise complete. */
#include <akadzed/plugin.h>

#include <stddef.h>
#include <stdio.h>

#if defined(WRONG_ABI)
#define PLUGIN_NAME "wrong_abi"
#define PLUGIN_ABI 999
#define PLUGIN_SIZE sizeof(struct akadzed_plugin)
#elif defined(SHORT_STRUCT)
#define PLUGIN_NAME "short_struct"
#define PLUGIN_ABI AKADZED_PLUGIN_ABI_VERSION
#define PLUGIN_SIZE offsetof(struct akadzed_plugin, version)
#elif defined(FAILING_INIT)
#define PLUGIN_NAME "failing_init"
#define PLUGIN_ABI AKADZED_PLUGIN_ABI_VERSION
#define PLUGIN_SIZE sizeof(struct akadzed_plugin)
#else
#error "define WRONG_ABI, SHORT_STRUCT or FAILING_INIT"
#endif

static int test_init(const char* config_json, void** instance, char* error, size_t error_size) {
  *instance = NULL;
#if defined(FAILING_INIT)
  snprintf(error, error_size, "cannot use config %s: missing key 'endpoint'", config_json);
  return 7;
#else
  (void)config_json;
  (void)error;
  (void)error_size;
  return 0;
#endif
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
    .struct_size = PLUGIN_SIZE,
    .abi_version = PLUGIN_ABI,
    .name = PLUGIN_NAME,
    .version = "0",
    .init = test_init,
    .handle = test_handle,
    .shutdown = test_shutdown,
};

AKADZED_PLUGIN_EXPORT const struct akadzed_plugin* akadzed_plugin_entry(void) { return &plugin; }
