#include "pg/connection.h"

#include <cctype>
#include <string>

#include "pg/pg_error.h"

namespace akadzed::pg {

namespace {

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

}  // namespace

Connection Connection::Open(const std::string& conninfo, std::string_view application_name) {
  const char* keywords[] = {"dbname", "fallback_application_name", nullptr};
  std::string app(application_name);
  const char* values[] = {conninfo.c_str(), app.c_str(), nullptr};
  // expand_dbname=1: a URL or keyword string in "dbname" is expanded.
  PGconn* raw = PQconnectdbParams(keywords, values, 1);
  if (raw == nullptr || PQstatus(raw) != CONNECTION_OK) {
    std::unique_ptr<PGconn, decltype(&PQfinish)> guard(raw, &PQfinish);
    ThrowForConnection(raw, "cannot connect to PostgreSQL", conninfo);
  }
  return Connection(raw);
}

Result Connection::check(PGresult* raw, std::string_view sql, bool during_commit) {
  Result result(raw);
  ExecStatusType status = raw != nullptr ? PQresultStatus(raw) : PGRES_FATAL_ERROR;
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_EMPTY_QUERY) {
    return result;
  }
  ThrowForResult(conn_.get(), raw, StatementName(sql) + " failed", during_commit);
}

Result Connection::exec(std::string_view sql) {
  std::string text(sql);
  return check(PQexec(conn_.get(), text.c_str()), sql, false);
}

Result Connection::exec(std::string_view sql, const Params& params) {
  std::string text(sql);
  std::vector<const char*> values = params.pointers();
  return check(PQexecParams(conn_.get(), text.c_str(), params.size(), nullptr, values.data(),
                            nullptr, nullptr, 0),
               sql, false);
}

bool Connection::healthy() const { return conn_ && PQstatus(conn_.get()) == CONNECTION_OK; }

int Connection::backend_pid() const { return PQbackendPID(conn_.get()); }

}  // namespace akadzed::pg
