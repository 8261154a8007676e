#include "metrics/metrics_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <functional>
#include <memory>
#include <system_error>

#include <httplib.h>
#include <spdlog/spdlog.h>

#include "core/redact.h"
#include "core/thread_annotations.h"
#include "runtime/service_loop.h"

namespace akadzed {

// httplib::Server with access to its listening socket, so that a socket bound
// but never served can be closed (httplib's stop() only acts while serving).
class BoundHttpServer : public httplib::Server {
 public:
  void CloseUnserved() {
    auto sock = svr_sock_.exchange(INVALID_SOCKET);
    if (sock != INVALID_SOCKET) close(sock);
  }
};

namespace {

// The listener's request threads, as httplib's TaskQueue, on the service
// kit: its ServiceLoop owns the threads (named "metrics http"), the mutex,
// the condition and the stop; this adds only the queue of requests.
// Not httplib's own ThreadPool: when a thread cannot start (a pids limit,
// TasksMax) its constructor throws with the threads it did start still
// joinable, and the process ends in std::terminate; and it is made on the
// listening thread, where nothing can catch it. This one is made by
// Serve() on the caller's thread, and a failure stops and joins the
// threads already started before it throws: the daemon then fails to
// start with one line (start_failed) instead of aborting.
class ServingThreads final : public httplib::TaskQueue {
 public:
  ServingThreads(int count, const ServiceClock& clock) : loop_(clock) {
    try {
      for (int i = 0; i < count; ++i) loop_.Start("metrics http", [this] { Work(); });
    } catch (...) {
      loop_.Stop();
      throw;
    }
  }
  ~ServingThreads() override { loop_.Stop(); }
  ServingThreads(const ServingThreads&) = delete;
  ServingThreads& operator=(const ServingThreads&) = delete;

  void enqueue(std::function<void()> fn) override {
    {
      MutexLock lock(loop_.mu());
      tasks_.push_back(std::move(fn));
    }
    loop_.Notify();
  }

  // Lets the tasks queued run, then joins every thread. Idempotent.
  void shutdown() override { loop_.Stop(); }

 private:
  void Work() {
    for (;;) {
      std::function<void()> task;
      {
        MutexLock lock(loop_.mu());
        loop_.Wait(lock, [this]() REQUIRES(loop_.mu()) { return !tasks_.empty(); });
        if (tasks_.empty()) return;  // stopping, nothing left
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  ServiceLoop loop_;
  std::deque<std::function<void()>> tasks_ GUARDED_BY(loop_.mu());
};

constexpr const char* kTextPlain = "text/plain; charset=utf-8";
constexpr const char* kExposition = "text/plain; version=0.0.4; charset=utf-8";

std::string Address(const std::string& host, int port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

// Why binding host:port fails, found by trying it the same way httplib does.
std::string BindFailure(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return gai_strerror(rc);
  }
  std::string reason = "the socket could not be bound";
  int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
  if (fd < 0) {
    reason = std::system_category().message(errno);
  } else {
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, 1) != 0) {
      reason = std::system_category().message(errno);
    }
    close(fd);
  }
  freeaddrinfo(found);
  return reason;
}

void Answer(httplib::Response& res, const std::optional<std::string>& problem) {
  if (problem) {
    res.status = 503;
    res.set_content(OneLine(RedactSecrets(*problem)) + "\n", kTextPlain);
  } else {
    res.set_content("ok\n", kTextPlain);
  }
}

}  // namespace

MetricsServer::MetricsServer(const ServiceClock& clock)
    : server_(std::make_unique<BoundHttpServer>()), listener_(clock) {
  // SO_REUSEADDR only (httplib's default adds SO_REUSEPORT, with which a
  // second daemon would share the port instead of failing), and no leak of
  // the socket into child processes.
  server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    fcntl(sock, F_SETFD, FD_CLOEXEC);
  });
  // Idle keep-alive connections hold a pool thread and delay Stop().
  server_->set_keep_alive_timeout(2);
  server_->set_read_timeout(5, 0);
  server_->set_write_timeout(5, 0);
  // The status page's actions carry `{}`; nothing here reads a large body.
  server_->set_payload_max_length(64 * 1024);
}

MetricsServer::~MetricsServer() { Stop(); }

