// The fast MLA layer against the float64 vectors, in both forms, in prefill, chunks and decode;
// and the expanded and absorbed forms against each other.
#include <gtest/gtest.h>

#include <random>

#include "gattn/attention/mla_layer.hpp"
#include "gattn/baseline/sdpa_backend.hpp"
#include "support/vectors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_mla_layer {

namespace {

using gattn::kv_cache;
using gattn::matrix_view;
using gattn::mla_config;
using gattn::mla_form;
using gattn::mla_layer;
using gattn::sdpa_backend;
using index = gattn::index;
namespace test = gattn::test;

/// Prefills `first` tokens, then feeds the rest in chunks of `step` (0: all at once).
std::vector<float> run_mla(const mla_layer& layer, const std::vector<float>& x, index T, index d, index first,
                           index step) {
  std::vector<float> y(std::size_t(T * d), -1.0f);
  kv_cache cache(layer.config(), T);
  index done = 0;
  while (done < T) {
    const index n = done == 0 ? std::max<index>(1, std::min(first, T)) : (step ? std::min(step, T - done) : T - done);
    layer.prefill({x.data() + done * d, n, d, d}, cache, {y.data() + done * d, n, d, d});
    done += n;
  }
  return y;
}

struct mla_case {
  std::string vector;
  mla_form form;
  sdpa_backend backend;
  index first, step;
};

class MlaLayerVectors : public ::testing::TestWithParam<mla_case> {};

TEST_P(MlaLayerVectors, MatchesFloat64Output) {
  const mla_case& mc = GetParam();
  const auto c = test::load_vector_case(mc.vector);
  mla_layer layer(std::get<mla_config>(c.config), c.weights);
  layer.set_form(mc.form);
  layer.set_sdpa(gattn::sdpa_of(mc.backend));
  const auto y = run_mla(layer, c.x, c.tokens, c.hidden, mc.first, mc.step);
  EXPECT_LE(test::max_abs_diff(y, c.y), 1e-4 * test::max_abs(c.y));
  EXPECT_LE(test::max_abs_diff(y, c.y), 1e-5 * std::max(1.0, test::max_abs(c.y)));
}

std::vector<mla_case> mla_cases() {
  std::vector<mla_case> out;
  for (const auto& v : test::mla_case_names())
    for (mla_form f : {mla_form::automatic, mla_form::absorbed, mla_form::expanded}) {
      out.push_back({v, f, sdpa_backend::kernel, 1 << 20, 0});  // one prefill
      out.push_back({v, f, sdpa_backend::kernel, 4, 1});        // decode from 4
      out.push_back({v, f, sdpa_backend::kernel, 3, 5});        // chunks
      out.push_back({v, f, sdpa_backend::reference, 4, 1});
    }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Vectors, MlaLayerVectors, ::testing::ValuesIn(mla_cases()), [](const auto& info) {
  const mla_case& m = info.param;
  return m.vector + "_" + gattn::to_string(m.form) + "_" + gattn::to_string(m.backend) + "_" +
         std::to_string(m.first > 1000 ? 0 : m.first) + "_" + std::to_string(m.step);
});

TEST(MlaLayer, AbsorbedEqualsExpandedOnWideShapes) {
  // DeepSeek-like proportions at a small width: d_c 64, d_rope 16, d_nope 32, d_v 32.
  mla_config c;
  c.hidden = 96;
  c.heads = 3;
  c.qk_nope_head_dim = 32;
  c.qk_rope_head_dim = 16;
  c.v_head_dim = 32;
  c.kv_lora_rank = 64;
  c.q_lora_rank = 48;
  c.rope.style = gattn::rope_style::interleaved;
  c.rope.rotary_dim = 16;
  c.gate.enabled = true;
  std::mt19937 gen(7);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  gattn::weight_map w;
  auto lin = [&](const std::string& name, index out, index in) {
    std::vector<float> v(std::size_t(out * in));
    for (auto& e : v) e = n01(gen) / std::sqrt(float(in));
    w.set(name, {out, in}, v);
  };
  auto ones = [&](const std::string& name, index n) { w.set(name, {n}, std::vector<float>(std::size_t(n), 1.0f)); };
  lin("q_a_proj.weight", 48, 96);
  ones("q_a_layernorm.weight", 48);
  lin("q_b_proj.weight", 3 * 48, 48);
  lin("kv_a_proj_with_mqa.weight", 80, 96);
  ones("kv_a_layernorm.weight", 64);
  lin("kv_b_proj.weight", 3 * 64, 64);
  lin("o_proj.weight", 96, 3 * 32);
  lin("g_proj.weight", 3 * 32, 96);
  const index T = 37;
  std::vector<float> x(std::size_t(T * 96));
  for (auto& e : x) e = n01(gen);
  mla_layer absorbed(c, w), expanded(c, w);
  absorbed.set_form(mla_form::absorbed);
  expanded.set_form(mla_form::expanded);
  const auto ya = run_mla(absorbed, x, T, 96, T, 0);
  const auto ye = run_mla(expanded, x, T, 96, T, 0);
  const auto yd = run_mla(absorbed, x, T, 96, 5, 1);
  EXPECT_LE(test::max_abs_diff(ya, ye), 2e-5 * test::max_abs(ye));
  EXPECT_LE(test::max_abs_diff(yd, ye), 2e-5 * test::max_abs(ye));
}

TEST(MlaLayer, CacheHoldsOnlyTheLatent) {
  const auto c = test::load_vector_case("mla_gated");
  const auto& cfg = std::get<mla_config>(c.config);
  kv_cache cache(cfg, 4);
  EXPECT_EQ(cache.key_width(), cfg.kv_lora_rank + cfg.qk_rope_head_dim);
  EXPECT_EQ(cache.value_width(), 0);
  mla_layer layer(cfg, c.weights);
  std::vector<float> y(std::size_t(5 * c.hidden));
  EXPECT_THROW(layer.prefill({c.x.data(), 5, c.hidden, c.hidden}, cache, {y.data(), 5, c.hidden, c.hidden}),
               gattn::cache_error);
  EXPECT_EQ(cache.size(), 0);
}

}  // namespace

}  // namespace test_mla_layer
