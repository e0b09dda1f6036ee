// core/block_scales.hpp: where the scale of each element of a block-FP8 weight view is (origins
// moved by row and column slices, block edges), and the checks a view's scales must pass.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "gattn/core/block_scales.hpp"
#include "gattn/simd/convert.hpp"

namespace gattn {
// Named, not anonymous: the test target is built as a few unity translation units.
namespace test_block_scales {

/// Scales [3, 4] of a [7, 10] weight in blocks of [3, 3]: s[i, j] = 10·i + j + 1.
struct grid {
  std::vector<float> s;
  block_scales scales;
  grid() {
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) s.push_back(float(10 * i + j + 1));
    scales = block_scales{storage_type::f32, s.data(), 3, 4, 3, 3, 0, 0};
  }
};

TEST(BlockScales, ElementsFindTheirBlockAfterSlices) {
  const grid g;
  EXPECT_EQ(g.scales.of(0, 0), 1.0f);
  EXPECT_EQ(g.scales.of(2, 2), 1.0f);
  EXPECT_EQ(g.scales.of(3, 2), 11.0f);
  EXPECT_EQ(g.scales.of(6, 9), 24.0f);
  const block_scales cut = g.scales.from_row(4).from_col(5);  // a slice that starts inside blocks
  EXPECT_EQ(cut.of(0, 0), 12.0f);                              // element (4, 5)
  EXPECT_EQ(cut.of(2, 1), 23.0f);                              // element (6, 6)
  EXPECT_EQ(cut.block_end_col(0), 1);                          // column 6 of the tensor opens block 2
  EXPECT_EQ(cut.block_end_col(1), 4);
  EXPECT_EQ(g.scales.block_end_col(0), 3);
}

TEST(BlockScales, Bf16ScalesWidenExactly) {
  const std::vector<std::uint16_t> s = {round_to_bf16(0.125f), round_to_bf16(-3.0f)};
  const block_scales b{storage_type::bf16, s.data(), 1, 2, 128, 128, 0, 0};
  EXPECT_EQ(b.of(5, 127), 0.125f);
  EXPECT_EQ(b.of(127, 128), -3.0f);
}

TEST(BlockScales, ChecksRefuseWhatCannotBeRead) {
  grid g;
  EXPECT_NO_THROW(detail::check_block_scales(g.scales, 7, 10, "w"));
  EXPECT_NO_THROW(detail::check_block_scales(g.scales.from_row(6).from_col(9), 1, 1, "w"));
  EXPECT_THROW(detail::check_block_scales(g.scales, 10, 10, "w"), weight_error);             // rows past the grid
  EXPECT_THROW(detail::check_block_scales(g.scales.from_col(1), 7, 12, "w"), weight_error);  // columns past it
  block_scales bad = g.scales;
  bad.type = storage_type::f16;
  EXPECT_THROW(detail::check_block_scales(bad, 7, 10, "w"), weight_error);
  bad = g.scales;
  bad.block_cols = 0;
  EXPECT_THROW(detail::check_block_scales(bad, 7, 10, "w"), weight_error);
  bad = g.scales;
  bad.data = nullptr;
  EXPECT_THROW(detail::check_block_scales(bad, 7, 10, "w"), weight_error);
  for (float v : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    g.s[7] = v;  // block [1, 3]
    try {
      detail::check_block_scales(g.scales, 7, 10, "q_proj.weight");
      ADD_FAILURE() << "a non-finite scale was accepted";
    } catch (const weight_error& e) {
      EXPECT_NE(std::string(e.what()).find("q_proj.weight: block scale [1, 3]"), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(detail::check_block_scales(g.scales, 3, 10, "w"));  // a view that does not reach it
  }
}

}  // namespace test_block_scales
}  // namespace gattn
