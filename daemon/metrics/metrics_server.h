// The HTTP listener of `akadzed run` (config `metrics:`), built on
// cpp-httplib, its listening thread and request threads on the service kit
// (runtime/service_loop.h):
//   GET /metrics  the Prometheus text exposition format 0.0.4
//   GET /healthz  200 "ok" while the daemon's loops are alive, else 503 and
//                 one line naming the stalled loop
//   GET /readyz   200 "ok" while the database answers with the schema this
//                 binary needs, else 503 and one line saying why
//   GET /, /assets/*, GET and POST /api/*
//                 the status page (web/status_page.h), when Endpoints::pages
//                 is set (web.enabled)
// Bind() opens the socket first, so that a taken port fails the start with
// one clear line; Serve() answers on its own threads until Stop(). The
// socket is bound without SO_REUSEPORT: a second daemon on the same port
// fails instead of silently sharing it.
//
// Thread-safety: Bind, Serve and Stop from the owner only; the endpoint
// functions are called on the server's threads, concurrently, and must be
// thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/http_exchange.h"
#include "core/thread_annotations.h"
#include "runtime/service_loop.h"

namespace akadzed {

class BoundHttpServer;  // httplib::Server, kept out of this header

class MetricsServer {
 public:
  struct Endpoints {
    std::function<std::string()> metrics;                    // the exposition text
    std::function<std::optional<std::string>()> unhealthy;   // nullopt: alive
    std::function<std::optional<std::string>()> unready;     // nullopt: ready
    std::function<HttpReply(const HttpRequest&)> pages;      // null: no status page
  };

  // `clock`: the daemon's, for the listener's and the request threads' loops.
  explicit MetricsServer(const ServiceClock& clock = SteadyServiceClock());
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Binds host:port (port 0: any free port). Throws std::runtime_error with
  // one line: "metrics: cannot listen on 127.0.0.1:9464: Address already in
  // use (set metrics.listen, or metrics.enabled: false)".
  void Bind(const std::string& host, int port);
  // host:port as bound (the real port when 0 was asked; [v6]:port).
  const std::string& address() const { return address_; }
  // Starts answering requests (after Bind), returns once httplib's accept
  // loop runs (so that a Stop() right after cannot miss it), and logs
  // `metrics_listening address=...`. Throws std::runtime_error with one
  // line when its threads cannot start ("metrics: cannot start the
  // listener's threads on ...: Resource temporarily unavailable ..."),
  // having joined those that did, or when the listener ended before it
  // listened.
  void Serve(Endpoints endpoints) EXCLUDES(listener_.mu());
  // Stops accepting, finishes the requests in flight and joins the threads;
  // closes a socket that was bound but never served. Idempotent.
  void Stop() EXCLUDES(listener_.mu());

 private:
  std::unique_ptr<BoundHttpServer> server_;
  Endpoints endpoints_;
  std::string address_;
  // The listening thread ("metrics listen"), and the mutex (listener_.mu())
  // guarding what it tells Serve(), which waits for either:
  ServiceLoop listener_;
  bool listening_ GUARDED_BY(listener_.mu()) = false;        // httplib's accept loop runs
  bool listen_returned_ GUARDED_BY(listener_.mu()) = false;  // the thread's listen ended
  bool serving_ = false;
};

}  // namespace akadzed
