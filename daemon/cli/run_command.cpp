// `akadzed run` and `akadzed check-config` (filled in with the daemon).
#include "cli/commands.h"
