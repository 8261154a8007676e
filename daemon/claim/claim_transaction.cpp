#include "claim/claim_transaction.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "claim/first_window.h"
#include "claim/key_locks.h"
#include "claim/window_reads.h"
#include "pg/pg_error.h"
#include "runtime/job_traces.h"
#include "pg/transaction.h"
#include "store/job_row.h"
#include "store/job_sql.h"

namespace akadzed {

void ValidateClaimRequest(const ClaimRequest& request) {
  if (request.slots < 1) throw std::invalid_argument("slots must be at least 1");
  if (request.expected_slots < 0 || request.expected_slots > request.slots) {
    throw std::invalid_argument("expected slots must be from 0 to slots");
  }
  if (!request.worker_id.empty() && !IsUuid(request.worker_id)) {
    throw std::invalid_argument("worker id '" + request.worker_id + "' is not a UUID");
  }
  if (request.aging_us && *request.aging_us <= 0) {
    throw std::invalid_argument("aging interval must be positive");
  }
  if (request.first_window_per_slot != 0 &&
      !(request.first_window_per_slot >= 1 && request.first_window_per_slot <= 64)) {
    throw std::invalid_argument("first window rows per slot must be 0 or from 1 to 64");
  }
}

namespace {

// The claim's elapsed time (ClaimResult::elapsed_ms, the claim duration
// metric) is measured on the real steady clock, never a test's: it reports
// how long the server and the network took. The claim decides nothing by
// the client's time (its now() is the server's), so it takes no ServiceClock.
double MillisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// ClaimRequest::lease_span_us as a condition: $<first> the span (NULL: no
// fence), $<first + 1> the worker id. clock_timestamp(), not now(): a
// statement that reaches the server late is judged by when it runs.
std::string LeaseFenceSql(int first) {
  const std::string span = "$" + std::to_string(first) + "::int8";
  const std::string worker = "$" + std::to_string(first + 1) + "::uuid";
  return "(" + span + " IS NULL OR EXISTS (SELECT 1 FROM akadze.workers w WHERE w.id = " + worker +
         " AND w.heartbeat_at >= clock_timestamp() - " + span + " * interval '1 microsecond'))";
}

// How a claim ends its transaction.
enum class ClaimEnd {
  kCaller,    // the caller ends it (ClaimInTransaction, or hooks before COMMIT)
  kCommit,    // COMMIT in the claiming statement's round trip
  kRollback,  // ROLLBACK in the claiming statement's round trip (dry runs)
};

struct ClaimOutcome {
  ClaimResult result;
  bool ended = false;  // the claim ended the transaction (ClaimEnd)
  // Planned rows another transaction held or took between the read and the
  // claiming statement, when the claim ended in that statement's round trip
  // (so it could not plan again, and claimed nothing): the caller claims
  // again without them.
  std::vector<std::int64_t> taken_elsewhere;
  // A speculative claim ended its transaction and found a planned key held
  // by another claim or without room: it claimed nothing, and the caller
  // claims again without speculation.
  bool speculation_failed = false;
  // The queue's floor after this claim (claim_floor.h), when it was asked
  // for one.
  std::optional<ClaimFloor> floor;
};

// The statement that claims, all or nothing: locks the planned rows (FOR
// UPDATE SKIP LOCKED, those still ready); when it locked every one, marks
// them running (or failed as Unprocessable), records their starts and
// purges the start marks of the keys this claim holds; when another
// transaction holds or took some, changes nothing and names them. One row
// at least: whether the lease fence held, the ids it could not lock, and a
// claimed job per row (NULLs when none). Parameters: $1 ids, $2 worker, $3
// keys whose starts are marked, $4-$5 the fence, $6 queue, $7 excluded ids,
// $8 locked keys; a speculative claim's keys (ClaimRun::ClaimPlan): $9 the
// planned keys whose state came from counts without locks, $10 the jobs
// planned of each, $11 the key whose lock the claim waited for (NULL: none),
// $12-$13 those keys' running floors and their points (claim_floor.h).
// With none ($9 empty) the check holds. When it does not, nothing changes,
// as with the fence.
const std::string& ClaimSql() {
  static const std::string sql =
      "WITH fence AS (SELECT " + LeaseFenceSql(4) + " AS held),"
      " spec AS (" + SpeculativeKeysSql("$9::text[]", "$10::int8[]", "$11::text", "$3::text[]", "$12::jsonb", "$13::xid8[]") + "),"
      // One lookup by id per planned row, through jobs_pkey alone
      // (kReadyByIdSql, and the queue compared as no index condition):
      // with `id = ANY($1) AND queue = $6 AND state = 'queued'` a generic
      // plan read the queue's range of jobs_claim_key_idx and filtered it,
      // stepping over every dead entry a held horizon keeps (12 ms at
      // 60,000). OFFSET 0 keeps the subquery a lookup per row.
      " plan AS ("
      "  SELECT j.id, j.run_count < 2147483647 AS runnable"
      "  FROM unnest($1::int8[]) AS u(id) CROSS JOIN LATERAL (SELECT id, run_count, attempt FROM akadze.jobs"
      "   WHERE id = u.id AND (queue = $6) IS TRUE AND id <> ALL($7::int8[]) AND " +
      std::string(kReadyByIdSql) +
      "   AND (SELECT held FROM fence) AND (SELECT ok FROM spec) OFFSET 0 FOR UPDATE SKIP LOCKED) j),"
      " missing AS (SELECT coalesce(array_agg(u.id), '{}') AS ids FROM unnest($1::int8[]) AS u(id)"
      "             WHERE NOT EXISTS (SELECT 1 FROM plan WHERE plan.id = u.id)),"
      " claimed AS ("
      "  UPDATE akadze.jobs j SET"
      "    state = CASE WHEN plan.runnable THEN 'running' ELSE 'failed' END,"
      "    run_count = j.run_count + plan.runnable::int,"
      "    worker_id = CASE WHEN plan.runnable THEN $2::uuid ELSE j.worker_id END,"
      // What the trigger of migration 010 would write; written here, it
      // does not call the trigger's function.
      "    running_xid = CASE WHEN plan.runnable THEN pg_current_xact_id() ELSE j.running_xid END,"
      // now(), as the start marks: started_at is when the job counts as
      // started for its key's rate (clock_timestamp() here made the fault
      // suite's audit see 6-8 starts in windows of 5).
      "    started_at = CASE WHEN plan.runnable THEN now() ELSE j.started_at END,"
      "    finished_at = CASE WHEN plan.runnable THEN j.finished_at ELSE now() END,"
      "    errors = CASE WHEN plan.runnable THEN j.errors ELSE " +
      AppendErrorSql("j.errors", "'Unprocessable'",
                     "'run_count is at its maximum (2147483647): the job cannot run again'") +
      " END"
      "  FROM plan WHERE j.id = plan.id AND (SELECT cardinality(ids) = 0 FROM missing)"
      "  RETURNING " + JobRowColumns(kJobRowForClaim, "j") + ", plan.runnable),"
      " marks AS (INSERT INTO akadze.limit_starts (key, started_at)"
      "           SELECT limit_key, now() FROM claimed"
      "           WHERE runnable AND limit_key = ANY($3::text[])),"
      " purge AS (" + PurgeStartsSql("($8::text[] || (SELECT held FROM spec))") + ")"
      " SELECT claimed.*, fence.held, missing.ids, spec.ok"
      " FROM fence CROSS JOIN missing CROSS JOIN spec LEFT JOIN claimed ON true";
  return sql;
}

// The claim head: the queue's claim lock, the pause check, the fence and
// the session settings of a claim (see ClaimRun::Start).
const std::string& HeadSql() {
  static const std::string sql =
      "SELECT set_config('max_parallel_workers_per_gather', '0', true), set_config('jit', 'off', true),"
      " CASE WHEN $5 THEN ROW(" + std::string(kIndexLookupPlansSql) + ") END,"
      " CASE WHEN $2 THEN pg_advisory_xact_lock(hashtextextended('akadze.claim_queue:' || $1, 0)) END,"
      " EXISTS (SELECT 1 FROM akadze.queue_pauses WHERE queue = $1),"
      " (SELECT reltuples::float8 FROM pg_class WHERE oid = 'akadze.jobs_claim_idx'::regclass),"
      " " + LeaseFenceSql(3);
  return sql;
}

// The queue's cap and its running jobs ($1 the queue), with the ids and the
// statement's snapshot (the queue's next running floor) and whether the
// role may read akadze.worker_stops; no row when it has no cap, and then
// nothing is counted. Pipelined after the head: it starts after the head
// took the claim lock, so its snapshot has every claim of the queue before
// this one. The running jobs are read through jobs_running_worker_idx
// (QueueRunningJobsSql, store/job_sql.h): with the queue's running floor
// ($2 from_xid, $3 points, $4 ids: ClaimFloor::queue_running) past the
// dead entries of the jobs the cluster ran while a held horizon keeps
// them; without one, each registered worker past its stored floor. A cost
// only capped queues pay, and no index write per job for the queues that
// have none. (OFFSET 0: `r` flattened into the outer query made each use of
// r.ids a subplan of its own, and the count ran twice.) With stops
// ($with_stops, what the last count's role could read): a grant revoked
// since fails this claim, which clears its floor; the next counts without
// one and learns.
const std::string& QueueCapSql(bool with_floor, bool with_stops) {
  const auto make = [](const QueueRunningFloorSql* floor) {
    return "SELECT c.max_running::int8, cardinality(r.ids)::int8, r.ids, " + std::string(kFloorSnapshotSql) +
           ", has_table_privilege('akadze.worker_stops', 'SELECT')"
           " FROM akadze.queue_caps c CROSS JOIN LATERAL (SELECT ARRAY(" + QueueRunningJobsSql("$1", floor) +
           ") AS ids OFFSET 0) r WHERE c.queue = $1";
  };
  static const std::string whole = make(nullptr);
  static const std::string floored = [&] {
    const QueueRunningFloorSql f{"$2::xid8", "$3::xid8[]", "$4::int8[]", false};
    return make(&f);
  }();
  static const std::string floored_with_stops = [&] {
    const QueueRunningFloorSql f{"$2::xid8", "$3::xid8[]", "$4::int8[]", true};
    return make(&f);
  }();
  return !with_floor ? whole : with_stops ? floored_with_stops : floored;
}

// One claim: reads, key states, plan, the claiming statement; ClaimRun::Run
// drives them. `one_at_a_time`: first wait for the queue's claim lock, so
// that claims of one queue run one after another.
//
// Round trips of a claim that settles in one window (no aging): BEGIN, the
// head and the first window with its keys' counts; the key locks and their
// recount; the claiming statement with COMMIT (`end`). Each further window
// adds its read and its keys' locks; aging adds the levels' read.
class ClaimRun {
 public:
  // `floor`: the queue's floor to read with, nullptr for none (then no
  // floor comes out either).
  ClaimRun(pg::Transaction& tx, const ClaimRequest& request, bool one_at_a_time, ClaimEnd end, bool speculate,
           const ClaimFloor* floor)
      : tx_(tx),
        request_(request),
        one_at_a_time_(one_at_a_time),
        end_(end),
        speculate_(speculate && end == ClaimEnd::kCommit),
        index_lookup_plans_(one_at_a_time && !(request.before_commit && !request.dry_run)),
        floor_wanted_(floor != nullptr && !request.aging_us),
        floor_(floor_wanted_ && !floor->empty() ? floor : nullptr),
        given_(floor_wanted_ && !floor->snapshot.empty() ? floor : nullptr),
        ctx_(MakeReadContext(request.queue, request.aging_us)),
        round_trips_before_(tx.connection().round_trips()) {
    result().worker_id = request.worker_id.empty() ? RandomUuid() : request.worker_id;
    unlocked_.known = &keys_;
    if (given_) running_ = given_->running;
    if (floor_wanted_) unlocked_.running = &running_;
  }

