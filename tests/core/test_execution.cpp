// execution_context: every index runs once, custom pools are used, nothing nests; on_this_thread
// runs its function once, on the calling thread, with a team size of one while it runs.
#include <atomic>
#include <limits>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "gattn/core/execution.hpp"

namespace gattn {
// Named, not anonymous: the test target is built as a few unity translation units.
namespace test_execution {

struct counting_pool {
  int calls = 0;
  // Runs the body in three uneven ranges, the way a caller's pool might.
  static void run(void* user, index n, void* body, execution_context::range_fn f) {
    ++static_cast<counting_pool*>(user)->calls;
    f(body, 0, n / 3);
    f(body, n / 3, n - 1);
    f(body, n - 1, n);
  }
};

TEST(ExecutionContext, EveryIndexOnceForEachKind) {
  counting_pool pool;
  const std::vector<execution_context> kinds = {execution_context{}, execution_context::with_threads(2),
                                                execution_context::serial(),
                                                execution_context::custom(&counting_pool::run, &pool, 4)};
  for (const execution_context& e : kinds) {
    std::vector<std::atomic<int>> hits(97);
    e.parallel_for(97, [&](index i) { hits[std::size_t(i)]++; });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
  EXPECT_EQ(pool.calls, 1);
  EXPECT_EQ(execution_context::serial().concurrency(), 1);
  EXPECT_EQ(execution_context::custom(&counting_pool::run, &pool, 5).concurrency(), 5);
}

TEST(ExecutionContext, RefusesBadArguments) {
  EXPECT_THROW(execution_context::with_threads(-1), config_error);
  EXPECT_THROW(execution_context::custom(nullptr, nullptr, 2), config_error);
  EXPECT_THROW(execution_context::custom(&counting_pool::run, nullptr, 0), config_error);
  // a count no machine has: refused before any call sizes its scratch by it (2 · threads overflowed)
  EXPECT_THROW(execution_context::with_threads(std::numeric_limits<int>::max()), config_error);
  EXPECT_THROW(execution_context::with_threads(execution_context::max_threads + 1), config_error);
  EXPECT_THROW(execution_context::custom(&counting_pool::run, nullptr, std::numeric_limits<int>::max()), config_error);
  EXPECT_EQ(execution_context::with_threads(execution_context::max_threads).concurrency() > 0, true);
}

#ifdef _OPENMP
TEST(ExecutionContext, NeverNestsInsideAParallelRegion) {
  std::atomic<int> nested_teams{0};
#pragma omp parallel num_threads(2)
  {
    execution_context::with_threads(2).parallel_for(8, [&](index) {
      if (omp_get_num_threads() > 1 && omp_get_level() > 1) nested_teams++;
    });
  }
  EXPECT_EQ(nested_teams.load(), 0);
}
#endif

TEST(ExecutionContext, OnThisThreadRunsOnceOnTheCallersThread) {
  const std::thread::id caller = std::this_thread::get_id();
  int runs = 0;
  bool same_thread = false;
  int threads_inside = 0, teams_inside = 0;
#ifdef _OPENMP
  const int threads_before = omp_get_max_threads();
#endif
  on_this_thread([&] {
    ++runs;
    same_thread = std::this_thread::get_id() == caller;
#ifdef _OPENMP
    threads_inside = omp_get_max_threads();  // what a nested library (Eigen) would start
    teams_inside = omp_get_num_threads();
#else
    threads_inside = teams_inside = 1;
#endif
  });
  EXPECT_EQ(runs, 1);
  EXPECT_TRUE(same_thread);
  EXPECT_EQ(threads_inside, 1);
  EXPECT_EQ(teams_inside, 1);
#ifdef _OPENMP
  EXPECT_EQ(omp_get_max_threads(), threads_before);  // the caller's setting is unchanged
#endif
}

}  // namespace test_execution
}  // namespace gattn
