// Ten claimers in parallel on one queue for at least 20 s (SPEC §3, the
// seed's load test): 20,000 jobs over 20 limited keys, ordered and fair, jobs
// completing as they go, while another connection samples running jobs per
// key. max_running is never exceeded, no claim errors or deadlocks, and every
// job is claimed exactly once. The fair run's queue also has a cluster-wide
// cap (akadze.queue_caps) of 12 running jobs, below what the claimers want
// (up to 8 slots each) and what the keys allow (50): the sampler checks the
// queue's running jobs never exceed it, and the claims found it full.
//
// AKADZED_CONCURRENCY_SECONDS changes the duration per mode (default 20).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "store/limits_table.h"
#include "claim/claim_transaction.h"
#include "support/test_cluster.h"

namespace akadzed {
namespace {

using Clock = std::chrono::steady_clock;

struct Held {
  std::int64_t id;
  std::int32_t run_count;
  Clock::time_point done_at;
};

void RunLoad(ClaimMode mode, std::optional<std::int64_t> queue_cap) {
  int seconds = 20;
  if (const char* env = std::getenv("AKADZED_CONCURRENCY_SECONDS")) seconds = std::atoi(env);
  constexpr int kClaimers = 10;
  constexpr int kJobs = 20000;
  constexpr int kKeys = 20;

  const std::string db = test::FreshDatabase();
  pg::Connection setup = pg::Connection::Open(db);
  std::map<std::string, std::int64_t> max_running;
  for (int k = 0; k < kKeys; ++k) {
    std::string key = "key" + std::to_string(k);
    std::int64_t cap = 1 + k % 4;
    max_running[key] = cap;
    if (k >= 16) {
      SetLimit(setup, LimitRow{key, cap, 400, 1'000'000});  // also rate-limited
    } else {
      SetLimit(setup, LimitRow{key, cap, std::nullopt, std::nullopt});
    }
  }
  setup.exec(
      "INSERT INTO akadze.jobs (task, queue, priority, limit_key, run_at)"
      " SELECT 't', 'load', (random() * 2)::int, 'key' || (random() * 19)::int,"
      "        now() - random() * interval '1 hour'"
      " FROM generate_series(1, $1::int)",
      pg::Params().add(kJobs));
  setup.exec("ANALYZE akadze.jobs");
  if (queue_cap) {
    setup.exec("INSERT INTO akadze.queue_caps (queue, max_running) VALUES ('load', $1::int)",
               pg::Params().add(*queue_cap));
  }

  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<std::int64_t> claimed;  // guarded by mu
  std::vector<std::string> errors;    // guarded by mu
  std::atomic<std::int64_t> claims{0};
  std::atomic<std::int64_t> capped_claims{0};

  auto claimer = [&](int n) {
    try {
      pg::Connection conn = pg::Connection::Open(db);
      std::mt19937 rng(static_cast<unsigned>(n));
      std::uniform_int_distribution<int> hold_us(0, 5000);
      std::uniform_int_distribution<int> slot_dist(1, 8);
      const std::string worker = RandomUuid();
      std::vector<Held> held;
      auto finish_due = [&](bool all) {
        auto now = Clock::now();
        for (auto it = held.begin(); it != held.end();) {
          if (!all && it->done_at > now) {
            ++it;
            continue;
          }
          pg::Result r = conn.exec(
              "UPDATE akadze.jobs SET state = 'succeeded', finished_at = now()"
              " WHERE id = $1 AND state = 'running' AND worker_id = $2::uuid AND run_count = $3",
              pg::Params().add(it->id).add(worker).add(std::int64_t{it->run_count}));
          if (r.affected() != 1) {
            std::lock_guard<std::mutex> lock(mu);
            errors.push_back("finish of job " + std::to_string(it->id) + " touched no row");
          }
          it = held.erase(it);
        }
      };
      while (!stop.load()) {
        ClaimRequest request;
        request.queue = "load";
        request.slots = slot_dist(rng);
        request.mode = mode;
        request.worker_id = worker;
        ClaimResult r = RunClaim(conn, request);
        ++claims;
        if (r.capped) ++capped_claims;
        {
          std::lock_guard<std::mutex> lock(mu);
          for (const ClaimedJob& j : r.jobs) claimed.push_back(j.id);
        }
        for (const ClaimedJob& j : r.jobs) {
          held.push_back({j.id, j.run_count, Clock::now() + std::chrono::microseconds(hold_us(rng))});
        }
        finish_due(false);
        if (r.jobs.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      finish_due(true);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu);
      errors.push_back(std::string("claimer: ") + e.what());
    }
  };

  std::atomic<std::int64_t> samples{0};
  std::vector<std::string> overshoots;  // written by the sampler only
  std::int64_t peak_queue_running = 0;  // written by the sampler only
  auto sampler = [&] {
    try {
      pg::Connection conn = pg::Connection::Open(db);
      while (!stop.load()) {
        // One statement: per key, and (every job has a key) the queue's total.
        pg::Result r = conn.exec(
            "SELECT limit_key, count(*), sum(count(*)) OVER ()::int8 FROM akadze.jobs"
            " WHERE state = 'running' GROUP BY limit_key");
        if (r.rows() > 0) {
          const std::int64_t queue_running = r.int64(0, 2);
          peak_queue_running = std::max(peak_queue_running, queue_running);
          if (queue_cap && queue_running > *queue_cap) {
            overshoots.push_back("queue load had " + std::to_string(queue_running) + " running");
          }
        }
        for (int i = 0; i < r.rows(); ++i) {
          std::string key(r.text(i, 0));
          if (r.int64(i, 1) > max_running.at(key)) {
            overshoots.push_back(key + " had " + std::to_string(r.int64(i, 1)) + " running");
          }
        }
        ++samples;
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu);
      errors.push_back(std::string("sampler: ") + e.what());
    }
  };

  auto started = Clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < kClaimers; ++i) threads.emplace_back(claimer, i);
  std::thread sampling(sampler);
  std::this_thread::sleep_until(started + std::chrono::seconds(seconds));  // the load's duration
  stop = true;
  for (auto& t : threads) t.join();
  sampling.join();
  double elapsed = std::chrono::duration<double>(Clock::now() - started).count();

  std::set<std::int64_t> unique(claimed.begin(), claimed.end());
  pg::Result counts = setup.exec(
      "SELECT count(*) FILTER (WHERE state = 'succeeded'), count(*) FILTER (WHERE state = 'running'),"
      "       count(*) FILTER (WHERE run_count > 1),"
      "       count(*) FILTER (WHERE state = 'queued' AND run_count <> 0)"
      " FROM akadze.jobs WHERE queue = 'load'");
  WARN((mode == ClaimMode::kFair ? "fair" : "ordered")
       << ": " << claimed.size() << " jobs claimed by " << kClaimers << " claimers in " << elapsed
       << " s (" << claims.load() << " claims, " << capped_claims.load() << " at the queue's cap), "
       << samples.load() << " samples of running jobs, at most " << peak_queue_running << " running");
  CHECK(errors.empty());
  for (const auto& e : errors) WARN(e);
  CHECK(overshoots.empty());
  for (std::size_t i = 0; i < overshoots.size() && i < 10; ++i) WARN(overshoots[i]);
  CHECK(samples.load() > 100);
  CHECK(claimed.size() == unique.size());  // no job claimed twice
  CHECK(counts.int64(0, 0) == static_cast<std::int64_t>(claimed.size()));
  CHECK(counts.int64(0, 1) == 0);
  CHECK(counts.int64(0, 2) == 0);
  CHECK(counts.int64(0, 3) == 0);
  CHECK(claimed.size() > 1000);
  if (queue_cap) CHECK(capped_claims.load() > 0);  // the cap was reached, and held
}

TEST_CASE("10 parallel claimers, ordered: no overshoot, no error, each job once", "[concurrency]") {
  RunLoad(ClaimMode::kOrdered, std::nullopt);
}

TEST_CASE("10 parallel claimers, fair, queue capped at 12: no overshoot, no error, each job once",
          "[concurrency]") {
  RunLoad(ClaimMode::kFair, 12);
}

}  // namespace
}  // namespace akadzed
