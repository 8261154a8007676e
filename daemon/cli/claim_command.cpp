#include <algorithm>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "claim/claim_transaction.h"
#include "claim/stored_floor.h"
#include "cli/commands.h"
#include "core/duration.h"
#include "pg/pg_error.h"

namespace akadzed::cli {

namespace {

struct ClaimOptions {
  std::string url;
  std::string queue;
  int slots = 0;
  std::string mode = "ordered";
  std::string worker_id;
  bool dry_run = false;
  int repeat = 1;
  bool json = false;
  std::string aging;
};

// Times of repeated dry runs: the first (cold: a new connection, statements
// not prepared yet) apart from the others (warm).
struct RunTimes {
  std::vector<double> runs_ms;
  double cold_ms() const { return runs_ms.front(); }
  std::vector<double> warm_sorted() const {
    std::vector<double> warm(runs_ms.begin() + 1, runs_ms.end());
    std::sort(warm.begin(), warm.end());
    return warm;
  }
  static double Median(const std::vector<double>& sorted) {
    const std::size_t m = sorted.size() / 2;
    return sorted.size() % 2 == 1 ? sorted[m] : (sorted[m - 1] + sorted[m]) / 2;
  }
};

nlohmann::json ToJson(const ClaimResult& r, bool aging) {
  nlohmann::json jobs = nlohmann::json::array();
  for (const ClaimedJob& job : r.jobs) {
    nlohmann::json j = {{"id", job.id},
                        {"limit_key", job.limit_key ? nlohmann::json(*job.limit_key) : nlohmann::json()},
                        {"priority", job.priority}};
    if (aging) j["effective_priority"] = job.effective_priority;
    jobs.push_back(std::move(j));
  }
  return {{"jobs", jobs},
          {"paused", r.paused},
          {"worker_id", r.worker_id},
          {"windows", r.windows},
          {"rows_read", r.rows_read},
          {"round_trips", r.round_trips},
          {"elapsed_ms", r.elapsed_ms}};
}

}  // namespace

void AddClaimCommand(CLI::App& app, Action& action) {
  auto o = std::make_shared<ClaimOptions>();
  CLI::App* cmd = app.add_subcommand("claim", "Claim ready jobs of one queue once and print them");
  AddDatabaseOption(cmd, o->url);
  cmd->add_option("--queue", o->queue, "Queue to claim from")->required();
  cmd->add_option("--slots", o->slots, "Most jobs to claim")->required()->check(CLI::Range(1, 100000));
  cmd->add_option("--mode", o->mode, "ordered or fair")
      ->check(CLI::IsMember({"ordered", "fair"}));
  cmd->add_option("--worker-id", o->worker_id, "Worker UUID to record (default: a random one)")
      ->check(CLI::Validator(
          [](const std::string& v) { return IsUuid(v) ? std::string() : "'" + v + "' is not a UUID"; },
          "UUID"));
  CLI::Option* dry_run = cmd->add_flag("--dry-run", o->dry_run, "Plan and lock as a real claim, then roll back");
  cmd->add_option("--repeat", o->repeat,
                  "With --dry-run: claim N times on one connection and print each run's time, the first"
                  " (cold) apart, and the warm runs' min/median/max")
      ->check(CLI::Range(1, 100000))
      ->needs(dry_run);
  cmd->add_option("--aging", o->aging,
                  "Priority aging interval, e.g. 5m: one point of priority per full interval waited");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->callback([&action, o] {
    action = [o]() -> int {
      ClaimRequest request;
      request.queue = o->queue;
      request.slots = o->slots;
      request.mode = o->mode == "fair" ? ClaimMode::kFair : ClaimMode::kOrdered;
      request.worker_id = o->worker_id;
      request.dry_run = o->dry_run;
      if (!o->aging.empty()) {
        std::string error;
        request.aging_us = ParseDuration(o->aging, &error);
        if (!request.aging_us || *request.aging_us <= 0) {
          PrintError("claim", "--aging: " + (error.empty() ? "must be positive" : error));
          return kExitUsage;
        }
      }
      return RunCommand("claim", [&] {
        pg::Connection conn = pg::Connection::Open(ResolveDatabaseUrl(o->url), "akadzed claim");
        RunTimes times;
        ClaimResult r;
        // The first run starts from the queue's stored floor, as a daemon's
        // first claim does (claim/stored_floor.h), and repeated runs carry
        // the floor from one to the next, as the daemon's claim loop does
        // (claim/claim_floor.h). Without a stored floor (no daemon wrote
        // one, or the role may not read it) the first reads from the heads.
        ClaimFloor floor;
        if (!request.aging_us) {
          try {
            floor = LoadQueueFloor(conn, o->queue);
          } catch (const pg::SqlError&) {
          }
        }
        request.floor = &floor;
        for (int run = 0; run < o->repeat; ++run) {
          r = RunClaim(conn, request);
          times.runs_ms.push_back(r.elapsed_ms);
        }
        const std::vector<double> warm = times.warm_sorted();
        if (o->json) {
          nlohmann::json out = ToJson(r, request.aging_us.has_value());
          if (o->repeat > 1) {
            out["runs_ms"] = times.runs_ms;
            out["cold_ms"] = times.cold_ms();
            out["warm_ms"] = {{"min", warm.front()}, {"median", RunTimes::Median(warm)}, {"max", warm.back()}};
          }
          std::cout << out.dump() << std::endl;
        } else {
          if (r.paused) std::cout << "queue " << o->queue << " is paused" << std::endl;
          for (const ClaimedJob& job : r.jobs) {
            std::cout << "claimed id=" << job.id << " task=" << job.task
                      << " limit_key=" << job.limit_key.value_or("-") << " priority=" << job.priority;
            if (request.aging_us) std::cout << " effective_priority=" << job.effective_priority;
            std::cout << std::endl;
          }
          std::cout << r.jobs.size() << " claimed" << (o->dry_run ? " (dry run, rolled back)" : "")
                    << ", windows=" << r.windows << " rows_read=" << r.rows_read
                    << " round_trips=" << r.round_trips << " elapsed_ms=" << r.elapsed_ms << std::endl;
          if (o->repeat > 1) {
            for (std::size_t i = 0; i < times.runs_ms.size(); ++i) {
              std::cout << "run " << i + 1 << (i == 0 ? " (cold)" : "") << ": " << times.runs_ms[i] << " ms"
                        << std::endl;
            }
            std::cout << "warm runs: " << warm.size() << ", min=" << warm.front()
                      << " median=" << RunTimes::Median(warm) << " max=" << warm.back() << " ms" << std::endl;
          }
        }
        return kExitOk;
      });
    };
  });
}

}  // namespace akadzed::cli
