// Tests of gattn/baseline/unfused_sdpa.hpp, the unfused Eigen SDPA, against the float64 oracle by
// the tolerance rule of docs/testing.md: GQA groups, T_q != T_k, causal or not, strided and
// head-major views, rows that see no key (output 0, lse -inf), the log-sum-exp, every thread
// count, and the epilogue (the kernel's own code, applied after the product).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "gattn/baseline/unfused_sdpa.hpp"
#include "gattn/reference/sdpa.hpp"
#include "support/kernel_sweep.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_unfused_sdpa {

namespace {

using gattn::index;
using kernel_test::problem;

problem make(index tq, index tk, index hq, index hkv, index dqk, index dv, bool causal) {
  problem p;
  p.t_q = tq; p.t_k = tk; p.hq = hq; p.hkv = hkv; p.dqk = dqk; p.dv = dv; p.causal = causal;
  return p;
}

/// The oracle's log-sum-exp [hq][t_q] of pr.
std::vector<double> oracle_lse(const problem& pr) {
  gattn::reference::sdpa_shape s{pr.t_q, pr.t_k, pr.hq, pr.hkv, pr.dqk, pr.dv, double(pr.eff_scale()), pr.causal};
  std::vector<double> out(std::size_t(std::max<index>(pr.t_q * pr.hq * pr.dv, 1)));
  std::vector<double> lse(std::size_t(std::max<index>(pr.hq * pr.t_q, 1)));
  const auto q = pr.dense_q(), k = pr.dense_k(), v = pr.dense_v();
  gattn::reference::sdpa(s, q.data(), k.data(), v.data(), out.data(), nullptr, lse.data());
  return lse;
}

void check(problem pr, unsigned seed, int threads) {
  pr.fill(seed);
  const auto ref = pr.oracle();
  double e_base = 0;
  for (bool pre : {true, false})
    for (bool late : {true, false}) e_base = std::max(e_base, kernel_test::max_abs_diff(pr.naive32(pre, late), ref));
  std::ostringstream what;
  what << "t_q=" << pr.t_q << " t_k=" << pr.t_k << " hq=" << pr.hq << " hkv=" << pr.hkv << " dqk=" << pr.dqk
       << " dv=" << pr.dv << " causal=" << pr.causal << " head_major=" << pr.head_major_kv << " threads=" << threads;
  std::vector<float> out(pr.out_size(), -7.0f), lse(std::size_t(std::max<index>(pr.hq * pr.t_q, 1)), 7.0f);
  gattn::sdpa_params p = pr.params(out.data());
  p.lse = lse.data();
  p.threads = threads;
  gattn::unfused_sdpa(p);
  const auto r = kernel_test::compare(out, pr.ots, ref, pr.t_q, pr.hq, pr.dv);
  EXPECT_LE(r.max_err, 2 * e_base + 2 * kernel_test::ulp32(r.max_ref)) << what.str() << " e_base=" << e_base;
  EXPECT_LE(r.worst_rel, 1.0) << what.str() << " max_err=" << r.max_err;
  const auto want_lse = oracle_lse(pr);
  for (index h = 0; h < pr.hq; ++h)
    for (index i = 0; i < pr.t_q; ++i) {
      const double want = want_lse[std::size_t(h * pr.t_q + i)];
      const float got = lse[std::size_t(h * pr.t_q + i)];
      if (std::isinf(want)) {
        EXPECT_EQ(got, -std::numeric_limits<float>::infinity()) << what.str() << " h=" << h << " i=" << i;
        for (index c = 0; c < pr.dv; ++c) EXPECT_EQ(out[std::size_t(i * pr.ots + h * pr.dv + c)], 0.0f) << what.str();
      } else {
        EXPECT_NEAR(got, want, 1e-5 + 1e-5 * std::fabs(want)) << what.str() << " h=" << h << " i=" << i;
      }
    }
}

TEST(UnfusedSdpa, MatchesTheOracle) {
  // (t_q, t_k, hq, hkv, dqk, dv, causal); t_q > t_k leaves the first rows without a key.
  const std::vector<std::vector<index>> cases = {
      {1, 1, 1, 1, 8, 8, 1},      {3, 17, 6, 2, 40, 40, 1},   {17, 3, 6, 2, 24, 24, 1},  {11, 64, 4, 1, 16, 24, 0},
      {64, 65, 8, 8, 59, 59, 1},  {65, 127, 16, 4, 64, 64, 1}, {1, 129, 6, 1, 80, 80, 1}, {130, 130, 2, 1, 16, 8, 1},
      {113, 257, 28, 4, 8, 8, 0}, {2, 1025, 1, 1, 111, 96, 1}};
  unsigned seed = 1;
  for (const auto& c : cases)
    for (int threads : {1, 2}) check(make(c[0], c[1], c[2], c[3], c[4], c[5], c[6] != 0), seed++, threads);
}

TEST(UnfusedSdpa, StridedAndHeadMajorViews) {
  unsigned seed = 100;
  for (bool head_major : {false, true}) {
    problem pr = make(9, 33, 6, 2, 24, 16, true);
    pr.q_pad = 3;
    pr.k_pad = 5;
    pr.v_pad = 2;
    pr.out_pad = 7;
    pr.head_major_kv = head_major;
    check(pr, seed++, 2);
  }
}

TEST(UnfusedSdpa, AppliesTheEpilogueAfterTheProduct) {
  problem pr = make(5, 12, 4, 2, 16, 16, true);
  pr.fill(7);
  std::vector<float> norm_w(16), u(std::size_t(5 * 4 * 16));
  for (std::size_t i = 0; i < norm_w.size(); ++i) norm_w[i] = 0.5f + 0.1f * float(i);
  for (std::size_t i = 0; i < u.size(); ++i) u[i] = std::sin(float(i));
  gattn::sdpa_epilogue e;
  e.out_norm = gattn::norm_kind::rms;
  e.out_norm_weight = norm_w.data();
  e.gate_scores = u.data();
  e.gate_token_stride = 4 * 16;
  e.gate_head_stride = 16;
  std::vector<float> bare(pr.out_size()), with(pr.out_size());
  gattn::sdpa_params p = pr.params(bare.data());
  gattn::unfused_sdpa(p);
  gattn::apply_sdpa_epilogue(p, e);
  p.out = with.data();
  p.epilogue = e;
  gattn::unfused_sdpa(p);
  EXPECT_EQ(bare, with);
  // and the epilogue did something: the gated rows differ from the plain product
  std::vector<float> plain(pr.out_size());
  p.out = plain.data();
  p.epilogue = gattn::sdpa_epilogue{};
  gattn::unfused_sdpa(p);
  EXPECT_NE(plain, with);
}

}  // namespace

}  // namespace test_unfused_sdpa