  ClaimOutcome Run() {
    if (Start()) {
      for (;;) {
        ReadRound();
        SetKeyStates();
        step_ = planner_->Plan();
        if (!step_.settled) {
          reads_ = std::move(step_.reads);
          catch_ups_ = std::move(step_.catch_ups);
          continue;
        }
        if (step_.plan.empty() || ClaimPlan()) break;
      }
      if (!step_.plan.empty()) result().rows_needed = RowsNeeded();
      if (floor_wanted_) outcome_.floor = NextFloor();
    } else if (given_) {
      // Nothing read (paused, fenced, capped, no free slot): the floor
      // still holds, for its own snapshot, with the running floors the
      // first window's counts and the cap's count left.
      outcome_.floor = *given_;
      outcome_.floor->running = running_;
      outcome_.floor->queue_running = queue_running_;
    } else if (queue_running_) {
      // A first claim that found its queue at its cap: its count's floor
      // alone, for the next claim's count.
      outcome_.floor.emplace();
      outcome_.floor->snapshot = snapshot_;
      outcome_.floor->server_started = server_started_;
      outcome_.floor->running = running_;
      outcome_.floor->queue_running = queue_running_;
    }
    return Finish();
  }

 private:
  ClaimResult& result() { return outcome_.result; }

  // The first round trip: BEGIN (if the transaction defers it), the head
  // and the first read (the levels with aging, else the first window, whose
  // rows go unused when the queue is paused or the fence holds). False when
  // there is nothing to claim: fenced, paused, or (aging) no queued job.
  //
  // RunClaim's claims of one queue run one at a time: each waits in the
  // head, before it reads anything, for the queue's claim lock (a
  // transaction-level advisory lock on 'akadze.claim_queue:' || queue),
  // held to its COMMIT. Claims running side by side all read the same head
  // of the queue; on the seed's load scenario (10 claimers, 20 keys under
  // limits) they spent their time on rows and keys the others had just
  // taken: 511 jobs/s against 919 one at a time (docs/benchmarks.md, "The
  // seed's load scenario"). The lock is waited for first, holding nothing
  // else, so it adds no deadlock: a claim waits for a key lock only while
  // holding no key or row lock, and never waits for a queue lock after
  // taking a key.
  //
  // Window reads are small index range scans; a parallel plan chosen on a
  // bad row estimate only adds worker start-up (tens of ms) to a claim.
  // Nor JIT: a million-row queue makes the estimates of a keyed read's
  // per-group ranges large enough for JIT, which then compiles for ~20 ms a
  // statement that runs in one. The planner's estimate of queued rows
  // (jobs_claim_idx's entries) comes along: it tells whether reading around
  // skipped groups can pay off.
  bool Start() {
    const pg::Params head_params = pg::Params()
                                       .add(request_.queue)
                                       .add(one_at_a_time_)
                                       .add(request_.lease_span_us)
                                       .add(result().worker_id)
                                       .add(index_lookup_plans_);
    ClaimPlannerOptions options;
    options.mode = request_.mode;
    options.slots = request_.slots;
    const int expected = request_.expected_slots > 0 ? request_.expected_slots : request_.slots;
    const double per_slot =
        request_.first_window_per_slot > 0 ? request_.first_window_per_slot : FirstWindowSizer::kMaxPerSlot;
    options.first_window = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(expected * per_slot)));
    // The queue's running floor, when the floor given has one (aging reads
    // with none).
    const QueueRunningFloor* queue_floor = given_ && given_->queue_running ? &*given_->queue_running : nullptr;
    pg::Params cap_params = pg::Params().add(request_.queue);
    if (queue_floor) {
      cap_params.add(std::to_string(queue_floor->running.from_xid))
          .add_array(XidTexts(queue_floor->running.points))
          .add_array(queue_floor->running.ids);
    }
    const std::string& cap_sql = QueueCapSql(queue_floor != nullptr, queue_floor && queue_floor->reads_stops);
    pg::Result head;
    pg::Result cap;
    // The dead entries' count before the claim's first read (ClaimResult::
    // dead_index_entries), right after the head.
    const pg::Statement dead = DeadEntriesStatement();
    const pg::PipelinedStatement dead_before = {dead.sql, &dead.params(), dead.prepare()};
    if (request_.aging_us) {
      const pg::Statement levels = FindLevelsStatement(ctx_);
      const pg::PipelinedStatement first[] = {{HeadSql(), &head_params},
                                              dead_before,
                                              {cap_sql, &cap_params},
                                              {levels.sql, &levels.params()}};
      std::vector<pg::Result> got = tx_.pipeline(first);
      head = std::move(got[0]);
      dead_before_ = got[1].int64(0, 0);
      cap = std::move(got[2]);
      levels_ = RowsFrom(got[3]);
      // Each priority level is a stream of its own (within a level,
      // effective priority never increases), read only when the plan needs
      // it, usually for a few rows: its first window is `slots` rows.
      options.first_window = expected;
      options.stream_count = static_cast<int>(std::max<std::size_t>(1, levels_.size()));
      planner_.emplace(options);
    } else {
      // No aging: the queue is one stream, and its first read has no
      // frontier.
      planner_.emplace(options);
      reads_ = planner_->FirstReads();
      // With a floor: the snapshot the next floor will hold for, then the
      // rows below the floor, then the first window past it, in that
      // order (each statement's snapshot no earlier than the one before).
      const pg::Statement snapshot = FloorSnapshotStatement();
      std::optional<pg::Statement> below;
      if (floor_) below = BelowFloorStatement(ctx_, *floor_);
      const pg::Statement window = WindowReader::FirstStatement(ctx_, reads_.front(), floor_, unlocked_);
      std::vector<pg::PipelinedStatement> first = {
          {HeadSql(), &head_params}, dead_before, {cap_sql, &cap_params}};
      if (floor_wanted_) first.push_back({snapshot.sql, &snapshot.params(), snapshot.prepare()});
      if (below) first.push_back({below->sql, &below->params(), below->prepare()});
      first.push_back({window.sql, &window.params(), window.prepare()});
      std::vector<pg::Result> got = tx_.pipeline(first);
      head = std::move(got[0]);
      dead_before_ = got[1].int64(0, 0);
      cap = std::move(got[2]);
      pg::Result window_result = std::move(got.back());
      if (floor_wanted_) {
        snapshot_ = std::string(got[3].text(0, 0));
        server_started_ = std::string(got[3].text(0, 1));
        now_us_ = got[3].int64(0, 2);
        if (given_ && !FloorUsable(*given_, snapshot_, server_started_)) {
          // Another server, or transaction ids that went back (a failover,
          // a restore): what the floor says of the rows below it, and of
          // the keys' running rows, is about another history. Read from the
          // heads and count the keys whole.
          floor_ = nullptr;
          given_ = nullptr;
          running_.clear();
          window_result = tx_.exec(WindowReader::FirstStatement(ctx_, reads_.front(), nullptr, unlocked_));
          if (queue_floor) cap = tx_.exec(QueueCapSql(false, false), pg::Params().add(request_.queue));
        } else if (floor_) {
          below_ = RowsFrom(got[4]);
          result().floor_levels = static_cast<int>(floor_->levels.size());
          result().rows_below_floor = static_cast<std::int64_t>(below_.size());
        }
      }
      window_reader_.emplace(tx_, ctx_, head.is_null(0, 5) ? -1.0 : head.float64(0, 5), floor_, below_);
      first_window_ = window_reader_->FromResult(reads_.front(), window_result, unlocked_);
    }
    // The queue's next running floor, from this count (none without a cap).
    if (floor_wanted_ && cap.rows() > 0) {
      const std::optional<SnapshotXids> s = ParseSnapshot(cap.text(0, 3));
      if (s) queue_running_ = QueueRunningFloor{RunningFloorAfter(*s, cap.int64_array(0, 2)), cap.boolean(0, 4)};
    }
    if (!head.boolean(0, 6)) {
      result().fenced = true;
      return false;
    }
    if (head.boolean(0, 4)) {
      result().paused = true;
      return false;
    }
    std::int64_t slots = request_.slots;
    if (cap.rows() > 0) {
      result().queue_cap = cap.int64(0, 0);
      result().queue_running = cap.int64(0, 1);
      const std::int64_t room = *result().queue_cap - result().queue_running;
      if (room <= 0) {
        result().capped = true;
        return false;
      }
      slots = std::min(slots, room);
    }
    // The caller's slots, counted now that the claim holds the claim lock:
    // those that freed while it waited are taken too.
    if (request_.slots_at_lock) {
      slots = std::min<std::int64_t>(slots, request_.slots_at_lock());
      if (slots < 1) return false;
    }
    if (slots < request_.slots) planner_->LowerSlots(static_cast<int>(slots));
    result().streams = options.stream_count;
    if (request_.aging_us) {
      if (levels_.empty()) return false;
      // Each level's first row tells the planner where the level starts in
      // claim order: levels that cannot reach the plan are never read.
      for (std::size_t s = 0; s < levels_.size(); ++s) planner_->SetStreamStart(static_cast<int>(s), levels_[s]);
    }
    return true;
  }

