// Identities the gate must satisfy (docs/spec.md §4), checked on the fast layer with random weights.
#include <gtest/gtest.h>

#include "gattn/attention/gqa_layer.hpp"
#include "gattn/reference/gqa_layer.hpp"
#include "support/random_layer.hpp"
#include "support/vectors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_gate_properties {

namespace {

using gattn::gqa_config;
using gattn::gqa_layer;
using gattn::weight_map;
using index = gattn::index;
namespace test = gattn::test;

std::vector<float> run(const gqa_config& c, const weight_map& w, const std::vector<float>& x) {
  const index T = index(x.size()) / c.hidden;
  std::vector<float> y(x.size());
  gqa_layer(c, w).forward({x.data(), T, c.hidden, c.hidden}, {y.data(), T, c.hidden, c.hidden});
  return y;
}

std::vector<float> input(const gqa_config& c, index T, unsigned seed) {
  std::mt19937 gen(seed);
  return test::random_values(gen, T * c.hidden, 1.0f);
}

TEST(GateProperties, GateOfOnesIsTheUngatedLayer) {
  for (auto pos : {gattn::gate_position::g1, gattn::gate_position::g2, gattn::gate_position::g3,
                   gattn::gate_position::g4, gattn::gate_position::g5}) {
    gqa_config plain = test::small_gqa();
    const weight_map w = test::random_gqa_weights(plain, 11);
    gqa_config gated = plain;
    gated.gate.enabled = true;
    gated.gate.position = pos;
    gated.gate.activation = gattn::activation::identity;  // act(0·x + 1) = 1 exactly
    weight_map wg = w;
    const index scores = gattn::shape_of_gate(gated).scores();
    wg.set("g_proj.weight", {scores, plain.hidden}, std::vector<float>(std::size_t(scores * plain.hidden), 0.0f));
    wg.set("g_proj.bias", {scores}, std::vector<float>(std::size_t(scores), 1.0f));
    const auto x = input(plain, 19, 3);
    EXPECT_LE(test::max_abs_diff(run(gated, wg, x), run(plain, w, x)), 1e-6) << gattn::to_string(pos);
  }
}

TEST(GateProperties, ConstantG1GateFoldsIntoOProj) {
  gqa_config c = test::small_gqa();
  c.gate.enabled = true;
  weight_map w = test::random_gqa_weights(c, 12);
  const index n = c.q_heads * c.head_dim;
  std::mt19937 gen(5);
  const auto bias = test::random_values(gen, n, 1.0f);
  w.set("g_proj.weight", {n, c.hidden}, std::vector<float>(std::size_t(n * c.hidden), 0.0f));
  w.set("g_proj.bias", {n}, bias);
  // W_o' = W_o · diag(σ(b)) on the ungated layer
  gqa_config plain = c;
  plain.gate.enabled = false;
  weight_map wf = w;
  auto wo = w.widened("o_proj.weight", {c.hidden, n});
  for (index r = 0; r < c.hidden; ++r)
    for (index k = 0; k < n; ++k) wo[std::size_t(r * n + k)] *= 1.0f / (1.0f + std::exp(-bias[std::size_t(k)]));
  wf.set("o_proj.weight", {c.hidden, n}, wo);
  const auto x = input(c, 23, 4);
  const auto y = run(c, w, x);
  EXPECT_LE(test::max_abs_diff(y, run(plain, wf, x)), 2e-6 * test::max_abs(y));
}

TEST(GateProperties, HeadwiseSigmoidQkGateCancelsUnderRmsNorm) {
  for (auto pos : {gattn::gate_position::g3, gattn::gate_position::g4}) {
    gqa_config c = test::small_gqa();
    c.rms_norm_eps = 1e-12;  // the cancellation is exact up to ε
    gqa_config plain = c;
    c.gate.enabled = true;
    c.gate.position = pos;
    c.gate.granularity = gattn::granularity::headwise;
    const weight_map w = test::random_gqa_weights(c, 13);
    const auto x = input(c, 17, 5);
    const auto y = run(c, w, x);
    EXPECT_LE(test::max_abs_diff(y, run(plain, w, x)), 1e-5 * test::max_abs(y)) << gattn::to_string(pos);
    // ...but not for SiLU, whose sign survives the norm.
    c.gate.activation = gattn::activation::silu;
    EXPECT_GT(test::max_abs_diff(run(c, w, x), run(plain, w, x)), 1e-3 * test::max_abs(y));
  }
}

TEST(GateProperties, G1AndG2DifferInGeneral) {
  gqa_config c = test::small_gqa(4, 4);  // MHA: a headwise G1 and G2 gate have the same g_proj shape
  c.gate.enabled = true;
  c.gate.granularity = gattn::granularity::headwise;
  const weight_map w = test::random_gqa_weights(c, 14);
  gqa_config c2 = c;
  c2.gate.position = gattn::gate_position::g2;
  const auto x = input(c, 13, 6);
  const auto y1 = run(c, w, x), y2 = run(c2, w, x);
  EXPECT_GT(test::max_abs_diff(y1, y2), 1e-2 * test::max_abs(y1));
  // ...except for the first token, which only sees itself: p = 1, so V-gating equals output-gating.
  for (index k = 0; k < c.hidden; ++k) EXPECT_NEAR(y1[std::size_t(k)], y2[std::size_t(k)], 1e-5);
}

TEST(GateProperties, NsSigmoidStaysInsideHalfToOne) {
  gqa_config c = test::small_gqa();
  c.gate.enabled = true;
  c.gate.activation = gattn::activation::ns_sigmoid;
  weight_map w = test::random_gqa_weights(c, 15);
  gattn::statistics_observer stats;
  const auto x = input(c, 29, 7);
  std::vector<float> y(x.size());
  gqa_layer(c, w).forward({x.data(), 29, c.hidden, c.hidden}, {y.data(), 29, c.hidden, c.hidden}, &stats);
  const auto r = stats.result();
  ASSERT_TRUE(r.gate_mean.has_value());
  EXPECT_GT(*r.gate_mean, 0.5);
  EXPECT_LT(*r.gate_mean, 1.0);
  EXPECT_EQ(*r.gate_frac_below_001, 0.0);
  for (float u : {-1e30f, -100.0f, -1.0f, 0.0f, 1.0f, 100.0f}) {
    const float g = gattn::act::apply(gattn::activation::ns_sigmoid, u);
    EXPECT_GE(g, 0.5f);
    EXPECT_LE(g, 1.0f);
  }
}

TEST(GateProperties, PaperLayoutEqualsQwenLayoutAfterRowPermutation) {
  // The same model stored in both fused_q layouts: per KV group [G queries | G gates] (paper) and
  // per head [q_h | u_h] (Qwen3-Next). Reading each with its own layout must give the same layer.
  gqa_config paper = test::small_gqa(6, 2, 8, 32);
  paper.gate.enabled = true;
  paper.gate.source = gattn::gate_source::fused_q;
  paper.gate.layout = gattn::fused_layout::per_kv_group;
  const weight_map w = test::random_gqa_weights(paper, 16);
  gqa_config qwen = paper;
  qwen.gate.layout = gattn::fused_layout::per_head;
  const index D = 8, G = 3, d = 32;
  const auto wq = w.widened("q_proj.weight", {6 * 2 * D, d});
  std::vector<float> permuted(wq.size());
  for (index h = 0; h < 6; ++h)
    for (index k = 0; k < 2 * D; ++k) {
      const index qwen_row = h * 2 * D + k;
      const index group = h / G, i = h % G;
      const index paper_row = k < D ? group * G * 2 * D + i * D + k : group * G * 2 * D + G * D + i * D + (k - D);
      std::copy_n(&wq[std::size_t(paper_row * d)], d, &permuted[std::size_t(qwen_row * d)]);
    }
  weight_map wqwen = w;
  wqwen.set("q_proj.weight", {6 * 2 * D, d}, permuted);
  const auto x = input(paper, 15, 8);
  const auto yp = run(paper, w, x);
  EXPECT_LE(test::max_abs_diff(yp, run(qwen, wqwen, x)), 1e-6 * test::max_abs(yp));
  // and the layouts are not interchangeable: the paper's file read as per_head differs
  EXPECT_GT(test::max_abs_diff(yp, run(qwen, w, x)), 1e-2 * test::max_abs(yp));
}

}  // namespace

}  // namespace test_gate_properties
