#include "web/status_page.h"

#include <charconv>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "claim/queue_counts.h"
#include "core/redact.h"
#include "pg/pg_error.h"
#include "runtime/log_line.h"
#include "store/job_admin.h"
#include "web/admin_token.h"
#include "web/report_json.h"
#include "web/web_assets.h"

namespace akadzed {

namespace {

using nlohmann::json;

constexpr const char* kContentSecurityPolicy =
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'";

HttpReply JsonReply(int status, const json& body) {
  HttpReply reply;
  reply.status = status;
  reply.content_type = "application/json";
  reply.body = DumpJson(body) + "\n";
  return reply;
}

HttpReply ErrorReply(int status, const std::string& message) {
  return JsonReply(status, {{"error", OneLine(RedactSecrets(message))}});
}

// The path's segments after the prefix "/api/": "jobs/42/cancel" gives
// {"jobs", "42", "cancel"}; each percent-decoded. Empty segments are kept.
std::vector<std::string> Segments(std::string_view path) {
  std::vector<std::string> out;
  std::string current;
  for (std::size_t i = 0; i < path.size(); ++i) {
    const char c = path[i];
    if (c == '/') {
      out.push_back(std::move(current));
      current.clear();
    } else if (c == '%' && i + 2 < path.size()) {
      int value = 0;
      const auto [end, ec] = std::from_chars(path.data() + i + 1, path.data() + i + 3, value, 16);
      if (ec != std::errc() || end != path.data() + i + 3) {
        current.push_back(c);
      } else {
        current.push_back(static_cast<char>(value));
        i += 2;
      }
    } else {
      current.push_back(c);
    }
  }
  out.push_back(std::move(current));
  return out;
}

// A positive job id, or nullopt.
std::optional<std::int64_t> JobId(const std::string& text) {
  std::int64_t id = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (ec != std::errc() || end != text.data() + text.size() || id <= 0) return std::nullopt;
  return id;
}

// "http://host:port" for the request's Host header.
bool SameOrigin(const std::string& origin, const std::string& host) {
  return !host.empty() && (origin == "http://" + host || origin == "https://" + host);
}

// Compares in time that depends on the lengths only.
bool SameSecret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

StatusPage::StatusPage(std::string conninfo, WebConfig config, std::chrono::milliseconds stall_timeout,
                       StatusPageOptions options, const ServiceClock& clock)
    : config_(std::move(config)),
      options_(options),
      clock_(clock),
      session_(std::move(conninfo), "akadzed web", stall_timeout) {}

HttpReply StatusPage::Handle(const HttpRequest& request) {
  HttpReply reply;
  try {
    if (request.path.rfind("/api/", 0) == 0) {
      const std::vector<std::string> s = Segments(std::string_view(request.path).substr(5));
      const bool turn = TakeTurn();
      struct GiveBack {
        StatusPage* page;
        bool taken;
        ~GiveBack() {
          if (taken) page->GiveTurn();
        }
      } give_back{this, turn};
      if (!turn) {
        reply = ErrorReply(503, "busy: the database is still answering an earlier request; try again");
        reply.headers.emplace_back("Retry-After", "1");
      } else if (request.method == "POST") {
        reply = Action(request, request.path);
      } else if (request.method != "GET") {
        reply = ErrorReply(405, "method " + request.method + " not allowed on " + request.path);
      } else if (s.size() == 1 && s[0] == "status") {
        reply = Status();
      } else if (s.size() == 2 && s[0] == "jobs") {
        reply = Job(s[1]);
      } else {
        reply = ErrorReply(404, "no such API path: " + request.path);
      }
      reply.headers.emplace_back("Cache-Control", "no-store");
    } else {
      reply = ErrorReply(404, "not found: " + request.path);
      if (request.method == "GET") {
        for (const WebAsset& asset : EmbeddedWebAssets()) {
          if (asset.path != request.path) continue;
          reply.status = 200;
          reply.content_type = std::string(asset.content_type);
          reply.body = std::string(asset.body);
          reply.headers.emplace_back("Cache-Control", "no-cache");
        }
      }
    }
  } catch (const pg::PgError& e) {
    // insufficient_privilege: the daemon's role lacks a grant the action
    // needs (docs/security.md); anything else: the database did not answer.
    reply = e.sqlstate() == "42501" ? ErrorReply(403, std::string("the daemon's database role may not do this: ") + e.what())
                                    : ErrorReply(503, std::string("database: ") + e.what());
  }
  reply.headers.emplace_back("Content-Security-Policy", kContentSecurityPolicy);
  reply.headers.emplace_back("X-Content-Type-Options", "nosniff");
  reply.headers.emplace_back("X-Frame-Options", "DENY");
  reply.headers.emplace_back("Referrer-Policy", "no-referrer");
  return reply;
}

bool StatusPage::TakeTurn() {
  MutexLock lock(turn_mu_);
  if (!turn_cv_.wait_for(lock, kTurnWait, [&]() NO_THREAD_SAFETY_ANALYSIS { return !turn_taken_; })) return false;
  turn_taken_ = true;
  return true;
}

void StatusPage::GiveTurn() {
  {
    MutexLock lock(turn_mu_);
    turn_taken_ = false;
  }
  turn_cv_.notify_one();
}

HttpReply StatusPage::Status() {
  MutexLock lock(mu_);
  const auto now = clock_.Now();
  if (!status_read_at_ || now - *status_read_at_ >= options_.status_max_age) {
    const StatusReport report =
        session_.Run([&](pg::Connection& conn) { return ReadStatusReport(conn, CountQueuedJobs, options_.report); });
    status_body_ = DumpJson(StatusJson(report, !config_.admin_token_file.empty())) + "\n";
    status_read_at_ = now;
  }
  HttpReply reply;
  reply.body = status_body_;
  return reply;
}

HttpReply StatusPage::Job(const std::string& id_text) {
  const std::optional<std::int64_t> id = JobId(id_text);
  if (!id) return ErrorReply(400, "job id must be a positive integer, got '" + TruncateUtf8(id_text, 40) + "'");
  MutexLock lock(mu_);
  try {
    const JobRow row = session_.Run([&](pg::Connection& conn) { return ShowJob(conn, *id); });
    return JsonReply(200, JobJson(row, JobDetail::kPage));
  } catch (const AdminError& e) {
    return ErrorReply(404, e.what());
  }
}

std::optional<HttpReply> StatusPage::RefuseAction(const HttpRequest& request) const {
  if (config_.admin_token_file.empty()) {
    return ErrorReply(403, "actions are off: set web.admin_token_file in the config to turn them on");
  }
  const std::string origin = request.Header("Origin");
  if (!origin.empty() && !SameOrigin(origin, request.Header("Host"))) {
    return ErrorReply(403, "refused: a request from another origin (" + TruncateUtf8(origin, 100) + ")");
  }
  const std::string site = request.Header("Sec-Fetch-Site");
  if (!site.empty() && site != "same-origin" && site != "none") {
    return ErrorReply(403, "refused: a request from another site (Sec-Fetch-Site: " + TruncateUtf8(site, 40) + ")");
  }
  const std::string type = request.Header("Content-Type");
  if (type.rfind("application/json", 0) != 0) {
    return ErrorReply(415, "an action must be sent as Content-Type: application/json");
  }
  const std::string authorization = request.Header("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.rfind(kBearer, 0) != 0) {
    return ErrorReply(401, "an action needs the admin token: Authorization: Bearer <token>");
  }
  std::string token;
  try {
    token = ReadAdminToken(config_.admin_token_file);
  } catch (const std::runtime_error& e) {
    spdlog::error("web_token_unreadable | {}; actions refused", OneLine(e.what()));
    return ErrorReply(403, "actions are off: the admin token file cannot be used (see the daemon's log)");
  }
  if (!SameSecret(std::string_view(authorization).substr(kBearer.size()), token)) {
    spdlog::warn("web_action_refused from={} | wrong admin token", request.remote_address);
    return ErrorReply(401, "wrong admin token");
  }
  return std::nullopt;
}

HttpReply StatusPage::Action(const HttpRequest& request, const std::string& path) {
  const std::vector<std::string> s = Segments(std::string_view(path).substr(5));
  const bool queue_action = s.size() == 3 && s[0] == "queues" && (s[2] == "pause" || s[2] == "resume");
  const bool job_action = s.size() == 3 && s[0] == "jobs" && (s[2] == "cancel" || s[2] == "requeue");
  if (!queue_action && !job_action) return ErrorReply(404, "no such action: POST " + path);
  if (std::optional<HttpReply> refusal = RefuseAction(request)) return *refusal;
  MutexLock lock(mu_);
  status_read_at_.reset();  // the next /api/status shows the change
  if (queue_action) {
    const std::string& queue = s[1];
    if (queue.empty()) return ErrorReply(400, "the queue name must not be empty");
    const bool pause = s[2] == "pause";
    const bool changed = session_.Run(
        [&](pg::Connection& conn) { return pause ? PauseQueue(conn, queue) : ResumeQueue(conn, queue); });
    spdlog::info("web_action action={} queue={} changed={} from={}", s[2], LogValue(queue), changed,
                 request.remote_address);
    const std::string message = changed ? (pause ? "paused " : "resumed ") + queue
                                        : queue + (pause ? " was already paused" : " was not paused");
    return JsonReply(200, {{"message", message}});
  }
  const std::optional<std::int64_t> id = JobId(s[1]);
  if (!id) return ErrorReply(400, "job id must be a positive integer, got '" + TruncateUtf8(s[1], 40) + "'");
  try {
    std::string message;
    if (s[2] == "cancel") {
      const CancelOutcome outcome = session_.Run([&](pg::Connection& conn) { return CancelJob(conn, *id); });
      message = outcome == CancelOutcome::kCancelled          ? "cancelled job " + s[1]
                : outcome == CancelOutcome::kCancelRequested ? "asked the daemon running job " + s[1] + " to stop it"
                                                             : "job " + s[1] + " was already asked to stop";
    } else {
      session_.Run([&](pg::Connection& conn) { return RequeueJob(conn, *id); });
      message = "requeued job " + s[1];
    }
    spdlog::info("web_action action={} job={} from={}", s[2], *id, request.remote_address);
    return JsonReply(200, {{"message", message}});
  } catch (const AdminError& e) {
    const std::string what = e.what();
    return ErrorReply(what.find("not found") != std::string::npos ? 404 : 409, what);
  }
}

}  // namespace akadzed