  // The catch-ups and windows the planner asked for, into the planner.
  void ReadRound() {
    if (!catch_ups_.empty() || request_.aging_us) rows_needed_known_ = false;
    for (const CatchUpRead& c : catch_ups_) {
      std::vector<ReadyRow> rows = ReadCatchUp(tx_, ctx_, c);
      result().rows_read += static_cast<std::int64_t>(rows.size());
      planner_->AddCatchUp(c, rows);
    }
    if (!reads_.empty()) {
      std::vector<WindowReader::Window> windows;
      if (first_window_) {
        windows.push_back(std::move(*first_window_));
        first_window_.reset();
      } else if (request_.aging_us) {
        for (std::vector<ReadyRow>& rows : ReadLevelWindows(tx_, ctx_, levels_, reads_, unlocked_)) {
          windows.push_back(WindowReader::Window{std::move(rows), false, false});
        }
        for (std::size_t i = 0; i < reads_.size(); ++i) {
          windows[i].exhausted = static_cast<std::int64_t>(windows[i].rows.size()) < reads_[i].limit;
        }
      } else {
        for (const WindowRead& w : reads_) windows.push_back(window_reader_->Read(w, unlocked_));
      }
      for (std::size_t i = 0; i < reads_.size(); ++i) {
        ++result().windows;
        if (windows[i].keyed) ++result().keyed_windows;
        result().rows_read += static_cast<std::int64_t>(windows[i].rows.size());
        if (windows[i].keyed || !reads_[i].skip_keys.empty() || reads_[i].skip_null_key) plain_prefix_ = false;
        if (plain_prefix_) {
          for (const ReadyRow& row : windows[i].rows) plain_positions_.push_back(row.index_position());
        }
        planner_->AddWindow(reads_[i], windows[i].rows, windows[i].exhausted);
      }
    }
    // Rows this claim must not take are passed over as if another claim had
    // locked them, before they are planned.
    if (!request_.exclude_ids.empty()) planner_->RemoveRows(request_.exclude_ids);
  }

