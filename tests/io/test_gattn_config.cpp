// The gattn config JSON (docs/spec.md §9): defaults, every vector config, and refusals that name the key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "gattn/io/delta_config.hpp"
#include "gattn/io/gattn_config.hpp"
#include "support/vectors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_gattn_config {

namespace {

using gattn::io::parse_gattn_config;
using nlohmann::json;

gattn::gqa_config gqa(const std::string& text) { return std::get<gattn::gqa_config>(parse_gattn_config(json::parse(text))); }

TEST(GattnConfig, DefaultsFollowSpec) {
  const auto c = gqa(R"({"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16})");
  EXPECT_EQ(c.qk_norm, gattn::norm_kind::none);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_EQ(c.rope.rotary_dim, 16);
  EXPECT_EQ(c.rope.style, gattn::rope_style::neox);
  EXPECT_TRUE(c.causal);
  EXPECT_FALSE(c.gate.enabled);
  EXPECT_DOUBLE_EQ(c.scale(), 0.25);
  const auto g = gqa(R"({"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                         "gate": {"position": "G1", "granularity": "headwise"}})");
  EXPECT_TRUE(g.gate.enabled);
  EXPECT_EQ(g.gate.activation, gattn::activation::sigmoid);
  EXPECT_EQ(g.gate.combine, gattn::combine::mul);
  EXPECT_EQ(g.gate.source, gattn::gate_source::separate);
  EXPECT_EQ(g.gate.layout, gattn::fused_layout::per_head);
  EXPECT_FALSE(g.gate.shared);
  const auto m = std::get<gattn::mla_config>(parse_gattn_config(json::parse(
      R"({"attention": "mla", "hidden_size": 64, "num_attention_heads": 4, "qk_nope_head_dim": 16,
          "qk_rope_head_dim": 8, "v_head_dim": 16, "kv_lora_rank": 32})")));
  EXPECT_EQ(m.rope.style, gattn::rope_style::interleaved);
  EXPECT_EQ(m.q_lora_rank, 0);
  EXPECT_DOUBLE_EQ(m.scale(), 1.0 / std::sqrt(24.0));
}

struct refusal {
  const char* json_text;
  const char* names;
};

class GattnConfigRefusal : public ::testing::TestWithParam<refusal> {};

TEST_P(GattnConfigRefusal, NamesTheKey) {
  try {
    parse_gattn_config(json::parse(GetParam().json_text));
    FAIL() << "accepted: " << GetParam().json_text;
  } catch (const gattn::config_error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(GetParam().names));
  }
}

