// fused_sdpa_batch (docs/spec.md §11): a batch of independent problems (mixed t_q, contexts, paged and
// contiguous, f32 and bf16 views) on one execution context; each output matches the oracle to
// 1e-4·max|y_ref| and equals that problem run alone (bitwise, on the context the batch gives it),
// and a batch is deterministic; on every arch.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "gattn/core/execution.hpp"
#include "gattn/kernel/kernel.hpp"
#include "support/kernel_sweep.hpp"
#include "support/low_precision.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_sdpa_batch {

namespace {

using gattn::index;
using gattn::storage_type;

struct member {
  index t_q, t_k, bs;  // bs 0 = contiguous
  storage_type type = storage_type::f32;
};

struct batch {
  std::vector<kernel_test::problem> problems;
  std::vector<std::unique_ptr<kernel_test::paged_copy>> pages;
  std::vector<std::vector<std::uint16_t>> kb, vb;
  std::vector<std::vector<float>> out;
  std::vector<gattn::sdpa_params> params;

  explicit batch(const std::vector<member>& ms) {
    problems.resize(ms.size());
    pages.resize(ms.size());
    kb.resize(ms.size());
    vb.resize(ms.size());
    out.resize(ms.size());
    for (std::size_t i = 0; i < ms.size(); ++i) {
      kernel_test::problem& pr = problems[i];
      pr.t_q = ms[i].t_q; pr.t_k = ms[i].t_k; pr.hq = 8; pr.hkv = 2; pr.dqk = pr.dv = 32;
      pr.fill(unsigned(100 + i));
      if (ms[i].type != storage_type::f32) {
        kb[i] = gattn::test::store_as(ms[i].type, pr.k);
        vb[i] = gattn::test::store_as(ms[i].type, pr.v);
      }
      if (ms[i].bs > 0) pages[i] = std::make_unique<kernel_test::paged_copy>(pr, ms[i].bs, unsigned(i), ms[i].type);
      out[i].assign(pr.out_size(), 0.0f);
    }
    for (std::size_t i = 0; i < ms.size(); ++i) params.push_back(make(i, ms[i].type));
  }
  gattn::sdpa_params make(std::size_t i, storage_type t) {
    auto p = problems[i].params(out[i].data());
    if (pages[i]) {
      pages[i]->apply(problems[i], p);
    } else if (t != storage_type::f32) {
      p.kv_type = t;
      p.k_bits = kb[i].data();
      p.v_bits = vb[i].data();
    }
    return p;
  }
};

const std::vector<member> mixed = {
    {1, 700, 16}, {1, 33, 0}, {2, 1200, 3}, {5, 260, 64, storage_type::bf16}, {64, 64, 0},
    {1, 1, 1},    {1, 2000, 0, storage_type::bf16}, {17, 400, 16}, {1, 0, 0},
};

template <class A>
void check_batch(const std::vector<member>& ms, const gattn::execution_context& exec, const char* what) {
  batch b(ms);
  gattn::fused_sdpa_batch<A>(b.params.data(), index(b.params.size()), exec);
  const bool one_thread_each = index(ms.size()) >= exec.concurrency();
  const auto serial = gattn::execution_context::serial();
  for (std::size_t i = 0; i < ms.size(); ++i) {
    const auto ref = b.problems[i].oracle();
    double ymax = 0;
    for (double y : ref) ymax = std::max(ymax, std::fabs(y));
    EXPECT_LE(kernel_test::max_abs_diff(b.out[i], ref), 1e-4 * ymax) << what << " problem " << i << " arch=" << A::name();
    std::vector<float> alone(b.out[i].size());
    auto p = b.params[i];
    p.out = alone.data();
    p.exec = one_thread_each ? &serial : &exec;
    gattn::fused_sdpa<A>(p);
    EXPECT_EQ(alone, b.out[i]) << what << " problem " << i << " arch=" << A::name();
  }
  batch again(ms);
  gattn::fused_sdpa_batch<A>(again.params.data(), index(again.params.size()), exec);
  for (std::size_t i = 0; i < ms.size(); ++i) EXPECT_EQ(again.out[i], b.out[i]) << what << " rerun, problem " << i;
}

TEST(KernelSdpaBatch, EachProblemAsAloneOnEveryArch) {
  kernel_test::for_each_arch([&](auto arch) {
    using A = decltype(arch);
    check_batch<A>(mixed, gattn::execution_context::with_threads(2), "9 problems, 2 threads");
    check_batch<A>(mixed, gattn::execution_context::serial(), "9 problems, serial");
    const std::vector<member> few(mixed.begin(), mixed.begin() + 3);
    check_batch<A>(few, gattn::execution_context::with_threads(4), "3 problems, 4 threads");
  });
}

TEST(KernelSdpaBatch, ValidatesEveryProblemBeforeRunningAny) {
  batch b({{1, 50, 16}, {1, 50, 0}});
  b.params[1].d_qk = 0;
  const std::vector<float> before = b.out[0];
  EXPECT_THROW(gattn::fused_sdpa_batch(b.params.data(), 2, gattn::execution_context::serial()), gattn::shape_error);
  EXPECT_EQ(b.out[0], before);
  EXPECT_THROW(gattn::fused_sdpa_batch(nullptr, 1, gattn::execution_context::serial()), gattn::shape_error);
}

}  // namespace

}  // namespace test_sdpa_batch