  void SetKeyState(const std::string& key, const KeyInfo& info) {
    keys_[key] = info;
    planner_->SetKeyAllowed(key, info.allowed);
  }

  // How many jobs each newly seen key may start in this claim.
  void SetKeyStates() {
    // Keys the keyed read enumerated: those held or at their limit in a
    // count without locks get n = 0 now, as they would when their rows are
    // seen, so the next window skips them before reading any of their rows.
    if (window_reader_) {
      if (std::vector<std::string> enumerated = window_reader_->TakeEnumeratedKeys(); !enumerated.empty()) {
        std::erase_if(enumerated, [&](const std::string& k) { return keys_.contains(k); });
        for (auto& [key, info] : CountKeys(tx_, enumerated, unlocked_.running)) {
          if (info.allowed <= 0) SetKeyState(key, KeyInfo{0, false});
        }
      }
    }
    // Keys first seen in rows: those a count without locks found held or at
    // their limit are skipped unlocked; the others are locked and counted
    // again (one round trip). A speculative claim plans on the count
    // without locks instead, and locks the keys it planned in the round
    // trip of its claiming statement (ClaimPlan).
    std::vector<std::string> fresh = planner_->KeysNeedingState();
    if (fresh.empty()) return;
    std::vector<std::string> to_lock;
    for (const std::string& key : fresh) {
      auto it = unlocked_.counts.find(key);
      if (it != unlocked_.counts.end() && it->second.allowed <= 0) {
        SetKeyState(key, KeyInfo{0, false});
      } else if (it != unlocked_.counts.end() && speculate_) {
        SetKeyState(key, it->second);
        speculative_.insert(key);
      } else {
        to_lock.push_back(key);
      }
    }
    if (to_lock.empty()) return;
    auto info = LockAndCountKeys(tx_, to_lock, &may_wait_, &result().keys_locked_elsewhere, &locked_keys_,
                                 unlocked_.running);
    for (const std::string& key : to_lock) SetKeyState(key, info[key]);
  }

