// The claim's key locks and recounts: how many jobs each limit key may start
// in this claim. A count without locks first; keys that look free are
// locked (transaction-level advisory locks on the key's name: the first may
// wait, the rest are try-locks) and counted again in a new statement, whose
// snapshot includes every claim that held the lock before. Start marks out
// of every window are purged under the lock.
//
// Thread-safety: functions use the transaction they are given.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "pg/transaction.h"

namespace akadzed {

struct KeyInfo {
  std::int64_t allowed = 0;
  bool records_starts = false;  // its applicable row caps starts
};

// Reads each key's applicable limits and counts its running jobs and starts.
// With `purge`, also deletes start marks older than the key's window (only
// under the key's lock).
std::unordered_map<std::string, KeyInfo> CountKeys(pg::Transaction& tx,
                                                   const std::vector<std::string>& keys,
                                                   bool purge);

// Decides how many jobs each of `keys` may start in this claim (see above).
// The first lock may wait when `*may_wait` (then cleared); a key another
// claim holds gets allowed = 0 and counts in `*locked_elsewhere`.
std::unordered_map<std::string, KeyInfo> LockAndCountKeys(pg::Transaction& tx,
                                                          const std::vector<std::string>& keys,
                                                          bool* may_wait, int* locked_elsewhere);

}  // namespace akadzed
