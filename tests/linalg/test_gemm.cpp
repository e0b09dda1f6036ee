// The small GEMM and the untransposed product (linalg/gemm.hpp) on every arch of the binary,
// f32/bf16/f16 and block-scaled E4M3: against double-precision dot products, and every row of a batch with the bits of
// that row alone, whatever the block shape, pass split or staged panel.
#include <cmath>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "gattn/linalg/gemm.hpp"
#include "support/kernel_sweep.hpp"
#include "support/linalg.hpp"

namespace gattn {
// Named, not anonymous: the test target is built as a few unity translation units.
namespace test_gemm {

using linalg_test::all_types;
using linalg_test::random_vector;
using linalg_test::reference_dot;
using linalg_test::stored_weight;
using linalg_test::dot_result;

TEST(LinalgGemm, SmallGemmRowsOnEveryArch) {
  kernel_test::for_each_arch([](auto arch) {
    using A = decltype(arch);
    for (storage_type type : all_types)
      for (index count : {index(11), detail::gemm_out_cols + 5})  // one staged panel of y, and two
        for (index in : {index(1), index(7), index(33), index(257), index(4096 + 37)})
          for (index rows : {index(1), index(3), index(4), index(5), index(9)}) {
            const index x_stride = in + 3, y_stride = count + 2;
            const stored_weight w(type, count, in, 2, unsigned(in + rows));
            const weight_view v = w.view();
            const auto x = random_vector(std::size_t(rows * x_stride), 5);
            std::vector<float> y(std::size_t(rows * y_stride), -99.0f);
            detail::gemm_rows<A>(type, v.data(), v.row_stride() * storage_bytes(type), count, x.data(), x_stride, rows, in,
                                 y.data(), y_stride, v.scales());
            for (index n = 0; n < rows; ++n) {
              for (index r = 0; r < count; ++r) {
                const dot_result want =
                    reference_dot(in, [&](index k) { return v.at(r, k); }, x.data() + n * x_stride);
                ASSERT_NEAR(y[std::size_t(n * y_stride + r)], want.sum, 3e-6 * want.magnitude + 1e-30)
                    << A::name() << " " << to_string(type) << " count " << count << " in " << in << " rows " << rows
                    << " x row " << n;
              }
              for (index r = count; r < y_stride; ++r) ASSERT_EQ(y[std::size_t(n * y_stride + r)], -99.0f) << "wrote past count";
            }
          }
  });
}


TEST(LinalgGemm, SmallGemmBatchedRowsEqualEachRowAloneOnEveryArch) {
  // Bit for bit: the summation order of a (weight row, x row) pair never depends on the block
  // shape (6 x 4 on AVX-512, 3 x 3 elsewhere, and every remainder), the number of x rows, the
  // x-row chunks of gemm_max_x_rows, the passes of gemm_pass values, or y's staged panels.
  // SSE4.2 has no FMA instruction: xsimd's fma is a·b + c there, which GCC contracts into an FMA
  // at some call sites and not others when the binary targets an FMA machine (this test binary; a
  // real SSE4.2 build cannot contract), so its bits may depend on the block shape.
  // The small sweep (qemu, sanitizers) keeps every edge kind: one count and one row count below a
  // block, one past it, one past a panel or chunk.
  const bool small = kernel_test::sweep() == kernel_test::sweep_size::small;
  kernel_test::for_each_arch([small](auto arch) {
    using A = decltype(arch);
    if (std::is_same<A, xsimd::sse4_2>::value) return;
    for (storage_type type : all_types)
      for (index in : {index(5), index(45), index(2 * detail::gemm_pass + 37)})
        for (index count : {index(1), index(5), index(7), index(13), 2 * detail::gemm_out_cols + 1})
          for (index rows : {index(2), index(5), index(7), index(11), index(detail::gemm_max_x_rows + 3)}) {
            if (in > 1000 && rows > 11 && !std::is_same<A, default_arch>::value) continue;  // keeps it quick
            if (small && (count == 5 || count == 13 || rows == 5 || rows == 11)) continue;
            const index x_stride = in + 1, y_stride = count + 1, stride = (in + 2) * storage_bytes(type);
            const stored_weight w(type, count, in, 2, unsigned(in + count + rows));
            const weight_view v = w.view();
            const auto x = random_vector(std::size_t(rows * x_stride), unsigned(rows));
            std::vector<float> y(std::size_t(rows * y_stride), -99.0f), one(static_cast<std::size_t>(count));
            detail::gemm_rows<A>(type, v.data(), stride, count, x.data(), x_stride, rows, in, y.data(), y_stride, v.scales());
            for (index n = 0; n < rows; ++n) {
              detail::gemm_rows<A>(type, v.data(), stride, count, x.data() + n * x_stride, x_stride, 1, in,
                                   one.data(), count, v.scales());
              for (index r = 0; r < count; ++r)
                ASSERT_EQ(y[std::size_t(n * y_stride + r)], one[std::size_t(r)])
                    << A::name() << " " << to_string(type) << " in " << in << " count " << count << " rows " << rows
                    << " x row " << n << " weight row " << r;
              ASSERT_EQ(y[std::size_t(n * y_stride + count)], -99.0f) << "wrote past count";
            }
            // and row by row in the other direction: each weight row alone gives the same bits
            for (index r = 0; r < count; r += 3) {
              std::vector<float> col(static_cast<std::size_t>(rows));
              const weight_view row = v.row_range(r, 1);
              detail::gemm_rows<A>(type, row.data(), stride, 1, x.data(), x_stride, rows, in, col.data(), 1, row.scales());
              for (index n = 0; n < rows; ++n) ASSERT_EQ(col[std::size_t(n)], y[std::size_t(n * y_stride + r)]);
            }
          }
  });
}


TEST(LinalgGemm, TransposedProductOnEveryArch) {
  kernel_test::for_each_arch([](auto arch) {
    using A = decltype(arch);
    for (storage_type type : all_types)
      for (index cols : {index(1), index(7), index(33), index(4 * 16 + 5)})
        for (index rows : {index(1), index(3)}) {
          const index k_count = 13, x_stride = k_count + 2, y_stride = cols + 3;
          const stored_weight w(type, k_count, cols, 2, unsigned(cols + rows));
          const weight_view v = w.view();
          const auto x = random_vector(std::size_t(rows * x_stride), 6);
          std::vector<float> y(std::size_t(rows * y_stride), -99.0f);
          detail::gemm_cols<A>(type, v.data(), v.row_stride() * storage_bytes(type), k_count, cols, x.data(), x_stride,
                               rows, y.data(), y_stride, v.scales());
          for (index n = 0; n < rows; ++n) {
            for (index c = 0; c < cols; ++c) {
              const dot_result want =
                  reference_dot(k_count, [&](index k) { return v.at(k, c); }, x.data() + n * x_stride);
              ASSERT_NEAR(y[std::size_t(n * y_stride + c)], want.sum, 3e-6 * want.magnitude + 1e-30)
                  << A::name() << " " << to_string(type) << " cols " << cols << " x row " << n;
            }
            for (index c = cols; c < y_stride; ++c) ASSERT_EQ(y[std::size_t(n * y_stride + c)], -99.0f) << "wrote past cols";
          }
        }
  });
}

}  // namespace test_gemm
}  // namespace gattn
