// Bad inputs to the layers: each is a gattn::error subclass whose message names the field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "gattn/attention/any_layer.hpp"
#include "gattn/attention/gqa_layer.hpp"
#include "gattn/attention/mla_layer.hpp"
#include "gattn/reference/gqa_layer.hpp"
#include "support/random_layer.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_layer_errors {

namespace {

using gattn::gqa_config;
using gattn::gqa_layer;
using gattn::kv_cache;
using gattn::mla_config;
using gattn::mla_layer;
using index = gattn::index;
using ::testing::HasSubstr;
namespace test = gattn::test;

template <class E, class F>
void expect_error(F&& f, const std::string& word) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one naming '" << word << "'";
  } catch (const E& e) {
    EXPECT_THAT(e.what(), HasSubstr(word));
  }
}

TEST(LayerErrors, MissingAndMisshapedWeightsAreNamed) {
  gqa_config c = test::small_gqa();
  c.gate.enabled = true;
  auto w = test::random_gqa_weights(c, 1);
  auto missing = w;
  missing = gattn::weight_map();
  for (const auto& [n, t] : w.all())
    if (n != "g_proj.weight") missing.set(n, t);
  expect_error<gattn::weight_error>([&] { gqa_layer l(c, missing); }, "g_proj.weight");
  auto wrong = w;
  wrong.set("k_proj.weight", {31, 48}, std::vector<float>(31 * 48));
  expect_error<gattn::weight_error>([&] { gqa_layer l(c, wrong); }, "k_proj.weight");
  expect_error<gattn::weight_error>([&] { w.set("x", {2, 3}, std::vector<float>(5)); }, "x");
}

TEST(LayerErrors, InvalidConfigIsRefusedAtConstruction) {
  gqa_config c = test::small_gqa(6, 4);
  expect_error<gattn::config_error>([&] { gqa_layer l(c, {}); }, "num_key_value_heads=4");
  c = test::small_gqa();
  c.rope.rotary_dim = 7;
  expect_error<gattn::config_error>([&] { gqa_layer l(c, {}); }, "rotary");
}

TEST(LayerErrors, CacheOverflowAndShapeMismatch) {
  gqa_config c = test::small_gqa();
  gqa_layer layer(c, test::random_gqa_weights(c, 2));
  kv_cache cache(c, 4);
  std::vector<float> x(5 * 48), y(5 * 48);
  layer.prefill({x.data(), 3, 48, 48}, cache, {y.data(), 3, 48, 48});
  expect_error<gattn::cache_error>([&] { layer.decode({x.data(), 2, 48, 48}, cache, {y.data(), 2, 48, 48}); },
                                   "capacity of 4");
  EXPECT_EQ(cache.size(), 3);  // nothing was appended by the refused call
  layer.decode({x.data(), 1, 48, 48}, cache, {y.data(), 1, 48, 48});
  EXPECT_EQ(cache.size(), 4);
  expect_error<gattn::cache_error>([&] { layer.decode({x.data(), 1, 48, 48}, cache, {y.data(), 1, 48, 48}); },
                                   "exceeds");
  kv_cache fresh(c, 8);
  expect_error<gattn::shape_error>([&] { layer.prefill({x.data(), 2, 40, 40}, fresh, {y.data(), 2, 48, 48}); },
                                   "hidden_size=48");
  kv_cache other(8, 16, 16);
  expect_error<gattn::shape_error>([&] { layer.prefill({x.data(), 1, 48, 48}, other, {y.data(), 1, 48, 48}); },
                                   "kv_heads * head_dim");
}

TEST(LayerErrors, NonCausalLayerRefusesDecode) {
  gqa_config c = test::small_gqa();
  c.causal = false;
  gqa_layer layer(c, test::random_gqa_weights(c, 3));
  kv_cache cache(c, 8);
  std::vector<float> x(2 * 48), y(2 * 48);
  layer.prefill({x.data(), 2, 48, 48}, cache, {y.data(), 2, 48, 48});
  expect_error<gattn::cache_error>([&] { layer.decode({x.data(), 1, 48, 48}, cache, {y.data(), 1, 48, 48}); },
                                   "causal");
  expect_error<gattn::cache_error>([&] { layer.prefill({x.data(), 1, 48, 48}, cache, {y.data(), 1, 48, 48}); },
                                   "non-causal");
}

TEST(LayerErrors, EmptyInputIsANoOp) {
  gqa_config c = test::small_gqa();
  gqa_layer layer(c, test::random_gqa_weights(c, 4));
  kv_cache cache(c, 2);
  std::vector<float> x(48), y(48, 7.0f);
  layer.prefill({x.data(), 0, 48, 48}, cache, {y.data(), 0, 48, 48});
  EXPECT_EQ(cache.size(), 0);
  EXPECT_EQ(y[0], 7.0f);
}

constexpr index absurd = 2147483646;  // 2^31 - 2

mla_config small_mla() {
  mla_config c;
  c.hidden = 32;
  c.heads = 2;
  c.qk_nope_head_dim = 8;
  c.qk_rope_head_dim = 8;
  c.v_head_dim = 8;
  c.kv_lora_rank = 16;
  c.rope.style = gattn::rope_style::interleaved;
  c.rope.rotary_dim = 8;
  return c;
}

