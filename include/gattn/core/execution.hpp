// How a call may use threads (docs/spec.md §11): the caller decides, the library never nests.
//
// Every parallel loop in gattn (kernel work units, projection panels, per-row stages) runs through
// execution_context::parallel_for. Three kinds of context:
//   - default / with_threads(n): an OpenMP team of n threads (0 = omp_get_max_threads()), dynamic
//     schedule; inside an active parallel region it runs serially, so gattn never nests teams;
//   - serial(): the calling thread only (what a caller that parallelises over layers or requests wants);
//   - custom(fn, user, concurrency): the caller's own pool. fn(user, n, body, run) must call
//     run(body, begin, end) for disjoint ranges covering [0, n) exactly once, on any threads, and
//     return after all have finished. `concurrency` is how many threads may run at once (work is
//     split to feed that many).
// This is the one header of gattn that uses OpenMP: on_this_thread keeps code that would start
// teams of its own (Eigen's products) on the calling thread.
#pragma once

#include <algorithm>
#include <type_traits>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "gattn/core/error.hpp"
#include "gattn/core/types.hpp"

GATTN_NAMESPACE_BEGIN

class execution_context {
 public:
  using range_fn = void (*)(void* body, index begin, index end);
  using parallel_for_fn = void (*)(void* user, index n, void* body, range_fn run);

  /// OpenMP with its default team size.
  execution_context() = default;
  /// The most threads a context may ask for: per-thread scratch and the work splits (twice the
  /// threads) stay far from overflowing, and no machine gattn runs on has more.
  static constexpr int max_threads = 1 << 16;

  static execution_context with_threads(int threads) {
    detail::require<config_error>(threads >= 0 && threads <= max_threads, "execution_context: threads=", threads,
                                  " must be in [0, ", max_threads, "]");
    execution_context e;
    e.threads_ = threads;
    return e;
  }
  static execution_context serial() { return with_threads(1); }
  static execution_context custom(parallel_for_fn fn, void* user, int concurrency) {
    detail::require<config_error>(fn != nullptr, "execution_context: custom parallel_for is null");
    detail::require<config_error>(concurrency >= 1 && concurrency <= max_threads, "execution_context: concurrency=",
                                  concurrency, " must be in [1, ", max_threads, "]");
    execution_context e;
    e.fn_ = fn;
    e.user_ = user;
    e.threads_ = concurrency;
    return e;
  }

  /// Threads a parallel_for may keep busy (>= 1). Inside an OpenMP parallel region: 1.
  int concurrency() const {
    if (fn_) return threads_;
#ifdef _OPENMP
    if (omp_in_parallel()) return 1;
    return threads_ > 0 ? threads_ : std::min(omp_get_max_threads(), max_threads);
#else
    return 1;
#endif
  }

  /// Calls f(i) for every i in [0, n), possibly concurrently; returns when all are done.
  /// f must not throw (an exception cannot cross an OpenMP region or a caller's pool).
  template <class F>
  void parallel_for(index n, F&& f) const {
    if (n <= 0) return;
    const int team = int(std::min<index>(concurrency(), n));
    if (team <= 1) {
      for (index i = 0; i < n; ++i) f(i);
      return;
    }
    if (fn_) {
      using body_t = std::remove_reference_t<F>;
      fn_(user_, n, const_cast<void*>(static_cast<const void*>(&f)), [](void* body, index begin, index end) {
        body_t& g = *static_cast<body_t*>(body);
        for (index i = begin; i < end; ++i) g(i);
      });
      return;
    }
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(team)
    for (index i = 0; i < n; ++i) f(i);
#endif
  }

 private:
  parallel_for_fn fn_ = nullptr;
  void* user_ = nullptr;
  int threads_ = 0;  ///< OpenMP: 0 = default team; custom: concurrency
};

/// Runs f on the calling thread only, for code that would start OpenMP teams of its own (Eigen's
/// products do unless they find themselves inside a team of more than one thread, or the thread
/// count is 1). Inside a team f just runs; outside one the calling thread's thread count is 1
/// while f runs (then restored), so a serial context stays serial, a caller's pool gets no OpenMP
/// teams, and every context splits the work the same way (the same bits). No parallel region of
/// its own: OpenMP allocates a new team whenever a region's size differs from the previous
/// region's, and a region of one between a context's teams of two would do that on every call.
/// (Eigen::setNbThreads above 1 overrides the thread count: an engine that sets it gets Eigen's
/// teams here.)
template <class F>
void on_this_thread(F&& f) {
#ifdef _OPENMP
  if (omp_get_num_threads() > 1) {
    f();
    return;
  }
  struct restore {
    int threads;
    ~restore() { omp_set_num_threads(threads); }
  } const saved{omp_get_max_threads()};
  omp_set_num_threads(1);
  f();
#else
  f();
#endif
}

GATTN_NAMESPACE_END  // namespace gattn
