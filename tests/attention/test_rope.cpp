// Tests of gattn/attention/rope.hpp (with core/rope_frequencies.hpp): the rotation of a head vector
// against the oracle's double-precision RoPE (reference/layer_ops.hpp), neox and interleaved,
// partial rotary widths and YaRN, up to long positions; channels past R and a rotation of style
// none are left alone.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "gattn/attention/rope.hpp"
#include "gattn/reference/layer_ops.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_rope {

namespace {

using gattn::index;

void check_against_oracle(const gattn::rope_config& c, index head_dim) {
  const gattn::rope_rotator rope(c);
  ASSERT_EQ(rope.half(), c.rotary_dim / 2);
  std::vector<float> cos(std::size_t(rope.half())), sin(cos.size());
  std::mt19937 gen(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (index pos : {index(0), index(1), index(7), index(1000), index(65537), index(1000000)}) {
    std::vector<float> x(static_cast<std::size_t>(head_dim));
    for (float& v : x) v = nd(gen);
    std::vector<double> want(x.begin(), x.end());
    gattn::reference::rope(want.data(), pos, c);
    rope.angles(pos, cos.data(), sin.data());
    std::vector<float> got = x;
    rope.rotate(got.data(), cos.data(), sin.data());
    for (index i = 0; i < head_dim; ++i) {
      if (i >= c.rotary_dim) {
        EXPECT_EQ(got[std::size_t(i)], x[std::size_t(i)]) << "channel " << i << " past R moved";
        continue;
      }
      EXPECT_NEAR(got[std::size_t(i)], want[std::size_t(i)], 2e-6 * (1 + std::fabs(want[std::size_t(i)])))
          << "pos " << pos << " channel " << i << " style " << int(c.style);
    }
  }
}

TEST(Rope, MatchesTheOracleForEveryStyleAndWidth) {
  for (auto style : {gattn::rope_style::neox, gattn::rope_style::interleaved})
    for (index r : {index(64), index(16)}) {  // full and partial rotary width of a 64-channel head
      gattn::rope_config c;
      c.style = style;
      c.theta = 1e6;
      c.rotary_dim = r;
      check_against_oracle(c, 64);
    }
}

TEST(Rope, MatchesTheOracleWithYarn) {
  gattn::rope_config c;
  c.rotary_dim = 32;
  c.scaling.yarn = true;
  c.scaling.factor = 4.0;
  c.scaling.original_max_position_embeddings = 4096;
  c.scaling.mscale = 1.0;
  c.scaling.mscale_all_dim = 0.5;
  check_against_oracle(c, 48);
}

TEST(Rope, StyleNoneAndNoRotaryChannelsLeaveTheVectorAlone) {
  gattn::rope_config none;
  none.style = gattn::rope_style::none;
  none.rotary_dim = 8;
  gattn::rope_config nope;
  nope.rotary_dim = 0;
  for (const auto& c : {none, nope}) {
    const gattn::rope_rotator rope(c);
    EXPECT_FALSE(rope.active());
    std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8}, cos(4, 0.5f), sin(4, 0.5f);
    const std::vector<float> before = x;
    rope.rotate(x.data(), cos.data(), sin.data());
    EXPECT_EQ(x, before);
  }
}

}  // namespace

}  // namespace test_rope
