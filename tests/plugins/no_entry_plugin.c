/* A test plugin that is a valid shared object but exports no
 * akadzed_plugin_entry (only a differently named function). */
#include <akadzed/plugin.h>

AKADZED_PLUGIN_EXPORT int not_an_akadzed_plugin(void);
AKADZED_PLUGIN_EXPORT int not_an_akadzed_plugin(void) { return 42; }
