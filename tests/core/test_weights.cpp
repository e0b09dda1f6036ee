// weight_view and weight_map: slices, exact widening of every bf16/f16 bit pattern, the owning
// convenience, keep-alive, and errors that name the weight.
#include <cstring>
#include <memory>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gattn/core/weights.hpp"
#include "gattn/simd/convert.hpp"

namespace gattn {
// Named, not anonymous: the test target is built as a few unity translation units.
namespace test_weights {

using ::testing::HasSubstr;

std::uint32_t bits_of(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

TEST(WeightView, WidensEveryBf16AndF16PatternLikeTheSimdReference) {
  std::vector<std::uint16_t> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = std::uint16_t(i);
  const weight_view bf(storage_type::bf16, all.data(), {256, 256});
  const weight_view hf(storage_type::f16, all.data(), {65536});
  const std::vector<float> b = bf.widened(), h = hf.widened();
  for (std::size_t i = 0; i < all.size(); ++i) {
    ASSERT_EQ(bits_of(b[i]), bits_of(bf16_to_float(all[i]))) << i;
    ASSERT_EQ(bits_of(h[i]), bits_of(f16_to_float(all[i]))) << i;
  }
}

TEST(WeightView, RowAndColumnRangesAreViewsOfTheSameMemory) {
  std::vector<float> m(6 * 5);
  for (std::size_t i = 0; i < m.size(); ++i) m[i] = float(i);
  const weight_view v(storage_type::f32, m.data(), {6, 5});
  EXPECT_EQ(v.rows(), 6);
  EXPECT_EQ(v.cols(), 5);
  EXPECT_TRUE(v.dense());
  const weight_view block = v.row_range(2, 3).col_range(1, 2);  // rows 2..4, columns 1..2
  EXPECT_EQ(block.shape(), (std::vector<index>{3, 2}));
  EXPECT_EQ(block.row_stride(), 5);
  EXPECT_FALSE(block.dense());
  EXPECT_EQ(block.widened(), (std::vector<float>{11, 12, 16, 17, 21, 22}));
  EXPECT_EQ(block.at(2, 1), 22.0f);
  const tensor copy = block.to_tensor();
  EXPECT_EQ(copy.shape, block.shape());
  EXPECT_EQ(copy.data, block.widened());
  EXPECT_EQ(block.bytes(), 6 * 4);
  const weight_view bias(storage_type::f32, m.data(), {7});
  EXPECT_EQ(bias.rows(), 7);
  EXPECT_EQ(bias.row_range(2, 3).widened(), (std::vector<float>{2, 3, 4}));
  EXPECT_THROW(v.row_range(4, 3), shape_error);
  EXPECT_THROW(v.col_range(3, 3), shape_error);
  EXPECT_THROW(bias.col_range(0, 1), shape_error);
  EXPECT_THROW(weight_view(storage_type::f32, m.data(), {3, 5}, 4), weight_error);
  EXPECT_THROW(weight_view(storage_type::f32, nullptr, {3, 5}), weight_error);
}

TEST(WeightView, KeepAliveOwnsTheMemory) {
  auto owner = std::make_shared<std::vector<std::uint16_t>>(4, std::uint16_t(0x3F80));  // bf16 1.0
  std::weak_ptr<std::vector<std::uint16_t>> watch = owner;
  weight_view v(storage_type::bf16, owner->data(), {2, 2}, -1, owner);
  owner.reset();
  EXPECT_FALSE(watch.expired());
  EXPECT_EQ(v.row_range(1, 1).widened(), (std::vector<float>{1.0f, 1.0f}));
  v = weight_view();
  EXPECT_TRUE(watch.expired());
}

TEST(WeightMap, OwnedFp32CopiesOutliveTheMapAndAreShared) {
  weight_view kept;
  {
    weight_map w;
    w.set("a.weight", {2, 3}, {1, 2, 3, 4, 5, 6});
    weight_map copy = w;
    EXPECT_EQ(copy.get("a.weight", {2, 3}).data(), w.get("a.weight", {2, 3}).data());  // shared, not copied
    kept = w.get("a.weight", {2, 3});
  }
  EXPECT_EQ(kept.type(), storage_type::f32);
  EXPECT_EQ(kept.widened(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(WeightMap, GetFindAndWidenedNameTheWeight) {
  std::vector<std::uint16_t> bits = {0x3F80, 0x4000, 0xC040};  // bf16 1, 2, -3
  weight_map w;
  w.set("n.weight", weight_view(storage_type::bf16, bits.data(), {3}));
  EXPECT_EQ(w.widened("n.weight", {3}), (std::vector<float>{1, 2, -3}));
  EXPECT_EQ(w.get("n.weight", {3}).type(), storage_type::bf16);
  EXPECT_EQ(w.find("n.bias", {3}), nullptr);
  EXPECT_NE(w.find("n.weight", {3}), nullptr);
  try {
    w.get("n.weight", {4});
    FAIL();
  } catch (const weight_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'n.weight' has shape [3], expected [4]"));
  }
  try {
    w.get("m.weight", {4});
    FAIL();
  } catch (const weight_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("missing weight 'm.weight'"));
  }
  EXPECT_THROW(w.set("x", {2, 3}, std::vector<float>(5)), weight_error);
  EXPECT_FALSE(w.contains("x"));  // nothing stored on failure
}

}  // namespace test_weights
}  // namespace gattn
