// docs/spec.md §10 `fast` numerics on a bf16 cache (decode path): within 1e-2·max|y_ref| of the float64
// oracle on every arch (archs without bf16 dot products run exact), and on AVX512-BF16 it really
// rounds scale·q and the probabilities to bf16: it matches a float64 emulation of that arithmetic
// far better than the exact path does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>

#include "gattn/core/cpu.hpp"
#include "gattn/kernel/fused_sdpa.hpp"
#include "gattn/simd/bf16_dot.hpp"
#include "gattn/simd/convert.hpp"
#include "support/kernel_sweep.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_decode_bf16_dot {

namespace {

using gattn::index;

// One query row per head, t_k keys, [T, H_kv, D] bf16 cache (values already bf16).
struct fast_case {
  index t_k = 300, hq = 4, hkv = 2, d = 72, dv = 64;
  std::vector<float> q;              // [hq, d]
  std::vector<std::uint16_t> k, v;   // [t_k, hkv, d] and [t_k, hkv, dv]
  float scale = 0.0f;

  explicit fast_case(unsigned seed, index t_k_ = 300, index d_ = 72, index dv_ = 64) : t_k(t_k_), d(d_), dv(dv_) {
    std::mt19937 g(seed);
    std::normal_distribution<float> n(0.0f, 1.0f);
    q.resize(std::size_t(hq * d));
    for (float& x : q) x = 2.0f * n(g);
    k.resize(std::size_t(t_k * hkv * d));
    v.resize(std::size_t(t_k * hkv * dv));
    for (auto& x : k) x = gattn::round_to_bf16(n(g));
    for (auto& x : v) x = gattn::round_to_bf16(n(g));
    scale = 1.0f / std::sqrt(float(d));
  }
  double kv(const std::vector<std::uint16_t>& a, index dd, index j, index r, index c) const {
    return gattn::bf16_to_float(a[std::size_t((j * hkv + r) * dd + c)]);
  }
  gattn::sdpa_params params(float* out, gattn::kv_numerics numerics) const {
    gattn::sdpa_params p;
    p.t_q = 1; p.t_k = t_k; p.q_heads = hq; p.kv_heads = hkv; p.d_qk = d; p.d_v = dv;
    p.q = q.data(); p.q_token_stride = hq * d; p.q_head_stride = d;
    p.kv_type = gattn::storage_type::bf16;
    p.k_bits = k.data(); p.k_token_stride = hkv * d; p.k_head_stride = d;
    p.v_bits = v.data(); p.v_token_stride = hkv * dv; p.v_head_stride = dv;
    p.out = out; p.out_token_stride = hq * dv; p.out_head_stride = dv;
    p.scale = scale;
    p.numerics = numerics;
    p.threads = 1;
    return p;
  }
  // float64 attention; Emulate: bf16(scale·q), and the probabilities of each 32-key block rounded
  // to bf16 against the running maximum (l from the unrounded ones), as the kernel does.
  std::vector<double> oracle(bool emulate) const {
    std::vector<double> y(std::size_t(hq * dv));
    const index g = hq / hkv;
    for (index h = 0; h < hq; ++h) {
      const index r = h / g;
      std::vector<double> s(static_cast<std::size_t>(t_k));
      for (index j = 0; j < t_k; ++j) {
        double acc = 0;
        for (index c = 0; c < d; ++c) {
          const float sq = q[std::size_t(h * d + c)] * scale;
          acc += (emulate ? double(gattn::bf16_to_float(gattn::round_to_bf16(sq))) : double(sq)) * kv(k, d, j, r, c);
        }
        s[std::size_t(j)] = acc;
      }
      double m = -INFINITY, l = 0;
      std::vector<double> o(std::size_t(dv), 0.0);
      const index bc = emulate ? 32 : t_k;
      for (index j0 = 0; j0 < t_k; j0 += bc) {
        const index j1 = std::min(t_k, j0 + bc);
        const double m_new = std::max(m, *std::max_element(s.begin() + j0, s.begin() + j1));
        const double alpha = std::exp(m - m_new);
        l *= alpha;
        for (double& x : o) x *= alpha;
        for (index j = j0; j < j1; ++j) {
          const double e = std::exp(s[std::size_t(j)] - m_new);
          l += e;
          const double pe = emulate ? double(gattn::bf16_to_float(gattn::round_to_bf16(float(e)))) : e;
          for (index c = 0; c < dv; ++c) o[std::size_t(c)] += pe * kv(v, dv, j, r, c);
        }
        m = m_new;
      }
      for (index c = 0; c < dv; ++c) y[std::size_t(h * dv + c)] = o[std::size_t(c)] / l;
    }
    return y;
  }
};

// Forces a vendor-dependent kernel choice (core/cpu.hpp) for one scope: the tests below must see
// the bf16 dot products on every CPU that has them, and automatic turns them off on Intel.
struct forced_choice {
  void (*set)(gattn::kernel_choice);
  forced_choice(void (*s)(gattn::kernel_choice), gattn::kernel_choice c) : set(s) { set(c); }
  ~forced_choice() { set(gattn::kernel_choice::automatic); }
  forced_choice(const forced_choice&) = delete;
  forced_choice& operator=(const forced_choice&) = delete;
};

double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double x : a) m = std::max(m, std::fabs(x));
  return m;
}
double max_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

