// Prefill attention in fast numerics (docs/spec.md §10, kernel/prefill_bf16.hpp): Q·Kᵀ and P·V on bf16
// operands within 1e-2·max|y_ref| of the float64 oracle for GQA and MLA-like shapes (d_v != d_qk),
// causal with offsets and odd lengths, f32/bf16/f16 caches, on every arch of the binary; the
// vdpbf16ps and FMA engines bit for bit where the machine has AVX512-BF16; exact numerics unchanged;
// a hidden NaN key stays hidden.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gattn/core/cpu.hpp"
#include "gattn/kernel/decode.hpp"
#include "gattn/simd/convert.hpp"
#include "support/kernel_sweep.hpp"
#include "support/low_precision.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_prefill_bf16 {

namespace {

using gattn::index;
using gattn::storage_type;
using gattn::test::store_as;

struct fast_case {
  index t_q, t_k, hq, hkv, dqk, dv;
};

/// The kernel on pr with K/V stored as s and the given products and threads.
template <class A>
std::vector<float> run(const kernel_test::problem& pr, storage_type s, gattn::numerics products, int threads,
                       const std::vector<std::uint16_t>& kb, const std::vector<std::uint16_t>& vb) {
  std::vector<float> out(pr.out_size(), -7.0f);
  auto p = pr.params(out.data());
  p.threads = threads;
  p.products = products;
  if (s != storage_type::f32) {
    p.kv_type = s;
    p.k_bits = kb.data();
    p.v_bits = pr.v_aliases_k ? kb.data() : vb.data();
    p.k = p.v = nullptr;
  }
  gattn::fused_sdpa<A>(p);
  return out;
}

/// The stored bits of v as s (v becomes the stored values); nothing for f32.
std::vector<std::uint16_t> stored(storage_type s, std::vector<float>& v) {
  return s == storage_type::f32 ? std::vector<std::uint16_t>{} : store_as(s, v);
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double y : v) m = std::max(m, std::fabs(y));
  return m;
}

std::vector<fast_case> cases() {
  std::vector<fast_case> c = {
      {17, 17, 8, 2, 64, 64},     {130, 130, 4, 4, 128, 128}, {1, 1, 8, 1, 64, 64},     {257, 257, 2, 1, 192, 128},
      {37, 150, 16, 2, 128, 128}, {20, 90, 6, 1, 256, 256},   {9, 600, 2, 2, 64, 64},  {33, 70, 16, 1, 192, 128},
      {66, 66, 8, 8, 256, 128},   {5, 257, 16, 4, 64, 64},
  };
  if (kernel_test::sweep() == kernel_test::sweep_size::small) c.resize(4);
  return c;
}

TEST(KernelPrefillBf16, WithinTheFastToleranceOfTheOracleOnEveryArch) {
  for (const fast_case& c : cases())
    for (bool causal : {true, false})
      for (storage_type s : {storage_type::f32, storage_type::bf16, storage_type::f16}) {
        kernel_test::problem pr;
        pr.t_q = c.t_q; pr.t_k = c.t_k; pr.hq = c.hq; pr.hkv = c.hkv; pr.dqk = c.dqk; pr.dv = c.dv;
        pr.causal = causal;
        pr.fill(3 + unsigned(c.t_q));
        const std::vector<std::uint16_t> kb = stored(s, pr.k), vb = stored(s, pr.v);
        const auto ref = pr.oracle();
        const double ymax = max_abs(ref);
        const std::string what = "t_q=" + std::to_string(c.t_q) + " t_k=" + std::to_string(c.t_k) + " G=" +
                                 std::to_string(c.hq / c.hkv) + " d=" + std::to_string(c.dqk) + "/" + std::to_string(c.dv) +
                                 (causal ? " causal " : " full ") + gattn::to_string(s);
        kernel_test::for_each_arch([&](auto arch) {
          using A = decltype(arch);
          for (int th : {1, 2}) {
            const auto out = run<A>(pr, s, gattn::numerics::fast, th, kb, vb);
            const auto r = kernel_test::compare(out, pr.ots, ref, pr.t_q, pr.hq, pr.dv);
            ASSERT_LE(r.max_err, 1e-2 * ymax) << what << " " << gattn::arch_name<A>() << " threads=" << th;
          }
        });
      }
}

// The fast path really rounds (it is not the exact kernel under another name), and exact is
// untouched by the new field's default.
TEST(KernelPrefillBf16, FastDiffersFromExactAndExactIsTheDefault) {
  kernel_test::problem pr;
  pr.t_q = 70; pr.t_k = 70; pr.hq = 8; pr.hkv = 2; pr.dqk = 64; pr.dv = 64;
  pr.fill(11);
  const std::vector<std::uint16_t> none;
  std::vector<float> dflt(pr.out_size());
  auto p = pr.params(dflt.data());
  p.threads = 1;
  gattn::fused_sdpa(p);
  const auto exact = run<gattn::default_arch>(pr, storage_type::f32, gattn::numerics::exact, 1, none, none);
  const auto fast = run<gattn::default_arch>(pr, storage_type::f32, gattn::numerics::fast, 1, none, none);
  EXPECT_EQ(dflt, exact);
  EXPECT_NE(exact, fast);
}