#define GQA_BASE R"("hidden_size": 64, "num_attention_heads": 4, "head_dim": 16)"
INSTANTIATE_TEST_SUITE_P(
    Cases, GattnConfigRefusal,
    ::testing::Values(refusal{R"({"hidden_size": 64, "num_attention_heads": 3, "num_key_value_heads": 2, "head_dim": 16})", "num_key_value_heads"},
                      refusal{R"({"num_attention_heads": 4, "head_dim": 16})", "hidden_size"},
                      refusal{R"({"hidden_size": "64", "num_attention_heads": 4, "head_dim": 16})", "hidden_size"},
                      refusal{R"({"hidden_size": 64.5, "num_attention_heads": 4, "head_dim": 16})", "hidden_size"},
                      refusal{R"({)" GQA_BASE R"(, "partial_rotary_factor": 0.3})", "partial_rotary_factor"},
                      refusal{R"({)" GQA_BASE R"(, "qk_norm": "layer"})", "qk_norm"},
                      refusal{R"({)" GQA_BASE R"(, "rope_style": "spiral"})", "rope_style"},
                      refusal{R"({)" GQA_BASE R"(, "rope_scaling": {"type": "linear", "factor": 2}})", "linear"},
                      refusal{R"({)" GQA_BASE R"(, "rope_scaling": {"type": "yarn"}})", "factor"},
                      refusal{R"({)" GQA_BASE R"(, "sliding_window": 128})", "sliding_window"},
                      refusal{R"({)" GQA_BASE R"(, "attention": "linear"})", "attention"},
                      refusal{R"({)" GQA_BASE R"(, "attention_scale": -1})", "attention_scale"},
                      refusal{R"({)" GQA_BASE R"(, "causal": "yes"})", "causal"},
                      refusal{R"({)" GQA_BASE R"(, "gate": {"granularity": "headwise"}})", "position"},
                      refusal{R"({)" GQA_BASE R"(, "gate": {"position": "G6", "granularity": "headwise"}})", "position"},
                      refusal{R"({)" GQA_BASE R"(, "gate": {"position": "G1"}})", "granularity"},
                      refusal{R"({)" GQA_BASE R"(, "gate": {"position": "G1", "granularity": "channel"}})", "granularity"},
                      refusal{R"({)" GQA_BASE R"(, "gate": {"position": "G1", "granularity": "headwise", "activation": "tanh"}})", "activation"},
                      refusal{R"({)" GQA_BASE R"(, "gate": {"position": "G1", "granularity": "headwise", "combine": "max"}})", "combine"},
                      refusal{R"({)" GQA_BASE R"(, "gate": {"position": "G2", "granularity": "headwise", "source": "fused_q"}})", "fused_q"},
                      refusal{R"({)" GQA_BASE R"(, "gate": {"position": "G1", "granularity": "headwise", "source": "low_rank"}})", "rank"},
                      refusal{R"({)" GQA_BASE R"(, "gate": {"position": "G1", "granularity": "headwise", "layout": "rows"}})", "layout"},
                      refusal{R"({"attention": "mla", "hidden_size": 64, "num_attention_heads": 4, "qk_nope_head_dim": 16, "qk_rope_head_dim": 7, "v_head_dim": 16, "kv_lora_rank": 32})", "qk_rope_head_dim"},
                      refusal{R"({"attention": "mla", "hidden_size": 64, "num_attention_heads": 4, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "kv_lora_rank": 32, "gate": {"position": "G2", "granularity": "headwise"}})", "G1"},
                      // Unknown keys: a typo, a newer version's key, at the top, in the gate, in rope_scaling.
                      refusal{R"({"hidden_size": 64, "num_attention_heads": 4, "num_attention_head": 4, "head_dim": 16})", "unknown key 'num_attention_head'"},
                      refusal{R"({)" GQA_BASE R"(, "sliding_window_pattern": null})", "unknown key 'sliding_window_pattern'"},
                      refusal{R"({)" GQA_BASE R"(, "gate": {"position": "G1", "granularity": "headwise", "activaton": "silu"}})", "unknown key 'activaton'"},
                      refusal{R"({)" GQA_BASE R"(, "rope_scaling": {"type": "yarn", "factor": 2, "original_max_position_embeddings": 64, "beta_fsat": 8}})", "unknown key 'beta_fsat'"},
                      // A key of the other family would be ignored by this one's math.
                      refusal{R"({)" GQA_BASE R"(, "kv_lora_rank": 32})", "'kv_lora_rank' is an MLA key"},
                      refusal{R"({"attention": "mla", "hidden_size": 64, "num_attention_heads": 4, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "kv_lora_rank": 32, "qk_norm": "rms"})", "'qk_norm' is a GQA key"},
                      refusal{R"({"attention": "mla", "hidden_size": 64, "num_attention_heads": 4, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "kv_lora_rank": 32, "output_norm": "rms"})", "'output_norm' is a GQA key"},
                      // docs/spec.md §10 values.
                      refusal{R"({)" GQA_BASE R"(, "kv_cache_dtype": "fp8"})", "'kv_cache_dtype'=\"fp8\" must be f32, bf16 or f16"},
                      refusal{R"({)" GQA_BASE R"(, "kv_cache_dtype": 16})", "kv_cache_dtype"},
                      refusal{R"({)" GQA_BASE R"(, "kv_numerics": "approx"})", "'kv_numerics'=\"approx\" must be exact or fast"},
                      refusal{R"({)" GQA_BASE R"(, "numerics": "bf16"})", "'numerics'=\"bf16\" must be exact or fast"},
                      refusal{R"({)" GQA_BASE R"(, "numerics": true})", "numerics"},
                      refusal{R"({)" GQA_BASE R"(, "gate": {"position": "G1", "granularity": "headwise", "gate_rounding": "f16"}})", "'gate_rounding'=\"f16\" must be none or bf16"},
                      refusal{R"({)" GQA_BASE R"(, "attention_bias": "no"})", "attention_bias"}));