gattn::weight_map small_mla_weights(const mla_config& c) {
  std::mt19937 gen(5);
  gattn::weight_map w;
  auto lin = [&](const std::string& name, index out, index in) {
    w.set(name, {out, in}, test::random_values(gen, out * in, 1.0f / std::sqrt(float(in))));
  };
  const index H = c.heads, Q = c.qk_head_dim();
  lin("q_proj.weight", H * Q, c.hidden);
  lin("kv_a_proj_with_mqa.weight", c.kv_lora_rank + c.qk_rope_head_dim, c.hidden);
  w.set("kv_a_layernorm.weight", {c.kv_lora_rank}, std::vector<float>(std::size_t(c.kv_lora_rank), 1.0f));
  lin("kv_b_proj.weight", H * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
  lin("o_proj.weight", c.hidden, H * c.v_head_dim);
  return w;
}

// Before the fix the layers built their RoPE table in a member initialiser, ahead of validate():
// 2^30 entries (8 GB, tens of seconds), then a weight error. Now: a config_error, immediately.
TEST(LayerErrors, AbsurdSizesAreRefusedBeforeAnythingIsBuilt) {
  gqa_config g = test::small_gqa();
  g.head_dim = absurd;
  g.rope.rotary_dim = absurd;
  expect_error<gattn::config_error>([&] { gqa_layer l(g, {}); }, "head_dim=2147483646");
  expect_error<gattn::config_error>([&] { gattn::any_layer l(g, {}); }, "head_dim=2147483646");
  expect_error<gattn::config_error>([&] { gattn::gated_gqa<> l(g, {}); }, "head_dim=2147483646");
  mla_config m = small_mla();
  m.qk_rope_head_dim = absurd;
  m.rope.rotary_dim = absurd;
  expect_error<gattn::config_error>([&] { mla_layer l(m, {}); }, "qk_rope_head_dim=2147483646");
  expect_error<gattn::config_error>([&] { gattn::any_layer l(m, {}); }, "qk_rope_head_dim=2147483646");
}

// A softmax scale that is inf as float: the kernel used to refuse it only when run, and the
// reference backend (--reference) ran it and wrote NaN. Both refuse it at construction now.
TEST(LayerErrors, ScaleTheKernelCannotTakeIsRefusedOnEveryBackend) {
  gqa_config g = test::small_gqa();
  g.attention_scale = 1e39;
  const auto w = test::random_gqa_weights(test::small_gqa(), 6);
  expect_error<gattn::config_error>([&] { gqa_layer l(g, w); }, "attention_scale=1e+39");
  std::vector<float> x(2 * 48, 0.25f);
  expect_error<gattn::config_error>([&] { gattn::reference::gqa_forward(g, w, x.data(), 2); }, "attention_scale");
}

TEST(LayerErrors, MakeCacheRefusesSizesThatCannotBeAllocated) {
  const gqa_config g = test::small_gqa();  // 2 KV heads of 16: 32 values per key row
  gattn::any_layer gqa(g, test::random_gqa_weights(g, 7));
  const mla_config m = small_mla();  // latent rows of 16 + 8
  gattn::any_layer mla(m, small_mla_weights(m));
  // 2^59 * 32 overflows 64 bits (it used to wrap to an empty cache, then decode crashed)
  expect_error<gattn::cache_error>([&] { (void)gqa.make_cache(index(1) << 59); }, "576460752303423488 * 32");
  expect_error<gattn::cache_error>([&] { (void)mla.make_cache(index(1) << 59); }, "576460752303423488 * 24");
  // 2^50 * 32 values is 4 PiB: std::bad_alloc before, a named cache_error now
  expect_error<gattn::cache_error>([&] { (void)gqa.make_cache(index(1) << 50); }, "1125899906842624 * 32");
  expect_error<gattn::cache_error>([&] { (void)mla.make_cache(index(1) << 50); }, "1125899906842624 * 24");
  EXPECT_EQ(gqa.make_cache(4).capacity(), 4);
}

TEST(LayerErrors, CallsWhoseWorkspaceOverflowsAreRefused) {
  const gqa_config g = test::small_gqa();
  gqa_layer layer(g, test::random_gqa_weights(g, 8));
  std::vector<float> x(48), y(48);
  for (index rows : {index(1) << 40, index(1) << 60}) {
    expect_error<gattn::shape_error>([&] { layer.forward({x.data(), rows, 48, 48}, {y.data(), rows, 48, 48}); },
                                     "T (rows of x)");
    kv_cache cache(g, 4);
    expect_error<gattn::shape_error>(
        [&] { layer.prefill({x.data(), rows, 48, 48}, cache, {y.data(), rows, 48, 48}); }, "T (rows of x)");
    EXPECT_EQ(cache.size(), 0);
  }
  expect_error<gattn::shape_error>([&] { layer.forward({x.data(), -1, 48, 48}, {y.data(), -1, 48, 48}); },
                                   "-1 rows");

  const mla_config m = small_mla();
  mla_layer mla(m, small_mla_weights(m));
  std::vector<float> xm(32), ym(32);
  for (index rows : {index(1) << 40, index(1) << 60}) {
    expect_error<gattn::shape_error>([&] { mla.forward({xm.data(), rows, 32, 32}, {ym.data(), rows, 32, 32}); },
                                     "T (rows of x)");
    kv_cache cache(m, 4);
    expect_error<gattn::shape_error>(
        [&] { mla.prefill({xm.data(), rows, 32, 32}, cache, {ym.data(), rows, 32, 32}); }, "T (rows of x)");
    EXPECT_EQ(cache.size(), 0);
  }
  kv_cache cache(m, 2);
  mla.prefill({xm.data(), 1, 32, 32}, cache, {ym.data(), 1, 32, 32});
  EXPECT_EQ(cache.size(), 1);
}

}  // namespace

}  // namespace test_layer_errors
