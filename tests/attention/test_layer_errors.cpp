// Bad inputs to the layers: each is a gattn::error subclass whose message names the field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gattn/attention/gqa_layer.hpp"
#include "gattn/attention/mla_layer.hpp"
#include "support/random_layer.hpp"

namespace {

using gattn::gqa_config;
using gattn::gqa_layer;
using gattn::kv_cache;
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

}  // namespace
