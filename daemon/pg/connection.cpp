#include "pg/connection.h"

#include <atomic>

#include <poll.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "core/redact.h"
#include "pg/pg_error.h"

namespace akadzed::pg {

namespace {

// Server notices and warnings (and libpq's own, such as a message that
// arrived while idle) go through the logger as pg_notice events at their
// severity's level, never raw to stderr, which would break the one event per
// line of logs and bypass logging.file and the JSON format. The text is
// redacted, on one line and cut to 500 bytes: akadzed's own statements
// raise no notice about job args or results, but an application's trigger
// or an SQL hook may (RAISE NOTICE '%', NEW.args). Notices sent while the
// connection is being opened still go to libpq's default (stderr): the
// receiver is set once the connection exists.
void LogNoticeUnsafe(const PGresult* notice) {
  auto field = [&](int code) {
    const char* value = PQresultErrorField(notice, code);
    return std::string(value != nullptr ? value : "");
  };
  std::string severity = field(PG_DIAG_SEVERITY_NONLOCALIZED);
  if (severity.empty()) severity = field(PG_DIAG_SEVERITY);
  std::string message = field(PG_DIAG_MESSAGE_PRIMARY);
  if (message.empty()) {
    const char* text = PQresultErrorMessage(notice);
    message = text != nullptr ? text : "";
  }
  spdlog::level::level_enum level = spdlog::level::warn;
  if (severity == "DEBUG" || severity == "LOG") {
    level = spdlog::level::debug;
  } else if (severity == "INFO" || severity == "NOTICE") {
    level = spdlog::level::info;
  } else if (severity == "ERROR" || severity == "FATAL" || severity == "PANIC") {
    level = spdlog::level::err;
  }
  for (char& c : severity) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string sqlstate = field(PG_DIAG_SQLSTATE);
  spdlog::log(level, "pg_notice severity={} sqlstate={} | {}", severity.empty() ? "unknown" : severity,
              sqlstate.empty() ? "none" : sqlstate, TruncateUtf8(OneLine(RedactSecrets(message)), 500));
}

// libpq calls this from C: nothing may unwind through it.
void LogNotice(void* /*arg*/, const PGresult* notice) {
  try {
    LogNoticeUnsafe(notice);
  } catch (...) {
  }
}

// A short name for the statement, for error messages: its first word(s).
std::string StatementName(std::string_view sql) {
  std::size_t start = sql.find_first_not_of(" \t\n");
  if (start == std::string_view::npos) return "statement";
  std::string_view rest = sql.substr(start);
  std::size_t end = rest.find_first_of(" \t\n(;");
  std::string word(rest.substr(0, end));
  for (char& c : word) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return word;
}

// FNV-1a over the statement's text and parameter types: its prepared name.
std::uint64_t StatementHash(std::string_view sql, const Params& params) {
  std::uint64_t h = 1469598103934665603ULL;
  auto mix = [&](const void* data, std::size_t n) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) {
      h ^= bytes[i];
      h *= 1099511628211ULL;
    }
  };
  mix(sql.data(), sql.size());
  if (const Oid* types = params.type_oids(); types != nullptr) {
    mix(types, sizeof(Oid) * static_cast<std::size_t>(params.type_count()));
  }
  return h;
}

// Statements prepared per connection at most; past that, the rest run
// unnamed (the daemon's own statements are a few dozen).
constexpr std::size_t kMaxPrepared = 512;

}  // namespace

SessionBounds SessionBounds::ForStall(std::chrono::milliseconds stall_timeout) {
  using std::chrono::milliseconds;
  if (stall_timeout <= milliseconds(0)) return {};
  return {stall_timeout, std::max(3 * stall_timeout, milliseconds(5000))};
}

