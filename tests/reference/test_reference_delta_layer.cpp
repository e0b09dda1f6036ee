// The double-precision gated delta-rule layer reproduces every delta vector (an independent PyTorch
// oracle), reads Hugging Face layouts, and refuses bad weights naming the tensor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gattn/reference/delta_layer.hpp"
#include "support/delta_vectors.hpp"
#include "support/random_delta_layer.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_reference_delta_layer {

namespace {

using gattn::index;
using gattn::weight_map;
using gattn::reference::delta_layer_forward;
using gattn::test::delta_case;
using gattn::test::delta_relative_error;
using gattn::test::load_delta_case;
using gattn::test::load_hf_delta_case;

gattn::reference::delta_result run(const delta_case& c, const weight_map& w) {
  return delta_layer_forward(c.config, w, c.x.data(), c.tokens, c.hidden);
}

// Both sides are float64 math on the same inputs (fp32 or bf16 weights widened exactly): only the
// summation order differs.
void expect_matches(const delta_case& c, const gattn::reference::delta_result& r, double tol) {
  EXPECT_EQ(r.tokens, c.tokens);
  EXPECT_LE(delta_relative_error(r.y, c.y), tol) << c.name << ": y";
  EXPECT_LE(delta_relative_error(r.o, c.o), tol) << c.name << ": o";
  EXPECT_LE(delta_relative_error(r.gated, c.gated), tol) << c.name << ": gated";
  EXPECT_LE(delta_relative_error(r.state, c.state), tol) << c.name << ": state";
}

class ReferenceDeltaLayer : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceDeltaLayer, MatchesVectorInDouble) {
  const delta_case c = load_delta_case(GetParam());
  expect_matches(c, run(c, c.weights), 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Vectors, ReferenceDeltaLayer, ::testing::ValuesIn(gattn::test::delta_case_names()),
                         [](const auto& info) { return info.param; });

class ReferenceDeltaLayerHf : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceDeltaLayerHf, MatchesBf16CheckpointInDouble) {
  const delta_case c = load_hf_delta_case(GetParam());
  for (const auto& [name, v] : c.weights.all()) EXPECT_EQ(v.type(), gattn::storage_type::bf16) << name;
  expect_matches(c, run(c, c.weights), 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Folders, ReferenceDeltaLayerHf,
                         ::testing::Values("hf_qwen3_next_linear", "hf_kimi_linear", "hf_qwen3_5_linear",
                                           "extra_hf_qwen3_5_text_linear_r4", "extra_hf_qwen3_5_moe_linear_mha"),
                         [](const auto& info) { return info.param; });

// The strong-decay cases are what they claim: every head's 64-token chunk sums its log-decay below -1000.
TEST(ReferenceDeltaLayerVectors, StrongDecayCasesSumBelowMinus1000PerChunk) {
  for (const char* name : {"extra_delta_gdn_strong_decay", "extra_delta_kda_strong_decay"}) {
    const auto file = gattn::io::safetensors_file::open(gattn::test::delta_data_path(std::string(name) + ".safetensors"));
    const auto stats = nlohmann::json::parse(file.metadata().at("stats"));
    EXPECT_LT(stats.at("chunk64_sum_g_max").get<double>(), -1000.0) << name;
    EXPECT_GE(file.info("x").shape[0], 130) << name;
  }
}

/// `w` without the tensor `drop`.
weight_map without(const weight_map& w, const std::string& drop) {
  weight_map out;
  for (const auto& [name, v] : w.all())
    if (name != drop) out.set(name, v);
  return out;
}

/// `w` with the tensor `name` replaced by `shape` filled with `value`.
weight_map with_tensor(weight_map w, const std::string& name, std::vector<index> shape, float value = 0.5f) {
  gattn::tensor t{std::move(shape), {}};
  t.data.assign(std::size_t(t.numel()), value);
  w.set(name, std::move(t));
  return w;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const gattn::error& e) {
    return e.what();
  }
  return "(no error)";
}

