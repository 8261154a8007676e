// The daemon's log: one event per line on stderr through spdlog's default
// logger. Under journald (stderr is the stream $JOURNAL_STREAM names) lines
// carry an sd-daemon priority prefix ("<6>") and no timestamp, since the
// journal adds its own; otherwise "2026-01-31T12:00:00.123Z info ...".
//
// Events are "<event> key=value ... [| free text]"; job args and results are
// never logged.
//
// Thread-safety: ConfigureLogging installs the default logger once and later
// changes its format and level in place; it may be called while other
// threads log.
#pragma once

#include "config/config.h"

namespace akadzed {

// True when stderr is connected to the journal.
bool StderrIsJournal();

// Installs (first call) or reconfigures the default logger for `config`.
void ConfigureLogging(const LoggingConfig& config);

}  // namespace akadzed
