// Weight rows read as fp32 (linalg/weight_rows.hpp): a panel widened exactly, on every arch of
// the binary, f32/bf16/f16, odd sizes and padded rows.
#include <cmath>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "gattn/linalg/weight_rows.hpp"
#include "support/kernel_sweep.hpp"
#include "support/linalg.hpp"

namespace gattn {
// Named, not anonymous: the test target is built as a few unity translation units.
namespace test_weight_rows {

using linalg_test::all_types;
using linalg_test::stored_weight;

TEST(LinalgWeightRows, WidenRowsOnEveryArch) {
  kernel_test::for_each_arch([](auto arch) {
    using A = decltype(arch);
    for (storage_type type : all_types)
      for (index in : {index(1), index(7), index(33), index(100), index(213), index(257)}) {
        const stored_weight w(type, 11, in, 2, unsigned(in));
        const weight_view v = w.view();
        std::vector<float> widened(std::size_t(11 * in));
        detail::widen_rows<A>(type, v.data(), v.row_stride() * storage_bytes(type), 11, in, widened.data(), v.scales());
        for (index r = 0; r < 11; ++r)
          for (index k = 0; k < in; ++k) ASSERT_EQ(widened[std::size_t(r * in + k)], v.at(r, k)) << A::name();
      }
  });
}

}  // namespace test_weight_rows
}  // namespace gattn
