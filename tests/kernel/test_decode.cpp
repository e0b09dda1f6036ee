// Tests of the decode path of gattn::fused_sdpa (few query rows per KV head, long caches: dot
// products along d, token-row-major streaming of all KV heads, key splits merged in split order).
// Every arch the build targets against the double oracle with the tolerance rule of docs/testing.md:
// t_q in {1, 2, 3} with long t_k, G in {1, 4, 8, 16}, odd head dims, MLA 576/512 with v aliasing
// k, strided views, rows without keys, and bitwise determinism per thread count (1, 2, 3).
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>

#include "support/kernel_sweep.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_decode {

namespace {

using gattn::index;
using kernel_test::problem;

problem make(index tq, index tk, index hq, index hkv, index dqk, index dv, bool causal = true) {
  problem p;
  p.t_q = tq; p.t_k = tk; p.hq = hq; p.hkv = hkv; p.dqk = dqk; p.dv = dv; p.causal = causal;
  return p;
}

std::string describe(const problem& pr) {
  std::ostringstream s;
  s << "t_q=" << pr.t_q << " t_k=" << pr.t_k << " hq=" << pr.hq << " hkv=" << pr.hkv << " dqk=" << pr.dqk
    << " dv=" << pr.dv << " causal=" << pr.causal << " alias=" << pr.v_aliases_k;
  return s.str();
}

/// Oracle + tolerance rule on every arch and thread count; also checks that the problem really
/// takes the decode path and that reruns are bitwise identical per thread count.
void run_decode_case(problem pr, unsigned seed, const std::vector<int>& threads = {1, 2, 3}) {
  pr.fill(seed);
  {
    std::vector<float> tmp(pr.out_size());
    ASSERT_TRUE(gattn::detail::use_decode_path(pr.params(tmp.data()))) << describe(pr);
  }
  const auto ref = pr.oracle();
  double e_base = 0;
  for (bool pre : {true, false})
    for (bool late : {true, false}) e_base = std::max(e_base, kernel_test::max_abs_diff(pr.naive32(pre, late), ref));
  const std::string what = describe(pr);
  kernel_test::for_each_arch([&](auto arch) {
    using A = decltype(arch);
    for (int th : threads) {
      std::vector<float> out(pr.out_size(), -7.0f), again(pr.out_size(), -9.0f);
      auto p = pr.params(out.data());
      p.threads = th;
      gattn::fused_sdpa<A>(p);
      const auto r = kernel_test::compare(out, pr.ots, ref, pr.t_q, pr.hq, pr.dv);
      const double tol = 2 * e_base + 2 * kernel_test::ulp32(r.max_ref);
      EXPECT_LE(r.max_err, tol) << what << " arch=" << gattn::arch_name<A>() << " threads=" << th
                                << " e_base=" << e_base;
      EXPECT_LE(r.worst_rel, 1.0) << what << " arch=" << gattn::arch_name<A>() << " threads=" << th
                                  << " max_err=" << r.max_err;
      p.out = again.data();
      gattn::fused_sdpa<A>(p);
      for (index i = 0; i < pr.t_q; ++i)  // compare the written rows only (padding keeps its fill)
        ASSERT_EQ(0, std::memcmp(out.data() + i * pr.ots, again.data() + i * pr.ots,
                                 sizeof(float) * std::size_t(pr.hq * pr.dv)))
            << what << " arch=" << gattn::arch_name<A>() << " threads=" << th << " not deterministic";
    }
  });
}

// t_q in {1, 2, 3} × long t_k (block and split boundaries) × G in {1, 4, 8, 16}.
TEST(KernelDecode, QueriesGroupsLengths) {
  const auto mode = kernel_test::sweep();
  std::vector<index> lengths = {1, 31, 32, 33, 257, 1025, 4099};
  if (mode != kernel_test::sweep_size::full) lengths = {1, 33, 257, 2049};
  unsigned seed = 1000;
  for (index tq : {1, 2, 3})
    for (index g : {1, 4, 8, 16})
      for (index tk : lengths) {
        const index hkv = g == 16 ? 1 : 2;
        run_decode_case(make(tq, tk, g * hkv, hkv, 64, 64), seed++);
      }
}

// D1-like head size (128) with 8 KV heads, and odd / unaligned head dims (channel tails in the
// dot products and packed V tiles).
TEST(KernelDecode, HeadDims) {
  unsigned seed = 1100;
  run_decode_case(make(1, 3000, 32, 8, 128, 128), seed++);
  run_decode_case(make(2, 700, 32, 8, 128, 128), seed++);
  for (index d : {8, 24, 59, 80, 111})
    for (index tq : {1, 3}) run_decode_case(make(tq, 1500, 8, 2, d, d), seed++);
  run_decode_case(make(2, 900, 12, 3, 40, 24), seed++);  // d_qk != d_v
}

// MLA absorbed decode: 16 heads on one latent KV head, d_qk 576, d_v 512 aliasing k.
TEST(KernelDecode, MlaAliasing) {
  const auto mode = kernel_test::sweep();
  unsigned seed = 1200;
  for (index tq : {1, 2, 3}) {
    problem pr = make(tq, mode == kernel_test::sweep_size::small ? 300 : 2049, 16, 1, 576, 512);
    pr.v_aliases_k = true;
    run_decode_case(pr, seed++);
  }
  problem pr = make(1, 777, 16, 1, 576, 512);  // not aliased
  run_decode_case(pr, seed++);
}

// Strided views, non-causal, and causal rows that see no key (t_q > t_k).
TEST(KernelDecode, StridedNonCausalAndEmptyRows) {
  unsigned seed = 1300;
  problem s = make(3, 2500, 16, 4, 64, 64);
  s.q_pad = 5; s.k_pad = 3; s.v_pad = 7; s.out_pad = 11;
  run_decode_case(s, seed++);
  run_decode_case(make(2, 1000, 8, 2, 40, 40, false), seed++);
  run_decode_case(make(3, 1, 8, 2, 24, 24), seed++);
  run_decode_case(make(3, 2, 4, 1, 24, 24), seed++);

  // Rows without keys: output exactly 0 and lse = -inf; others finite.
  for (auto [tq, tk] : std::vector<std::pair<index, index>>{{3, 1}, {2, 0}, {3, 0}}) {
    problem pr = make(tq, tk, 8, 2, 24, 24);
    pr.fill(seed++);
    kernel_test::for_each_arch([&](auto arch) {
      for (int th : {1, 2, 3}) {
        std::vector<float> out(pr.out_size(), 99.0f), lse(std::size_t(pr.hq * pr.t_q), 5.0f);
        auto p = pr.params(out.data());
        p.lse = lse.data();
        p.threads = th;
        gattn::fused_sdpa<decltype(arch)>(p);
        for (index i = 0; i < tq; ++i)
          for (index h = 0; h < pr.hq; ++h) {
            const bool none = i + tk - tq + 1 <= 0;
            for (index c = 0; c < pr.dv; ++c) {
              const float o = out[std::size_t(i * pr.ots + h * pr.dv + c)];
              if (none) ASSERT_EQ(o, 0.0f);
              else ASSERT_TRUE(std::isfinite(o));
            }
            const float l = lse[std::size_t(h * tq + i)];
            if (none) ASSERT_EQ(l, -std::numeric_limits<float>::infinity());
            else ASSERT_TRUE(std::isfinite(l));
          }
      }
    });
  }
}

// lse of the decode path (split merge included) against a double computation.
TEST(KernelDecode, LogSumExpAcrossSplits) {
  problem pr = make(2, 5000, 8, 2, 40, 40);
  pr.fill(1400);
  const auto dq = pr.dense_q(), dk = pr.dense_k();
  const index g = pr.hq / pr.hkv;
  std::vector<double> ref(std::size_t(pr.hq * pr.t_q));
  for (index h = 0; h < pr.hq; ++h)
    for (index i = 0; i < pr.t_q; ++i) {
      const index vis = std::min(pr.t_k, i + pr.t_k - pr.t_q + 1);
      std::vector<double> sc(static_cast<std::size_t>(vis));
      double m = -1e300, s = 0;
      for (index j = 0; j < vis; ++j) {
        double d = 0;
        for (index c = 0; c < pr.dqk; ++c)
          d += double(dq[std::size_t((i * pr.hq + h) * pr.dqk + c)]) * dk[std::size_t((j * pr.hkv + h / g) * pr.dqk + c)];
        sc[std::size_t(j)] = d * pr.eff_scale();
        m = std::max(m, sc[std::size_t(j)]);
      }
      for (double x : sc) s += std::exp(x - m);
      ref[std::size_t(h * pr.t_q + i)] = m + std::log(s);
    }
  kernel_test::for_each_arch([&](auto arch) {
    for (int th : {1, 2, 3}) {
      std::vector<float> out(pr.out_size()), lse(ref.size());
      auto p = pr.params(out.data());
      p.lse = lse.data();
      p.threads = th;
      gattn::fused_sdpa<decltype(arch)>(p);
      for (std::size_t x = 0; x < ref.size(); ++x) ASSERT_NEAR(lse[x], ref[x], 2e-5 * (1 + std::fabs(ref[x])));
    }
  });
}

// Thread counts 1/2/3: bitwise identical over repeated calls (and a large D1-like shape).
TEST(KernelDecode, DeterministicPerThreadCount) {
  std::vector<problem> probs = {make(1, 8192, 32, 8, 128, 128), make(3, 4000, 16, 4, 64, 64)};
  problem mla = make(2, 3000, 16, 1, 576, 512);
  mla.v_aliases_k = true;
  probs.push_back(mla);
  unsigned seed = 1500;
  for (problem& pr : probs) {
    pr.fill(seed++);
    for (int th : {1, 2, 3}) {
      std::vector<float> a(pr.out_size()), b(pr.out_size());
      auto p = pr.params(a.data());
      p.threads = th;
      gattn::fused_sdpa(p);
      for (int rep = 0; rep < 3; ++rep) {
        p.out = b.data();
        gattn::fused_sdpa(p);
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << describe(pr) << " threads=" << th;
      }
    }
  }
}

}  // namespace

}  // namespace test_decode
