// The fused kernel's parallel loops run through execution_context (core/execution.hpp): a
// caller's own parallel_for is used (and given work), its results equal the OpenMP team's of the
// same concurrency bitwise (the plan depends only on the concurrency), and a call made inside an
// OpenMP parallel region runs serially (no nested team) with the serial result.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "gattn/core/execution.hpp"
#include "gattn/kernel/kernel.hpp"
#include "support/kernel_sweep.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_execution_sdpa {

namespace {

using gattn::index;

// A two-thread pool that counts the calls and the indices it ran.
struct counting_pool {
  std::atomic<int> calls{0};
  std::atomic<index> items{0};
  static void run(void* user, index n, void* body, gattn::execution_context::range_fn f) {
    auto* self = static_cast<counting_pool*>(user);
    ++self->calls;
    self->items += n;
    std::thread other([&] { f(body, n / 2, n); });
    f(body, 0, n / 2);
    other.join();
  }
};

struct shape {
  index t_q, t_k, hq, hkv, d;
};

const shape shapes[] = {
    {1, 3000, 8, 2, 64},  // decode, key splits
    {3, 900, 8, 8, 32},   // interleaved units, key splits
    {96, 300, 4, 2, 48},  // prefill units
};

std::vector<float> run(const kernel_test::problem& pr, const gattn::execution_context* exec, int threads) {
  std::vector<float> out(pr.out_size());
  auto p = pr.params(out.data());
  p.exec = exec;
  p.threads = threads;
  gattn::fused_sdpa(p);
  return out;
}

kernel_test::problem make(const shape& s) {
  kernel_test::problem pr;
  pr.t_q = s.t_q; pr.t_k = s.t_k; pr.hq = s.hq; pr.hkv = s.hkv; pr.dqk = pr.dv = s.d;
  pr.fill(11);
  return pr;
}

TEST(KernelExecution, UsesTheCallersParallelForAndMatchesOpenMP) {
  for (const shape& s : shapes) {
    const auto pr = make(s);
    counting_pool pool;
    const auto ctx = gattn::execution_context::custom(&counting_pool::run, &pool, 4);
    const auto custom = run(pr, &ctx, 0);
    EXPECT_GT(pool.calls.load(), 0) << "t_q=" << s.t_q;
    EXPECT_GT(pool.items.load(), 1) << "t_q=" << s.t_q;
    const auto omp4 = gattn::execution_context::with_threads(4);
    EXPECT_EQ(custom, run(pr, &omp4, 0)) << "t_q=" << s.t_q;
    EXPECT_EQ(custom, run(pr, nullptr, 4)) << "t_q=" << s.t_q;  // p.threads without a context
    const auto ref = pr.oracle();
    double ymax = 0;
    for (double y : ref) ymax = std::max(ymax, std::fabs(y));
    EXPECT_LE(kernel_test::max_abs_diff(custom, ref), 1e-4 * ymax);
  }
}

TEST(KernelExecution, InsideAParallelRegionRunsSeriallyWithTheSerialResult) {
  for (const shape& s : shapes) {
    const auto pr = make(s);
    const auto serial_ctx = gattn::execution_context::serial();
    const auto serial = run(pr, &serial_ctx, 0);
    std::vector<std::vector<float>> inner(2);
#ifdef _OPENMP
#pragma omp parallel num_threads(2)
    { inner[std::size_t(omp_get_thread_num())] = run(pr, nullptr, 4); }
#else
    inner[0] = inner[1] = run(pr, nullptr, 4);
#endif
    EXPECT_EQ(inner[0], serial) << "t_q=" << s.t_q;
    EXPECT_EQ(inner[1], serial) << "t_q=" << s.t_q;
  }
}

}  // namespace

}  // namespace test_execution_sdpa
