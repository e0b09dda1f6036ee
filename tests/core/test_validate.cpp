// Tests for include/gattn/core/validate.hpp: absurd sizes and configs that would compute NaN are
// refused by validate(), and so on every path that goes through it (gattn and HF configs, the
// reference layers, KV caches), with a config_error naming the field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "gattn/cache/kv_cache.hpp"
#include "gattn/core/validate.hpp"
#include "gattn/io/gattn_config.hpp"
#include "gattn/io/hf_config.hpp"
#include "gattn/reference/gqa_layer.hpp"
#include "gattn/reference/mla_layer.hpp"
#include "support/random_layer.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_validate {

namespace {

using gattn::config_error;
using gattn::gqa_config;
using gattn::mla_config;
using index = gattn::index;
using nlohmann::json;
using ::testing::HasSubstr;
namespace test = gattn::test;

constexpr index absurd = 2147483646;  // 2^31 - 2: even, and accepted by the JSON readers

template <class E, class F>
void expect_error(F&& f, const std::string& word) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one naming '" << word << "'";
  } catch (const E& e) {
    EXPECT_THAT(e.what(), HasSubstr(word));
  }
}

template <class C>
void expect_refused(const C& c, const std::string& word) {
  expect_error<config_error>([&] { gattn::validate(c); }, word);
}

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

gqa_config yarn_gqa() {
  gqa_config c = test::small_gqa();
  c.rope.scaling.yarn = true;
  c.rope.scaling.factor = 4;
  c.rope.scaling.original_max_position_embeddings = 4096;
  return c;
}

json gattn_gqa_json() {
  return {{"attention", "gqa"}, {"hidden_size", 48}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"head_dim", 16}};
}
json gattn_mla_json() {
  return {{"attention", "mla"},   {"hidden_size", 32},   {"num_attention_heads", 2}, {"qk_nope_head_dim", 8},
          {"qk_rope_head_dim", 8}, {"v_head_dim", 8},    {"kv_lora_rank", 16}};
}
json deepseek_json() {
  return {{"model_type", "deepseek_v3"}, {"hidden_size", 64},     {"num_attention_heads", 4},
          {"num_key_value_heads", 4},    {"q_lora_rank", 24},     {"kv_lora_rank", 32},
          {"qk_nope_head_dim", 16},      {"qk_rope_head_dim", 8}, {"v_head_dim", 16},
          {"rms_norm_eps", 1e-6},        {"rope_theta", 10000.0}};
}

TEST(Validate, SmallConfigsPass) {
  EXPECT_NO_THROW(gattn::validate(test::small_gqa()));
  EXPECT_NO_THROW(gattn::validate(yarn_gqa()));
  EXPECT_NO_THROW(gattn::validate(small_mla()));
}

TEST(Validate, SizesAboveTheLimitAreRefused) {
  gqa_config g = test::small_gqa();
  g.head_dim = absurd;
  g.rope.rotary_dim = absurd;
  expect_refused(g, "head_dim=2147483646");
  g = test::small_gqa();
  g.hidden = gattn::limits::max_size + 1;
  expect_refused(g, "hidden_size=");
  g = test::small_gqa(absurd, 2);
  expect_refused(g, "num_attention_heads=2147483646");
  g = test::small_gqa();
  g.gate.enabled = true;
  g.gate.source = gattn::gate_source::low_rank;
  g.gate.rank = absurd;
  expect_refused(g, "gate.rank=2147483646");

  mla_config m = small_mla();
  m.qk_rope_head_dim = absurd;
  m.rope.rotary_dim = absurd;
  expect_refused(m, "qk_rope_head_dim=2147483646");
  const std::vector<std::pair<index mla_config::*, std::string>> fields = {
      {&mla_config::hidden, "hidden_size"},         {&mla_config::heads, "num_attention_heads"},
      {&mla_config::qk_nope_head_dim, "qk_nope_head_dim"}, {&mla_config::v_head_dim, "v_head_dim"},
      {&mla_config::kv_lora_rank, "kv_lora_rank"},  {&mla_config::q_lora_rank, "q_lora_rank"}};
  for (const auto& [field, name] : fields) {
    m = small_mla();
    m.*field = absurd;
    expect_refused(m, name + "=2147483646");
  }
}

TEST(Validate, TheSizeLimitIsInclusive) {
  gqa_config g = test::small_gqa(1, 1, gattn::limits::max_size, 64);
  EXPECT_NO_THROW(gattn::validate(g));
  g = test::small_gqa(1, 1, gattn::limits::max_size + 2, 64);
  expect_refused(g, "head_dim=1048578");
}

