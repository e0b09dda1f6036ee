// Tests of gattn/gate/source.hpp: the scores of each source as a strided view over the projection
// buffer (separate / fused_q in place, low_rank through g_b_proj into the caller's buffer), and
// head sharing, which averages the scores over the heads in place.
#include <gtest/gtest.h>

#include <vector>

#include "gattn/gate/source.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_source {

namespace {

using gattn::index;

TEST(GateSource, SeparateScoresAreReadInPlace) {
  gattn::gate_config g;
  g.enabled = true;
  const gattn::gate_shape shape{3, 4, 4};  // 3 heads, elementwise over 4 channels
  const index tokens = 2, stride = 20;
  std::vector<float> raw(std::size_t(tokens * stride));
  for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = float(i);
  const std::vector<float> before = raw;
  gattn::streamed_vector<float> buffer;
  const gattn::gate_scores u = gattn::resolve_gate_scores(g, shape, raw.data(), stride, tokens, {}, buffer);
  EXPECT_EQ(u.data, raw.data());
  EXPECT_EQ(u.token_stride, stride);
  EXPECT_EQ(u.head_stride, 4);
  EXPECT_EQ(raw, before);
  EXPECT_TRUE(buffer.empty());
}

TEST(GateSource, SharedScoresAreTheMeanOverHeadsWithHeadStrideZero) {
  gattn::gate_config g;
  g.enabled = true;
  g.shared = true;
  const gattn::gate_shape shape{2, 3, 1};  // 2 heads, headwise
  std::vector<float> raw = {1.0f, 4.0f, -9.0f, 2.0f, 6.0f, -9.0f};  // 2 tokens, stride 3 (one unused column)
  gattn::streamed_vector<float> buffer;
  const gattn::gate_scores u = gattn::resolve_gate_scores(g, shape, raw.data(), 3, 2, {}, buffer);
  EXPECT_EQ(u.head_stride, 0);
  EXPECT_EQ(u.token_stride, 3);
  EXPECT_EQ(u.data[0], 2.5f);
  EXPECT_EQ(u.data[3], 4.0f);
  EXPECT_EQ(raw[2], -9.0f);  // outside the scores: untouched
}

TEST(GateSource, LowRankScoresComeFromGbIntoTheCallersBuffer) {
  gattn::gate_config g;
  g.enabled = true;
  g.source = gattn::gate_source::low_rank;
  g.rank = 2;
  const gattn::gate_shape shape{2, 2, 2};  // 4 scores per token
  // g_b_proj [4, 2]: score s = a0·gb[s][0] + a1·gb[s][1]
  std::vector<float> gb = {1, -1, 2, 0, 3, 1, 4, 2};
  const gattn::weight_view gb_view(gattn::storage_type::f32, gb.data(), {4, 2});
  const gattn::linear_map gate_b(gb_view, nullptr);
  std::vector<float> raw = {1.0f, 2.0f, 7.0f, 0.5f, -1.0f, 7.0f};  // g_a output of 2 tokens, stride 3
  gattn::streamed_vector<float> buffer;
  const gattn::gate_scores u = gattn::resolve_gate_scores(g, shape, raw.data(), 3, 2, gate_b, buffer);
  ASSERT_GE(buffer.size(), 8u);
  EXPECT_EQ(u.data, buffer.data());
  EXPECT_EQ(u.token_stride, 4);
  EXPECT_EQ(u.head_stride, 2);
  for (index t = 0; t < 2; ++t)
    for (index s = 0; s < 4; ++s) {
      const float a0 = raw[std::size_t(t * 3)], a1 = raw[std::size_t(t * 3 + 1)];
      EXPECT_FLOAT_EQ(u.data[t * 4 + s], a0 * gb[std::size_t(2 * s)] + a1 * gb[std::size_t(2 * s + 1)]) << t << " " << s;
    }
}

}  // namespace

}  // namespace test_source