TEST(KernelDecodeFastNumerics, MatchesTheOracleToSpecToleranceOnEveryArch) {
  // d and d_v: multiples of 32, odd tails of the 32-channel steps, < 16 channels in the last step.
  for (auto [t_k, d, dv] : {std::tuple<index, index, index>{300, 72, 64}, {2100, 128, 128}, {77, 40, 50}, {33, 576, 512}}) {
    const fast_case fc(7, t_k, d, dv);
    const forced_choice dots(&gattn::set_bf16_dot_products, gattn::kernel_choice::always);
    const std::vector<double> ref = fc.oracle(false);
    const double ymax = max_abs(ref);
    kernel_test::for_each_arch([&](auto arch) {
      using A = decltype(arch);
      for (int th : {1, 2}) {
        std::vector<float> out(ref.size());
        auto p = fc.params(out.data(), gattn::kv_numerics::fast);
        p.threads = th;
        gattn::fused_sdpa<A>(p);
        const double err = max_diff(out, ref) / ymax;
        EXPECT_LE(err, 1e-2) << gattn::arch_name<A>() << " t_k=" << t_k << " d=" << d << " threads=" << th;
        if (th == 1)
          std::cout << "[ fast ] " << gattn::arch_name<A>() << " t_k=" << t_k << " d=" << d << " d_v=" << dv
                    << (gattn::simd::has_bf16_dot<A> && gattn::bf16_dot_products_wanted() ? " bf16 dot" : " exact fallback") << ": max err " << err
                    << " of max|y_ref|\n";
      }
    });
  }
}

TEST(KernelDecodeFastNumerics, TakesTheBf16DotProductsWhereTheCpuHasThem) {
  using A = gattn::default_arch;
  if constexpr (!gattn::simd::has_bf16_dot<A>) {
    GTEST_SKIP() << "no AVX512-BF16 in this build (" << gattn::arch_name<A>() << "): fast runs exact";
  } else {
    if (!gattn::avx512_bf16_usable()) GTEST_SKIP() << "this CPU has no AVX512-BF16: fast runs exact";
    const fast_case fc(11, 300, 72, 64);
    const forced_choice dots(&gattn::set_bf16_dot_products, gattn::kernel_choice::always);
    const std::vector<double> emu = fc.oracle(true), ref = fc.oracle(false);
    const double ymax = max_abs(ref);
    std::vector<float> fast(ref.size()), exact(ref.size());
    gattn::fused_sdpa<A>(fc.params(fast.data(), gattn::kv_numerics::fast));
    gattn::fused_sdpa<A>(fc.params(exact.data(), gattn::kv_numerics::exact));
    const double fast_emu = max_diff(fast, emu) / ymax, exact_emu = max_diff(exact, emu) / ymax;
    const double fast_ref = max_diff(fast, ref) / ymax;
    std::cout << "[ fast ] vs bf16 emulation " << fast_emu << ", exact vs emulation " << exact_emu
              << ", fast vs oracle " << fast_ref << " (of max|y_ref|)\n";
    EXPECT_LT(fast_emu, 2e-5);
    EXPECT_GT(exact_emu, 20 * fast_emu);
    EXPECT_GT(fast_ref, 1e-4);  // the rounding shows: fast did not run the exact path
  }
}