Connection Connection::Open(const std::string& conninfo, std::string_view application_name,
                            SessionBounds bounds) {
  // Defaults that keep a dead server or network from hanging a thread
  // forever; they come before "dbname", so the conninfo (and PG* variables
  // the user set) override them.
  struct Default {
    const char* keyword;
    const char* env;
    const char* value;
  };
  static constexpr Default kDefaults[] = {
      {"connect_timeout", "PGCONNECT_TIMEOUT", "10"},
      {"keepalives_idle", nullptr, "30"},
      {"keepalives_interval", nullptr, "10"},
      {"keepalives_count", nullptr, "3"},
      {"tcp_user_timeout", nullptr, "60000"},
      {"target_session_attrs", "PGTARGETSESSIONATTRS", "read-write"},
  };
  std::vector<const char*> keywords;
  std::vector<const char*> values;
  for (const Default& d : kDefaults) {
    if (d.env != nullptr && std::getenv(d.env) != nullptr) continue;
    keywords.push_back(d.keyword);
    values.push_back(d.value);
  }
  std::string app(application_name);
  keywords.insert(keywords.end(), {"dbname", "fallback_application_name", nullptr});
  values.insert(values.end(), {conninfo.c_str(), app.c_str(), nullptr});
  // expand_dbname=1: a URL or keyword string in "dbname" is expanded.
  PGconn* raw = PQconnectdbParams(keywords.data(), values.data(), 1);
  if (raw == nullptr || PQstatus(raw) != CONNECTION_OK) {
    std::unique_ptr<PGconn, decltype(&PQfinish)> guard(raw, &PQfinish);
    ThrowForConnection(raw, "cannot connect to PostgreSQL", conninfo);
  }
  PQsetNoticeReceiver(raw, &LogNotice, nullptr);
  Connection conn(raw);
  static std::atomic<std::uint64_t> next_serial{0};
  conn.serial_ = ++next_serial;
  conn.bounds_.stall = std::max(bounds.stall, std::chrono::milliseconds(0));
  conn.bounds_.reply = std::max(bounds.reply, std::chrono::milliseconds(0));
  // Sending never blocks: Await() flushes within the reply's deadline.
  if (PQsetnonblocking(raw, 1) != 0) ThrowForConnection(raw, "cannot set the connection nonblocking", conninfo);
  return conn;
}

Result Connection::check(Result result, std::string_view sql, bool during_commit) {
  PGresult* raw = result.raw();
  ExecStatusType status = raw != nullptr ? PQresultStatus(raw) : PGRES_FATAL_ERROR;
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_EMPTY_QUERY) {
    return result;
  }
  ThrowForResult(conn_.get(), raw, StatementName(sql) + " failed", during_commit);
}