class ReferenceDeltaLayerWeights : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceDeltaLayerWeights, MissingTensorIsNamed) {
  const delta_case c = load_delta_case(GetParam());
  const auto contract = gattn::detail::delta_weights(c.config, c.weights);
  for (const auto& spec : contract.weights) {
    const weight_map w = without(c.weights, spec.name);
    EXPECT_THROW(run(c, w), gattn::weight_error) << spec.name;
    EXPECT_THAT(error_of([&] { run(c, w); }), ::testing::HasSubstr("missing weight '" + spec.name + "'"));
  }
}

TEST_P(ReferenceDeltaLayerWeights, WrongShapeIsNamedWithBothShapes) {
  const delta_case c = load_delta_case(GetParam());
  const auto contract = gattn::detail::delta_weights(c.config, c.weights);
  for (const auto& spec : contract.weights) {
    std::vector<index> bad = c.weights.all().at(spec.name).shape();
    bad.back() += 1;  // the last dimension: a row count may define a rank the next tensor must match
    const weight_map w = with_tensor(c.weights, spec.name, bad);
    EXPECT_THROW(run(c, w), gattn::weight_error) << spec.name;
    const std::string e = error_of([&] { run(c, w); });
    EXPECT_THAT(e, ::testing::HasSubstr("'" + spec.name + "'"));
    EXPECT_THAT(e, ::testing::HasSubstr(gattn::shape_string(bad)));
    // the expected shape, or [r, d] for a tensor whose rows give a rank (f_a_proj, g_a_proj)
    EXPECT_THAT(e, ::testing::AnyOf(::testing::HasSubstr("expected " + gattn::shape_string(spec.shapes.front())),
                                    ::testing::HasSubstr("expected [r, " + std::to_string(c.hidden) + "]")));
    if (!spec.bias.empty()) {  // a bias of the wrong length
      const weight_map wb = with_tensor(c.weights, spec.bias, {spec.shapes.front().front() + 1});
      EXPECT_THAT(error_of([&] { run(c, wb); }), ::testing::HasSubstr("'" + spec.bias + "'"));
    }
  }
}

TEST_P(ReferenceDeltaLayerWeights, NonFiniteDecayParametersAreConfigErrors) {
  const delta_case c = load_delta_case(GetParam());
  for (const char* name : {"A_log", "dt_bias"})
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()}) {
      const weight_map w = with_tensor(c.weights, name, c.weights.all().at(name).shape(), bad);
      EXPECT_THROW(run(c, w), gattn::config_error) << name << " = " << bad;
      EXPECT_THAT(error_of([&] { run(c, w); }), ::testing::HasSubstr(std::string("'") + name + "'"));
      EXPECT_THROW(gattn::detail::check_decay_parameters(c.config, w), gattn::config_error);
    }
}

// A bias beside a convolution or a norm weight would be dropped silently: refused, named.
TEST_P(ReferenceDeltaLayerWeights, BiasWhereTheLayerHasNoneIsRefused) {
  const delta_case c = load_delta_case(GetParam());
  const bool kda = c.config.kind == gattn::delta_kind::kda;
  const index C = kda ? c.config.key_heads * c.config.key_head_dim : c.config.conv_channels();
  for (const auto& [name, n] : std::vector<std::pair<std::string, index>>{
           {kda ? "q_conv1d.bias" : "conv1d.bias", C}, {kda ? "o_norm.bias" : "norm.bias", c.config.value_head_dim}}) {
    const weight_map w = with_tensor(c.weights, name, {n});
    EXPECT_THROW(run(c, w), gattn::weight_error) << name;
    EXPECT_THAT(error_of([&] { run(c, w); }), ::testing::HasSubstr("'" + name + "'"));
  }
}

INSTANTIATE_TEST_SUITE_P(Vectors, ReferenceDeltaLayerWeights,
                         ::testing::Values("delta_gdn", "delta_kda", "delta_kda_full_gate_bound",
                                           "extra_delta_kda_low_rank_bias_bound"),
                         [](const auto& info) { return info.param; });

