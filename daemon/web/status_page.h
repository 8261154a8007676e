// The status page (docs/status-page.md): a read-only page for operators and
// the JSON API it reads, served by the daemon on its metrics listener.
//
//   GET  /                         the page (web/assets/index.html)
//   GET  /assets/app.js, app.css   its script and style, compiled into the
//                                  binary (nothing is fetched from outside)
//   GET  /api/status               StatusJson (web/report_json.h) of
//                                  ReadStatusReport: what `akadzed status
//                                  --json` prints, plus actions.enabled
//   GET  /api/jobs/ID              a job: JobJson(kPage), never args or result
//   POST /api/queues/NAME/pause    the actions, only with an admin token
//   POST /api/queues/NAME/resume   (WebConfig::admin_token_file):
//   POST /api/jobs/ID/cancel         Authorization: Bearer <token>
//   POST /api/jobs/ID/requeue        Content-Type: application/json
//
// Every error is a JSON object {"error": "one line"} with its status: 400
// bad path or id, 401 missing or wrong token, 403 actions off, a request
// from another origin or a grant the daemon's role lacks, 404 unknown path or
// job, 405 wrong method, 409 a job in the wrong state, 415 not JSON, 503 the
// database did not answer.
//
// CSRF: the token travels in a header a page of another origin cannot set
// without CORS, which is never granted; requests whose Origin (or
// Sec-Fetch-Site) says another site are refused before the token is read,
// and an action must be sent as application/json (no form can). The token is
// compared in constant time; the file is read for each action.
//
// Cost: /api/status is read at most once per `status_max_age` whatever the
// number of open pages (the reply is reused), in one READ ONLY transaction
// whose statements read bounded index ranges (store/status_report.h).
//
// Thread-safety: Handle is called on the listener's threads, concurrently;
// database work takes turns on one connection. A request waits at most
// kTurnWait for its turn and is answered 503 ("busy") after that, so a
// database that stalls never holds every thread of the listener's pool
// (and with it /metrics and /healthz).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "core/http_exchange.h"
#include "core/thread_annotations.h"
#include "runtime/db_session.h"
#include "runtime/service_clock.h"
#include "store/status_report.h"
#include "web/web_config.h"

namespace akadzed {

struct StatusPageOptions {
  std::chrono::milliseconds status_max_age{1000};  // a /api/status reply younger than this is reused
  StatusReportOptions report;
};

class StatusPage {
 public:
  // `stall_timeout` bounds each of its transactions (DbSession); a
  // status read is reused for status_max_age by `clock`.
  StatusPage(std::string conninfo, WebConfig config, std::chrono::milliseconds stall_timeout,
             StatusPageOptions options = {}, const ServiceClock& clock = SteadyServiceClock());
  StatusPage(const StatusPage&) = delete;
  StatusPage& operator=(const StatusPage&) = delete;

  // Answers one request whose path starts with "/" (the listener passes
  // "/", "/assets/..." and "/api/...").
  HttpReply Handle(const HttpRequest& request);

 private:
  // Waits up to kTurnWait for the database's turn; false when it did not come.
  bool TakeTurn() EXCLUDES(turn_mu_);
  void GiveTurn() EXCLUDES(turn_mu_);
  HttpReply Status();
  HttpReply Job(const std::string& id_text);
  HttpReply Action(const HttpRequest& request, const std::string& path);
  // The reply refusing an action, or nullopt when it may run.
  std::optional<HttpReply> RefuseAction(const HttpRequest& request) const;

  static constexpr std::chrono::milliseconds kTurnWait{1000};

  const WebConfig config_;
  const StatusPageOptions options_;
  const ServiceClock& clock_;
  // One request at a time uses the database. A flag and a condition
  // variable rather than std::timed_mutex: its try_lock_for is a call
  // ThreadSanitizer does not see lock (pthread_mutex_clocklock).
  Mutex turn_mu_;
  CondVar turn_cv_;
  bool turn_taken_ GUARDED_BY(turn_mu_) = false;
  Mutex mu_;
  DbSession session_ GUARDED_BY(mu_);
  std::optional<ServiceClock::time_point> status_read_at_ GUARDED_BY(mu_);
  std::string status_body_ GUARDED_BY(mu_);
};

}  // namespace akadzed
