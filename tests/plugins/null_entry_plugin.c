/* A test plugin whose entry point returns NULL. */
#include <akadzed/plugin.h>

AKADZED_PLUGIN_EXPORT const struct akadzed_plugin* akadzed_plugin_entry(void) { return NULL; }