TEST(Validate, ProjectionsAboveTheValueLimitAreRefused) {
  // Every size is allowed on its own, but q_proj alone would hold 2^40 values.
  gqa_config g = test::small_gqa(1024, 1024, 1024, 1 << 20);
  expect_refused(g, "hidden_size");
  expect_refused(g, "limits::max_values");
  mla_config m = small_mla();
  m.heads = 1 << 12;
  m.v_head_dim = 1 << 12;
  m.kv_lora_rank = 1 << 20;
  expect_refused(m, "kv_lora_rank");
}

TEST(Validate, NonFiniteAndOutOfRangeFloatsAreRefused) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (double eps : {-1.0, nan, inf, 1e39}) {
    gqa_config g = test::small_gqa();
    g.rms_norm_eps = eps;
    expect_refused(g, "rms_norm_eps");
    mla_config m = small_mla();
    m.rms_norm_eps = eps;
    expect_refused(m, "rms_norm_eps");
  }
  for (double theta : {0.0, -1.0, nan, inf}) {
    gqa_config g = test::small_gqa();
    g.rope.theta = theta;
    expect_refused(g, "rope_theta");
  }
  for (double f : {-0.5, 1.5, nan}) {
    gqa_config g = test::small_gqa();
    g.partial_rotary_factor = f;
    expect_refused(g, "partial_rotary_factor");
  }
  // an attention_scale that is finite in double but not in fp32, or rounds to fp32 zero
  for (double s : {1e39, 1e-50, inf, nan, -1.0}) {
    gqa_config g = test::small_gqa();
    g.attention_scale = s;
    expect_refused(g, "attention_scale");
    mla_config m = small_mla();
    m.attention_scale = s;
    expect_refused(m, "attention_scale");
  }
}

TEST(Validate, YarnFieldsThatWouldComputeNanAreRefused) {
  gqa_config g = yarn_gqa();
  g.rope.theta = 1;  // ln θ = 0 divides the correction range
  expect_refused(g, "rope_theta=1");
  g.rope.theta = 0.5;
  expect_refused(g, "rope_theta=0.5");

  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  using scaling = gattn::rope_scaling_config;
  const std::vector<std::pair<double scaling::*, std::string>> fields = {
      {&scaling::factor, "factor"},
      {&scaling::original_max_position_embeddings, "original_max_position_embeddings"},
      {&scaling::beta_fast, "beta_fast"},
      {&scaling::beta_slow, "beta_slow"},
      {&scaling::mscale, "mscale"},
      {&scaling::mscale_all_dim, "mscale_all_dim"},
      {&scaling::attention_factor, "attention_factor"}};
  for (const auto& [field, name] : fields)
    for (double v : {-1.0, inf, nan}) {
      g = yarn_gqa();
      g.rope.scaling.*field = v;
      expect_refused(g, "rope_scaling." + name);
    }
  g = yarn_gqa();
  g.rope.scaling.factor = 0;  // 0 means "absent" only for the optional fields
  expect_refused(g, "rope_scaling.factor");
}

TEST(Validate, DerivedYarnValuesThatAreNotFiniteAreRefused) {
  gqa_config g = yarn_gqa();
  g.rope.scaling.attention_factor = 1e300;  // finite, but inf as the fp32 factor of cos and sin
  expect_refused(g, "attention factor");
  g = yarn_gqa();
  g.rope.scaling.mscale = 1e308;  // m(s, mscale) / m(s, mscale_all_dim) overflows fp32
  g.rope.scaling.mscale_all_dim = 1;
  expect_refused(g, "mscale=1e+308");
  g = yarn_gqa();
  g.rope.scaling.factor = 1e-320;  // 1 / (s · base) is inf
  expect_refused(g, "inv_freq");
  g = yarn_gqa();
  g.rope.scaling.beta_fast = 1e-320;  // corr(β_fast) = +inf: the ramp is inf / inf
  expect_refused(g, "inv_freq");
}

TEST(Validate, FrequenciesThatOverflowAtLatePositionsAreRefused) {
  // θ^(−62/64) is finite for this θ, but times a position of 2^40 it is not: cos(inf) is NaN.
  gqa_config g = test::small_gqa(4, 2, 64, 48);
  g.rope.theta = 1e-310;
  expect_refused(g, "inv_freq[31]");
  g.rope.theta = 1e-3;
  EXPECT_NO_THROW(gattn::validate(g));
}

