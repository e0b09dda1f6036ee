// The unit paths of the fused kernel (prefill, chunked prefill, interleaved few-row units, key
// splits) on K/V stored as bf16/f16 (docs/spec.md §10, exact numerics): each tile is widened into the
// unit's scratch, so the kernel must match the oracle fed the widened stored values
// (1e-4·max|y_ref|) and the fp32 kernel on those values (same fp32 math), on every arch; a NaN
// in a key the causal mask hides stays out of every row that cannot see it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gattn/kernel/decode.hpp"
#include "gattn/simd/convert.hpp"
#include "support/kernel_sweep.hpp"
#include "support/low_precision.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_prefill_low_precision {

namespace {

using gattn::index;
using gattn::storage_type;

using gattn::test::store_as;

struct lp_case {
  const char* what;
  index t_q, t_k, hq, hkv, dqk, dv;
  bool head_major = false, v_aliases_k = false;
  index k_pad = 0;
};

TEST(KernelPrefillLowPrecision, MatchesTheOracleOnTheStoredValuesOnEveryArch) {
  const lp_case cases[] = {
      {"prefill", 70, 70, 4, 2, 40, 40},                     // d tails, several query blocks
      {"chunked prefill", 37, 150, 8, 2, 64, 64},           // t_q < t_k: bottom-right causal
      {"interleaved", 9, 600, 2, 2, 32, 32},                 // G·br <= 2W: interleaved units, key splits
      {"MQA head-major", 20, 90, 6, 1, 59, 59, true},        // [H_kv, T, D] views, odd width
      {"MLA latent", 12, 260, 8, 1, 72, 64, false, true, 5},  // V inside K, padded rows
  };
  for (const lp_case& c : cases)
    for (storage_type s : {storage_type::bf16, storage_type::f16}) {
      kernel_test::problem pr;
      pr.t_q = c.t_q; pr.t_k = c.t_k; pr.hq = c.hq; pr.hkv = c.hkv; pr.dqk = c.dqk; pr.dv = c.dv;
      pr.head_major_kv = c.head_major;
      pr.v_aliases_k = c.v_aliases_k;
      pr.k_pad = c.k_pad;
      pr.fill(17);
      const std::vector<std::uint16_t> kb = store_as(s, pr.k);
      const std::vector<std::uint16_t> vb = store_as(s, pr.v);
      ASSERT_FALSE(gattn::detail::use_decode_path(pr.params(nullptr))) << c.what;
      const auto ref = pr.oracle();
      double ymax = 0;
      for (double y : ref) ymax = std::max(ymax, std::fabs(y));
      const std::string what = std::string(c.what) + " " + gattn::to_string(s);
      kernel_test::for_each_arch([&](auto arch) {
        using A = decltype(arch);
        for (int th : {1, 2}) {
          std::vector<float> out(pr.out_size()), out32(pr.out_size());
          auto p32 = pr.params(out32.data());
          p32.threads = th;
          gattn::fused_sdpa<A>(p32);
          auto p = pr.params(out.data());
          p.threads = th;
          p.kv_type = s;
          p.k_bits = kb.data();
          p.v_bits = c.v_aliases_k ? kb.data() : vb.data();
          p.k = p.v = nullptr;  // nothing may read a float K/V
          gattn::fused_sdpa<A>(p);
          const auto r = kernel_test::compare(out, pr.ots, ref, pr.t_q, pr.hq, pr.dv);
          ASSERT_LE(r.max_err, 1e-4 * ymax) << what << " " << gattn::arch_name<A>() << " threads=" << th;
          for (std::size_t i = 0; i < out.size(); ++i)
            ASSERT_NEAR(out[i], out32[i], 1e-6 * ymax) << what << " " << gattn::arch_name<A>() << " threads=" << th << " at " << i;
        }
      });
    }
}

// A NaN in V of key j reaches no row that cannot see j: the widened tile keeps the
// kernel's masked P·V on diagonal tiles.
TEST(KernelPrefillLowPrecision, AHiddenNaNKeyStaysHidden) {
  for (storage_type s : {storage_type::bf16, storage_type::f16}) {
    kernel_test::problem pr;
    pr.t_q = 40; pr.t_k = 40; pr.hq = 4; pr.hkv = 2; pr.dqk = 32; pr.dv = 32;
    pr.fill(5);
    const index bad = 23;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (index r = 0; r < pr.hkv; ++r)
      for (index c = 0; c < pr.dv; ++c) pr.v[std::size_t(bad * pr.vts + r * pr.vhs + c)] = nan;
    const std::vector<std::uint16_t> kb = store_as(s, pr.k);
    const std::vector<std::uint16_t> vb = store_as(s, pr.v);
    kernel_test::for_each_arch([&](auto arch) {
      using A = decltype(arch);
      std::vector<float> out(pr.out_size());
      auto p = pr.params(out.data());
      p.kv_type = s;
      p.k_bits = kb.data();
      p.v_bits = vb.data();
      p.k = p.v = nullptr;
      gattn::fused_sdpa<A>(p);
      for (index i = 0; i < pr.t_q; ++i)
        for (index c = 0; c < pr.hq * pr.dv; ++c) {
          const float y = out[std::size_t(i * pr.ots + c)];
          if (i < bad) ASSERT_TRUE(std::isfinite(y)) << gattn::arch_name<A>() << " query " << i << " channel " << c;
          else ASSERT_TRUE(std::isnan(y)) << gattn::arch_name<A>() << " query " << i << " channel " << c;
        }
    });
  }
}

}  // namespace

}  // namespace test_prefill_low_precision
