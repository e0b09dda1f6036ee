// Compile-time gate types produce exactly the runtime layer of the same config.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gattn/attention/any_layer.hpp"
#include "support/random_layer.hpp"
#include "support/vectors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_policy {

namespace {

using index = gattn::index;
namespace test = gattn::test;

TEST(GatePolicy, TypedLayerEqualsRuntimeLayer) {
  const auto c = test::load_vector_case("qwen3_next_layout");
  const auto& cfg = std::get<gattn::gqa_config>(c.config);
  gattn::gated_gqa<gattn::qwen3_next_gate> typed(cfg, c.weights);
  gattn::gqa_config ungated_cfg = cfg;
  ungated_cfg.gate = {};  // the type supplies the gate
  gattn::gated_gqa<gattn::qwen3_next_gate> from_plain(ungated_cfg, c.weights);
  std::vector<float> y1(c.x.size()), y2(c.x.size());
  const index T = c.tokens, d = c.hidden;
  typed.forward({c.x.data(), T, d, d}, {y1.data(), T, d, d});
  from_plain.forward({c.x.data(), T, d, d}, {y2.data(), T, d, d});
  EXPECT_EQ(y1, y2);
  EXPECT_LE(test::max_abs_diff(y1, c.y), 1e-4 * test::max_abs(c.y));
}

TEST(GatePolicy, MlaTypedLayer) {
  const auto c = test::load_vector_case("mla_gated");
  gattn::gated_mla<gattn::separate_g1_gate> layer(std::get<gattn::mla_config>(c.config), c.weights);
  std::vector<float> y(c.x.size());
  layer.forward({c.x.data(), c.tokens, c.hidden, c.hidden}, {y.data(), c.tokens, c.hidden, c.hidden});
  EXPECT_LE(test::max_abs_diff(y, c.y), 1e-4 * test::max_abs(c.y));
}

TEST(GatePolicy, ConflictingConfigIsRefused) {
  gattn::gqa_config c = test::small_gqa();
  c.gate.enabled = true;
  c.gate.granularity = gattn::granularity::headwise;
  const auto w = test::random_gqa_weights(c, 3);
  try {
    gattn::gated_gqa<gattn::gate<gattn::gate_position::g1, gattn::granularity::elementwise>> layer(c, w);
    FAIL() << "accepted a headwise config for an elementwise gate type";
  } catch (const gattn::config_error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("headwise"));
  }
  gattn::gated_gqa<gattn::gate<gattn::gate_position::g1, gattn::granularity::headwise>> ok(c, w);
  EXPECT_EQ(ok.config().gate.granularity, gattn::granularity::headwise);
  gattn::gated_gqa<> plain(test::small_gqa(), test::random_gqa_weights(test::small_gqa(), 4));
  EXPECT_FALSE(plain.config().gate.enabled);
}

}  // namespace

}  // namespace test_policy