TEST(KernelDecodeFastNumerics, HiddenKeysStayOutOfTheDotProducts) {
  // Causal decode of 3 queries: query 0 sees keys 0..62, query 1 also 63, query 2 all 65. A NaN
  // V at key 63 must not reach query 0 (0·NaN), though it shares a key pair with key 62.
  fast_case fc(5, 65, 64, 64);
  std::vector<float> out(std::size_t(3 * fc.hq * fc.dv));
  std::vector<float> q3(std::size_t(3 * fc.hq * fc.d));
  for (std::size_t i = 0; i < q3.size(); ++i) q3[i] = fc.q[i % fc.q.size()];
  const forced_choice dots(&gattn::set_bf16_dot_products, gattn::kernel_choice::always);
  for (index c = 0; c < fc.dv; ++c)
    for (index r = 0; r < fc.hkv; ++r) fc.v[std::size_t(((fc.t_k - 2) * fc.hkv + r) * fc.dv + c)] = 0x7FC0;  // NaN
  kernel_test::for_each_arch([&](auto arch) {
    using A = decltype(arch);
    auto p = fc.params(out.data(), gattn::kv_numerics::fast);
    p.t_q = 3;
    p.q = q3.data();
    p.causal = true;
    gattn::fused_sdpa<A>(p);
    for (index i = 0; i < 3; ++i)
      for (index x = 0; x < fc.hq * fc.dv; ++x) {
        const float y = out[std::size_t(i * fc.hq * fc.dv + x)];
        if (i == 0) EXPECT_TRUE(std::isfinite(y)) << gattn::arch_name<A>() << " query " << i;
        else EXPECT_TRUE(std::isnan(y)) << gattn::arch_name<A>() << " query " << i;
      }
  });
}

TEST(KernelDecodeFastNumerics, WithoutTheDotProductsFastIsExactBitForBit) {
  // kernel_choice::never (automatic on Intel): fast numerics run the exact path, every bit.
  const fast_case fc(13, 300, 72, 64);
  const forced_choice dots(&gattn::set_bf16_dot_products, gattn::kernel_choice::never);
  kernel_test::for_each_arch([&](auto arch) {
    using A = decltype(arch);
    for (int th : {1, 2}) {
      std::vector<float> fast(std::size_t(fc.hq * fc.dv)), exact(fast.size());
      auto pf = fc.params(fast.data(), gattn::kv_numerics::fast), pe = fc.params(exact.data(), gattn::kv_numerics::exact);
      pf.threads = pe.threads = th;
      gattn::fused_sdpa<A>(pf);
      gattn::fused_sdpa<A>(pe);
      EXPECT_EQ(0, std::memcmp(fast.data(), exact.data(), fast.size() * sizeof(float)))
          << gattn::arch_name<A>() << " threads=" << th;
    }
  });
}

TEST(KernelDecodePrefetch, OnAndOffGiveTheSameBits) {
  // The software prefetch (automatic: not on Intel) is a hint: the output cannot depend on it.
  for (auto numerics : {gattn::kv_numerics::exact, gattn::kv_numerics::fast}) {
    const fast_case fc(17, 2100, 128, 128);
    kernel_test::for_each_arch([&](auto arch) {
      using A = decltype(arch);
      std::vector<float> on(std::size_t(fc.hq * fc.dv)), off(on.size());
      {
        const forced_choice pf(&gattn::set_decode_prefetch, gattn::kernel_choice::always);
        gattn::fused_sdpa<A>(fc.params(on.data(), numerics));
      }
      {
        const forced_choice pf(&gattn::set_decode_prefetch, gattn::kernel_choice::never);
        gattn::fused_sdpa<A>(fc.params(off.data(), numerics));
      }
      EXPECT_EQ(0, std::memcmp(on.data(), off.data(), on.size() * sizeof(float))) << gattn::arch_name<A>();
    });
  }
}

}  // namespace

}  // namespace test_decode_bf16_dot
