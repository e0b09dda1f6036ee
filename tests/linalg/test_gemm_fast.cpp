// The small GEMM's `fast` numerics (linalg/gemm_fast.hpp) on every arch of the binary, bf16 weights:
// 1 to 64 rows of x (and a chunk past them), odd `in`, passes and staging-panel edges, within the fast
// tolerance of double dot products; vdpbf16ps bit for bit the FMA engine where the build has
// AVX512-BF16; linear_map's fast small GEMM is that product and its exact one is unchanged.
#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "gattn/linalg/gemm.hpp"
#include "gattn/linalg/gemm_fast.hpp"
#include "gattn/linalg/linear_map.hpp"
#include "support/kernel_sweep.hpp"
#include "support/linalg.hpp"

namespace gattn {
// Named, not anonymous: the test target is built as a few unity translation units.
namespace test_gemm_fast {

using linalg_test::random_vector;
using linalg_test::reference_dot;
using linalg_test::stored_weight;

struct shape {
  index rows, count, in;
};

/// y of detail::gemm_fast_rows<A, Native> for one shape (row strides padded, -99 elsewhere).
template <class A, bool Native>
std::vector<float> run(const stored_weight& w, const std::vector<float>& x, index x_stride, shape s, index y_stride) {
  const weight_view v = w.view();
  std::vector<float> y(std::size_t(s.rows * y_stride), -99.0f);
  detail::gemm_fast_rows<A, Native>(v.data(), v.row_stride() * 2, s.count, x.data(), x_stride, s.rows, s.in, y.data(),
                                    y_stride);
  return y;
}

/// The FMA engine against double within 1e-2·max|y|, and vdpbf16ps against it bit for bit.
template <class A>
void check(shape s) {
  const index x_stride = s.in + 3, y_stride = s.count + 2;
  const stored_weight w(storage_type::bf16, s.count, s.in, 1, unsigned(s.in + 7 * s.rows + s.count));
  const weight_view v = w.view();
  const auto x = random_vector(std::size_t(s.rows * x_stride), unsigned(11 + s.rows));
  const std::vector<float> y = run<A, false>(w, x, x_stride, s, y_stride);
  std::vector<double> want(std::size_t(s.rows * s.count));
  double scale = 0.0;
  for (index m = 0; m < s.rows; ++m)
    for (index n = 0; n < s.count; ++n) {
      const double d = reference_dot(s.in, [&](index k) { return v.at(n, k); }, x.data() + m * x_stride).sum;
      want[std::size_t(m * s.count + n)] = d;
      scale = std::max(scale, std::abs(d));
    }
  for (index m = 0; m < s.rows; ++m) {
    for (index n = 0; n < s.count; ++n)
      ASSERT_NEAR(y[std::size_t(m * y_stride + n)], want[std::size_t(m * s.count + n)], 1e-2 * scale)
          << A::name() << " rows " << s.rows << " count " << s.count << " in " << s.in << " at " << m << ", " << n;
    for (index n = s.count; n < y_stride; ++n) ASSERT_EQ(y[std::size_t(m * y_stride + n)], -99.0f) << "wrote past count";
  }
  if constexpr (detail::pgemm_native_bf16<A>) {
    if (!detail::pgemm_native_bf16_runs<A>()) return;  // the build has the engine, the CPU not
    // Random normal operands: no denormal arises, where vdpbf16ps (which flushes them) could differ.
    const std::vector<float> yd = run<A, true>(w, x, x_stride, s, y_stride);
    ASSERT_EQ(std::memcmp(y.data(), yd.data(), y.size() * sizeof(float)), 0)
        << A::name() << " rows " << s.rows << " count " << s.count << " in " << s.in << ": the engines differ";
  }
}

TEST(LinalgGemmFast, EveryRowCountMeetsTheFastToleranceAndTheEnginesAgree) {
  kernel_test::for_each_arch([](auto arch) {
    using A = decltype(arch);
    for (index rows = 1; rows <= detail::gemm_max_x_rows; ++rows) check<A>({rows, 13, 67});
    const index panel = detail::gemm_out_cols, pass = detail::gemm_pass;
    const shape edges[] = {{1, 1, 1},  {3, 7, 31},           {4, panel + 5, 97},          {7, 9, 64},
                           {33, 19, 5}, {5, 11, pass + 45}, {detail::gemm_max_x_rows + 7, 8, 33}};
    for (const shape& s : edges) check<A>(s);
  });
}

/// linear_map over bf16 weights: `fast` with 3-64 rows is gemm_fast_packed (the engine core/cpu.hpp
/// picks), and `exact` stays within fp32 rounding of double (test_linear_map.cpp checks its bits).
TEST(LinalgGemmFast, LinearMapRunsItForFastAndKeepsExact) {
  const index in = 129, out = 70;
  const stored_weight w(storage_type::bf16, out, in, 0, 5);
  const linear_map map(w.view(), nullptr);
  const bool dots = bf16_dot_products_wanted();
  const bool small = kernel_test::sweep() == kernel_test::sweep_size::small;  // qemu, sanitizers
  for (index rows : {3, 4, 17, 32, 63, 64}) {
    if (small && (rows == 4 || rows == 32 || rows == 63)) continue;
    const auto x = random_vector(std::size_t(rows * in), unsigned(rows));
    std::vector<float> fast(std::size_t(rows * out)), exact(fast.size()), want_fast(fast.size());
    map.apply(x.data(), rows, in, fast.data(), out, gemm_numerics::fast);
    map.apply(x.data(), rows, in, exact.data(), out, gemm_numerics::exact);
    if (dots)
      detail::gemm_fast_rows<default_arch>(w.view().data(), in * 2, out, x.data(), in, rows, in, want_fast.data(), out);
    else
      detail::gemm_fast_rows<default_arch, false>(w.view().data(), in * 2, out, x.data(), in, rows, in, want_fast.data(), out);
    EXPECT_EQ(std::memcmp(fast.data(), want_fast.data(), fast.size() * sizeof(float)), 0) << "fast, rows " << rows;
    for (index m = 0; m < rows; ++m)
      for (index n = 0; n < out; ++n) {
        const auto d = reference_dot(in, [&](index k) { return w.view().at(n, k); }, x.data() + m * in);
        ASSERT_NEAR(exact[std::size_t(m * out + n)], d.sum, 3e-6 * d.magnitude + 1e-30) << "exact, rows " << rows;
      }
  }
}

}  // namespace test_gemm_fast
}  // namespace gattn
