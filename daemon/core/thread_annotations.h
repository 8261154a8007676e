// Clang's thread-safety annotations (-Wthread-safety), in the spirit of
// LevelDB's port/thread_annotations.h and Abseil's Mutex, and the annotated
// mutex they need: libstdc++'s std::mutex carries no annotations, so every
// mutex-guarded member of the daemon is declared GUARDED_BY a `Mutex`, and
// every function that must or must not hold one says so (REQUIRES,
// EXCLUDES). Clang checks them in the build `.ci/run` makes with clang (the
// fuzz step) with -Wthread-safety -Werror; with GCC the macros are empty.
//
//   Mutex      std::mutex with annotations; BasicLockable, so a
//              std::condition_variable_any waits on it.
//   MutexLock  the scoped lock (lock_guard and unique_lock in one): it can
//              unlock and lock again, and a condition_variable_any waits on it.
//
// Thread-safety: Mutex is a mutex; a MutexLock belongs to the thread that
// made it.
#pragma once

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
  std::mutex mu_;
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() RELEASE() {
    if (locked_) mu_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // For a condition_variable_any's wait, and for code that lets go of the
  // mutex for a while (a call that must not hold it).
  void lock() ACQUIRE() {
    mu_.lock();
    locked_ = true;
  }
  void unlock() RELEASE() {
    locked_ = false;
    mu_.unlock();
  }

 private:
  Mutex& mu_;
  bool locked_ = true;
};

}  // namespace akadzed
