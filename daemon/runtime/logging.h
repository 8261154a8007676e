// The daemon's log destination: spdlog's default logger writing one event
// per line (runtime/log_line.h: logfmt, JSON or journald) to stderr or,
// with `logging.file`, appended to a file that SIGHUP reopens (logrotate
// moves it, then sends SIGHUP). Each line is one write(2); the file is
// opened O_APPEND|O_CLOEXEC, mode 0640, so handler processes never inherit
// it. Job args and results are never logged.
//
// Thread-safety: ConfigureLogging installs the default logger once and later
// changes its destination, format and level in place; it and ReopenLogFile
// may be called while other threads log (a destination change takes the
// sink's lock, so no line is split or written to a closed descriptor).
#pragma once

#include "runtime/logging_config.h"

namespace akadzed {

// True when stderr is connected to the journal.
bool StderrIsJournal();

// Installs (first call) or reconfigures the default logger for `config`.
// `format: auto` is journald when logging to stderr and stderr is the
// journal, else logfmt. A file is opened only when `config.file` differs
// from the current destination. The first call throws ConfigError when the
// file cannot be opened; later calls keep the current destination and log
// one `log_open_failed` error line instead.
void ConfigureLogging(const LoggingConfig& config);

// Reopens the current log file by its path, creating it when it was moved
// away; nothing when logging to stderr. When the open fails the old file
// stays in use and one `log_open_failed` error line is logged.
void ReopenLogFile();

}  // namespace akadzed
