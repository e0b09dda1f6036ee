// Tests for gattn/diagnostics/statistics.hpp: docs/spec.md §6 statistics by hand, chunked, and from a vector.
#include "gattn/diagnostics/statistics.hpp"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gattn/io/safetensors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_statistics {

namespace {

// Values below are powers of two (or sums of few), so the expected fractions and means are exact.
TEST(Statistics, HandComputedSmallCase) {
  gattn::statistics_observer obs;
  const float q0[] = {1.0f, 1.0f}, q1[] = {0.5f, 0.25f}, q2[] = {0.125f, 0.0625f};
  obs.add_first_token_probs(0, q0, 2);  // excluded: query 0 only sees itself
  obs.add_first_token_probs(1, q1, 2);
  obs.add_first_token_probs(2, q2, 2);
  const float y[] = {-3.0f, 2.0f, 0.5f};
  obs.add_output(y, 3);
  const float gate[] = {0.0f, 0.5f, 1.0f, 0.25f, 0.0078125f};  // 2^-7 < 0.01
  obs.add_gate(gate, 5);
  // m = gate_mean = 0.3515625. |s·m|: 0.00275, 0.176, 0.000343, 0.00549.
  const float sdpa[] = {0.0078125f, 0.5f, -0.0009765625f, 0.015625f};
  const float gated[] = {0.0f, 0.25f, 0.5f, -0.0009f};
  obs.add_sdpa_and_gated(sdpa, gated, 4);

  const gattn::layer_statistics s = obs.result();
  EXPECT_DOUBLE_EQ(s.first_token_attention, (0.5 + 0.25 + 0.125 + 0.0625) / 4);
  EXPECT_EQ(s.max_abs_output, 3.0);
  ASSERT_TRUE(s.gate_mean && s.gate_frac_below_001);
  EXPECT_EQ(*s.gate_mean, 1.7578125 / 5);
  EXPECT_EQ(*s.gate_frac_below_001, 2.0 / 5);
  ASSERT_TRUE(s.below_001 && s.below_0001);
  EXPECT_EQ(s.below_001->pre_gate, 2.0 / 4);
  EXPECT_EQ(s.below_001->mean_scaled, 3.0 / 4);
  EXPECT_EQ(s.below_001->gated, 2.0 / 4);
  EXPECT_EQ(s.below_0001->pre_gate, 1.0 / 4);
  EXPECT_EQ(s.below_0001->mean_scaled, 1.0 / 4);
  EXPECT_EQ(s.below_0001->gated, 2.0 / 4);
}

TEST(Statistics, SingleTokenGivesFirstTokenAttentionOne) {
  gattn::statistics_observer obs;
  EXPECT_EQ(obs.result().first_token_attention, 1.0);  // nothing seen yet
  const float p[] = {1.0f, 1.0f, 1.0f};
  obs.add_first_token_probs(0, p, 3);
  const float y[] = {0.25f, -0.75f};
  obs.add_output(y, 2);
  const gattn::layer_statistics s = obs.result();
  EXPECT_EQ(s.first_token_attention, 1.0);
  EXPECT_EQ(s.max_abs_output, 0.75);
  // No gate fed: the gate and sparsity statistics are absent, in the struct and in the JSON.
  EXPECT_FALSE(s.gate_mean || s.gate_frac_below_001 || s.below_001 || s.below_0001);
  const nlohmann::json j = s.to_json();
  EXPECT_EQ(j.size(), 2u);
  EXPECT_EQ(j.at("first_token_attention").get<double>(), 1.0);
  EXPECT_EQ(j.at("max_abs_output").get<double>(), 0.75);
}

TEST(Statistics, SparsityNeedsTheGateMean) {
  gattn::statistics_observer obs;
  const float v[] = {0.0f, 1.0f};
  obs.add_sdpa_and_gated(v, v, 2);
  EXPECT_FALSE(obs.result().below_001.has_value());
  obs.add_gate(v, 2);
  EXPECT_TRUE(obs.result().below_001.has_value());
  obs.reset();
  EXPECT_FALSE(obs.result().gate_mean.has_value());
}

TEST(Statistics, NanOutputPropagatesToMaxAbs) {
  gattn::statistics_observer obs;
  const float y[] = {1.0f, std::nanf(""), -2.0f};
  obs.add_output(y, 3);
  EXPECT_TRUE(std::isnan(obs.result().max_abs_output));
}

TEST(Statistics, JsonKeysRoundTrip) {
  gattn::layer_statistics s;
  s.first_token_attention = 0.5;
  s.max_abs_output = 7;
  s.gate_mean = 0.25;
  s.gate_frac_below_001 = 0.125;
  s.below_001 = gattn::layer_statistics::sparsity{0.1, 0.2, 0.3};
  s.below_0001 = gattn::layer_statistics::sparsity{0.01, 0.02, 0.03};
  const nlohmann::json j = s.to_json();
  std::vector<std::string> keys;
  for (const auto& item : j.items()) keys.push_back(item.key());
  const std::vector<std::string> expected = {
      "first_token_attention",      "frac_below_0.001_gated",   "frac_below_0.001_mean_scaled",
      "frac_below_0.001_pre_gate",  "frac_below_0.01_gated",    "frac_below_0.01_mean_scaled",
      "frac_below_0.01_pre_gate",   "gate_frac_below_0.01",     "gate_mean",
      "max_abs_output"};
  EXPECT_EQ(keys, expected);  // nlohmann::json objects iterate in key order
  EXPECT_EQ(j.at("frac_below_0.01_mean_scaled").get<double>(), 0.2);
  EXPECT_EQ(j.at("frac_below_0.001_gated").get<double>(), 0.03);
  EXPECT_EQ(gattn::layer_statistics::from_json(j).to_json(), j);
  EXPECT_THROW(gattn::layer_statistics::from_json(nlohmann::json::array()), gattn::format_error);
  EXPECT_THROW(gattn::layer_statistics::from_json({{"gate_mean", "x"}}), gattn::format_error);
}

TEST(Statistics, ChunkedFeedingEqualsOneShot) {
  const gattn::index T = 37, heads = 4, width = heads * 16, d = 24;
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> probs(std::size_t(heads * T)), y(std::size_t(T * d)), gate(std::size_t(T * width)),
      sdpa(gate.size()), gated(gate.size());
  for (auto& p : probs) p = unit(gen);
  for (auto& v : y) v = normal(gen) * 40.0f;
  for (auto& g : gate) g = unit(gen) * unit(gen) * unit(gen);
  for (std::size_t i = 0; i < sdpa.size(); ++i) {
    sdpa[i] = normal(gen);
    gated[i] = sdpa[i] * gate[i];
  }

  gattn::statistics_arrays a;
  a.probs_first = probs.data();
  a.heads = heads;
  a.tokens = T;
  a.y = y.data();
  a.y_size = gattn::index(y.size());
  a.gate = gate.data();
  a.gate_size = gattn::index(gate.size());
  a.sdpa = sdpa.data();
  a.gated = gated.data();
  a.sdpa_size = gattn::index(sdpa.size());
  const gattn::layer_statistics one_shot = gattn::compute_statistics(a);

  // A prefill of 5 tokens, two decode steps, then a chunked prefill of the rest.
  gattn::statistics_observer obs;
  gattn::index t0 = 0;
  for (gattn::index len : {5, 1, 1, 13, 17}) {
    for (gattn::index i = t0; i < t0 + len; ++i) {
      std::vector<float> column(std::size_t(heads), 0.0f);
      for (gattn::index h = 0; h < heads; ++h) column[std::size_t(h)] = probs[std::size_t(h * T + i)];
      obs.add_first_token_probs(i, column.data(), heads);
    }
    obs.add_output(y.data() + t0 * d, len * d);
    obs.add_gate(gate.data() + t0 * width, len * width);
    obs.add_sdpa_and_gated(sdpa.data() + t0 * width, gated.data() + t0 * width, len * width);
    t0 += len;
  }
  ASSERT_EQ(t0, T);
  // Same values in the same order: bitwise the same numbers.
  EXPECT_EQ(obs.result().to_json(), one_shot.to_json());

  // And the numbers are what a direct double computation gives.
  double first = 0;
  for (gattn::index h = 0; h < heads; ++h)
    for (gattn::index i = 1; i < T; ++i) first += probs[std::size_t(h * T + i)];
  EXPECT_NEAR(one_shot.first_token_attention, first / double(heads * (T - 1)), 1e-14);
  double gate_sum = 0;
  for (float g : gate) gate_sum += g;
  EXPECT_NEAR(*one_shot.gate_mean, gate_sum / double(gate.size()), 1e-14);
  ASSERT_TRUE(one_shot.below_001.has_value());
  EXPECT_GT(one_shot.below_001->gated, one_shot.below_001->pre_gate);  // the data is made to show it
}

TEST(Statistics, BadInputThrows) {
  gattn::statistics_observer obs;
  const float v[] = {1.0f};
  EXPECT_THROW(obs.add_output(v, -1), gattn::shape_error);
  EXPECT_THROW(obs.add_gate(nullptr, 3), gattn::shape_error);
  EXPECT_THROW(obs.add_sdpa_and_gated(v, nullptr, 1), gattn::shape_error);
  EXPECT_THROW(obs.add_first_token_probs(-1, v, 1), gattn::shape_error);
  EXPECT_NO_THROW(obs.add_gate(nullptr, 0));
}

// The reference vector's `stats` metadata (refgen.py, float64) reproduced from its float64 tensors
// fed as float. The activated gate is not stored in the file; it is recomputed from x and g_proj.
TEST(Statistics, MatchesReferenceVectorStats) {
  const std::string path = std::string(GATTN_TEST_DATA) + "/gqa_g1_elementwise_sigmoid.safetensors";
  const auto file = gattn::io::safetensors_file::open(path);
  const auto expected = gattn::layer_statistics::from_json(nlohmann::json::parse(file.metadata().at("stats")));
  const auto config = nlohmann::json::parse(file.metadata().at("config"));
  ASSERT_EQ(config.at("gate").at("position"), "G1");
  ASSERT_EQ(config.at("gate").at("granularity"), "elementwise");
  ASSERT_FALSE(file.contains("g_proj.bias"));

  const auto to_float = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  const std::vector<float> sdpa = to_float(file.read_f64("sdpa")), gated = to_float(file.read_f64("gated")),
                           probs = to_float(file.read_f64("probs_first")), y = to_float(file.read_f64("y"));
  const std::vector<double> x = file.read_f64("x"), wg = file.read_f64("g_proj.weight");
  const gattn::index T = gattn::index(file.info("x").shape.at(0)), d = gattn::index(file.info("x").shape.at(1));
  const gattn::index width = gattn::index(file.info("g_proj.weight").shape.at(0));
  const gattn::index heads = gattn::index(file.info("probs_first").shape.at(0));
  ASSERT_EQ(gattn::index(sdpa.size()), T * width);

  std::vector<float> gate(std::size_t(T * width));
  for (gattn::index t = 0; t < T; ++t)
    for (gattn::index o = 0; o < width; ++o) {
      double u = 0;
      for (gattn::index i = 0; i < d; ++i) u += x[std::size_t(t * d + i)] * wg[std::size_t(o * d + i)];
      gate[std::size_t(t * width + o)] = float(1.0 / (1.0 + std::exp(-u)));
    }

  gattn::statistics_arrays a;
  a.probs_first = probs.data();
  a.heads = heads;
  a.tokens = T;
  a.y = y.data();
  a.y_size = gattn::index(y.size());
  a.gate = gate.data();
  a.gate_size = gattn::index(gate.size());
  a.sdpa = sdpa.data();
  a.gated = gated.data();
  a.sdpa_size = gattn::index(sdpa.size());
  const gattn::layer_statistics got = gattn::compute_statistics(a);

  // Means: float rounding of the inputs. Fractions: a value within rounding of τ may flip, so allow
  // one count out of N.
  EXPECT_NEAR(got.first_token_attention, expected.first_token_attention, 1e-6);
  EXPECT_NEAR(got.max_abs_output, expected.max_abs_output, 1e-6);
  ASSERT_TRUE(got.gate_mean && expected.gate_mean);
  EXPECT_NEAR(*got.gate_mean, *expected.gate_mean, 1e-6);
  const double gate_step = 1.0 / double(gate.size()), step = 1.0 / double(sdpa.size());
  EXPECT_NEAR(*got.gate_frac_below_001, *expected.gate_frac_below_001, gate_step);
  ASSERT_TRUE(got.below_001 && got.below_0001 && expected.below_001 && expected.below_0001);
  for (const auto& [g, e] : {std::make_pair(*got.below_001, *expected.below_001),
                            std::make_pair(*got.below_0001, *expected.below_0001)}) {
    EXPECT_NEAR(g.pre_gate, e.pre_gate, step);
    EXPECT_NEAR(g.mean_scaled, e.mean_scaled, step);
    EXPECT_NEAR(g.gated, e.gated, step);
  }
  // At least one of the fractions is non-trivial, so the comparison means something.
  EXPECT_GT(expected.below_001->gated, 0.0);
}

}  // namespace

}  // namespace test_statistics
