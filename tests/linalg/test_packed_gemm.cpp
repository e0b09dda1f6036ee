// The cache-blocked GEMM for many rows (linalg/packed_gemm.hpp) on every arch of the binary,
// f32/bf16/f16: against double-precision dot products, across register-block, tile, k-block and
// chunk edges; and every output bit for bit the in-order fp32 FMA chain over k that the header
// promises, whatever the split. Its bf16-operand engines (packed_gemm_fast.hpp): within the
// `fast` tolerance of the exact product, bit for bit the chain of pairs (odd half first) on the
// bf16-rounded operands, and vdpbf16ps equal to the FMA engine where the build has AVX512-BF16
// (BFDOT on AArch64: the tolerance only).
#include <cmath>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "gattn/linalg/packed_gemm.hpp"
#include "gattn/linalg/packed_gemm_fast.hpp"
#include "gattn/simd/convert.hpp"
#include "support/kernel_sweep.hpp"
#include "support/linalg.hpp"

namespace gattn {
// Named, not anonymous: the test target is built as a few unity translation units.
namespace test_packed_gemm {

using linalg_test::all_types;
using linalg_test::dot_result;
using linalg_test::random_vector;
using linalg_test::reference_dot;
using linalg_test::stored_weight;

struct shape {
  index rows, count, in;
};

/// Runs detail::packed_gemm<A> on one shape and checks every output against double (and, with
/// `exact`, against the in-order FMA chain bit for bit).
template <class A>
void check(storage_type type, shape s, bool exact) {
  const index x_stride = s.in + 3, y_stride = s.count + 2;
  const stored_weight w(type, s.count, s.in, 2, unsigned(s.in + s.rows + s.count));
  const weight_view v = w.view();
  const auto x = random_vector(std::size_t(s.rows * x_stride), 5);
  std::vector<float> y(std::size_t(s.rows * y_stride), -99.0f);
  detail::packed_gemm<A>(type, v.data(), v.row_stride() * storage_bytes(type), s.count, x.data(), x_stride, s.rows, s.in,
                         y.data(), y_stride, v.scales());
  for (index m = 0; m < s.rows; ++m) {
    for (index n = 0; n < s.count; ++n) {
      const float got = y[std::size_t(m * y_stride + n)];
      const float* xr = x.data() + m * x_stride;
      const dot_result want = reference_dot(s.in, [&](index k) { return v.at(n, k); }, xr);
      ASSERT_NEAR(got, want.sum, 3e-6 * want.magnitude + 1e-30)
          << A::name() << " " << to_string(type) << " rows " << s.rows << " count " << s.count << " in " << s.in
          << " at " << m << ", " << n;
      if (!exact) continue;
      float chain = 0.0f;
      for (index k = 0; k < s.in; ++k) chain = std::fma(xr[k], v.at(n, k), chain);
      ASSERT_EQ(got, chain) << A::name() << " " << to_string(type) << " at " << m << ", " << n;
    }
    for (index n = s.count; n < y_stride; ++n) ASSERT_EQ(y[std::size_t(m * y_stride + n)], -99.0f) << "wrote past count";
  }
}

TEST(LinalgPackedGemm, MatchesDoubleAndTheInOrderChainOnEveryArch) {
  // SSE4.2 has no FMA instruction: xsimd's fma is a·b + c there, which GCC may contract into an
  // FMA at some call sites, so only its accuracy is checked.
  kernel_test::for_each_arch([](auto arch) {
    using A = decltype(arch);
    const bool exact = !std::is_same<A, xsimd::sse4_2>::value;
    const index tile = detail::pgemm_tile_cols, kc = detail::pgemm_kc, chunk = detail::pgemm_chunk;
    const shape shapes[] = {{1, 1, 1},          {3, 5, 7},           {33, 31, 17},   {5, tile + 9, kc + 37},
                            {chunk + 7, 19, 45}, {70, 2 * tile, 2 * kc}};
    // The small sweep (qemu, sanitizers) leaves out the largest shape; {5, tile + 9, kc + 37} still
    // crosses a tile and a k-block.
    const std::size_t n = kernel_test::sweep() == kernel_test::sweep_size::small ? 5 : 6;
    for (storage_type type : all_types)
      for (std::size_t i = 0; i < n; ++i) check<A>(type, shapes[i], exact);
  });
}

/// The fast engine's promised arithmetic for one output: over the pairs in order, the odd half's
/// product then the even half's, each an fp32 FMA on bf16-rounded values.
float fast_chain(const float* x, const weight_view& v, index n, index in) {
  auto r = [](float f) { return bf16_to_float(round_to_bf16(f)); };
  float s = 0.0f;
  for (index k = 0; k < in; k += 2) {
    if (k + 1 < in) s = std::fma(r(x[k + 1]), r(v.at(n, k + 1)), s);
    s = std::fma(r(x[k]), r(v.at(n, k)), s);
  }
  return s;
}

template <class A, bool Native>
void check_fast(storage_type type, shape s, bool exact) {
  const index x_stride = s.in + 1, y_stride = s.count + 3;
  const stored_weight w(type, s.count, s.in, 1, unsigned(2 * s.in + s.rows));
  const weight_view v = w.view();
  const auto x = random_vector(std::size_t(s.rows * x_stride), 8);
  std::vector<float> y(std::size_t(s.rows * y_stride), -99.0f);
  detail::packed_gemm_fast<A, Native>(type, v.data(), v.row_stride() * storage_bytes(type), s.count, x.data(), x_stride,
                                      s.rows, s.in, y.data(), y_stride, v.scales());
  std::vector<double> want(std::size_t(s.rows * s.count));
  double scale = 0.0;
  for (index m = 0; m < s.rows; ++m)
    for (index n = 0; n < s.count; ++n) {
      const dot_result d = reference_dot(s.in, [&](index k) { return v.at(n, k); }, x.data() + m * x_stride);
      want[std::size_t(m * s.count + n)] = d.sum;
      scale = std::max(scale, std::abs(d.sum));
    }
  for (index m = 0; m < s.rows; ++m) {
    for (index n = 0; n < s.count; ++n) {
      const float got = y[std::size_t(m * y_stride + n)];
      ASSERT_NEAR(got, want[std::size_t(m * s.count + n)], 1e-2 * scale)
          << A::name() << " " << to_string(type) << " rows " << s.rows << " count " << s.count << " in " << s.in;
      if (exact) {
        ASSERT_EQ(got, fast_chain(x.data() + m * x_stride, v, n, s.in)) << A::name() << " at " << m << ", " << n;
      }
    }
    ASSERT_EQ(y[std::size_t(m * y_stride + s.count)], -99.0f) << "wrote past count";
  }
}

TEST(LinalgPackedGemm, FastEnginesMeetTheFastToleranceAndTheirPairChain) {
  // Random normal operands: no denormal arises, where vdpbf16ps (which flushes them) and the FMA
  // engine could differ.
  kernel_test::for_each_arch([](auto arch) {
    using A = decltype(arch);
    const bool exact = !std::is_same<A, xsimd::sse4_2>::value;
    const index tile = detail::pgemm_tile_cols, kc = detail::pgemm_kc, chunk = detail::pgemm_chunk;
    const shape shapes[] = {{1, 1, 1}, {3, 5, 7}, {33, 31, 17}, {5, tile + 9, kc + 37}, {chunk + 7, 19, 45}};
    for (storage_type type : all_types)
      for (const shape& s : shapes) {
        check_fast<A, false>(type, s, exact);
        // BFDOT (AArch64) rounds in its own way: only the tolerance there.
        if constexpr (detail::pgemm_native_bf16<A>)
          if (detail::pgemm_native_bf16_runs<A>()) check_fast<A, true>(type, s, exact && !std::is_same<A, xsimd::neon64>::value);
      }
  });
}

}  // namespace test_packed_gemm
}  // namespace gattn
