#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "claim/claim_transaction.h"
#include "cli/commands.h"
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
  bool json = false;
};

nlohmann::json ToJson(const ClaimResult& r) {
  nlohmann::json jobs = nlohmann::json::array();
  for (const ClaimedJob& job : r.jobs) {
    jobs.push_back({{"id", job.id},
                    {"limit_key", job.limit_key ? nlohmann::json(*job.limit_key) : nlohmann::json()},
                    {"priority", job.priority}});
  }
  return {{"jobs", jobs},
          {"windows", r.windows},
          {"rows_read", r.rows_read},
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
  cmd->add_flag("--dry-run", o->dry_run, "Plan and lock as a real claim, then roll back");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->callback([&action, o] {
    action = [o]() -> int {
      ClaimRequest request;
      request.queue = o->queue;
      request.slots = o->slots;
      request.mode = o->mode == "fair" ? ClaimMode::kFair : ClaimMode::kOrdered;
      request.worker_id = o->worker_id;
      request.dry_run = o->dry_run;
      try {
        pg::Connection conn = pg::Connection::Open(ResolveDatabaseUrl(o->url), "akadzed claim");
        ClaimResult r = RunClaim(conn, request);
        if (o->json) {
          std::cout << ToJson(r).dump() << std::endl;
        } else {
          if (r.paused) std::cout << "queue " << o->queue << " is paused" << std::endl;
          for (const ClaimedJob& job : r.jobs) {
            std::cout << "claimed id=" << job.id << " task=" << job.task
                      << " limit_key=" << job.limit_key.value_or("-") << " priority=" << job.priority
                      << std::endl;
          }
          std::cout << r.jobs.size() << " claimed" << (o->dry_run ? " (dry run, rolled back)" : "")
                    << ", windows=" << r.windows << " rows_read=" << r.rows_read
                    << " elapsed_ms=" << r.elapsed_ms << std::endl;
        }
        return kExitOk;
      } catch (const std::invalid_argument& e) {
        PrintError("claim", e.what());
        return kExitUsage;
      } catch (const std::exception& e) {
        PrintError("claim failed", e.what());
        return kExitFailure;
      }
    };
  });
}

}  // namespace akadzed::cli