TEST(ReferenceDeltaLayerWeights, GateRankFromConfigMustMatchTheShape) {
  delta_case c = load_delta_case("delta_kda");  // low_rank, rank 16
  const weight_map w = with_tensor(c.weights, "g_a_proj.weight", {8, c.hidden});
  const std::string e = error_of([&] { run(c, w); });
  EXPECT_THAT(e, ::testing::HasSubstr("'g_a_proj.weight' has shape [8, 128], expected [16, 128]"));
  // Without a rank in the config, the shape gives it (and then g_b_proj must agree).
  c.config.gate_rank = 0;
  EXPECT_THAT(error_of([&] { run(c, w); }), ::testing::HasSubstr("'g_b_proj.weight' has shape [128, 16], expected [128, 8]"));
  expect_matches(c, run(c, c.weights), 1e-9);
}

TEST(ReferenceDeltaLayerWeights, ContractNamesOnlyItsTensors) {
  const delta_case c = load_delta_case("delta_gdn");
  const auto contract = gattn::detail::delta_weights(c.config, c.weights);
  EXPECT_EQ(contract.weights.size(), 7u);
  EXPECT_EQ(contract["in_proj_qkvz.weight"].shapes.front(), (std::vector<index>{384, 128}));
  EXPECT_EQ(contract["in_proj_qkvz.weight"].bias, "in_proj_qkvz.bias");
  EXPECT_TRUE(contract["A_log"].bias.empty());
  EXPECT_THROW(contract["q_proj.weight"], gattn::weight_error);
  EXPECT_EQ(gattn::detail::check_delta_weights(c.config, c.weights).weights.size(), 7u);
}

// Qwen3.5's split projections (docs/spec.md §14) are Qwen3-Next's fused ones regrouped: the reference
// reads either layout to the same doubles, biases included.
TEST(ReferenceDeltaLayer, SplitLayoutEqualsFused) {
  gattn::delta_config c = gattn::test::small_delta(gattn::delta_kind::gated_deltanet, 16, 24);
  const weight_map split = gattn::test::random_delta_weights(c, 17, {}, true, gattn::gdn_layout::split);
  const weight_map fused = gattn::test::fused_from_split(c, split);
  const index T = 23;
  std::mt19937 gen(18);
  const std::vector<float> x = gattn::test::random_values(gen, T * c.hidden, 1.0f);
  const auto a = delta_layer_forward(c, split, x.data(), T, c.hidden);
  const auto b = delta_layer_forward(c, fused, x.data(), T, c.hidden);
  EXPECT_EQ(a.y, b.y);
  EXPECT_EQ(a.gated, b.gated);
  EXPECT_EQ(a.state, b.state);
  // The shared folder holds the same weights as Qwen3-Next's, split: the same result, bit for bit.
  const delta_case q35 = load_hf_delta_case("hf_qwen3_5_linear"), next = load_hf_delta_case("hf_qwen3_next_linear");
  EXPECT_EQ(run(q35, q35.weights).y, run(next, next.weights).y);
}

// The biases of the extra vectors carry weight: without them the output moves.
TEST(ReferenceDeltaLayer, BiasesPresentAreUsed) {
  const delta_case c = load_delta_case("extra_delta_kda_full_gate_biases");
  weight_map w;
  for (const auto& [name, v] : c.weights.all())
    if (name.size() < 5 || name.compare(name.size() - 5, 5, ".bias") != 0) w.set(name, v);
  ASSERT_LT(w.all().size(), c.weights.all().size());
  EXPECT_GT(delta_relative_error(run(c, w).y, c.y), 1e-3);
}

// Real checkpoints keep A_log, dt_bias and the conv weights in F32 beside bf16 projections: the
// views are read as stored, so widening some of them changes nothing.
TEST(ReferenceDeltaLayer, MixedWeightDtypesGiveTheSameResult) {
  const delta_case c = load_hf_delta_case("hf_kimi_linear");
  weight_map w = c.weights;
  for (const char* name : {"A_log", "dt_bias", "q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight"})
    w.set(name, c.weights.all().at(name).to_tensor());
  EXPECT_EQ(w.all().at("A_log").type(), gattn::storage_type::f32);
  const auto a = run(c, c.weights), b = run(c, w);
  EXPECT_EQ(a.y, b.y);
  EXPECT_EQ(a.state, b.state);
}