  // Runs the claiming statement for the settled plan (ending the
  // transaction with it unless the caller ends it). True when the claim is
  // over; false when other transactions hold planned rows and the claim
  // must plan again without them.
  //
  // A planned row whose run_count is at int4's maximum cannot run: its
  // fencing token (run_count + 1) cannot be written. (Its attempt is not
  // written at the claim: a job at attempt's maximum runs, as with akadze's
  // worker, its handler told attempt 2,147,483,647.) It is failed here as Unprocessable, its counters untouched,
  // instead of failing the statement for the rows beside it (which wedged
  // the queue). It counts no start and holds no slot. The fence is checked
  // again as this statement runs: the lease may have run out since the
  // head (a cut between the two), and nothing is claimed then.
  //
  // A speculative claim (ClaimRun::speculate_) planned the keys it saw
  // first on their counts without locks. The claiming statement goes after
  // those keys' locks and recount (KeyLockRound), in the same round trip,
  // and claims only if every such planned key is held and, counted again
  // in the claiming statement (whose snapshot follows the locks), still
  // has room for its planned jobs (SpeculativeKeysSql). Otherwise it
  // changes nothing, its transaction ends, and RunClaim claims again
  // without speculation. Under the queue's claim lock only a claim of
  // another queue, a ClaimInTransaction (which takes no claim lock), an
  // application holding a key's lock or an operator changing a key's limits
  // row can change a key in between, so the check rarely fails; and the
  // claim lock is held for one round trip less.
  bool ClaimPlan() {
    ++result().lock_rounds;
    // The keys whose claimed jobs each leave a start mark, and the
    // speculative keys planned, with their planned jobs.
    std::vector<std::string> start_marks;
    std::vector<std::string> spec_keys;
    std::vector<std::int64_t> spec_counts;
    for (std::int64_t id : step_.plan) {
      const ReadyRow* row = planner_->Find(id);
      if (!row->limit_key) continue;
      const std::string& key = *row->limit_key;
      if (keys_[key].records_starts && std::find(start_marks.begin(), start_marks.end(), key) == start_marks.end()) {
        start_marks.push_back(key);
      }
      if (speculative_.contains(key)) {
        const auto at = std::find(spec_keys.begin(), spec_keys.end(), key);
        if (at == spec_keys.end()) {
          spec_keys.push_back(key);
          spec_counts.push_back(1);
        } else {
          ++spec_counts[static_cast<std::size_t>(at - spec_keys.begin())];
        }
      }
    }
    std::optional<KeyLockRound> round;
    if (!spec_keys.empty()) round.emplace(spec_keys, may_wait_, unlocked_.running);
    pg::Params params;
    params.add_array(step_.plan).add(result().worker_id).add_array(start_marks);
    params.add(request_.lease_span_us).add(result().worker_id);
    params.add(request_.queue).add_array(request_.exclude_ids).add_array(locked_keys_);
    params.add_array(spec_keys).add_array(spec_counts);
    params.add(round && round->waited_key() ? std::optional<std::string>(*round->waited_key()) : std::nullopt);
    const RunningFloorArgs spec_floors = RunningFloorsArgs(unlocked_.running, &spec_keys);
    params.add(spec_floors.floors).add_array(spec_floors.points);
    std::vector<pg::PipelinedStatement> statements;
    if (round) round->AddStatements(statements);
    const pg::Statement dead = DeadEntriesStatement();
    statements.push_back({dead.sql, &dead.params(), dead.prepare()});
    statements.push_back({ClaimSql(), &params});
    std::vector<pg::Result> results;
    if (end_ == ClaimEnd::kCaller) {
      results = tx_.pipeline(statements);
    } else {
      results = tx_.end_after(statements, end_ == ClaimEnd::kCommit);
      outcome_.ended = true;
    }
    const pg::Result& claimed = results.back();
    result().dead_index_entries = results[results.size() - 2].int64(0, 0) - dead_before_;
    if (round) {
      for (auto& [key, info] : round->Read(results, &result().keys_locked_elsewhere, &locked_keys_)) {
        SetKeyState(key, info);
        speculative_.erase(key);
      }
    }
    // It locked rows (those it could): from now on no key lock may wait, so
    // a claim never waits while holding a row another claim may wait for.
    may_wait_ = false;
    const int runnable_column = JobRowColumnCount(kJobRowForClaim);
    if (!claimed.boolean(0, runnable_column + 1)) {
      // Only the fence leaves every planned row unchanged.
      result().fenced = true;
      return true;
    }
    if (!claimed.boolean(0, runnable_column + 3)) {
      // A speculative key was held elsewhere or had no room: nothing claimed.
      outcome_.speculation_failed = true;
      return true;
    }
    if (std::vector<std::int64_t> missing = claimed.int64_array(0, runnable_column + 2); !missing.empty()) {
      // Another transaction holds or took planned rows: nothing was claimed.
      if (outcome_.ended) {
        outcome_.taken_elsewhere = std::move(missing);
        return true;
      }
      planner_->RemoveRows(missing);
      reads_.clear();
      catch_ups_.clear();
      return false;
    }
    if (!outcome_.ended || end_ != ClaimEnd::kCommit) {
      TakeClaimed(claimed, runnable_column);
      return true;
    }
    // Committed: its jobs are running under this worker. A result that
    // cannot be read then is reported as a claim in doubt, whose jobs the
    // claim loop releases (docs/reliability.md), not left to the rescue.
    try {
      TakeClaimed(claimed, runnable_column);
    } catch (const std::exception& e) {
      throw pg::InDoubtError(std::string("claim committed, but its result could not be read: ") + e.what(), "");
    }
    return true;
  }