int Connection::WaitSocket(short events, std::optional<std::chrono::steady_clock::time_point> deadline) const {
  for (;;) {
    int timeout_ms = -1;
    if (deadline) {
      // The real clock: the deadline bounds a wait in poll(2) on the
      // server's socket, which only real time moves.
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return 0;
      timeout_ms = static_cast<int>(std::min<long long>(left.count(), 60'000));
    }
    const int sock = PQsocket(conn_.get());
    if (sock < 0) return 1;  // closed: libpq's next call reports it
    pollfd fd{sock, events, 0};
    const int n = poll(&fd, 1, timeout_ms);
    if (n > 0) return 1;  // ready, or an error/hang-up libpq will report
    if (n < 0 && errno != EINTR) return -errno;
  }
}

void Connection::Drop(std::string_view sql, bool during_commit, const std::string& detail) {
  // The statement may still be running, or held by a pooler: the connection
  // cannot be used again. Closing it ends the session on the server (the
  // server, or the pooler, sees the socket close; an open transaction is
  // rolled back).
  conn_.reset();
  prepared_.clear();
  ThrowLost(StatementName(sql) + " failed", detail, during_commit);
}

Connection::Exchange Connection::StartExchange(std::string_view sql, bool during_commit) {
  // Closed after an earlier statement's reply did not come: this one is
  // never sent (not even a COMMIT is in doubt then).
  if (!conn_) {
    ThrowLost(StatementName(sql) + " failed",
              "the connection was closed after an earlier statement got no reply in time", false);
  }
  Exchange x{sql, during_commit, std::nullopt};
  // The real clock: a reply's deadline is for the server's socket (WaitSocket).
  if (bounds_.reply.count() > 0) x.deadline = std::chrono::steady_clock::now() + bounds_.reply;
  return x;
}

void Connection::WaitReady(const Exchange& x, short events) {
  const int ready = WaitSocket(events, x.deadline);
  if (ready > 0) return;
  if (ready == 0) {
    Drop(x.sql, x.during_commit,
         "no reply from the server within " + std::to_string(bounds_.reply.count()) +
             " ms (a pooler holding the query, or a network dropping packets); connection closed");
  }
  Drop(x.sql, x.during_commit, std::string("poll() failed: ") + std::strerror(-ready) + "; connection closed");
}

void Connection::Consume(const Exchange& x) {
  PGconn* c = conn_.get();
  if (PQconsumeInput(c) != 0 || PQstatus(c) == CONNECTION_BAD) return;  // bad: PQgetResult reports it
  Drop(x.sql, x.during_commit, std::string(PQerrorMessage(c)) + "; connection closed");
}

void Connection::FlushSent(const Exchange& x) {
  for (int left = PQflush(conn_.get()); left == 1; left = PQflush(conn_.get())) {
    WaitReady(x, POLLIN | POLLOUT);
    // The server may answer (an error) before it read everything.
    Consume(x);
    if (PQstatus(conn_.get()) == CONNECTION_BAD) break;
  }
}

Result Connection::NextResult(const Exchange& x) {
  while (PQisBusy(conn_.get()) != 0 && PQstatus(conn_.get()) != CONNECTION_BAD) {
    WaitReady(x, POLLIN);
    Consume(x);
  }
  return Result(PQgetResult(conn_.get()));
}

Result Connection::Await(int sent, std::string_view sql, bool during_commit) {
  const Exchange x = StartExchange(sql, during_commit);
  if (sent == 0) ThrowForResult(conn_.get(), nullptr, StatementName(sql) + " failed", during_commit);
  ++round_trips_;
  FlushSent(x);
  Result kept;
  for (;;) {
    Result next = NextResult(x);
    if (next.raw() == nullptr) break;
    // Of several statements, the last result, unless one failed: then the
    // first error (later ones follow from it), as PQexec does.
    if (kept.raw() == nullptr || PQresultStatus(kept.raw()) != PGRES_FATAL_ERROR) kept = std::move(next);
    // COPY (not used) returns its state on every call; a bad connection ends
    // the results (as in PQexec).
    const ExecStatusType status = PQresultStatus(kept.raw());
    if (status == PGRES_COPY_IN || status == PGRES_COPY_OUT || status == PGRES_COPY_BOTH ||
        PQstatus(conn_.get()) == CONNECTION_BAD) {
      break;
    }
  }
  return check(std::move(kept), sql, during_commit);
}

std::vector<Result> Connection::pipeline(std::span<const PipelinedStatement> statements, bool during_commit) {
  failed_statement_ = -1;
  if (statements.empty()) return {};
  if (!conn_) StartExchange(statements.front().sql, during_commit);  // throws: closed earlier
  // Checked before anything is queued: a throw after PQenterPipelineMode
  // would leave statements queued on the connection.
  for (const PipelinedStatement& s : statements) {
    if (s.params != nullptr && s.params->type_oids() != nullptr && s.params->type_count() != s.params->size()) {
      throw std::invalid_argument("pg::Params: " + std::to_string(s.params->type_count()) +
                                  " types declared for " + std::to_string(s.params->size()) + " values");
    }
  }
  // Whether statements may be prepared is asked before the pipeline starts
  // (pooled() is a round trip of its own, once per connection).
  const bool any_prepared = std::any_of(statements.begin(), statements.end(),
                                        [](const PipelinedStatement& s) { return s.params && s.prepare; });
  if (any_prepared && prepare_ && pooled()) prepare_ = false;
  const Exchange first = StartExchange(statements.front().sql, during_commit);
  PGconn* c = conn_.get();
  if (PQenterPipelineMode(c) != 1) ThrowForResult(c, nullptr, "pipeline failed", false);
  // What each statement sent: a Prepare first (its hash) or not.
  struct Sent {
    std::string_view sql;
    std::optional<std::uint64_t> prepares;
  };
  std::vector<Sent> sent;
  std::unordered_set<std::uint64_t> preparing;  // prepared by this pipeline: sent once
  for (const PipelinedStatement& s : statements) {
    const std::string text(s.sql);
    int ok = 0;
    Sent item{s.sql, std::nullopt};
    if (s.params == nullptr) {
      ok = PQsendQueryParams(c, text.c_str(), 0, nullptr, nullptr, nullptr, nullptr, 0);
    } else {
      const Params& params = *s.params;
      std::vector<const char*> values = params.pointers();
      const std::uint64_t hash = StatementHash(s.sql, params);
      const bool known = prepared_.contains(hash) || preparing.contains(hash);
      const bool named = s.prepare && prepare_ && (known || prepared_.size() + preparing.size() < kMaxPrepared);
      if (!named) {
        ok = PQsendQueryParams(c, text.c_str(), params.size(), params.type_oids(), values.data(), nullptr,
                               nullptr, 0);
      } else {
        char name[32];
        std::snprintf(name, sizeof name, "akadzed_%016llx", static_cast<unsigned long long>(hash));
        ok = 1;
        if (!known) {
          const int types = params.type_oids() != nullptr ? params.type_count() : 0;
          ok = PQsendPrepare(c, name, text.c_str(), types, params.type_oids());
          item.prepares = hash;
          preparing.insert(hash);
        }
        if (ok != 0) ok = PQsendQueryPrepared(c, name, params.size(), values.data(), nullptr, nullptr, 0);
      }
    }
    // A failed send: the connection cannot be used again. What went out
    // before may include a COMMIT the server runs without waiting for the
    // Sync.
    if (ok == 0) Drop(s.sql, during_commit, std::string(PQerrorMessage(c)) + "; connection closed");
    sent.push_back(item);
  }
  if (PQpipelineSync(c) == 0) Drop(first.sql, during_commit, std::string(PQerrorMessage(c)) + "; connection closed");
  ++round_trips_;
  FlushSent(first);
  std::vector<Result> out;
  out.reserve(sent.size());
  Result error;
  std::string_view error_sql;
  // One statement's result: every result up to the null that ends it.
  auto read_one = [&](const Exchange& x) {
    Result kept;
    for (Result next = NextResult(x); next.raw() != nullptr; next = NextResult(x)) {
      if (kept.raw() == nullptr) kept = std::move(next);
    }
    if (PQstatus(conn_.get()) == CONNECTION_BAD) {
      ThrowForResult(conn_.get(), kept.raw(), StatementName(x.sql) + " failed", during_commit);
    }
    return kept;
  };
  for (std::size_t index = 0; index < sent.size(); ++index) {
    const Sent& item = sent[index];
    const Exchange x{item.sql, during_commit, first.deadline};
    for (int part = item.prepares ? 0 : 1; part < 2; ++part) {
      Result r = read_one(x);
      const ExecStatusType status = r.raw() != nullptr ? PQresultStatus(r.raw()) : PGRES_FATAL_ERROR;
      const bool failed = status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK &&
                          status != PGRES_EMPTY_QUERY && status != PGRES_PIPELINE_ABORTED;
      if (failed && error.raw() == nullptr) {
        error = std::move(r);
        error_sql = item.sql;
        failed_statement_ = static_cast<int>(index);
      } else if (part == 0 && status == PGRES_COMMAND_OK) {
        prepared_.insert(*item.prepares);
      } else if (part == 1) {
        out.push_back(std::move(r));
      }
    }
  }
  // The Sync's own result ends the pipeline.
  Result sync = NextResult(first);
  if (sync.raw() == nullptr || PQresultStatus(sync.raw()) != PGRES_PIPELINE_SYNC || PQexitPipelineMode(c) != 1) {
    Drop(first.sql, during_commit, "the pipeline did not end as sent; connection closed");
  }
  if (error.raw() != nullptr) {
    const char* state = PQresultErrorField(error.raw(), PG_DIAG_SQLSTATE);
    const std::string_view sqlstate = state != nullptr ? state : "";
    // As in ExecParams: stop preparing on this connection.
    if (sqlstate == "42P05" || sqlstate == "26000" || sqlstate == "0A000") {
      prepare_ = false;
      prepared_.clear();
    }
    // Only the COMMIT's own failure leaves its outcome unknown: a statement
    // before it failed, and the server skipped the COMMIT.
    check(std::move(error), error_sql,
          during_commit && failed_statement_ == static_cast<int>(statements.size()) - 1);
  }
  return out;
}

Result Connection::exec(std::string_view sql) {
  std::string text(sql);
  return Await(PQsendQuery(conn_.get(), text.c_str()), sql, false);
}

Result Connection::exec(std::string_view sql, const Params& params) { return ExecParams(sql, params, true); }

Result Connection::exec_replanned(std::string_view sql, const Params& params) {
  return ExecParams(sql, params, false);
}

Result Connection::ExecParams(std::string_view sql, const Params& params, bool prepare) {
  std::string text(sql);
  std::vector<const char*> values = params.pointers();
  if (params.type_oids() != nullptr && params.type_count() != params.size()) {
    throw std::invalid_argument("pg::Params: " + std::to_string(params.type_count()) +
                                " types declared for " + std::to_string(params.size()) + " values");
  }
  auto unnamed = [&] {
    return Await(PQsendQueryParams(conn_.get(), text.c_str(), params.size(), params.type_oids(),
                                   values.data(), nullptr, nullptr, 0),
                 sql, false);
  };
  if (prepare && prepare_ && pooled()) prepare_ = false;
  if (!prepare || !prepare_) return unnamed();
  const std::uint64_t hash = StatementHash(sql, params);
  if (!prepared_.contains(hash) && prepared_.size() >= kMaxPrepared) return unnamed();
  char name[32];
  std::snprintf(name, sizeof name, "akadzed_%016llx", static_cast<unsigned long long>(hash));
  try {
    if (!prepared_.contains(hash)) {
      const int types = params.type_oids() != nullptr ? params.type_count() : 0;
      Await(PQsendPrepare(conn_.get(), name, text.c_str(), types, params.type_oids()), sql, false);
      prepared_.insert(hash);
    }
    return Await(PQsendQueryPrepared(conn_.get(), name, params.size(), values.data(), nullptr, nullptr, 0),
                 sql, false);
  } catch (const PgError& e) {
    // 42P05: the server has this name already (only a pooler or a DISCARD
    // behind our back explains it); 26000: the server lost it; 0A000: a
    // migration changed its result type. Stop preparing on this connection.
    if (e.sqlstate() == "42P05" || e.sqlstate() == "26000" || e.sqlstate() == "0A000") {
      prepare_ = false;
      prepared_.clear();
    }
    throw;
  }
}

bool Connection::pooled() {
  if (!pooled_) {
    pooled_ = exec("SELECT pg_backend_pid()").int64(0, 0) != backend_pid();
  }
  return *pooled_;
}

bool Connection::healthy() const { return conn_ && PQstatus(conn_.get()) == CONNECTION_OK; }

int Connection::backend_pid() const { return PQbackendPID(conn_.get()); }

}  // namespace akadzed::pg
