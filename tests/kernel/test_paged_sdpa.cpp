// The fused kernel on paged K/V views (docs/spec.md §11): blocks in a permuted order, NaN everywhere the
// table does not point, every path (decode, interleaved, prefill units, split-KV), f32/bf16/f16,
// GQA groups and MLA's V-inside-K, on every arch: the oracle's output to 1e-4·max|y_ref|, and the
// contiguous view's output: bitwise when the block size is a multiple of the 64-key tile, else
// within 1e-5·max|y_ref| (tiles and V groups are cut at block ends, which moves the online
// softmax's rescaling points and the microkernels' partial sums).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gattn/baseline/sdpa_backend.hpp"
#include "gattn/kernel/kernel.hpp"
#include "support/kernel_sweep.hpp"
#include "support/low_precision.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_paged_sdpa {

namespace {

using gattn::index;
using gattn::storage_type;

struct paged_case {
  index t_q, t_k, hq, hkv, dqk, dv;
  bool mla = false;
};

double max_abs(const std::vector<double>& y) {
  double m = 0;
  for (double x : y) m = std::max(m, std::fabs(x));
  return m;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    m = std::max(m, std::isnan(d) ? std::numeric_limits<double>::infinity() : d);
  }
  return m;
}

void run_case(const paged_case& c, storage_type s, index bs) {
  kernel_test::problem pr;
  pr.t_q = c.t_q; pr.t_k = c.t_k; pr.hq = c.hq; pr.hkv = c.hkv; pr.dqk = c.dqk; pr.dv = c.dv;
  pr.v_aliases_k = c.mla;
  pr.k_pad = c.mla ? 3 : 0;
  pr.fill(unsigned(7 + c.t_q * 131 + c.t_k + bs));
  std::vector<std::uint16_t> kb, vb;
  if (s != storage_type::f32) {
    kb = gattn::test::store_as(s, pr.k);  // pr.k/v now hold the stored values
    vb = gattn::test::store_as(s, pr.v);
  }
  const kernel_test::paged_copy pc(pr, bs, unsigned(bs * 17 + c.t_k), s);
  const auto ref = pr.oracle();
  const double ymax = max_abs(ref);
  const std::string what = std::string(gattn::to_string(s)) + " bs=" + std::to_string(bs) + " t_q=" +
                           std::to_string(c.t_q) + " t_k=" + std::to_string(c.t_k) + " hq/hkv=" + std::to_string(c.hq) +
                           "/" + std::to_string(c.hkv) + (c.mla ? " mla" : "");
  kernel_test::for_each_arch([&](auto arch) {
    using A = decltype(arch);
    for (int th : {1, 3}) {
      std::vector<float> out(pr.out_size()), flat(pr.out_size());
      auto pf = pr.params(flat.data());
      pf.threads = th;
      if (s != storage_type::f32) {
        pf.kv_type = s;
        pf.k_bits = kb.data();
        pf.v_bits = c.mla ? kb.data() : vb.data();
      }
      gattn::fused_sdpa<A>(pf);
      auto pp = pr.params(out.data());
      pp.threads = th;
      pc.apply(pr, pp);
      gattn::fused_sdpa<A>(pp);
      const double err = kernel_test::max_abs_diff(out, ref);
      EXPECT_LE(err, 1e-4 * ymax) << what << " arch=" << A::name() << " threads=" << th;
      if (bs % 64 == 0) EXPECT_EQ(max_diff(out, flat), 0.0) << what << " arch=" << A::name() << " threads=" << th;
      else EXPECT_LE(max_diff(out, flat), 1e-5 * ymax) << what << " arch=" << A::name() << " threads=" << th;
    }
  });
}

TEST(KernelPagedSdpa, MatchesTheOracleAndTheContiguousViewOnEveryArch) {
  const paged_case cases[] = {
      {1, 300, 8, 2, 40, 40},      // decode, GQA group 4, QK tails
      {2, 77, 4, 4, 64, 64},       // decode, V read in place (fp32)
      {5, 150, 6, 3, 32, 32},      // interleaved units
      {64, 200, 4, 2, 48, 48},     // prefill units, causal diagonal across blocks
      {1, 210, 8, 1, 72, 64, true},  // MLA: V inside K, padded rows, head stride 0
      {5, 90, 4, 1, 40, 32, true},
  };
  const bool small = kernel_test::sweep() == kernel_test::sweep_size::small;
  for (const paged_case& c : cases)
    for (storage_type s : {storage_type::f32, storage_type::bf16, storage_type::f16})
      for (index bs : {1, 3, 16, 64}) {
        if (small && s != storage_type::f32 && bs != 3) continue;
        run_case(c, s, bs);
      }
}

TEST(KernelPagedSdpa, SplitKeyDecodeAndPrefillOverManyBlocks) {
  // Long enough for several key splits per thread count.
  run_case({1, 2100, 8, 2, 40, 40}, storage_type::f32, 16);
  run_case({2, 1500, 4, 1, 64, 64}, storage_type::bf16, 64);
  run_case({64, 900, 4, 2, 32, 32}, storage_type::f16, 3);
}

// The baselines behind --reference and unfused read paged and bf16/f16 views too (widened copies).
TEST(KernelPagedSdpa, BaselinesReadPagedAndLowPrecisionViews) {
  for (storage_type s : {storage_type::f32, storage_type::bf16, storage_type::f16})
    for (bool mla : {false, true}) {
      kernel_test::problem pr;
      pr.t_q = 5; pr.t_k = 50; pr.hq = 4; pr.hkv = mla ? 1 : 2; pr.dqk = 16; pr.dv = mla ? 12 : 16;
      pr.v_aliases_k = mla;
      pr.fill(3);
      if (s != storage_type::f32) {
        gattn::test::store_as(s, pr.k);
        gattn::test::store_as(s, pr.v);
      }
      const kernel_test::paged_copy pc(pr, 3, 5, s);
      const auto ref = pr.oracle();
      for (auto fn : {&gattn::reference_sdpa, &gattn::unfused_sdpa}) {
        std::vector<float> out(pr.out_size());
        auto p = pr.params(out.data());
        pc.apply(pr, p);
        fn(p);
        EXPECT_LE(kernel_test::max_abs_diff(out, ref), 1e-5 * max_abs(ref)) << gattn::to_string(s) << (mla ? " mla" : "");
      }
    }
}

TEST(KernelPagedSdpa, RefusesABadBlockSize) {
  kernel_test::problem pr;
  pr.fill(1);
  const kernel_test::paged_copy pc(pr, 4, 1);
  std::vector<float> out(pr.out_size());
  auto p = pr.params(out.data());
  pc.apply(pr, p);
  p.block_size = 0;
  try {
    gattn::fused_sdpa(p);
    FAIL() << "block_size=0 accepted";
  } catch (const gattn::shape_error& e) {
    EXPECT_NE(std::string(e.what()).find("block_size=0"), std::string::npos) << e.what();
  }
}

}  // namespace

}  // namespace test_paged_sdpa