// vdpbf16ps and the FMA engine give the same bits (no denormals in these inputs), on the prefill
// and the interleaved unit paths, with causal masks that leave odd key counts on diagonal tiles.
TEST(KernelPrefillBf16, DotProductAndFmaEnginesAgreeBitForBit) {
  if (!gattn::detail::prefill_native_bf16<gattn::default_arch>) GTEST_SKIP() << "no AVX512-BF16 in this build";
  if (!gattn::avx512_bf16_usable()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  for (const fast_case& c : cases())
    for (storage_type s : {storage_type::f32, storage_type::bf16}) {
      kernel_test::problem pr;
      pr.t_q = c.t_q; pr.t_k = c.t_k; pr.hq = c.hq; pr.hkv = c.hkv; pr.dqk = c.dqk; pr.dv = c.dv;
      pr.fill(29);
      const std::vector<std::uint16_t> kb = stored(s, pr.k), vb = stored(s, pr.v);
      gattn::set_bf16_dot_products(gattn::kernel_choice::always);
      const auto dp = run<gattn::default_arch>(pr, s, gattn::numerics::fast, 2, kb, vb);
      gattn::set_bf16_dot_products(gattn::kernel_choice::never);
      const auto fma = run<gattn::default_arch>(pr, s, gattn::numerics::fast, 2, kb, vb);
      gattn::set_bf16_dot_products(gattn::kernel_choice::automatic);
      for (std::size_t i = 0; i < dp.size(); ++i)
        ASSERT_EQ(gattn::detail::float_bits(dp[i]), gattn::detail::float_bits(fma[i]))
            << "t_q=" << c.t_q << " d=" << c.dqk << " " << gattn::to_string(s) << " at " << i;
    }
}

// MLA's latent cache: V is the first d_v channels of the K rows (aliasing), one KV head.
TEST(KernelPrefillBf16, LatentCacheWithVInsideK) {
  kernel_test::problem pr;
  pr.t_q = 45; pr.t_k = 130; pr.hq = 16; pr.hkv = 1; pr.dqk = 192; pr.dv = 128;
  pr.v_aliases_k = true;
  pr.fill(7);
  const auto ref = pr.oracle();
  const double ymax = max_abs(ref);
  for (storage_type s : {storage_type::f32, storage_type::bf16}) {
    const std::vector<std::uint16_t> kb = stored(s, pr.k);
    kernel_test::for_each_arch([&](auto arch) {
      using A = decltype(arch);
      const auto out = run<A>(pr, s, gattn::numerics::fast, 2, kb, kb);
      EXPECT_LE(kernel_test::compare(out, pr.ots, ref, pr.t_q, pr.hq, pr.dv).max_err, 1e-2 * ymax)
          << gattn::to_string(s) << " " << gattn::arch_name<A>();
    });
  }
}

// A NaN in K and V of key `bad` reaches no row that cannot see it, whatever the parity of the
// rows' visible counts on the diagonal tile (the bf16 P·V pairs keys).
TEST(KernelPrefillBf16, AHiddenNaNKeyStaysHidden) {
  for (index bad : {index(22), index(23)}) {
    kernel_test::problem pr;
    pr.t_q = 40; pr.t_k = 40; pr.hq = 4; pr.hkv = 2; pr.dqk = 32; pr.dv = 32;
    pr.fill(5);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (index r = 0; r < pr.hkv; ++r)
      for (index c = 0; c < pr.dqk; ++c) pr.k[std::size_t(bad * pr.kts + r * pr.khs + c)] = nan;
    for (index r = 0; r < pr.hkv; ++r)
      for (index c = 0; c < pr.dv; ++c) pr.v[std::size_t(bad * pr.vts + r * pr.vhs + c)] = nan;
    kernel_test::for_each_arch([&](auto arch) {
      using A = decltype(arch);
      const std::vector<std::uint16_t> none;
      const auto out = run<A>(pr, storage_type::f32, gattn::numerics::fast, 1, none, none);
      for (index i = 0; i < pr.t_q; ++i)
        for (index c = 0; c < pr.hq * pr.dv; ++c) {
          const float y = out[std::size_t(i * pr.ots + c)];
          if (i < bad) ASSERT_TRUE(std::isfinite(y)) << gattn::arch_name<A>() << " bad=" << bad << " query " << i;
          else ASSERT_TRUE(std::isnan(y)) << gattn::arch_name<A>() << " bad=" << bad << " query " << i;
        }
    });
  }
}

}  // namespace
}  // namespace test_prefill_bf16