  // The claimed (and Unprocessable) jobs of the claiming statement's result,
  // in plan order.
  void TakeClaimed(const pg::Result& claimed, int runnable_column) {
    std::unordered_map<std::int64_t, ClaimedJob> by_id;
    for (int i = 0; i < claimed.rows(); ++i) {
      if (claimed.is_null(i, 0)) continue;  // the fence's row alone
      JobRow row = ReadJobRow(claimed, i, kJobRowForClaim);
      ClaimedJob job;
      job.id = row.id;
      job.task = std::move(row.task);
      job.queue = std::move(row.queue);
      job.limit_key = std::move(row.limit_key);
      if (!claimed.boolean(i, runnable_column)) {
        result().unprocessable.push_back(std::move(job));
        continue;
      }
      job.priority = row.priority;
      job.attempt = row.attempt;
      job.max_attempts = row.max_attempts;
      job.run_count = row.run_count;
      job.args_json = std::move(row.args_json);
      if (row.traceparent) {
        job.trace_id = ParseTraceparent(*row.traceparent);
        if (job.trace_id) job.traceparent = W3cTraceparent(*row.traceparent);
      }
      job.effective_priority = planner_->Find(job.id)->effective;
      by_id.emplace(job.id, std::move(job));
    }
    // Every planned row is claimed or failed; anything else is a planner
    // bug (the claim rolls back, or, committed already, is reported in
    // doubt and its jobs released).
    if (by_id.size() + result().unprocessable.size() != step_.plan.size()) {
      throw std::logic_error("claim planner lost a planned row; claim rolled back");
    }
    for (std::int64_t id : step_.plan) {
      if (auto it = by_id.find(id); it != by_id.end()) result().jobs.push_back(std::move(it->second));
    }
  }

