// linear_map and transposed_map over typed weight views: GEMV (rows <= 2), the small GEMM (rows
// 3..small_gemm_rows) and the cache-blocked GEMM beyond, f32/bf16/f16, several segments, row strides
// (column-sliced views), odd sizes, every thread context; against a double-precision product of
// the widened weights. Through the map, the small GEMM gives every row of a batch the bits of that
// row alone (the GEMV of 1-2 rows sums in another order), whatever the thread count or mix of
// dtypes. The inner loops on every arch: test_gemv.cpp, test_gemm.cpp, test_weight_rows.cpp.
#include <cmath>
#include <random>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "gattn/linalg/linear_map.hpp"
#include "gattn/simd/convert.hpp"
#include "support/linalg.hpp"

namespace gattn {
// Named, not anonymous: the test target is built as a few unity translation units.
namespace test_linear_map {

using linalg_test::all_types;
using linalg_test::random_vector;
using linalg_test::stored_weight;

/// y = x · Wᵀ + b in double over the rows of the segments, and Σ|w·x| per output (the scale of
/// fp32 rounding).
void reference(const std::vector<weight_segment>& segs, const std::vector<float>& x, index rows, index in,
               std::vector<double>& y, std::vector<double>& mag) {
  y.clear();
  mag.clear();
  for (index t = 0; t < rows; ++t)
    for (const weight_segment& s : segs) {
      const index count = s.count < 0 ? s.weight.rows() - s.first : s.count;
      for (index r = s.first; r < s.first + count; ++r) {
        double acc = s.bias ? double(s.bias->at(r, 0)) : 0.0, m = std::abs(acc);
        for (index k = 0; k < in; ++k) {
          const double p = double(s.weight.at(r, k)) * double(x[std::size_t(t * in + k)]);
          acc += p;
          m += std::abs(p);
        }
        y.push_back(acc);
        mag.push_back(m);
      }
    }
}

void expect_close(const linear_map& m, const std::vector<weight_segment>& segs, index rows, index in,
                  const execution_context& exec, const char* what) {
  const auto x = random_vector(std::size_t(rows * in), 7);
  std::vector<double> want, mag;
  reference(segs, x, rows, in, want, mag);
  const index out = m.out(), y_stride = out + 3;
  std::vector<float> y(std::size_t(rows * y_stride), -99.0f);
  m.apply(x.data(), rows, in, y.data(), y_stride, exec);
  for (index t = 0; t < rows; ++t) {
    for (index o = 0; o < out; ++o) {
      const double w = want[std::size_t(t * out + o)], tol = 3e-5 * mag[std::size_t(t * out + o)] + 1e-30;
      ASSERT_NEAR(y[std::size_t(t * y_stride + o)], w, tol) << what << " row " << t << " out " << o << " in " << in;
    }
    for (index o = out; o < y_stride; ++o) ASSERT_EQ(y[std::size_t(t * y_stride + o)], -99.0f) << "wrote past out";
  }
}


TEST(LinearMap, GemvAndGemmMatchDoubleForEveryDtypeAndOddSize) {
  for (storage_type type : all_types)
    for (index in : {index(1), index(3), index(17), index(4096 + 5)})
      for (index out : {index(1), index(5), index(70), index(131)}) {
        if (in > 1000 && out > 70) continue;  // keeps the double reference quick
        const stored_weight w(type, out, in, 0, unsigned(in * 1000 + out));
        const std::vector<weight_segment> segs = {{w.view(), 0, -1, nullptr}};
        const linear_map m(segs);
        EXPECT_EQ(m.out(), out);
        EXPECT_EQ(m.in(), in);
        for (index rows : {index(1), index(2), index(3), index(9)})
          expect_close(m, segs, rows, in, execution_context{}, to_string(type));
      }
}

TEST(LinearMap, SegmentsWithBiasesAndRowStridesOfColumnSlices) {
  for (storage_type type : all_types) {
    // a wider tensor whose columns [5, 5 + 37) are the map's input: row stride 61 + 4 padding
    const stored_weight big(type, 90, 61, 4, 11);
    const weight_view slice = big.view().col_range(5, 37);
    ASSERT_EQ(slice.row_stride(), 65);
    const stored_weight other(type, 20, 37, 0, 12);
    std::vector<float> bias_values = random_vector(90, 13);
    const weight_view bias(storage_type::f32, bias_values.data(), {90});
    const std::vector<weight_segment> segs = {
        {slice, 3, 7, &bias}, {other.view(), 0, -1, nullptr}, {slice, 70, 20, &bias}, {slice, 0, 1, nullptr}};
    const linear_map m(segs);
    EXPECT_EQ(m.out(), 7 + 20 + 20 + 1);
    for (index rows : {index(1), index(2), index(5)}) expect_close(m, segs, rows, 37, execution_context{}, to_string(type));
  }
}

TEST(LinearMap, SmallGemmEveryRowCountAroundTheBlocksAndTheCrossover) {
  for (storage_type type : all_types) {
    const index max_rows = linear_map::small_gemm_rows(type);
    std::vector<index> row_counts;
    for (index r = 3; r <= max_rows + 1; ++r) row_counts.push_back(r);
    // odd sizes: 71 output rows (4-row blocks and a remainder), in = 45 (a vector body and a tail)
    const stored_weight big(type, 71, 52, 3, 31);
    const weight_view slice = big.view().col_range(4, 45);  // row stride 55
    const stored_weight other(type, 9, 45, 0, 32);
    std::vector<float> bias_values = random_vector(71, 33);
    const weight_view bias(storage_type::f32, bias_values.data(), {71});
    const std::vector<weight_segment> segs = {{slice, 2, 66, &bias}, {other.view(), 0, -1, nullptr}, {slice, 0, 1, &bias}};
    const linear_map m(segs);
    for (index rows : row_counts) expect_close(m, segs, rows, 45, execution_context{}, to_string(type));
  }
}

TEST(LinearMap, EveryThreadContextGivesTheSameBits) {
  struct pool {
    static void run(void*, index n, void* body, execution_context::range_fn f) {
      for (index i = n; i > 0; --i) f(body, i - 1, i);  // backwards, one index at a time
    }
  };
  const stored_weight w(storage_type::bf16, 700, 300, 0, 21);  // 420 KB: large enough to go parallel
  const linear_map m(w.view(), nullptr);
  for (index rows : {index(1), index(2), index(6), index(33), index(linear_map::small_gemm_rows(storage_type::bf16) + 3),
                     detail::pgemm_chunk + 5}) {
    const auto x = random_vector(std::size_t(rows * 300), 22);
    std::vector<float> a(std::size_t(rows * 700)), b(a.size()), c(a.size());
    m.apply(x.data(), rows, 300, a.data(), 700, execution_context::serial());
    m.apply(x.data(), rows, 300, b.data(), 700, execution_context::with_threads(2));
    m.apply(x.data(), rows, 300, c.data(), 700, execution_context::custom(&pool::run, nullptr, 3));
    EXPECT_EQ(a, b);
    EXPECT_EQ(a, c);
  }
  // the small GEMM of every dtype, with an input longer than one pass (4096 values) and a tail
  for (storage_type type : all_types) {
    const index in = 4096 + 45;
    const stored_weight big(type, 131, in, 0, 23);  // >= 256 KB: parallel
    const linear_map mb(big.view(), nullptr);
    const index rows = linear_map::small_gemm_rows(type) - 1;
    const auto x = random_vector(std::size_t(rows * in), 24);
    std::vector<float> a(std::size_t(rows * 131)), b(a.size());
    mb.apply(x.data(), rows, in, a.data(), 131, execution_context::serial());
    mb.apply(x.data(), rows, in, b.data(), 131, execution_context::with_threads(2));
    EXPECT_EQ(a, b) << to_string(type);
  }
}

TEST(LinearMap, MixedDtypesShareOnePackedXAndGiveEachDtypesBits) {
  // One map over f32, bf16 and f16 slices (the small GEMM packs x once per call, in each order its
  // dtypes need): every output equals, bit for bit, the same slice in a map of its own.
  const index in = 301;
  const stored_weight a(storage_type::f32, 40, in, 3, 41), b(storage_type::bf16, 29, in, 0, 42),
      c(storage_type::f16, 17, in, 1, 43);
  const std::vector<weight_segment> segs = {
      {a.view(), 2, 30, nullptr}, {b.view(), 0, -1, nullptr}, {c.view(), 0, -1, nullptr}, {a.view(), 0, 2, nullptr}};
  const linear_map mixed(segs);
  EXPECT_EQ(mixed.out(), 30 + 29 + 17 + 2);
  for (index rows = 3; rows <= linear_map::small_gemm_rows(storage_type::f32); ++rows) {
    const auto x = random_vector(std::size_t(rows * in), unsigned(44 + rows));
    std::vector<float> y(std::size_t(rows * mixed.out()));
    mixed.apply(x.data(), rows, in, y.data(), mixed.out(), execution_context::with_threads(2));
    index o = 0;
    for (const weight_segment& s : segs) {
      const linear_map alone(std::vector<weight_segment>{s});
      std::vector<float> z(std::size_t(rows * alone.out()));
      alone.apply(x.data(), rows, in, z.data(), alone.out(), execution_context::serial());
      for (index t = 0; t < rows; ++t)
        for (index c2 = 0; c2 < alone.out(); ++c2)
          ASSERT_EQ(y[std::size_t(t * mixed.out() + o + c2)], z[std::size_t(t * alone.out() + c2)])
              << to_string(s.weight.type()) << " rows " << rows << " row " << t << " out " << o + c2;
      o += alone.out();
    }
  }
}

TEST(LinearMap, FastNumericsMeetTheFastToleranceAndLeaveExactAlone) {
  // Two segments of different dtypes, a bias, more rows than the small GEMM and than one chunk.
  const index in = 300, rows = detail::pgemm_chunk + 9;
  const stored_weight a(storage_type::bf16, 300, in, 0, 41), b(storage_type::f32, 70, in, 2, 42);
  std::vector<float> bias_values = random_vector(300, 43);
  const weight_view bias(storage_type::f32, bias_values.data(), {300});
  const std::vector<weight_segment> segs = {{a.view(), 0, -1, &bias}, {b.view(), 0, -1, nullptr}};
  const linear_map m(segs);
  const auto x = random_vector(std::size_t(rows * in), 44);
  std::vector<double> want, mag;
  reference(segs, x, rows, in, want, mag);
  double scale = 0.0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  const index out = m.out();
  std::vector<float> fast(std::size_t(rows * out)), fast2(fast.size()), exact(fast.size()), plain(fast.size());
  m.apply(x.data(), rows, in, fast.data(), out, gemm_numerics::fast, execution_context::serial());
  m.apply(x.data(), rows, in, fast2.data(), out, gemm_numerics::fast, execution_context::with_threads(2));
  m.apply(x.data(), rows, in, exact.data(), out, gemm_numerics::exact);
  m.apply(x.data(), rows, in, plain.data(), out);
  EXPECT_EQ(fast, fast2) << "fast numerics depend on the thread count";
  EXPECT_EQ(exact, plain);
  for (std::size_t i = 0; i < fast.size(); ++i) ASSERT_NEAR(fast[i], want[i], 1e-2 * scale) << "at " << i;
}

TEST(LinearMap, MismatchedSegmentsAreRefused) {
  const stored_weight a(storage_type::f32, 4, 8, 0, 1), b(storage_type::bf16, 4, 9, 0, 2);
  EXPECT_THROW(linear_map({{a.view(), 0, -1, nullptr}, {b.view(), 0, -1, nullptr}}), shape_error);
  EXPECT_THROW(linear_map({{a.view(), 2, 3, nullptr}}), shape_error);
  std::vector<float> short_bias(3);
  const weight_view bias(storage_type::f32, short_bias.data(), {3});
  EXPECT_THROW(linear_map(a.view(), &bias), shape_error);
}

TEST(LinearMap, TransposedMapOnAColumnSlice) {
  // a transposed_map over a column slice of a wider tensor
  const stored_weight big(storage_type::bf16, 9, 40, 0, 3);
  const transposed_map m(big.view().col_range(6, 21));
  EXPECT_EQ(m.in(), 9);
  EXPECT_EQ(m.out(), 21);
  const auto x = random_vector(9 * 2, 4);
  std::vector<float> y(2 * 21);
  m.apply(x.data(), 2, 9, y.data(), 21);
  for (index n = 0; n < 2; ++n)
    for (index c = 0; c < 21; ++c) {
      double want = 0;
      for (index k = 0; k < 9; ++k) want += double(big.view().at(k, 6 + c)) * x[std::size_t(n * 9 + k)];
      ASSERT_NEAR(y[std::size_t(n * 21 + c)], want, 1e-4) << "row " << n << " col " << c;
    }
}


}  // namespace test_linear_map
}  // namespace gattn
