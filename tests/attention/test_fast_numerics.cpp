// A layer's `numerics = fast` (docs/spec.md §10): bf16-operand projections and prefill attention within
// 1e-2·max|y_ref| on every vector family and on random layers (long enough to reach the cache-blocked
// GEMM, or short so that only the attention rounds); `exact` stays bit for bit.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "gattn/attention/any_layer.hpp"
#include "gattn/linalg/linear_map.hpp"
#include "gattn/reference/delta_layer.hpp"
#include "gattn/reference/gqa_layer.hpp"
#include "gattn/reference/mla_layer.hpp"
#include "support/delta_vectors.hpp"
#include "support/random_delta_layer.hpp"
#include "support/random_layer.hpp"
#include "support/vectors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_fast_numerics {

namespace {

using gattn::any_layer;
using gattn::delta_config;
using gattn::delta_kind;
using gattn::gqa_config;
using gattn::layer_config;
using gattn::matrix_view;
using gattn::mla_config;
using gattn::numerics;
using index = gattn::index;
namespace test = gattn::test;

/// The fast tolerance of docs/spec.md §10.
constexpr double fast_tolerance = 1e-2;

layer_config with_numerics(layer_config cfg, numerics n) {
  std::visit([n](auto& c) { c.numerics = n; }, cfg);
  return cfg;
}

std::vector<float> forward(const any_layer& layer, const std::vector<float>& x, index T, index d) {
  std::vector<float> y(std::size_t(T * d), -1.0f);
  layer.forward({x.data(), T, d, d}, {y.data(), T, d, d});
  return y;
}

/// max|y − y_ref| / max|y_ref|, printed so the fast path's error can be read off a run.
double relative_error(const std::string& what, const std::vector<float>& y, const std::vector<double>& y_ref) {
  const double e = test::max_abs_diff(y, y_ref) / test::max_abs(y_ref);
  std::printf("[ fast     ] %-44s max|dy|/max|y| = %.3e\n", what.c_str(), e);
  return e;
}

// ---- the vector files of tests/data ----

class FastNumericsVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(FastNumericsVectors, SoftmaxLayersMatchTheVector) {
  const auto c = test::load_vector_case(GetParam());
  const any_layer layer(with_numerics(c.config, numerics::fast), c.weights);
  EXPECT_LE(relative_error(c.name, forward(layer, c.x, c.tokens, c.hidden), c.y), fast_tolerance);
}

std::vector<std::string> softmax_names() {
  std::vector<std::string> names = test::gqa_case_names();
  for (const auto& n : test::mla_case_names()) names.push_back(n);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Cases, FastNumericsVectors, ::testing::ValuesIn(softmax_names()));

class FastNumericsDeltaVectors : public ::testing::TestWithParam<std::string> {};

// Four of these cases have more than 64 tokens: their output projections take the bf16 GEMM (a delta-rule
// layer keeps its input projection exact, delta_config::numerics).
TEST_P(FastNumericsDeltaVectors, DeltaLayersMatchTheVector) {
  const auto c = test::load_delta_case(GetParam());
  const any_layer layer(with_numerics(c.config, numerics::fast), c.weights);
  EXPECT_LE(relative_error(c.name, forward(layer, c.x, c.tokens, c.hidden), c.y), fast_tolerance);
}

INSTANTIATE_TEST_SUITE_P(Cases, FastNumericsDeltaVectors, ::testing::ValuesIn(test::delta_case_names()));

// The Hugging Face folders: bf16 weights used in place under the layer's prefix, x and y in io.safetensors.
TEST(FastNumericsHfFolders, EveryFolderMatchesItsVector) {
  for (const char* dir : {"hf_qwen3_next", "hf_deepseek_v3_gated", "hf_qwen3_next_linear", "hf_kimi_linear",
                          "extra_hf_deepseek_v2_plain", "extra_hf_kimi_k3_nope", "extra_hf_qwen3_next_7",
                          "extra_hf_qwen3_paper_elementwise", "extra_hf_qwen3_paper_headwise_bias", "hf_qwen3_5",
                          "hf_qwen3_5_linear", "extra_hf_qwen3_5_text_linear_r4", "extra_hf_qwen3_5_moe_linear_mha",
                          "extra_hf_qwen3_5_moe_full_7", "extra_hf_qwen3_5_text_ungated"}) {
    const std::string path = test::data_path(dir);
    const auto io_file = gattn::io::safetensors_file::open(path + "/io.safetensors");
    const layer_config cfg = gattn::io::parse_gattn_config(nlohmann::json::parse(io_file.metadata().at("gattn_config")));
    const auto model = gattn::io::safetensors_file::open(path + "/model.safetensors");
    const gattn::weight_map w = gattn::io::load_weights(model, io_file.metadata().at("prefix"));
    const any_layer layer(with_numerics(cfg, numerics::fast), w);
    const std::vector<float> x = io_file.read_f32("x");
    const index T = io_file.info("x").shape[0], d = io_file.info("x").shape[1];
    EXPECT_LE(relative_error(dir, forward(layer, x, T, d), io_file.read_f64("y")), fast_tolerance) << dir;
  }
}

// ---- random layers with enough rows for the bf16 GEMM (more than linear_map's small-GEMM limit) ----

constexpr index long_prefill = 150;
static_assert(long_prefill > gattn::linear_map::small_gemm_rows_16bit, "the fast path needs more rows");

gqa_config gated_gqa(gattn::gate_source source) {
  gqa_config c = test::small_gqa(4, 2, 16, 64);
  c.gate.enabled = true;
  c.gate.source = source;
  c.gate.rank = source == gattn::gate_source::low_rank ? 8 : 0;
  return c;
}

mla_config gated_mla() {
  mla_config c;
  c.hidden = 64;
  c.heads = 3;
  c.qk_nope_head_dim = 16;
  c.qk_rope_head_dim = 8;
  c.v_head_dim = 16;
  c.kv_lora_rank = 32;
  c.q_lora_rank = 24;
  c.rope.style = gattn::rope_style::interleaved;
  c.rope.rotary_dim = 8;
  c.gate.enabled = true;
  c.gate.source = gattn::gate_source::low_rank;
  c.gate.rank = 8;
  return c;
}

gattn::weight_map mla_weights(const mla_config& c, unsigned seed) {
  std::mt19937 gen(seed);
  gattn::weight_map w;
  auto lin = [&](const std::string& name, index out, index in) {
    w.set(name, {out, in}, test::random_values(gen, out * in, 1.0f / std::sqrt(float(in))));
  };
  const index H = c.heads, r = c.kv_lora_rank, q = c.qk_head_dim();
  lin("q_a_proj.weight", c.q_lora_rank, c.hidden);
  w.set("q_a_layernorm.weight", {c.q_lora_rank}, test::random_values(gen, c.q_lora_rank, 0.1f, 1.0f));
  lin("q_b_proj.weight", H * q, c.q_lora_rank);
  lin("kv_a_proj_with_mqa.weight", r + c.qk_rope_head_dim, c.hidden);
  w.set("kv_a_layernorm.weight", {r}, test::random_values(gen, r, 0.1f, 1.0f));
  lin("kv_b_proj.weight", H * (c.qk_nope_head_dim + c.v_head_dim), r);
  lin("o_proj.weight", c.hidden, H * c.v_head_dim);
  lin("g_a_proj.weight", c.gate.rank, c.hidden);
  lin("g_b_proj.weight", H * c.v_head_dim, c.gate.rank);
  return w;
}

/// One random layer of each family, with its float64 reference output for x.
struct random_case {
  std::string name;
  layer_config config;
  gattn::weight_map weights;
  gattn::mla_form form = gattn::mla_form::automatic;
};

std::vector<random_case> random_cases() {
  std::vector<random_case> out;
  for (auto source : {gattn::gate_source::separate, gattn::gate_source::low_rank}) {
    const gqa_config c = gated_gqa(source);
    out.push_back({std::string("gqa_g1_") + gattn::to_string(source), c, test::random_gqa_weights(c, 21, true)});
  }
  for (auto form : {gattn::mla_form::absorbed, gattn::mla_form::expanded}) {
    const mla_config c = gated_mla();
    out.push_back({std::string("mla_low_rank_gate_") + gattn::to_string(form), c, mla_weights(c, 22), form});
  }
  for (delta_kind kind : {delta_kind::gated_deltanet, delta_kind::kda}) {
    const delta_config c = test::small_delta(kind);
    out.push_back({std::string("delta_") + gattn::to_string(kind), c, test::random_delta_weights(c, 23)});
  }
  return out;
}

std::vector<double> reference_output(const random_case& rc, const std::vector<float>& x, index T) {
  if (const auto* g = std::get_if<gqa_config>(&rc.config)) return gattn::reference::gqa_forward(*g, rc.weights, x.data(), T).y;
  if (const auto* m = std::get_if<mla_config>(&rc.config)) return gattn::reference::mla_forward(*m, rc.weights, x.data(), T).y;
  const delta_config& c = std::get<delta_config>(rc.config);
  return gattn::reference::delta_layer_forward(c, rc.weights, x.data(), T, c.hidden).y;
}

any_layer make_layer(const random_case& rc, const layer_config& cfg) {
  any_layer layer(cfg, rc.weights);
  if (std::holds_alternative<mla_config>(cfg)) layer.set_mla_form(rc.form);
  return layer;
}

index hidden_of(const layer_config& cfg) {
  return std::visit([](const auto& c) { return c.hidden; }, cfg);
}

std::vector<float> random_x(index T, index d, unsigned seed) {
  std::mt19937 gen(seed);
  return test::random_values(gen, T * d, 1.0f);
}

// A long prefill with fast numerics: within the tolerance of the float64 reference, and not the
// exact output (the bf16 GEMM ran).
TEST(FastNumericsRandomLayers, LongPrefillIsWithinTheFastTolerance) {
  for (const random_case& rc : random_cases()) {
    const index d = hidden_of(rc.config), T = long_prefill;
    const auto x = random_x(T, d, 31);
    const auto y_ref = reference_output(rc, x, T);
    const auto fast = forward(make_layer(rc, with_numerics(rc.config, numerics::fast)), x, T, d);
    const auto exact = forward(make_layer(rc, rc.config), x, T, d);
    EXPECT_LE(relative_error(rc.name + " T=150", fast, y_ref), fast_tolerance) << rc.name;
    EXPECT_LE(test::max_abs_diff(exact, y_ref), 1e-4 * test::max_abs(y_ref)) << rc.name;
    EXPECT_NE(std::memcmp(fast.data(), exact.data(), fast.size() * sizeof(float)), 0)
        << rc.name << ": fast numerics gave the exact output bit for bit (the bf16 GEMM did not run)";
  }
}

// A prefill too short for the bf16 GEMM (the projections stay exact) still differs from exact:
// the prefill attention's Q·Kᵀ and P·V ran on bf16 operands; within the tolerance, f32 and bf16 caches.
TEST(FastNumericsRandomLayers, ShortPrefillRoundsTheAttentionOnly) {
  constexpr index T = 24;
  static_assert(T <= gattn::linear_map::small_gemm_rows_16bit && T > 4, "exact projections, prefill attention path");
  for (const random_case& rc : random_cases()) {
    if (std::holds_alternative<delta_config>(rc.config)) continue;
    for (auto cache : {gattn::storage_type::f32, gattn::storage_type::bf16}) {
      layer_config cfg = rc.config;
      std::visit([cache](auto& c) {
        if constexpr (!std::is_same<std::decay_t<decltype(c)>, delta_config>::value) c.kv_cache_type = cache;
      }, cfg);
      const index d = hidden_of(cfg);
      const auto x = random_x(T, d, 34);
      const auto y_ref = reference_output(rc, x, T);
      const auto fast = forward(make_layer(rc, with_numerics(cfg, numerics::fast)), x, T, d);
      const auto exact = forward(make_layer(rc, cfg), x, T, d);
      const std::string what = rc.name + " T=24 " + gattn::to_string(cache) + " cache";
      EXPECT_LE(relative_error(what, fast, y_ref), fast_tolerance) << what;
      EXPECT_NE(std::memcmp(fast.data(), exact.data(), fast.size() * sizeof(float)), 0)
          << what << ": fast numerics gave the exact output bit for bit (the attention did not round)";
    }
  }
}

// The field left at its default and set to `exact` give the same bits.
TEST(FastNumericsRandomLayers, ExactIsTheDefaultBitForBit) {
  for (const random_case& rc : random_cases()) {
    const index d = hidden_of(rc.config), T = long_prefill;
    const auto x = random_x(T, d, 32);
    std::visit([](const auto& c) { EXPECT_EQ(c.numerics, numerics::exact); }, rc.config);
    const auto by_default = forward(make_layer(rc, rc.config), x, T, d);
    const auto explicit_exact = forward(make_layer(rc, with_numerics(rc.config, numerics::exact)), x, T, d);
    EXPECT_EQ(std::memcmp(by_default.data(), explicit_exact.data(), by_default.size() * sizeof(float)), 0) << rc.name;
  }
}

/// Sequence lengths of the batched test: 150 rows in one call, each sequence attends to itself.
const std::vector<index> batch_lengths = {90, 60};

/// Runs a batch through step() (one cache or state per sequence) and returns y for all rows.
std::vector<float> batched_step(const any_layer& layer, const layer_config& cfg, const std::vector<float>& x) {
  const index d = hidden_of(cfg), B = index(batch_lengths.size());
  std::vector<index> cu = {0};
  for (index n : batch_lengths) cu.push_back(cu.back() + n);
  const index N = cu.back();
  std::vector<float> y(std::size_t(N * d), -1.0f);
  gattn::layer_workspace ws;
  if (layer.is_delta()) {
    std::vector<gattn::delta_state> states;
    for (index s = 0; s < B; ++s) states.push_back(layer.make_state());
    std::vector<gattn::delta_sequence> handles(states.begin(), states.end());
    layer.step({x.data(), N, d, d}, cu.data(), B, handles.data(), {y.data(), N, d, d}, ws);
    return y;
  }
  std::vector<gattn::kv_cache> caches;
  for (index s = 0; s < B; ++s)
    caches.push_back(std::visit(
        [&](const auto& c) -> gattn::kv_cache {
          if constexpr (std::is_same<std::decay_t<decltype(c)>, delta_config>::value) return gattn::kv_cache();
          else return gattn::kv_cache(c, N);
        },
        cfg));
  std::vector<gattn::sequence_cache> handles(caches.begin(), caches.end());
  layer.step({x.data(), N, d, d}, cu.data(), B, handles.data(), {y.data(), N, d, d}, ws);
  return y;
}

TEST(FastNumericsRandomLayers, BatchedStepIsWithinTheFastTolerance) {
  for (const random_case& rc : random_cases()) {
    const layer_config cfg = with_numerics(rc.config, numerics::fast);
    const index d = hidden_of(cfg);
    const auto x = random_x(batch_lengths[0] + batch_lengths[1], d, 33);
    const auto y = batched_step(make_layer(rc, cfg), cfg, x);
    index first = 0;
    for (index n : batch_lengths) {
      const std::vector<float> xs(x.begin() + first * d, x.begin() + (first + n) * d);
      const std::vector<float> ys(y.begin() + first * d, y.begin() + (first + n) * d);
      EXPECT_LE(relative_error(rc.name + " step rows " + std::to_string(n), ys, reference_output(rc, xs, n)),
                fast_tolerance)
          << rc.name;
      first += n;
    }
  }
}

}  // namespace

}  // namespace test_fast_numerics
