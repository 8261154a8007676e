// Every key of the config file, with what a SIGHUP does with it: one row per
// key, in the spirit of pgbouncer's config table. The parser accepts exactly
// the keys listed here (config.cpp asks KeysOf for each mapping), and the
// reload (worker/daemon.cpp) warns about the changed keys that wait for a
// restart (RestartKeysChanged). docs/configuration.md says the same per key;
// tests/unit/config_test.cpp checks the table against the parser.
//
// Adding a key: one row here (and its parsing in config.cpp).
//
// Thread-safety: the table is constant; the functions are pure.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"

namespace akadzed {

enum class OnReload {
  kApplied,  // SIGHUP applies the new value
  kRestart,  // the running value stays until the next start; a change is warned about
  kPerKey,   // a mapping of keys: they say (the mapping itself holds no value)
};

struct ConfigKey {
  // The mapping the key is in: "" for the top level, "worker", "queues[]"
  // (every element of the list), "handlers.*" (every entry of the mapping),
  // "handlers.*.shell", ...
  std::string_view section;
  std::string_view name;
  OnReload on_reload;
  // kRestart: whether the key's value (in any entry, for list and mapping
  // sections) differs between two configs. Entries are matched by position;
  // entries added or removed are the section's own row (for periodic.*,
  // whose entries are named by their keys: any change of the names). Null
  // for the other kinds.
  bool (*differs)(const DaemonConfig& a, const DaemonConfig& b) = nullptr;

  // "worker.poll_interval", "queues[].slots", "database".
  std::string Path() const;
};

// Every key, grouped by section.
std::span<const ConfigKey> ConfigKeys();

// The names of the keys of `section`, in table order. Throws
// std::logic_error for a section with no keys (a parser asking for a
// section the table lacks).
std::vector<std::string_view> KeysOf(std::string_view section);

// The paths of the kRestart keys whose values differ between the running
// config and a freshly loaded one, in table order; empty when a reload
// applies everything that changed.
std::vector<std::string> RestartKeysChanged(const DaemonConfig& running, const DaemonConfig& fresh);

}  // namespace akadzed