  // The queue's floor after this claim (claim_floor.h): what its reads
  // knew, less the jobs it took (none when it rolled back or claimed
  // nothing).
  ClaimFloor NextFloor() const {
    std::unordered_set<std::int64_t> taken;
    if (!request_.dry_run) {
      for (const ClaimedJob& j : outcome_.result.jobs) taken.insert(j.id);
      for (const ClaimedJob& j : outcome_.result.unprocessable) taken.insert(j.id);
    }
    const std::vector<ReadyRow> read = planner_->KnownRows();
    ClaimKnowledge k;
    k.old_floor = floor_;
    k.below = below_;
    k.read = read;
    k.known = planner_->Known(0);
    k.taken = &taken;
    k.snapshot = snapshot_;
    k.server_started = server_started_;
    k.now_us = now_us_;
    ClaimFloor next = NextClaimFloor(k);
    // The keys' running floors hold on their own, so with no level floor
    // too; S and the server then say where they hold.
    next.running = running_;
    next.queue_running = queue_running_;
    if (next.snapshot.empty()) {
      next.snapshot = snapshot_;
      next.server_started = server_started_;
    }
    return next;
  }

  // ClaimResult::rows_needed: the rows read at or before the plan's last
  // row in index order (claim order, without aging), when that row lies in
  // the plain prefix of the reads (plain_positions_): windows after it,
  // which skip groups, start after it and cannot hold an earlier row.
  std::optional<std::int64_t> RowsNeeded() const {
    if (!rows_needed_known_ || plain_positions_.empty()) return std::nullopt;
    IndexPosition last = planner_->Find(step_.plan.front())->index_position();
    for (std::int64_t id : step_.plan) {
      const IndexPosition p = planner_->Find(id)->index_position();
      if (IndexBefore(last, p)) last = p;
    }
    if (IndexBefore(plain_positions_.back(), last)) return std::nullopt;
    return std::count_if(plain_positions_.begin(), plain_positions_.end(),
                         [&](const IndexPosition& p) { return !IndexBefore(last, p); });
  }

  // Ends the transaction when the claim owns its end and has not ended it.
  ClaimOutcome Finish() {
    if (end_ != ClaimEnd::kCaller && !outcome_.ended) {
      const pg::Statement dead = DeadEntriesStatement();
      const pg::PipelinedStatement last[] = {{dead.sql, &dead.params(), dead.prepare()}};
      result().dead_index_entries =
          tx_.end_after(last, end_ == ClaimEnd::kCommit).front().int64(0, 0) - dead_before_;
      outcome_.ended = true;
    }
    result().elapsed_ms = MillisecondsSince(started_);
    result().round_trips = static_cast<int>(tx_.connection().round_trips() - round_trips_before_);
    return std::move(outcome_);
  }

  pg::Transaction& tx_;
  const ClaimRequest& request_;
  const bool one_at_a_time_;
  const ClaimEnd end_;
  // Plan keys first seen on their counts without locks, and lock them with
  // the claiming statement (ClaimPlan); only when that statement ends the
  // transaction.
  const bool speculate_;
  // The claim reports its queue's next floor (no aging); the floor it
  // reads with (nullptr: none, or not usable), the rows below it, and the
  // snapshot and server start its first statements saw.
  // The claim's statements are planned as index lookups (RunClaim's
  // transactions without hooks; HeadSql, store/job_sql.h's
  // kIndexLookupPlansSql): each reads a few rows through an index by
  // design, and generic plans made on a daemon's first claims, while the
  // table was small, joined the claiming UPDATE by a scan of the table,
  // then of the whole of jobs_pkey (10-43 ms a claim after 40-60 s of a
  // held horizon at 1,000 jobs/s).
  const bool index_lookup_plans_;
  const bool floor_wanted_;
  const ClaimFloor* floor_;
  // The floor given, when it has a snapshot (its running floors may serve
  // with no level floor), until found not usable.
  const ClaimFloor* given_;
  // The keys' running floors: the given floor's, then each count's.
  RunningFloors running_;
  // The queue's running floor from this claim's cap count (none: no cap).
  std::optional<QueueRunningFloor> queue_running_;
  std::vector<ReadyRow> below_;
  // DeadEntriesStatement() before the first read.
  std::int64_t dead_before_ = 0;
  std::string snapshot_;
  std::string server_started_;
  std::int64_t now_us_ = 0;
  const ReadContext ctx_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();  // elapsed_ms: real time
  const std::int64_t round_trips_before_;
  ClaimOutcome outcome_;
  std::optional<ClaimPlanner> planner_;
  std::optional<WindowReader> window_reader_;  // no aging
  std::vector<ReadyRow> levels_;                // with aging: each level's first row
  std::optional<WindowReader::Window> first_window_;  // read with the head, not yet given to the planner
  std::vector<WindowRead> reads_;
  std::vector<CatchUpRead> catch_ups_;
  PlanStep step_;
  // For RowsNeeded: where each row of the reads' plain prefix sits in the
  // index (windows that neither skip nor read around groups, in order);
  // whether the windows so far are all plain; and whether rows needed can
  // be told at all (not with aging's levels or a catch-up read).
  std::vector<IndexPosition> plain_positions_;
  bool plain_prefix_ = true;
  bool rows_needed_known_ = true;
  std::unordered_map<std::string, KeyInfo> keys_;
  UnlockedCounts unlocked_;
  std::vector<std::string> locked_keys_;
  bool may_wait_ = true;
  // Keys whose state came from a count without locks (speculate_), not yet
  // locked and counted again.
  std::unordered_set<std::string> speculative_;
};