TEST(GattnConfig, KvNumerics) {
  EXPECT_EQ(gqa(R"({)" GQA_BASE R"(})").kv_numerics, gattn::kv_numerics::exact);
  EXPECT_EQ(gqa(R"({)" GQA_BASE R"(, "kv_numerics": "fast"})").kv_numerics, gattn::kv_numerics::fast);
  EXPECT_EQ(gqa(R"({)" GQA_BASE R"(, "kv_numerics": "exact"})").kv_numerics, gattn::kv_numerics::exact);
  const auto m = std::get<gattn::mla_config>(parse_gattn_config(json::parse(
      R"({"attention": "mla", "hidden_size": 64, "num_attention_heads": 4, "qk_nope_head_dim": 16,
          "qk_rope_head_dim": 8, "v_head_dim": 16, "kv_lora_rank": 32, "kv_numerics": "fast"})")));
  EXPECT_EQ(m.kv_numerics, gattn::kv_numerics::fast);
}

// `numerics` (docs/spec.md §10): exact by default, fast on request, for both softmax families and the
// delta-rule layers, and independent of kv_numerics.
TEST(GattnConfig, Numerics) {
  EXPECT_EQ(gqa(R"({)" GQA_BASE R"(})").numerics, gattn::numerics::exact);
  EXPECT_EQ(gqa(R"({)" GQA_BASE R"(, "numerics": "exact"})").numerics, gattn::numerics::exact);
  const auto g = gqa(R"({)" GQA_BASE R"(, "numerics": "fast"})");
  EXPECT_EQ(g.numerics, gattn::numerics::fast);
  EXPECT_EQ(g.kv_numerics, gattn::kv_numerics::exact);
  EXPECT_EQ(gqa(R"({)" GQA_BASE R"(, "numerics": null})").numerics, gattn::numerics::exact);
  const auto m = std::get<gattn::mla_config>(parse_gattn_config(json::parse(
      R"({"attention": "mla", "hidden_size": 64, "num_attention_heads": 4, "qk_nope_head_dim": 16,
          "qk_rope_head_dim": 8, "v_head_dim": 16, "kv_lora_rank": 32, "numerics": "fast"})")));
  EXPECT_EQ(m.numerics, gattn::numerics::fast);
  EXPECT_EQ(m.kv_numerics, gattn::kv_numerics::exact);
  const auto d = std::get<gattn::delta_config>(parse_gattn_config(json::parse(
      R"({"attention": "gated_deltanet", "hidden_size": 64, "num_key_heads": 2, "num_value_heads": 4,
          "key_head_dim": 16, "value_head_dim": 8, "numerics": "fast"})")));
  EXPECT_EQ(d.numerics, gattn::numerics::fast);
  EXPECT_STREQ(gattn::to_string(gattn::numerics::fast), "fast");
  EXPECT_STREQ(gattn::to_string(gattn::numerics::exact), "exact");
}

TEST(GattnConfig, KvCacheDtypeAndGateRounding) {
  EXPECT_EQ(gqa(R"({)" GQA_BASE R"(})").kv_cache_type, gattn::storage_type::f32);
  EXPECT_EQ(gqa(R"({)" GQA_BASE R"(, "kv_cache_dtype": "bf16"})").kv_cache_type, gattn::storage_type::bf16);
  EXPECT_EQ(gqa(R"({)" GQA_BASE R"(, "kv_cache_dtype": "f16"})").kv_cache_type, gattn::storage_type::f16);
  EXPECT_EQ(gqa(R"({)" GQA_BASE R"(, "kv_cache_dtype": "f32"})").kv_cache_type, gattn::storage_type::f32);
  const auto m = std::get<gattn::mla_config>(parse_gattn_config(json::parse(
      R"({"attention": "mla", "hidden_size": 64, "num_attention_heads": 4, "qk_nope_head_dim": 16,
          "qk_rope_head_dim": 8, "v_head_dim": 16, "kv_lora_rank": 32, "kv_cache_dtype": "bf16",
          "gate": {"position": "G1", "granularity": "elementwise", "gate_rounding": "bf16"}})")));
  EXPECT_EQ(m.kv_cache_type, gattn::storage_type::bf16);
  EXPECT_EQ(m.gate.rounding, gattn::gate_rounding::bf16);
  const auto g = gqa(R"({)" GQA_BASE R"(, "gate": {"position": "G1", "granularity": "headwise", "gate_rounding": "none"}})");
  EXPECT_EQ(g.gate.rounding, gattn::gate_rounding::none);
}

// Every key docs/spec.md §9 names is accepted (so refusing unknown keys refuses nothing documented).
TEST(GattnConfig, EveryDocumentedKeyIsAccepted) {
  EXPECT_NO_THROW(parse_gattn_config(json::parse(R"({"attention": "gqa", "hidden_size": 64, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 16, "qk_norm": "rms", "rms_norm_eps": 1e-5, "rope_theta": 1e4,
      "partial_rotary_factor": 0.5, "rope_style": "neox", "causal": true, "attention_bias": true,
      "output_norm": null, "attention_scale": 0.2, "kv_cache_dtype": "f16", "sliding_window": null,
      "kv_numerics": "fast", "numerics": "fast",
      "rope_scaling": {"type": "yarn", "rope_type": "yarn", "factor": 2, "original_max_position_embeddings": 64,
                       "beta_fast": 32, "beta_slow": 1, "mscale": 1, "mscale_all_dim": 1, "attention_factor": 1,
                       "truncate": false},
      "gate": {"position": "G1", "granularity": "headwise", "shared": false, "activation": "sigmoid",
               "combine": "mul", "source": "separate", "layout": "per_head", "rank": 0, "gate_rounding": "none"}})")));
  EXPECT_NO_THROW(parse_gattn_config(json::parse(R"({"attention": "mla", "hidden_size": 64, "num_attention_heads": 4,
      "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "kv_lora_rank": 32, "q_lora_rank": 16,
      "rms_norm_eps": 1e-6, "rope_theta": 1e4, "rope_style": "interleaved", "causal": true, "attention_bias": false,
      "attention_scale": 0.2, "kv_cache_dtype": "bf16", "kv_numerics": "exact", "numerics": "exact"})")));
}

// Every vector's config (file and safetensors metadata) still parses.
TEST(GattnConfig, EveryVectorConfigParses) {
  int seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(gattn::test::data_path(""))) {
    const std::string name = entry.path().filename().string();
    if (name.size() < 12 || name.compare(name.size() - 12, 12, ".config.json") != 0) continue;
    std::ifstream in(entry.path());
    const json j = json::parse(in);
    EXPECT_NO_THROW(parse_gattn_config(j)) << name;
    ++seen;
  }
  EXPECT_GE(seen, 40);
}

}  // namespace

}  // namespace test_gattn_config
