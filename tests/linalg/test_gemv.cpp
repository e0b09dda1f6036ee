// The decode GEMV (linalg/gemv.hpp) on every arch of the binary, f32/bf16/f16/E4M3, odd sizes and padded
// rows, against a double-precision dot product of the widened weights.
#include <cmath>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "gattn/linalg/gemv.hpp"
#include "support/kernel_sweep.hpp"
#include "support/linalg.hpp"

namespace gattn {
// Named, not anonymous: the test target is built as a few unity translation units.
namespace test_gemv {

using linalg_test::all_types;
using linalg_test::random_vector;
using linalg_test::reference_dot;
using linalg_test::stored_weight;
using linalg_test::dot_result;

TEST(LinalgGemv, E4m3RowsAcrossRowGroupsBlockRowsAndChunksOnEveryArch) {
  // 37 rows: groups of the width, several block rows (3) and a partial one; 4227 columns: past the
  // scaled chunk of x (detail::gemv_e4m3_chunk) with a tail; the view starts mid-block (rows and columns).
  kernel_test::for_each_arch([](auto arch) {
    using A = decltype(arch);
    const index in = detail::gemv_e4m3_chunk + 131, count = 37;
    const stored_weight w(storage_type::f8_e4m3, count + 2, in + 5, 1, 41);
    const weight_view v = w.view().row_range(2, count).col_range(5, in);
    const auto x = random_vector(std::size_t(in), 3);
    std::vector<float> y(static_cast<std::size_t>(count));
    detail::gemv_rows<A>(v.type(), v.data(), v.row_stride(), count, x.data(), in, y.data(), v.scales());
    for (index r = 0; r < count; ++r) {
      const dot_result want = reference_dot(in, [&](index k) { return v.at(r, k); }, x.data());
      ASSERT_NEAR(y[std::size_t(r)], want.sum, 3e-6 * want.magnitude + 1e-30) << A::name() << " row " << r;
    }
  });
}

TEST(LinalgGemv, GemvRowsOnEveryArch) {
  kernel_test::for_each_arch([](auto arch) {
    using A = decltype(arch);
    for (storage_type type : all_types)
      // 100 and 213: the 16-bit row's four-vector steps, then one-vector steps, then a tail
      for (index in : {index(1), index(7), index(33), index(100), index(213), index(257)}) {
        const stored_weight w(type, 11, in, 2, unsigned(in));
        const weight_view v = w.view();
        const auto x = random_vector(std::size_t(in), 3);
        std::vector<float> y(11);
        detail::gemv_rows<A>(type, v.data(), v.row_stride() * storage_bytes(type), 11, x.data(), in, y.data(), v.scales());
        for (index r = 0; r < 11; ++r) {
          const dot_result want = reference_dot(in, [&](index k) { return v.at(r, k); }, x.data());
          ASSERT_NEAR(y[std::size_t(r)], want.sum, 3e-6 * want.magnitude + 1e-30)
              << A::name() << " " << to_string(type) << " in " << in;
        }
      }
  });
}


}  // namespace test_gemv
}  // namespace gattn