ClaimOutcome Claim(pg::Transaction& tx, const ClaimRequest& request, bool one_at_a_time, ClaimEnd end,
                   bool speculate, const ClaimFloor* floor) {
  ValidateClaimRequest(request);
  return ClaimRun(tx, request, one_at_a_time, end, speculate, floor).Run();
}

}  // namespace

ClaimResult ClaimInTransaction(pg::Transaction& tx, const ClaimRequest& request) {
  return Claim(tx, request, /*one_at_a_time=*/false, ClaimEnd::kCaller, /*speculate=*/false, nullptr).result;
}

ClaimResult RunClaim(pg::Connection& conn, const ClaimRequest& request) {
  ValidateClaimRequest(request);  // before BEGIN: a bad request costs no round trip
  const auto started = std::chrono::steady_clock::now();  // elapsed_ms: real time (MillisecondsSince)
  const std::int64_t round_trips_before = conn.round_trips();
  // Without hooks to run before COMMIT, the claim commits (or a dry run
  // rolls back) in its claiming statement's round trip.
  const bool hooks = request.before_commit && !request.dry_run;
  ClaimRequest again = request;
  ClaimResult result;
  // The floor this claim reads with, for every try; the request's is
  // cleared until the claim succeeds (a claim that throws leaves none).
  ClaimFloor floor;
  if (request.floor) {
    floor = std::move(*request.floor);
    request.floor->clear();
    // Set through another connection: not believed (pg::Connection::serial).
    if (floor.connection != conn.serial()) floor.clear();
  }
  std::optional<ClaimFloor> next_floor;
  int windows = 0, keyed_windows = 0, lock_rounds = 0, keys_locked_elsewhere = 0, speculation_failures = 0;
  std::int64_t rows_read = 0, dead_index_entries = 0;
  // A claim that ended its transaction and found planned rows held or taken
  // by another transaction (an application's lock, an admin command) claimed
  // nothing: it runs again without those rows, as the claim would have
  // planned again in its transaction. The last try plans again in its
  // transaction and commits after, so a claim always makes progress.
  // A claim also runs again, without speculation, when its speculation
  // failed (ClaimRun::ClaimPlan).
  constexpr int kTries = 4;
  bool speculate = true;
  for (int attempt = 1;; ++attempt) {
    const ClaimEnd end = hooks || attempt == kTries ? ClaimEnd::kCaller
                         : request.dry_run          ? ClaimEnd::kRollback
                                                    : ClaimEnd::kCommit;
    // The lock-then-recount rule needs each statement to see what claims
    // that held a key's lock before committed: READ COMMITTED, whatever the
    // role's or database's default isolation level is.
    // Generic plans: planning the claim's statements for each claim's
    // values cost more server time than running them (docs/benchmarks.md,
    // "Generic plans for the claim"); a statement with a hashed set still
    // gets its own plan. Not with hooks: they run their own SQL in this
    // transaction, planned as the server says, as on every other transition.
    pg::Transaction tx(conn, "BEGIN ISOLATION LEVEL READ COMMITTED", pg::Transaction::Begin::kWithFirstStatement,
                       hooks ? pg::Transaction::Plans::kServerDefault : pg::Transaction::Plans::kGeneric);
    ClaimOutcome outcome = Claim(tx, again, /*one_at_a_time=*/true, end, speculate, request.floor ? &floor : nullptr);
    result = std::move(outcome.result);
    next_floor = std::move(outcome.floor);
    windows += result.windows;
    keyed_windows += result.keyed_windows;
    rows_read += result.rows_read;
    dead_index_entries += result.dead_index_entries;
    lock_rounds += result.lock_rounds;
    keys_locked_elsewhere += result.keys_locked_elsewhere;
    if (!outcome.ended) {
      if (hooks && (!result.jobs.empty() || !result.unprocessable.empty())) {
        std::vector<std::int64_t> ids;
        for (const ClaimedJob& job : result.jobs) ids.push_back(job.id);
        for (const ClaimedJob& job : result.unprocessable) ids.push_back(job.id);
        request.before_commit(conn, ids);
      }
      if (request.dry_run) {
        tx.rollback();
      } else {
        tx.commit();
      }
    }
    if (outcome.speculation_failed) {
      ++speculation_failures;
      speculate = false;
      continue;
    }
    if (outcome.taken_elsewhere.empty()) break;
    again.exclude_ids.insert(again.exclude_ids.end(), outcome.taken_elsewhere.begin(),
                             outcome.taken_elsewhere.end());
  }
  if (request.floor && next_floor) {
    *request.floor = std::move(*next_floor);
    request.floor->connection = conn.serial();
  }
  result.windows = windows;
  result.keyed_windows = keyed_windows;
  result.rows_read = rows_read;
  result.dead_index_entries = dead_index_entries;
  result.lock_rounds = lock_rounds;
  result.keys_locked_elsewhere = keys_locked_elsewhere;
  result.speculation_failures = speculation_failures;
  result.elapsed_ms = MillisecondsSince(started);  // the whole transaction, COMMIT included
  result.round_trips = static_cast<int>(conn.round_trips() - round_trips_before);
  return result;
}

}  // namespace akadzed
