// The claim's key locks and recounts: how many jobs each limit key may start
// in this claim. A count without locks first (the window read brings it
// along, window_reads.h); keys that look free are locked (transaction-level
// advisory locks on the key's name: the first may wait, the rest are
// try-locks) and counted again in a new statement, whose snapshot includes
// every claim that held the lock before: the locks and the recount go in
// one round trip (a pipeline). Start marks that left every window are purged
// under the lock, by the statement that claims (PurgeStartsSql).
//
// Thread-safety: functions use the transaction they are given.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "claim/claim_floor.h"
#include "pg/transaction.h"

namespace akadzed {

struct KeyInfo {
  std::int64_t allowed = 0;
  bool records_starts = false;  // its applicable row caps starts
};

// SQL of a count: for each key `keys_sql` yields (a query of one text
// column), its applicable limits and its running jobs and starts, as the
// columns key, has_row, max_running, max_starts, running, starts, then the
// ids of the running jobs counted (int8[]; empty when the key has no
// running cap and nothing was counted) and the statement's snapshot
// (kKeyCountColumns of them; KeyInfoAt and RecordRunningFloors read them).
// `floors_sql` and `points_sql`: SQL expressions of types jsonb and xid8[],
// the keys' running floors and their points (claim_floor.h,
// RunningFloorsArgs); a key without a floor is counted whole.
std::string KeyCountsSql(const std::string& keys_sql, const std::string& floors_sql, const std::string& points_sql);
inline constexpr int kKeyCountColumns = 8;
// The KeyInfo of the count in `r`'s row `row`, its columns from `first`
// (the key itself at `first`).
KeyInfo KeyInfoAt(const pg::Result& r, int row, int first);
// The running floor each counted key of `r` (rows with a count from column
// `first`; a row whose count there is NULL is skipped) leaves, into
// `floors` (null: none kept).
void RecordRunningFloors(const pg::Result& r, int first, RunningFloors* floors);

// Reads each key's applicable limits and counts its running jobs and starts,
// with and into `floors` (null: counted whole, none kept).
std::unordered_map<std::string, KeyInfo> CountKeys(pg::Transaction& tx, const std::vector<std::string>& keys,
                                                   RunningFloors* floors);

// One round of key locks and their recount, as statements to send in one
// pipeline: alone (LockAndCountKeys), or followed by the claiming statement
// when the claim planned on the counts without locks (a speculative claim,
// claim_transaction.cpp), which then checks with SpeculativeKeysSql that
// the keys it planned are held and still have room.
//
// The first lock waits when `may_wait`; the rest are try-locks, which also
// record the keys they got in the transaction-local setting
// akadzed.claim_keys (a JSON array), for a later statement of the
// transaction to read.
class KeyLockRound {
 public:
  // `keys` not empty. The recount reads with and records into `floors`
  // (null: counted whole, none kept), which must outlive the round.
  KeyLockRound(std::vector<std::string> keys, bool may_wait, RunningFloors* floors);
  KeyLockRound(const KeyLockRound&) = delete;
  KeyLockRound& operator=(const KeyLockRound&) = delete;

  // Appends the round's statements (they point into this object).
  void AddStatements(std::vector<pg::PipelinedStatement>& out) const;
  int statement_count() const;
  // The key whose lock the round waits for, if any.
  const std::string* waited_key() const { return may_wait_ ? &keys_.front() : nullptr; }
  // The KeyInfo of every key from the round's results (`results` from its
  // first statement on): a key another claim holds gets allowed = 0 and
  // counts in `*locked_elsewhere`; the keys locked are appended to `*locked`.
  // Every key's running floor is recorded, locked or not.
  std::unordered_map<std::string, KeyInfo> Read(std::span<const pg::Result> results, int* locked_elsewhere,
                                                std::vector<std::string>* locked) const;

 private:
  std::vector<std::string> keys_;
  bool may_wait_;
  RunningFloors* floors_;
  std::vector<std::string> tried_;
  pg::Params first_;
  pg::Params rest_;
  pg::Params all_;
};

// Decides how many jobs each of `keys` may start in this claim (see above):
// keys are locked and counted in one round trip. The first lock may wait
// when `*may_wait` (then cleared); a key another claim holds gets allowed =
// 0, counts in `*locked_elsewhere` and is not in `*locked`.
std::unordered_map<std::string, KeyInfo> LockAndCountKeys(pg::Transaction& tx,
                                                          const std::vector<std::string>& keys,
                                                          bool* may_wait, int* locked_elsewhere,
                                                          std::vector<std::string>* locked, RunningFloors* floors);

// The check of a speculative claim, as a query of one row (ok, held): `ok`
// when every key of `keys_param` (text[]) is held by this transaction, the
// waited key `waited_param` (text, NULL: none) or one the KeyLockRound's
// try-locks recorded, and may start at least the matching count of
// `counts_param` (int8[]) jobs, counted in this statement (whose snapshot
// follows the round's locks); `held`: those of the keys that are held
// (text[]). `marks_param` (text[]): the keys whose starts the claim marks;
// a key's applicable row must cap starts exactly when it is among them.
// `floors_param` (jsonb) and `points_param` (xid8[]): the keys' running
// floors (KeyCountsSql).
// Run in a statement after the KeyLockRound's, in the same
// transaction.
std::string SpeculativeKeysSql(const std::string& keys_param, const std::string& counts_param,
                               const std::string& waited_param, const std::string& marks_param,
                               const std::string& floors_param, const std::string& points_param);

// A data-modifying CTE body that deletes the start marks of the keys in
// `keys_param` (an SQL expression of type text[]) that are outside every
// window a claim may count and left it at most 10 seconds before that, or lie past
// it (see key_locks.cpp); older ones are pruning's. Only for keys this
// claim holds the lock of.
std::string PurgeStartsSql(const std::string& keys_param);

}  // namespace akadzed
