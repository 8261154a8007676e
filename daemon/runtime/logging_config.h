// What logging.* in the config file says (docs/configuration.md): the
// logging room owns it; config/ only parses into it.
#pragma once

#include <string>

namespace akadzed {

// How log lines are written: logfmt (`ts=... level=info event=job_started
// id=42 ...`), one JSON object per line, or logfmt with the sd-daemon
// priority prefix and no timestamp for the journal. auto is journald when
// stderr is the journal, else logfmt.
enum class LogFormat { kAuto, kLogfmt, kJson, kJournald };

struct LoggingConfig {
  std::string level = "info";                    // trace..critical, off
  LogFormat format = LogFormat::kAuto;
  // Absolute path of a file to append to instead of stderr; "" = stderr.
  // Reopened on SIGHUP (for logrotate).
  std::string file;
};

}  // namespace akadzed
