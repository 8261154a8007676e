#include "worker/finisher.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "core/redact.h"
#include "pg/pg_error.h"

namespace akadzed {

namespace {

constexpr std::size_t kMaxBatch = 1000;

void LogFinish(const FinishItem& item, const FinishResult& result) {
  const ClaimedJob& job = item.job;
  const JobOutcome& o = item.outcome;
  if (!result.applied) {
    spdlog::warn(
        "stale_finish job={} run={} task={} queue={} outcome={} | discarded: the job is no longer "
        "running under this worker (rescued or cancelled meanwhile)",
        job.id, job.run_count, job.task, job.queue, OutcomeKindName(o.kind));
    return;
  }
  std::string next;
  if (result.state == "queued") next = fmt::format(" run_in={:.1f}s", result.run_in_s);
  std::string error;
  if (!o.error.empty()) {
    error = fmt::format(" error={} | {}", o.error, TruncateUtf8(OneLine(RedactSecrets(o.message)), 300));
  }
  auto level = result.state == "failed" ? spdlog::level::warn : spdlog::level::info;
  spdlog::log(level, "finish job={} task={} queue={} outcome={} state={} failed_runs={} duration_ms={:.0f}{}{}",
              job.id, job.task, job.queue, OutcomeKindName(o.kind), result.state, result.attempt,
              item.duration_ms, next, error);
}

}  // namespace

Finisher::Finisher(std::string conninfo) : session_(std::move(conninfo), "akadzed finisher") {}

Finisher::~Finisher() {
  if (thread_.joinable()) Stop(std::chrono::steady_clock::now());
}

void Finisher::Start() { thread_ = std::thread([this] { Loop(); }); }

void Finisher::Submit(FinishItem item) {
  item.job.args_json.clear();
  item.job.args_json.shrink_to_fit();
  {
    std::lock_guard lock(mu_);
    pending_.push_back(std::move(item));
  }
  cv_.notify_one();
}

void Finisher::Stop(std::chrono::steady_clock::time_point deadline) {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    deadline_ = deadline;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

std::int64_t Finisher::statements() const {
  std::lock_guard lock(mu_);
  return statements_;
}

void Finisher::Loop() {
  auto retry_delay = std::chrono::milliseconds(100);
  std::deque<FinishItem> batch;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !pending_.empty() || !batch.empty(); });
      while (!pending_.empty() && batch.size() < kMaxBatch) {
        batch.push_back(std::move(pending_.front()));
        pending_.pop_front();
      }
      if (batch.empty() && stopping_) return;
    }
    bool written = false;
    try {
      written = Write(batch);
    } catch (const std::exception& e) {  // not a database error: retried like one
      spdlog::error("finish_failed count={} | {}", batch.size(), OneLine(e.what()));
    }
    if (written) {
      retry_delay = std::chrono::milliseconds(100);
      continue;
    }
    // The database is away: keep the batch and try again, until shutdown's
    // deadline; then the rescue recovers these jobs.
    std::unique_lock lock(mu_);
    if (stopping_ && std::chrono::steady_clock::now() >= deadline_) {
      spdlog::error(
          "finish_unrecorded count={} | the database stayed unreachable; these jobs stay running "
          "under this worker and are rescued after heartbeat_ttl",
          batch.size() + pending_.size());
      for (auto& item : batch) item.done();
      for (auto& item : pending_) item.done();
      batch.clear();
      pending_.clear();
      return;
    }
    cv_.wait_for(lock, retry_delay, [&] { return stopping_ && std::chrono::steady_clock::now() >= deadline_; });
    retry_delay = std::min<std::chrono::milliseconds>(retry_delay * 2, std::chrono::seconds(5));
  }
}

std::vector<FinishResult> Finisher::FinishOneByOne(const std::string& worker_id,
                                                   std::vector<FinishRequest>& requests) {
  std::vector<FinishResult> results;
  for (FinishRequest& request : requests) {
    try {
      results.push_back(
          session_.Run([&](pg::Connection& c) { return FinishJobs(c, worker_id, {request}); }).front());
      continue;
    } catch (const pg::ConnectionError&) {
      throw;
    } catch (const pg::TransientError&) {
      throw;
    } catch (const pg::SqlError& e) {
      request.outcome = RetryOutcome("BadResult", std::string("the database refused the outcome: ") + e.what());
    }
    results.push_back(
        session_.Run([&](pg::Connection& c) { return FinishJobs(c, worker_id, {request}); }).front());
  }
  return results;
}

bool Finisher::Write(std::deque<FinishItem>& batch) {
  // Groups by worker id (a daemon that lost its lease claims under a new one).
  while (!batch.empty()) {
    const std::string worker_id = batch.front().worker_id;
    std::vector<FinishRequest> requests;
    std::vector<std::size_t> members;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].worker_id != worker_id) continue;
      requests.push_back({batch[i].job.id, batch[i].job.run_count, batch[i].outcome});
      members.push_back(i);
    }
    std::vector<FinishResult> results;
    try {
      results = session_.Run([&](pg::Connection& c) { return FinishJobs(c, worker_id, requests); });
    } catch (const pg::ConnectionError& e) {
      spdlog::error("finish_failed count={} | {}", requests.size(), OneLine(e.what()));
      return false;
    } catch (const pg::TransientError& e) {
      spdlog::warn("finish_failed count={} | {}", requests.size(), OneLine(e.what()));
      return false;
    } catch (const pg::SqlError&) {
      // One row cannot be stored (a result jsonb rejects, e.g. \u0000):
      // record rows one by one, and a row that still fails as a failed run.
      try {
        results = FinishOneByOne(worker_id, requests);
      } catch (const pg::PgError& again) {
        spdlog::error("finish_failed count={} | {}", requests.size(), OneLine(again.what()));
        return false;
      }
      for (std::size_t k = 0; k < members.size(); ++k) batch[members[k]].outcome = requests[k].outcome;
    }
    {
      std::lock_guard lock(mu_);
      ++statements_;
    }
    for (std::size_t k = 0; k < members.size(); ++k) {
      LogFinish(batch[members[k]], results[k]);
      batch[members[k]].done();
    }
    for (auto it = members.rbegin(); it != members.rend(); ++it) {
      batch.erase(batch.begin() + static_cast<std::ptrdiff_t>(*it));
    }
  }
  return true;
}

}  // namespace akadzed
