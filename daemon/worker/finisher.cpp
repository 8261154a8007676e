#include "worker/finisher.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "core/redact.h"
#include "pg/pg_error.h"
#include "runtime/job_traces.h"
#include "runtime/log_line.h"
#include "store/poison_rows.h"

namespace akadzed {

namespace {

constexpr std::size_t kMaxBatch = 1000;

void LogFinish(const FinishItem& item, const FinishResult& result) {
  const ClaimedJob& job = item.job;
  const JobOutcome& o = item.outcome;
  // The run's lines carried its trace id (QueueRunner::Execute); so does this.
  const JobTraceScope trace(job.id, job.trace_id);
  if (!result.applied) {
    spdlog::warn(
        "stale_finish job={} run={} task={} queue={} outcome={} | discarded: the job is no longer "
        "running under this worker (rescued or cancelled meanwhile, or finished by an earlier try "
        "of this finish whose reply the broken connection lost)",
        job.id, job.run_count, LogValue(job.task), LogValue(job.queue), OutcomeKindName(o.kind));
    return;
  }
  std::string next;
  if (result.state == JobState::kQueued) next = fmt::format(" run_in={:.1f}s", result.run_in_s);
  std::string error;
  if (!o.error.empty()) {
    error = fmt::format(" error={} | {}", LogValue(o.error), TruncateUtf8(OneLine(RedactSecrets(o.message)), 300));
  }
  auto level = result.state == JobState::kFailed ? spdlog::level::warn : spdlog::level::info;
  spdlog::log(level, "finish job={} task={} queue={} outcome={} state={} failed_runs={} duration_ms={:.0f}{}{}",
              job.id, LogValue(job.task), LogValue(job.queue), OutcomeKindName(o.kind), result.state, result.attempt,
              item.duration_ms, next, error);
}

}  // namespace

Finisher::Finisher(std::string conninfo, std::chrono::milliseconds stall_timeout, WorkerMetrics& metrics,
                   FinisherOptions options, const ServiceClock& clock)
    : session_(std::move(conninfo), "akadzed finisher", stall_timeout),
      guard_(clock, LoopBackoff(std::chrono::milliseconds(100), std::chrono::milliseconds(500))),
      metrics_(metrics),
      hooks_(options.hooks),
      plan_(options.plan),
      tally_(options.tally),
      batch_delay_(options.batch_delay),
      loop_(clock) {}

Finisher::~Finisher() {
  if (loop_.started()) Stop(loop_.clock().Now());
}

void Finisher::Start() { loop_.Start("finisher", [this] { Loop(); }); }

void Finisher::Submit(FinishItem item) {
  item.job.args_json.clear();
  item.job.args_json.shrink_to_fit();
  bool notify;
  {
    MutexLock lock(loop_.mu());
    if (pending_.empty()) pending_since_ = loop_.clock().Now();
    pending_.push_back(std::move(item));
    // The loop waits for the first finish, or for a full batch during its
    // batch delay: a wake-up for every finish in between would cost the
    // loop a switch per job.
    notify = pending_.size() == 1 || pending_.size() == kMaxBatch;
  }
  if (notify) loop_.Notify();
}

void Finisher::Stop(ServiceClock::time_point deadline) {
  {
    MutexLock lock(loop_.mu());
    deadline_ = deadline;
  }
  loop_.Stop();
}

std::int64_t Finisher::statements() const {
  MutexLock lock(loop_.mu());
  return statements_;
}

void Finisher::Loop() {
  for (;;) {
    const FinisherRound round = Round();
    if (round.done) return;
    MutexLock lock(loop_.mu());
    if (!round.next_round) {
      // Until a finish is submitted (or the stop: the next round says so).
      loop_.Wait(lock, [&]() REQUIRES(loop_.mu()) { return !pending_.empty() || !batch_.empty(); });
    } else if (round.kept == 0) {
      // The batch delay: returns at once when stopping (what is pending
      // goes out now) or when a batch is full.
      loop_.WaitUntil(lock, *round.next_round, [&]() REQUIRES(loop_.mu()) { return pending_.size() >= kMaxBatch; });
    } else {
      // The database is away: the batch is tried again after the backoff,
      // through a stop, until the stop's deadline.
      const auto retry_in = std::chrono::duration_cast<ServiceLoop::Duration>(*round.next_round - loop_.clock().Now());
      loop_.WaitForIgnoringStop(lock, retry_in, [&]() REQUIRES(loop_.mu()) {
        return loop_.stop_requested_locked() && loop_.clock().Now() >= deadline_;
      });
    }
  }
}

FinisherRound Finisher::Round() {
  {
    MutexLock lock(loop_.mu());
    const bool stopping = loop_.stop_requested_locked();
    // A new batch waits out its delay from its first finish, unless full or
    // stopping. pending_since_ is the first of pending_ only when the last
    // batch took all of it; items left behind (beyond kMaxBatch) keep the
    // older time and go out sooner, never later.
    if (batch_.empty() && !pending_.empty() && batch_delay_.count() > 0 && !stopping &&
        pending_.size() < kMaxBatch && loop_.clock().Now() < pending_since_ + batch_delay_) {
      FinisherRound wait;
      wait.next_round = pending_since_ + batch_delay_;
      return wait;
    }
    while (!pending_.empty() && batch_.size() < kMaxBatch) {
      batch_.push_back(std::move(pending_.front()));
      pending_.pop_front();
    }
    if (batch_.empty()) {
      FinisherRound idle;
      idle.done = stopping;
      return idle;
    }
  }
  return WriteBatch();
}

FinisherRound Finisher::WriteBatch() {
  const std::size_t taken = batch_.size();
  bool written = false;
  try {
    written = Write(batch_);
  } catch (const std::exception&) {  // not a database error: retried like one
    const RoundFailure f = guard_.Failed(std::current_exception());
    spdlog::log(f.level, "finish_failed count={} | {}", batch_.size(), f.message);
    retry_in_ = f.retry_in;
  }
  loop_.MarkRound();
  FinisherRound round;
  round.ended = taken - batch_.size();
  round.kept = batch_.size();
  if (written) {
    if (auto ended = guard_.Succeeded()) {
      spdlog::info("finish_recovered failures={} outage_ms={}", ended->failures, ended->ms);
    }
    return round;
  }
  // The database is away: keep the batch and try again, until shutdown's
  // deadline; then the rescue recovers these jobs.
  MutexLock lock(loop_.mu());
  if (!loop_.stop_requested_locked() || loop_.clock().Now() < deadline_) {
    round.next_round = loop_.clock().Now() + retry_in_;
    return round;
  }
  spdlog::error(
      "finish_unrecorded count={} | the database stayed unreachable; these jobs stay running "
      "under this worker and are rescued after heartbeat_ttl",
      batch_.size() + pending_.size());
  std::vector<const FinishItem*> ended;
  for (auto* items : {&batch_, &pending_}) {
    for (auto& item : *items) {
      metrics_.JobEnded(item.job.task, "unrecorded", item.duration_ms / 1000);
      ended.push_back(&item);
    }
  }
  FreeSlots(ended);
  round.ended += ended.size();
  round.kept = 0;
  round.done = true;
  batch_.clear();
  pending_.clear();
  return round;
}

void Finisher::FreeSlots(const std::vector<const FinishItem*>& ended) {
  // A handful of holders (one per queue): a linear search beats a map.
  std::vector<std::pair<SlotHolder*, std::vector<std::int64_t>>> by_holder;
  for (const FinishItem* item : ended) {
    if (item->slot == nullptr) continue;
    auto it = std::find_if(by_holder.begin(), by_holder.end(), [&](const auto& h) { return h.first == item->slot; });
    if (it == by_holder.end()) it = by_holder.insert(by_holder.end(), {item->slot, {}});
    it->second.push_back(item->job.id);
  }
  for (auto& [holder, ids] : by_holder) holder->FreeSlots(ids);
}

std::vector<FinishResult> Finisher::FinishGroup(const std::string& worker_id,
                                                std::vector<FinishRequest>& requests,
                                                const std::vector<std::optional<std::string>>& trace_ids,
                                                std::vector<RowFate>& fates) {
  auto finish = [&](const std::vector<FinishRequest>& these) {
    return session_.Run([&](pg::Connection& c) { return FinishJobs(c, worker_id, these, hooks_, plan_); });
  };
  std::vector<FinishResult> results;
  fates.assign(requests.size(), RowFate::kWritten);
  std::vector<int> rungs(requests.size(), 0);  // lesser outcomes tried, per request
  IsolatePoisonRows(
      [&] { results = finish(requests); },
      [&] {
        results.assign(requests.size(), FinishResult{});
        std::vector<std::size_t> each(requests.size());
        for (std::size_t k = 0; k < each.size(); ++k) each[k] = k;
        return each;
      },
      [&](std::size_t k) {
        try {
          results[k] = finish({requests[k]}).front();
        } catch (const HookError&) {  // logged by the hook runner
          results[k] = {requests[k].job_id, false, {}, 0, 0};
          fates[k] = RowFate::kRefused;
        }
      },
      [&](std::size_t k, const pg::RowFaultError& e) {
        FinishRequest& request = requests[k];
        const JobTraceScope trace(request.job_id, trace_ids[k]);
        // The run's last progress report first: the database may refuse
        // that (an application's constraint on meta) and not the outcome.
        if (request.outcome.meta_patch) {
          spdlog::error("progress_dropped job={} | its meta could not be written ({}); this report is "
                        "dropped, the outcome is recorded without it",
                        request.job_id, OneLine(e.what()));
          request.outcome.meta_patch.reset();
          return PoisonedRow::kTryAgain;
        }
        // A success its queue does not keep, whose row the database would
        // not delete (an application's foreign key or trigger): kept as
        // succeeded, as on any other queue, rather than failed.
        if (request.DeletesJob()) {
          spdlog::warn("delete_refused job={} | the succeeded job could not be deleted ({}); it is kept "
                       "as succeeded",
                       request.job_id, OneLine(e.what()));
          request.keep_succeeded = true;
          return PoisonedRow::kTryAgain;
        }
        const std::string why = std::string("the database refused the outcome: ") + e.what();
        switch (rungs[k]++) {
          case 0:
            request.outcome = RetryOutcome("BadResult", why);
            return PoisonedRow::kTryAgain;
          case 1:
            request.outcome = RetryOutcome("Unprocessable", why);
            request.outcome.kind = OutcomeKind::kFail;
            return PoisonedRow::kTryAgain;
          default:
            break;
        }
        spdlog::error("finish_unprocessable job={} run={} | {}; not recorded: the job stays running until the "
                      "lease keeper releases it (heartbeat_ttl after its claim)",
                      request.job_id, request.run_count, OneLine(e.what()));
        results[k] = {request.job_id, false, {}, 0, 0};
        fates[k] = RowFate::kGivenUp;
        return PoisonedRow::kLeave;
      });
  return results;
}

bool Finisher::Write(std::deque<FinishItem>& batch) {
  // Finishes a transition hook refused wait here, outside the batch, so the
  // rest goes through; they go back for the next try, after a backoff.
  std::deque<FinishItem> refused;
  const bool written = WriteGroups(batch, refused);
  for (FinishItem& item : refused) batch.push_back(std::move(item));
  if (written && !refused.empty()) {  // the hook runner logged the refusals
    retry_in_ = guard_.Failed(RoundFailureKind::kOther, "a transition hook refused").retry_in;
  }
  return written && refused.empty();
}

bool Finisher::WriteGroups(std::deque<FinishItem>& batch, std::deque<FinishItem>& refused) {
  // Groups by worker id (a daemon that lost its lease claims under a new one).
  while (!batch.empty()) {
    const std::string worker_id = batch.front().worker_id;
    std::vector<FinishRequest> requests;
    std::vector<std::optional<std::string>> trace_ids;
    std::vector<std::size_t> members;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].worker_id != worker_id) continue;
      requests.push_back({batch[i].job.id, batch[i].job.run_count, batch[i].outcome,
                          batch[i].keep_succeeded});
      trace_ids.push_back(batch[i].job.trace_id);
      members.push_back(i);
    }
    // Lines about these jobs while they are written (a hook's refusal, a row
    // given up) carry their trace ids.
    std::deque<JobTraceScope> traces;
    for (std::size_t m : members) traces.emplace_back(batch[m].job.id, batch[m].job.trace_id);
    std::vector<FinishResult> results;
    std::vector<RowFate> fates(requests.size(), RowFate::kWritten);
    // The batch in one statement; if one row cannot be stored (a result
    // jsonb rejects, e.g. \u0000) or a transition hook refuses one, row by
    // row, recording a row that still fails as a failed run.
    try {
      results = FinishGroup(worker_id, requests, trace_ids, fates);
    } catch (const pg::PgError&) {
      // The server being away (logged once per outage) or its state (a
      // timeout, a read-only server) is waited out, batch and all.
      const RoundFailure f = guard_.Failed(std::current_exception());
      spdlog::log(f.level, "finish_failed count={} | {}", requests.size(), f.message);
      retry_in_ = f.retry_in;
      return false;
    }
    // Row by row, a request may have gone in a lesser form.
    for (std::size_t k = 0; k < members.size(); ++k) batch[members[k]].outcome = requests[k].outcome;
    {
      MutexLock lock(loop_.mu());
      ++statements_;
    }
    std::vector<const FinishItem*> ended;
    ended.reserve(members.size());
    for (std::size_t k = 0; k < members.size(); ++k) {
      if (fates[k] == RowFate::kRefused) {
        refused.push_back(std::move(batch[members[k]]));
        continue;
      }
      if (fates[k] == RowFate::kGivenUp) {
        metrics_.JobEnded(batch[members[k]].job.task, "unprocessable", batch[members[k]].duration_ms / 1000);
        ended.push_back(&batch[members[k]]);
        continue;
      }
      LogFinish(batch[members[k]], results[k]);
      if (tally_ && results[k].applied) tally_->Add(batch[members[k]].job.queue, results[k].state);
      metrics_.JobEnded(batch[members[k]].job.task,
                        results[k].applied ? OutcomeKindName(batch[members[k]].outcome.kind) : "stale",
                        batch[members[k]].duration_ms / 1000);
      ended.push_back(&batch[members[k]]);
    }
    FreeSlots(ended);
    for (auto it = members.rbegin(); it != members.rend(); ++it) {
      batch.erase(batch.begin() + static_cast<std::ptrdiff_t>(*it));
    }
  }
  return true;
}

}  // namespace akadzed