void MetricsServer::Bind(const std::string& host, int port) {
  int bound = port;
  bool ok;
  if (port == 0) {
    bound = server_->bind_to_any_port(host);
    ok = bound > 0;
  } else {
    ok = server_->bind_to_port(host, port);
  }
  if (!ok) {
    throw std::runtime_error("metrics: cannot listen on " + Address(host, port) + ": " +
                             BindFailure(host, port) +
                             " (set metrics.listen, or metrics.enabled: false)");
  }
  address_ = Address(host, bound);
}

void MetricsServer::Serve(Endpoints endpoints) {
  endpoints_ = std::move(endpoints);
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(endpoints_.metrics(), kExposition);
  });
  server_->Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    Answer(res, endpoints_.unhealthy());
  });
  server_->Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
    Answer(res, endpoints_.unready());
  });
  if (endpoints_.pages) {
    const auto page = [this](const httplib::Request& req, httplib::Response& res) {
      // The path as sent (httplib's req.path is percent-decoded already:
      // a queue named "a%41" or "a/b" could not be told apart from "aA" or
      // two segments); the page decodes each segment once.
      std::string raw = req.target.empty() ? req.path : req.target.substr(0, req.target.find('?'));
      HttpRequest request{req.method, std::move(raw), {}, req.body, req.remote_addr};
      for (const auto& [name, value] : req.headers) request.headers.emplace_back(name, value);
      HttpReply reply = endpoints_.pages(request);
      res.status = reply.status;
      for (auto& [name, value] : reply.headers) res.set_header(name, value);
      res.set_content(std::move(reply.body), reply.content_type);
    };
    server_->Get("/", page);
    server_->Get(R"(/assets/.*)", page);
    server_->Get(R"(/api/.*)", page);
    server_->Post(R"(/api/.*)", page);
  }
  server_->set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.status == 404 && res.body.empty()) {
      res.set_content("not found: try /, /metrics, /healthz or /readyz\n", kTextPlain);
    }
  });
  server_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
        res.status = 500;
        std::string what = "internal error";
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          what = OneLine(RedactSecrets(e.what()));
        } catch (...) {
        }
        spdlog::error("metrics_request_failed | {}", what);
        res.set_content(what + "\n", kTextPlain);
      });
  // Four request threads (idle keep-alive connections hold one each, up to
  // keep_alive_timeout), made here so that a failure to start them throws
  // to the caller; httplib takes them over on its listening thread and
  // shuts them down when listening ends.
  auto threads = std::make_shared<std::unique_ptr<ServingThreads>>();
  try {
    *threads = std::make_unique<ServingThreads>(4, listener_.clock());
    // httplib calls this on the listening thread just after its accept loop
    // is marked running (from then on its stop() acts): the start Serve()
    // waits for.
    server_->new_task_queue = [this, threads] {
      {
        MutexLock lock(listener_.mu());
        listening_ = true;
      }
      listener_.Notify();
      return threads->release();
    };
    listener_.Start("metrics listen", [this] {
      const bool ok = server_->listen_after_bind();
      bool listened;
      {
        MutexLock lock(listener_.mu());
        listen_returned_ = true;
        listened = listening_;
      }
      listener_.Notify();
      // An end before listening is Serve()'s to report.
      if (!ok && listened) spdlog::error("metrics_stopped | the listener failed");
    });
  } catch (const std::system_error& e) {
    threads->reset();  // joins those that started
    throw std::runtime_error("metrics: cannot start the listener's threads on " + address_ + ": " +
                             e.code().message() + " (a limit on threads: systemd's TasksMax, a pids cgroup?)");
  }
  serving_ = true;
  // httplib's stop() does nothing until the accept loop runs: wait for it
  // (or for the thread's end), so that a Stop() right after Serve() cannot
  // miss it.
  bool listening;
  {
    MutexLock lock(listener_.mu());
    listener_.Wait(lock, [this]() REQUIRES(listener_.mu()) { return listening_ || listen_returned_; });
    listening = listening_;
  }
  if (!listening) {
    Stop();
    threads->reset();  // never handed to httplib: joined here
    throw std::runtime_error("metrics: the listener on " + address_ + " ended before it listened");
  }
  spdlog::info("metrics_listening address={}", address_);
  if (endpoints_.pages) spdlog::info("status_page url=http://{}/", address_);
}

void MetricsServer::Stop() {
  if (serving_) {
    server_->stop();
    listener_.Stop();
    serving_ = false;
  }
  server_->CloseUnserved();
}

}  // namespace akadzed
