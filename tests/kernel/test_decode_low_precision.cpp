// The decode path on K/V stored as bf16/f16 (docs/spec.md §10, exact numerics): against the oracle fed the
// same stored values widened (1e-4·max|y_ref|), and against the fp32 kernel on those widened values
// (widening is exact and the math is the same fp32 math: 1e-6·max|y_ref|, bit for bit without a
// d % W tail), on every arch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "gattn/baseline/sdpa_backend.hpp"
#include "gattn/simd/convert.hpp"
#include "support/kernel_sweep.hpp"
#include "support/low_precision.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_decode_low_precision {

namespace {

using gattn::index;
using gattn::storage_type;

using gattn::test::store_as;

struct lp_case {
  index t_q, t_k, hq, hkv, dqk, dv;
  bool head_major = false, v_aliases_k = false;
  index k_pad = 0;
};

TEST(KernelDecodeLowPrecision, MatchesTheOracleOnTheStoredValuesOnEveryArch) {
  const lp_case cases[] = {
      {1, 2100, 8, 2, 40, 40},            // split-KV, tails of the QK microkernel
      {3, 700, 16, 1, 72, 64},            // MQA, several queries
      {1, 33, 4, 4, 64, 64},              // d a multiple of every width: fp32 reads V in place
      {2, 300, 6, 3, 59, 59, true},       // head-major [H_kv, T, D] views, odd width
      {1, 500, 8, 1, 72, 64, false, true, 5},  // MLA latent cache: V inside K, padded rows
  };
  for (const lp_case& c : cases)
    for (storage_type s : {storage_type::bf16, storage_type::f16}) {
      kernel_test::problem pr;
      pr.t_q = c.t_q; pr.t_k = c.t_k; pr.hq = c.hq; pr.hkv = c.hkv; pr.dqk = c.dqk; pr.dv = c.dv;
      pr.head_major_kv = c.head_major;
      pr.v_aliases_k = c.v_aliases_k;
      pr.k_pad = c.k_pad;
      pr.fill(31);
      const std::vector<std::uint16_t> kb = store_as(s, pr.k);
      const std::vector<std::uint16_t> vb = store_as(s, pr.v);
      const auto ref = pr.oracle();
      double ymax = 0;
      for (double y : ref) ymax = std::max(ymax, std::fabs(y));
      const std::string what = std::string(gattn::to_string(s)) + " t_q=" + std::to_string(c.t_q) +
                               " t_k=" + std::to_string(c.t_k) + " d=" + std::to_string(c.dqk);
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
          p.k = p.v = nullptr;
          gattn::fused_sdpa<A>(p);
          const auto r = kernel_test::compare(out, pr.ots, ref, pr.t_q, pr.hq, pr.dv);
          ASSERT_LE(r.max_err, 1e-4 * ymax) << what << " " << gattn::arch_name<A>() << " threads=" << th;
          // Same fp32 math up to the compiler's choice of contracting the d % W tail into FMAs;
          // without a tail, the same operations in the same order (widening in registers is exact),
          // checked on the default AVX2/AVX-512 arch (others may contract mul + add differently).
          const index w = index(gattn::simd::width<A>);
          const bool no_tail = std::is_same<A, gattn::default_arch>::value && w >= 8 && c.dqk % w == 0 && c.dv % w == 0;
          for (std::size_t i = 0; i < out.size(); ++i) {
            ASSERT_NEAR(out[i], out32[i], 1e-6 * ymax) << what << " " << gattn::arch_name<A>() << " threads=" << th << " at " << i;
            if (no_tail) {
              ASSERT_EQ(out[i], out32[i]) << what << " " << gattn::arch_name<A>() << " threads=" << th << " at " << i;
            }
          }
        }
      });
    }
}

TEST(KernelDecodeLowPrecision, BackendsReadItAndTheBitsMustBeThere) {
  kernel_test::problem pr;
  pr.t_q = 1; pr.t_k = 20; pr.hq = 4; pr.hkv = 2;
  pr.causal = false;
  pr.fill(2);
  std::vector<std::uint16_t> kb(pr.k.size()), vb(pr.v.size());
  std::vector<float> out(pr.out_size());
  auto p = pr.params(out.data());
  p.kv_type = storage_type::bf16;
  p.k_bits = kb.data();
  p.v_bits = vb.data();
  EXPECT_NO_THROW(gattn::fused_sdpa(p));
  // The baselines read bf16/f16 views too (widened copies, baseline/dense_kv.hpp): same output.
  const std::vector<float> fused = out;
  for (auto b : {gattn::sdpa_backend::reference, gattn::sdpa_backend::unfused}) {
    std::fill(out.begin(), out.end(), -1.0f);
    EXPECT_NO_THROW(gattn::sdpa_of(b)(p)) << gattn::to_string(b);
    for (std::size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], fused[i], 1e-5) << gattn::to_string(b) << " " << i;
  }
  p.v_bits = nullptr;
  EXPECT_THROW(gattn::fused_sdpa(p), gattn::shape_error);
}

}  // namespace

}  // namespace test_decode_low_precision
