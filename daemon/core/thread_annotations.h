// Clang's thread-safety annotations (-Wthread-safety), in the spirit of
// LevelDB's port/thread_annotations.h and Abseil's Mutex, and the annotated
// mutex they need: libstdc++'s std::mutex carries no annotations, so every
// mutex-guarded member of the daemon is declared GUARDED_BY a `Mutex`, and
// every function that must or must not hold one says so (REQUIRES,
// EXCLUDES). Clang checks them in the build `.ci/run` makes with clang (the
// fuzz step) with -Wthread-safety -Werror; with GCC the macros are empty.
//
//   Mutex      std::mutex with annotations.
//   MutexLock  the scoped lock (lock_guard and unique_lock in one): it can
//              unlock and lock again.
//   CondVar    std::condition_variable waiting on a MutexLock. Not
//              std::condition_variable_any: that one takes a mutex of its
//              own in every wait and notify, which doubled the futex
//              traffic of 1,000 executors handing jobs over
//              (docs/benchmarks.md, "Per-job overhead").
//
// Thread-safety: Mutex is a mutex; a MutexLock belongs to the thread that
// made it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define AKADZED_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define AKADZED_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) AKADZED_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY AKADZED_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) AKADZED_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) AKADZED_THREAD_ANNOTATION(pt_guarded_by(x))
#define REQUIRES(...) AKADZED_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) AKADZED_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) AKADZED_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) AKADZED_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) AKADZED_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define RETURN_CAPABILITY(x) AKADZED_THREAD_ANNOTATION(lock_returned(x))
#define ASSERT_CAPABILITY(x) AKADZED_THREAD_ANNOTATION(assert_capability(x))
#define ACQUIRED_BEFORE(...) AKADZED_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS AKADZED_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace akadzed {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  friend class MutexLock;
  std::mutex mu_;
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() RELEASE() {}  // lock_ unlocks if it holds the mutex
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // For code that lets go of the mutex for a while (a call that must not
  // hold it).
  void lock() ACQUIRE() { lock_.lock(); }
  void unlock() RELEASE() { lock_.unlock(); }

 private:
  friend class CondVar;
  std::unique_lock<std::mutex> lock_;
};

// The waits take the MutexLock that holds the mutex guarding what `ready`
// reads; the analysis does not follow into `ready` (annotate it REQUIRES or
// NO_THREAD_SAFETY_ANALYSIS).
class CondVar {
 public:
  void notify_one() noexcept { cv_.notify_one(); }
  void notify_all() noexcept { cv_.notify_all(); }

  template <typename Ready>
  void wait(MutexLock& lock, Ready ready) {
    cv_.wait(lock.lock_, std::move(ready));
  }
  template <typename Rep, typename Period, typename Ready>
  bool wait_for(MutexLock& lock, const std::chrono::duration<Rep, Period>& timeout, Ready ready) {
    return cv_.wait_for(lock.lock_, timeout, std::move(ready));
  }
  template <typename Clock, typename Duration, typename Ready>
  bool wait_until(MutexLock& lock, const std::chrono::time_point<Clock, Duration>& deadline, Ready ready) {
    return cv_.wait_until(lock.lock_, deadline, std::move(ready));
  }

 private:
  std::condition_variable cv_;
};

}  // namespace akadzed