TEST(Validate, GattnConfigFilesAreRefused) {
  json j = gattn_gqa_json();
  EXPECT_NO_THROW(gattn::io::parse_gattn_config(j));
  j["head_dim"] = absurd;
  expect_error<config_error>([&] { gattn::io::parse_gattn_config(j); }, "head_dim=2147483646");
  j = gattn_gqa_json();
  j["attention_scale"] = 1e39;
  expect_error<config_error>([&] { gattn::io::parse_gattn_config(j); }, "attention_scale");
  j = gattn_gqa_json();
  j["rope_theta"] = 1.0;
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 4096}};
  expect_error<config_error>([&] { gattn::io::parse_gattn_config(j); }, "rope_theta=1");
  j = gattn_gqa_json();
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 4096},
                       {"attention_factor", 1e300}};
  expect_error<config_error>([&] { gattn::io::parse_gattn_config(j); }, "attention_factor=1e+300");

  j = gattn_mla_json();
  EXPECT_NO_THROW(gattn::io::parse_gattn_config(j));
  j["qk_rope_head_dim"] = absurd;
  expect_error<config_error>([&] { gattn::io::parse_gattn_config(j); }, "qk_rope_head_dim=2147483646");
}

TEST(Validate, HfConfigsAreRefused) {
  json j = deepseek_json();
  EXPECT_NO_THROW(gattn::io::parse_hf_config(j));
  j["qk_rope_head_dim"] = absurd;
  expect_error<config_error>([&] { gattn::io::parse_hf_config(j); }, "qk_rope_head_dim=2147483646");
  // mscale_all_dim enters the softmax scale squared: finite in double, inf in fp32
  j = deepseek_json();
  j["rope_scaling"] = {{"type", "yarn"},        {"factor", 40.0},        {"original_max_position_embeddings", 4096},
                       {"beta_fast", 32.0},     {"beta_slow", 1.0},      {"mscale", 1.0},
                       {"mscale_all_dim", 1e21}};
  expect_error<config_error>([&] { gattn::io::parse_hf_config(j); }, "attention_scale");
}

TEST(Validate, ReferenceLayersRefuseWhatTheFastPathRefuses) {
  gqa_config g = test::small_gqa();
  const auto w = test::random_gqa_weights(g, 1);
  std::vector<float> x(2 * 48, 0.5f);
  EXPECT_NO_THROW(gattn::reference::gqa_forward(g, w, x.data(), 2));
  g.attention_scale = 1e39;  // the kernel takes the scale as float: inf
  expect_error<config_error>([&] { gattn::reference::gqa_forward(g, w, x.data(), 2); }, "attention_scale");
  g = test::small_gqa();
  expect_error<gattn::shape_error>([&] { gattn::reference::gqa_forward(g, w, x.data(), index(1) << 60); }, "T (rows of x)");
  expect_error<gattn::shape_error>([&] { gattn::reference::gqa_forward(g, w, x.data(), -1); }, "rows");
  mla_config m = small_mla();
  m.rope.scaling.yarn = true;
  m.rope.scaling.factor = 4;
  m.rope.scaling.original_max_position_embeddings = 4096;
  m.rope.theta = 1;
  expect_error<config_error>([&] { gattn::reference::mla_forward(m, {}, x.data(), 2); }, "rope_theta=1");
}

TEST(Validate, CacheOfAnInvalidConfigIsRefused) {
  gqa_config g = test::small_gqa();
  g.head_dim = absurd;
  g.kv_heads = absurd;  // kv_heads * head_dim overflows: refused before the product is formed
  g.q_heads = absurd;
  expect_error<config_error>([&] { gattn::kv_cache c(g, 4); }, "2147483646");
  mla_config m = small_mla();
  m.kv_lora_rank = std::numeric_limits<index>::max();
  expect_error<config_error>([&] { gattn::kv_cache c(m, 4); }, "kv_lora_rank");
}

TEST(Validate, CacheSizesAreCheckedAndNamed) {
  expect_error<gattn::cache_error>([&] { gattn::kv_cache c(index(1) << 59, 32, 32); }, "576460752303423488 * 32");
  expect_error<gattn::cache_error>([&] { gattn::kv_cache c(index(1) << 50, 32, 0); }, "capacity * key_width = 1125899906842624");
  expect_error<gattn::cache_error>([&] { gattn::kv_cache c(16, index(1) << 62, 0); }, "key_width");
  gattn::kv_cache fine(16, 8, 0);
  EXPECT_EQ(fine.capacity(), 16);
}

}  // namespace

}  // namespace test_validate