TEST(ReferenceDeltaLayer, StridedInputGivesTheSameResult) {
  const delta_case c = load_delta_case("delta_gdn_mha");
  const index stride = c.hidden + 5;
  std::vector<float> padded(std::size_t(c.tokens * stride), std::numeric_limits<float>::quiet_NaN());
  for (index t = 0; t < c.tokens; ++t)
    std::copy(c.x.begin() + t * c.hidden, c.x.begin() + (t + 1) * c.hidden, padded.begin() + t * stride);
  const auto a = run(c, c.weights);
  const auto b = delta_layer_forward(c.config, c.weights, padded.data(), c.tokens, stride);
  EXPECT_EQ(a.y, b.y);
  EXPECT_EQ(a.state, b.state);
}

// Causal: the first n tokens alone give the first n rows; a NaN in token t changes no row before t.
TEST(ReferenceDeltaLayer, RowsDependOnlyOnEarlierTokens) {
  for (const char* name : {"delta_gdn", "delta_kda"}) {
    const delta_case c = load_delta_case(name);
    const auto full = run(c, c.weights);
    const index n = 9, row = n * c.config.value_heads * c.config.value_head_dim;
    const auto head = delta_layer_forward(c.config, c.weights, c.x.data(), n, c.hidden);
    EXPECT_TRUE(std::equal(head.y.begin(), head.y.end(), full.y.begin())) << name;
    EXPECT_TRUE(std::equal(head.gated.begin(), head.gated.end(), full.gated.begin())) << name;
    EXPECT_EQ(index(head.o.size()), row);
    std::vector<float> x = c.x;
    x[std::size_t(n * c.hidden + 3)] = std::numeric_limits<float>::quiet_NaN();
    const auto poisoned = delta_layer_forward(c.config, c.weights, x.data(), c.tokens, c.hidden);
    EXPECT_TRUE(std::equal(full.y.begin(), full.y.begin() + n * c.hidden, poisoned.y.begin())) << name;
    EXPECT_TRUE(std::isnan(poisoned.y[std::size_t(n * c.hidden)])) << name;
  }
}

TEST(ReferenceDeltaLayer, NoTokensGiveAZeroState) {
  const delta_case c = load_delta_case("delta_kda");
  const auto r = delta_layer_forward(c.config, c.weights, nullptr, 0, c.hidden);
  EXPECT_EQ(r.tokens, 0);
  EXPECT_TRUE(r.y.empty() && r.o.empty() && r.gated.empty());
  EXPECT_EQ(index(r.state.size()), c.config.state_values());
  EXPECT_EQ(r.state, std::vector<double>(r.state.size(), 0.0));
}

TEST(ReferenceDeltaLayer, RefusesBadInputAndConfig) {
  const delta_case c = load_delta_case("delta_gdn");
  EXPECT_THROW(delta_layer_forward(c.config, c.weights, c.x.data(), c.tokens, c.hidden - 1), gattn::shape_error);
  EXPECT_THROW(delta_layer_forward(c.config, c.weights, nullptr, 2, c.hidden), gattn::shape_error);
  EXPECT_THROW(delta_layer_forward(c.config, c.weights, c.x.data(), -1, c.hidden), gattn::shape_error);
  gattn::delta_config bad = c.config;
  bad.value_heads = 3;
  EXPECT_THAT(error_of([&] { delta_layer_forward(bad, c.weights, c.x.data(), c.tokens, c.hidden); }),
              ::testing::HasSubstr("num_value_heads=3"));
  bad = c.config;
  bad.kind = gattn::delta_kind::kda;  // H_v != H_k
  EXPECT_THROW(delta_layer_forward(bad, c.weights, c.x.data(), c.tokens, c.hidden), gattn::config_error);
}

}  // namespace

}  // namespace test_reference_delta_layer
