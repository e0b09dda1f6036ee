// Tests for include/gattn/io/hf_config.hpp and config_file.hpp: HF configs map to the vectors' gattn
// configs, the paper's qwen3 variants, every refusal, layer prefixes and the file dispatcher.
#include "gattn/io/config_file.hpp"
#include "gattn/io/hf_config.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "gattn/io/safetensors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_hf_config {

#ifndef GATTN_TEST_DATA
#error "GATTN_TEST_DATA must be defined as the absolute path of tests/data"
#endif

namespace {

using gattn::config_error;
using gattn::format_error;
using gattn::gqa_config;
using gattn::layer_config;
using gattn::mla_config;
using gattn::io::parse_gattn_config;
using gattn::io::parse_hf_config;
using nlohmann::json;
using ::testing::HasSubstr;

std::string data_path(const std::string& rel) { return std::string(GATTN_TEST_DATA) + "/" + rel; }

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  return json::parse(in);
}

// ---------------------------------------------------------------------------------------------
// Field-by-field comparison, so a mismatch names the field rather than "configs differ".

void expect_same(const gattn::gate_config& a, const gattn::gate_config& b) {
  EXPECT_EQ(a.enabled, b.enabled) << "gate.enabled";
  if (!a.enabled || !b.enabled) return;
  EXPECT_EQ(a.position, b.position) << "gate.position";
  EXPECT_EQ(a.granularity, b.granularity) << "gate.granularity";
  EXPECT_EQ(a.shared, b.shared) << "gate.shared";
  EXPECT_EQ(a.activation, b.activation) << "gate.activation";
  EXPECT_EQ(a.combine, b.combine) << "gate.combine";
  EXPECT_EQ(a.source, b.source) << "gate.source";
  EXPECT_EQ(a.layout, b.layout) << "gate.layout";
  EXPECT_EQ(a.rank, b.rank) << "gate.rank";
}

void expect_same(const gattn::rope_config& a, const gattn::rope_config& b) {
  EXPECT_EQ(a.style, b.style) << "rope.style";
  EXPECT_DOUBLE_EQ(a.theta, b.theta) << "rope.theta";
  EXPECT_EQ(a.rotary_dim, b.rotary_dim) << "rope.rotary_dim";
  const auto& s = a.scaling;
  const auto& t = b.scaling;
  EXPECT_EQ(s.yarn, t.yarn) << "rope.scaling.yarn";
  if (!s.yarn || !t.yarn) return;
  EXPECT_DOUBLE_EQ(s.factor, t.factor) << "rope.scaling.factor";
  EXPECT_DOUBLE_EQ(s.original_max_position_embeddings, t.original_max_position_embeddings)
      << "rope.scaling.original_max_position_embeddings";
  EXPECT_DOUBLE_EQ(s.beta_fast, t.beta_fast) << "rope.scaling.beta_fast";
  EXPECT_DOUBLE_EQ(s.beta_slow, t.beta_slow) << "rope.scaling.beta_slow";
  EXPECT_DOUBLE_EQ(s.mscale, t.mscale) << "rope.scaling.mscale";
  EXPECT_DOUBLE_EQ(s.mscale_all_dim, t.mscale_all_dim) << "rope.scaling.mscale_all_dim";
  EXPECT_DOUBLE_EQ(s.attention_factor, t.attention_factor) << "rope.scaling.attention_factor";
  EXPECT_EQ(s.truncate, t.truncate) << "rope.scaling.truncate";
}

void expect_same(const gqa_config& a, const gqa_config& b) {
  EXPECT_EQ(a.hidden, b.hidden) << "hidden";
  EXPECT_EQ(a.q_heads, b.q_heads) << "q_heads";
  EXPECT_EQ(a.kv_heads, b.kv_heads) << "kv_heads";
  EXPECT_EQ(a.head_dim, b.head_dim) << "head_dim";
  EXPECT_EQ(a.qk_norm, b.qk_norm) << "qk_norm";
  EXPECT_EQ(a.output_norm, b.output_norm) << "output_norm";
  EXPECT_DOUBLE_EQ(a.rms_norm_eps, b.rms_norm_eps) << "rms_norm_eps";
  EXPECT_DOUBLE_EQ(a.partial_rotary_factor, b.partial_rotary_factor) << "partial_rotary_factor";
  expect_same(a.rope, b.rope);
  EXPECT_EQ(a.causal, b.causal) << "causal";
  EXPECT_DOUBLE_EQ(a.attention_scale, b.attention_scale) << "attention_scale";
  EXPECT_DOUBLE_EQ(a.scale(), b.scale()) << "scale()";
  expect_same(a.gate, b.gate);
}

void expect_same(const mla_config& a, const mla_config& b) {
  EXPECT_EQ(a.hidden, b.hidden) << "hidden";
  EXPECT_EQ(a.heads, b.heads) << "heads";
  EXPECT_EQ(a.qk_nope_head_dim, b.qk_nope_head_dim) << "qk_nope_head_dim";
  EXPECT_EQ(a.qk_rope_head_dim, b.qk_rope_head_dim) << "qk_rope_head_dim";
  EXPECT_EQ(a.v_head_dim, b.v_head_dim) << "v_head_dim";
  EXPECT_EQ(a.kv_lora_rank, b.kv_lora_rank) << "kv_lora_rank";
  EXPECT_EQ(a.q_lora_rank, b.q_lora_rank) << "q_lora_rank";
  EXPECT_DOUBLE_EQ(a.rms_norm_eps, b.rms_norm_eps) << "rms_norm_eps";
  expect_same(a.rope, b.rope);
  EXPECT_EQ(a.causal, b.causal) << "causal";
  EXPECT_DOUBLE_EQ(a.attention_scale, b.attention_scale) << "attention_scale";
  EXPECT_DOUBLE_EQ(a.scale(), b.scale()) << "scale()";
  expect_same(a.gate, b.gate);
}

void expect_same(const gattn::delta_config& a, const gattn::delta_config& b) {
  EXPECT_EQ(a.kind, b.kind) << "kind";
  EXPECT_EQ(a.hidden, b.hidden) << "hidden";
  EXPECT_EQ(a.key_heads, b.key_heads) << "key_heads";
  EXPECT_EQ(a.value_heads, b.value_heads) << "value_heads";
  EXPECT_EQ(a.key_head_dim, b.key_head_dim) << "key_head_dim";
  EXPECT_EQ(a.value_head_dim, b.value_head_dim) << "value_head_dim";
  EXPECT_EQ(a.conv_kernel, b.conv_kernel) << "conv_kernel";
  EXPECT_DOUBLE_EQ(a.rms_norm_eps, b.rms_norm_eps) << "rms_norm_eps";
  EXPECT_EQ(a.decay, b.decay) << "decay";
  EXPECT_DOUBLE_EQ(a.decay_lower_bound, b.decay_lower_bound) << "decay_lower_bound";
  EXPECT_EQ(a.gate, b.gate) << "gate";
  EXPECT_EQ(a.gate_rank, b.gate_rank) << "gate_rank";
}

void expect_same(const layer_config& a, const layer_config& b) {
  ASSERT_EQ(a.index(), b.index()) << "layer kind (gqa, mla or a delta-rule layer)";
  if (const auto* g = std::get_if<gqa_config>(&a)) expect_same(*g, std::get<gqa_config>(b));
  else if (const auto* m = std::get_if<mla_config>(&a)) expect_same(*m, std::get<mla_config>(b));
  else expect_same(std::get<gattn::delta_config>(a), std::get<gattn::delta_config>(b));
}

/// The gattn config that refgen stored next to the HF checkpoint, the prefix it used, and the layer
/// its weights are (-1 when the metadata does not say).
struct hf_vector {
  json hf;
  layer_config expected;
  std::string prefix;
  gattn::index layer = -1;
};

hf_vector load_hf_vector(const std::string& name) {
  const auto io = gattn::io::safetensors_file::open(data_path(name + "/io.safetensors"));
  const auto& meta = io.metadata();
  return {read_json(data_path(name + "/config.json")), parse_gattn_config(json::parse(meta.at("gattn_config"))),
          meta.at("prefix"), meta.count("layer") ? gattn::index(std::stoll(meta.at("layer"))) : -1};
}

/// The config_error message parse_hf_config throws for `layer` (-1: none) ("" and a failure when it
/// accepts the config).
std::string hf_error(const json& j, gattn::index layer = -1) {
  try {
    if (layer < 0) parse_hf_config(j);
    else parse_hf_config(j, layer);
  } catch (const config_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected gattn::config_error, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected gattn::config_error, parse succeeded for " << j.dump();
  return "";
}

// Small HF configs written the way the checkpoints write them.
json qwen3_next_json() {
  return {{"model_type", "qwen3_next"}, {"hidden_size", 64},           {"num_attention_heads", 4},
          {"num_key_value_heads", 2},   {"head_dim", 32},              {"rope_theta", 10000000.0},
          {"rms_norm_eps", 1e-6},       {"full_attention_interval", 4}, {"num_hidden_layers", 8}};
}

json qwen3_json() {
  return {{"architectures", {"Qwen3ForCausalLM"}},
          {"model_type", "qwen3"},
          {"hidden_size", 64},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 16},
          {"rope_theta", 1000000.0},
          {"rms_norm_eps", 1e-6},
          {"num_hidden_layers", 4},
          {"max_window_layers", 4},
          {"use_sliding_window", false},
          {"sliding_window", 4096},
          {"attention_dropout", 0.0},
          {"vocab_size", 151936},
          {"tie_word_embeddings", true}};
}

json deepseek_json() {
  return {{"model_type", "deepseek_v3"}, {"hidden_size", 64},      {"num_attention_heads", 4},
          {"num_key_value_heads", 4},    {"q_lora_rank", 24},      {"kv_lora_rank", 32},
          {"qk_nope_head_dim", 16},      {"qk_rope_head_dim", 8},  {"v_head_dim", 16},
          {"rms_norm_eps", 1e-6},        {"rope_theta", 10000.0},  {"n_routed_experts", 256},
          {"first_k_dense_replace", 3},  {"moe_intermediate_size", 2048}};
}

// ---------------------------------------------------------------------------------------------
// The reference checkpoints: the HF config means exactly the gattn config refgen used.

TEST(HfConfigVectors, Qwen3NextMatchesGattnConfig) {
  const auto v = load_hf_vector("hf_qwen3_next");
  expect_same(parse_hf_config(v.hf, 3), v.expected);
  EXPECT_EQ(gattn::io::hf_layer_prefix(v.hf, 3), v.prefix);
  EXPECT_EQ(gattn::io::first_attention_layer(v.hf), 3);
}

TEST(HfConfigVectors, DeepseekV3GatedMatchesGattnConfig) {
  const auto v = load_hf_vector("hf_deepseek_v3_gated");
  const layer_config c = parse_hf_config(v.hf);
  expect_same(c, v.expected);
  // Spelled out: the softmax scale carries m(40, 1)^2 under YaRN.
  const double m = 0.1 * std::log(40.0) + 1.0;
  EXPECT_NEAR(std::get<mla_config>(c).attention_scale, m * m / std::sqrt(24.0), 1e-15);
  EXPECT_EQ(gattn::io::hf_layer_prefix(v.hf, 0), v.prefix);
  EXPECT_EQ(gattn::io::first_attention_layer(v.hf), 0);
}

// ---------------------------------------------------------------------------------------------
// qwen3_next details

TEST(HfConfigQwen3Next, DefaultsPartialRotaryAndHeadDim) {
  json j = qwen3_next_json();
  j.erase("head_dim");
  j.erase("rope_theta");
  j.erase("rms_norm_eps");
  const auto c = std::get<gqa_config>(parse_hf_config(j, 3));
  EXPECT_EQ(c.head_dim, 16);                  // hidden / heads
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.25);
  EXPECT_EQ(c.rope.rotary_dim, 4);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope.style, gattn::rope_style::neox);
  EXPECT_EQ(c.qk_norm, gattn::norm_kind::rms_zero_centered);
  EXPECT_EQ(c.gate.source, gattn::gate_source::fused_q);
  EXPECT_EQ(c.gate.layout, gattn::fused_layout::per_head);
  EXPECT_DOUBLE_EQ(c.scale(), 0.25);
}

TEST(HfConfigQwen3Next, RopeParametersCarryThetaAndYarn) {
  json j = qwen3_next_json();
  j.erase("rope_theta");
  j["max_position_embeddings"] = 131072;
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 5e6}, {"factor", 4.0}};
  const auto c = std::get<gqa_config>(parse_hf_config(j, 3));
  EXPECT_DOUBLE_EQ(c.rope.theta, 5e6);
  EXPECT_TRUE(c.rope.scaling.yarn);
  EXPECT_DOUBLE_EQ(c.rope.scaling.factor, 4.0);
  // HF falls back to max_position_embeddings when YaRN has no original length.
  EXPECT_DOUBLE_EQ(c.rope.scaling.original_max_position_embeddings, 131072.0);
  EXPECT_DOUBLE_EQ(c.attention_scale, 0.0);  // GQA: YaRN acts through cos/sin only

  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e6}};
  EXPECT_FALSE(std::get<gqa_config>(parse_hf_config(j, 3)).rope.scaling.yarn);
}

TEST(HfConfigQwen3Next, NestedRopeParametersUseFullAttention) {
  json j = qwen3_next_json();
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "linear"}, {"factor", 2.0}}}};
  EXPECT_THAT(hf_error(j, 3), HasSubstr("linear"));
}

TEST(HfConfigQwen3Next, AttentionBiasAndIgnoredKeys) {
  json j = qwen3_next_json();
  j["attention_bias"] = true;
  j["attention_dropout"] = 0.1;  // inference: no dropout
  j["num_experts"] = 512;
  j["linear_num_value_heads"] = 32;
  j["tie_word_embeddings"] = false;
  expect_same(parse_hf_config(j, 3), parse_hf_config(qwen3_next_json(), 3));
}

// ---------------------------------------------------------------------------------------------
// The paper's release (model_type qwen3 with a gate key) and plain qwen3

TEST(HfConfigPaper, HeadwiseGate) {
  json j = qwen3_json();
  j["headwise_attn_output_gate"] = true;
  j["elementwise_attn_output_gate"] = false;
  j["qkv_bias"] = true;
  const layer_config c = parse_hf_config(j);
  const layer_config expected = parse_gattn_config(json{
      {"attention", "gqa"}, {"hidden_size", 64}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
      {"head_dim", 16}, {"qk_norm", "rms"}, {"rope_theta", 1000000.0}, {"partial_rotary_factor", 1.0},
      {"gate", {{"position", "G1"}, {"granularity", "headwise"}, {"source", "fused_q"}, {"layout", "per_kv_group"}}}});
  expect_same(c, expected);
}

TEST(HfConfigPaper, ElementwiseGateWithoutQkNorm) {
  json j = qwen3_json();
  j["elementwise_attn_output_gate"] = true;
  j["use_qk_norm"] = false;
  const auto c = std::get<gqa_config>(parse_hf_config(j));
  EXPECT_TRUE(c.gate.enabled);
  EXPECT_EQ(c.gate.granularity, gattn::granularity::elementwise);
  EXPECT_EQ(c.gate.source, gattn::gate_source::fused_q);
  EXPECT_EQ(c.gate.layout, gattn::fused_layout::per_kv_group);
  EXPECT_EQ(c.gate.activation, gattn::activation::sigmoid);
  EXPECT_EQ(c.qk_norm, gattn::norm_kind::none);
}

TEST(HfConfigPaper, PlainQwen3IsUngatedWithRmsQkNorm) {
  const auto c = std::get<gqa_config>(parse_hf_config(qwen3_json()));
  EXPECT_FALSE(c.gate.enabled);
  EXPECT_EQ(c.qk_norm, gattn::norm_kind::rms);
  EXPECT_EQ(c.rope.rotary_dim, 16);  // qwen3: full rotary
  EXPECT_EQ(c.kv_heads, 2);
}

TEST(HfConfigPaper, BothGatesRefused) {
  json j = qwen3_json();
  j["headwise_attn_output_gate"] = true;
  j["elementwise_attn_output_gate"] = true;
  const std::string m = hf_error(j);
  EXPECT_THAT(m, HasSubstr("headwise_attn_output_gate"));
  EXPECT_THAT(m, HasSubstr("elementwise_attn_output_gate"));
}

// ---------------------------------------------------------------------------------------------
// The MLA family

TEST(HfConfigMla, NullQLoraRankAndDefaults) {
  json j = deepseek_json();
  j["q_lora_rank"] = nullptr;
  j["num_key_value_heads"] = 1;  // meaningless for MLA: ignored
  const auto c = std::get<mla_config>(parse_hf_config(j));
  EXPECT_EQ(c.q_lora_rank, 0);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.rope.style, gattn::rope_style::interleaved);
  EXPECT_EQ(c.rope.rotary_dim, 8);
  EXPECT_FALSE(c.gate.enabled);
  EXPECT_DOUBLE_EQ(c.attention_scale, 0.0);
  EXPECT_DOUBLE_EQ(c.scale(), 1.0 / std::sqrt(24.0));
}

TEST(HfConfigMla, MissingQLoraRankRefused) {
  json j = deepseek_json();
  j.erase("q_lora_rank");
  EXPECT_THAT(hf_error(j), HasSubstr("q_lora_rank"));
}

TEST(HfConfigMla, RopeInterleaveFalseIsNeox) {
  json j = deepseek_json();
  j["rope_interleave"] = false;
  EXPECT_EQ(std::get<mla_config>(parse_hf_config(j)).rope.style, gattn::rope_style::neox);
}

TEST(HfConfigMla, KimiK3GateAndNope) {
  for (const char* type : {"kimi_k3", "kimi_k2", "deepseek_v2"}) {
    json j = deepseek_json();
    j["model_type"] = type;
    j["mla_use_output_gate"] = true;
    j["mla_use_nope"] = true;
    const auto c = std::get<mla_config>(parse_hf_config(j));
    EXPECT_EQ(c.rope.style, gattn::rope_style::none) << type;
    EXPECT_EQ(c.rope.rotary_dim, 8) << type;  // channels kept, just not rotated
    EXPECT_TRUE(c.gate.enabled) << type;
    EXPECT_EQ(c.gate.source, gattn::gate_source::separate) << type;
    EXPECT_EQ(c.gate.granularity, gattn::granularity::elementwise) << type;
    EXPECT_EQ(c.gate.position, gattn::gate_position::g1) << type;
  }
}

TEST(HfConfigMla, ZeroRopeHeadDim) {
  json j = deepseek_json();
  j["qk_rope_head_dim"] = 0;
  const auto c = std::get<mla_config>(parse_hf_config(j));
  EXPECT_EQ(c.qk_rope_head_dim, 0);
  EXPECT_EQ(c.rope.rotary_dim, 0);
}

TEST(HfConfigMla, YarnWithoutMscaleAllDimKeepsDefaultScale) {
  json j = deepseek_json();
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 40.0}, {"original_max_position_embeddings", 4096}};
  const auto c = std::get<mla_config>(parse_hf_config(j));
  EXPECT_TRUE(c.rope.scaling.yarn);
  EXPECT_DOUBLE_EQ(c.attention_scale, 0.0);
  j["rope_scaling"]["mscale_all_dim"] = 0.707;  // DeepSeek-V2-Lite's value
  const double m = 0.1 * 0.707 * std::log(40.0) + 1.0;
  EXPECT_NEAR(std::get<mla_config>(parse_hf_config(j)).attention_scale, m * m / std::sqrt(24.0), 1e-15);
}

// ---------------------------------------------------------------------------------------------
// Refusals: each names the key

TEST(HfConfigRefusal, OtherRopeTypes) {
  for (const char* type : {"linear", "dynamic", "llama3", "longrope"}) {
    json j = qwen3_json();
    j["rope_scaling"] = {{"rope_type", type}, {"factor", 2.0}};
    std::string m = hf_error(j);
    EXPECT_THAT(m, HasSubstr("rope_scaling")) << type;
    EXPECT_THAT(m, HasSubstr(type));
    json k = deepseek_json();
    k["rope_parameters"] = {{"rope_type", type}, {"factor", 2.0}, {"rope_theta", 10000.0}};
    m = hf_error(k);
    EXPECT_THAT(m, HasSubstr("rope_parameters")) << type;
    EXPECT_THAT(m, HasSubstr(type));
  }
}

TEST(HfConfigRefusal, DisagreeingRopeTheta) {
  json j = qwen3_next_json();
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  EXPECT_THAT(hf_error(j, 3), HasSubstr("rope_theta"));
}

TEST(HfConfigRefusal, Qwen3SlidingWindowInUse) {
  json j = qwen3_json();
  j["use_sliding_window"] = true;
  j["max_window_layers"] = 2;  // layers 2 and 3 of 4 use the window
  EXPECT_THAT(hf_error(j), HasSubstr("sliding_window"));
  // Layer by layer: below max_window_layers is full attention, from it on the window applies.
  EXPECT_NO_THROW(parse_hf_config(j, 1));
  EXPECT_THROW(parse_hf_config(j, 2), config_error);
  // A window switched on but applied to no layer changes nothing.
  j["max_window_layers"] = 4;
  EXPECT_NO_THROW(parse_hf_config(j));
  // layer_types decides when given.
  j["layer_types"] = {"full_attention", "sliding_attention", "full_attention", "full_attention"};
  EXPECT_THAT(hf_error(j), HasSubstr("sliding_window"));
  EXPECT_NO_THROW(parse_hf_config(j, 0));
  EXPECT_THROW(parse_hf_config(j, 1), config_error);
  // Without the switch, sliding_window (stock configs carry a number) is unused.
  j["use_sliding_window"] = false;
  EXPECT_NO_THROW(parse_hf_config(j));
  // A window with null size is no window.
  j["use_sliding_window"] = true;
  j["sliding_window"] = nullptr;
  EXPECT_NO_THROW(parse_hf_config(j));
}

TEST(HfConfigRefusal, SlidingWindowWithoutASwitch) {
  json j = qwen3_next_json();
  j["sliding_window"] = 4096;
  EXPECT_THAT(hf_error(j, 3), HasSubstr("sliding_window"));
  json k = deepseek_json();
  k["use_sliding_window"] = true;
  EXPECT_THAT(hf_error(k), HasSubstr("use_sliding_window"));
  k["use_sliding_window"] = false;
  k["sliding_window"] = nullptr;  // null means absent
  EXPECT_NO_THROW(parse_hf_config(k));
}

TEST(HfConfigRefusal, UnknownModelTypeListsSupported) {
  json j = qwen3_json();
  j["model_type"] = "llama";
  const std::string m = hf_error(j);
  EXPECT_THAT(m, HasSubstr("model_type"));
  EXPECT_THAT(m, HasSubstr("llama"));
  EXPECT_THAT(m, HasSubstr("qwen3_next"));
  EXPECT_THAT(m, HasSubstr("deepseek_v3"));
  EXPECT_THAT(m, HasSubstr("kimi_k3"));
  for (const char* type : {"qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text"})
    EXPECT_THAT(m, HasSubstr(type));
  j["model_type"] = 3;
  EXPECT_THAT(hf_error(j), HasSubstr("model_type"));
  j.erase("model_type");
  EXPECT_THAT(hf_error(j), HasSubstr("model_type"));
  EXPECT_THAT(hf_error(json::array()), HasSubstr("object"));
}

TEST(HfConfigRefusal, ForeignFamilySwitches) {
  for (const json& base : {qwen3_next_json(), qwen3_json()}) {
    for (const char* key : {"mla_use_output_gate", "mla_use_nope"}) {
      json j = base;
      j[key] = true;
      EXPECT_THAT(hf_error(j, 3), HasSubstr(key));
      j[key] = false;  // switched off: harmless
      EXPECT_NO_THROW(parse_hf_config(j, 3));
    }
  }
  for (const json& base : {qwen3_next_json(), deepseek_json()}) {
    for (const char* key : {"headwise_attn_output_gate", "elementwise_attn_output_gate"}) {
      json j = base;
      j[key] = true;
      EXPECT_THAT(hf_error(j, 3), HasSubstr(key));
    }
  }
}

TEST(HfConfigRefusal, WrongTypesNameTheKey) {
  const struct {
    json base;
    const char* key;
    json value;
  } cases[] = {
      {qwen3_next_json(), "hidden_size", "64"},
      {qwen3_next_json(), "head_dim", 32.5},
      {qwen3_next_json(), "partial_rotary_factor", "0.25"},
      {qwen3_next_json(), "rope_theta", json::array()},
      {qwen3_next_json(), "attention_bias", "no"},
      {qwen3_next_json(), "full_attention_interval", "4"},
      {qwen3_next_json(), "layer_types", "full_attention"},
      {qwen3_next_json(), "rope_parameters", 5},
      {qwen3_json(), "use_qk_norm", 1},
      {qwen3_json(), "qkv_bias", "true"},
      {qwen3_json(), "headwise_attn_output_gate", 1},
      {qwen3_json(), "use_sliding_window", "yes"},
      {qwen3_json(), "rope_scaling", "yarn"},
      {deepseek_json(), "rope_interleave", "yes"},
      {deepseek_json(), "q_lora_rank", "24"},
      {deepseek_json(), "kv_lora_rank", true},
      {deepseek_json(), "mla_use_output_gate", 1},
      {deepseek_json(), "rms_norm_eps", "1e-6"},
  };
  for (const auto& c : cases) {
    json j = c.base;
    j[c.key] = c.value;
    EXPECT_THAT(hf_error(j, 3), HasSubstr(c.key)) << j.dump();  // layer 3: a softmax layer of each base
  }
}

TEST(HfConfigRefusal, InvalidValuesAreValidated) {
  json j = qwen3_next_json();
  j["num_key_value_heads"] = 3;  // 4 % 3 != 0
  EXPECT_THAT(hf_error(j, 3), HasSubstr("num_key_value_heads"));
  j = qwen3_next_json();
  j["partial_rotary_factor"] = 0.3;  // 32 * 0.3 is not an even integer
  EXPECT_THAT(hf_error(j, 3), HasSubstr("partial_rotary_factor"));
  j = qwen3_next_json();
  j.erase("head_dim");
  j["num_attention_heads"] = 0;
  EXPECT_THAT(hf_error(j, 3), HasSubstr("num_attention_heads"));
  j = deepseek_json();
  j["rope_scaling"] = {{"type", "yarn"}, {"original_max_position_embeddings", 4096}};
  EXPECT_THAT(hf_error(j, 3), HasSubstr("factor"));
}

// ---------------------------------------------------------------------------------------------
// Layers and prefixes

/// The config_error message of `f()` ("" and a failure when it does not throw one).
template <class F>
std::string config_error_of(F f) {
  try {
    f();
  } catch (const config_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no config_error";
  return "";
}

TEST(HfConfigLayers, Qwen3NextPrefixesForBothKinds) {
  const json j = read_json(data_path("hf_qwen3_next/config.json"));
  EXPECT_EQ(gattn::io::hf_layer_prefix(j, 3), "model.layers.3.self_attn.");
  EXPECT_EQ(gattn::io::hf_layer_prefix(j, 7), "model.layers.7.self_attn.");
  // Every other layer is a Gated DeltaNet layer, under linear_attn.
  EXPECT_EQ(gattn::io::hf_layer_prefix(j, 2), "model.layers.2.linear_attn.");
  // This config leaves out the linear layers' sizes: asking for one names the first missing key.
  EXPECT_THAT(config_error_of([&] { parse_hf_config(j, 2); }), HasSubstr("linear_num_key_heads"));
  EXPECT_THROW(gattn::io::hf_layer_prefix(j, 11), config_error);  // num_hidden_layers = 8
  EXPECT_THROW(gattn::io::hf_layer_prefix(j, -1), config_error);
}

TEST(HfConfigLayers, LayerTypesAndIntervalDecide) {
  json j = qwen3_next_json();
  j["full_attention_interval"] = 2;
  EXPECT_EQ(gattn::io::first_attention_layer(j), 1);
  EXPECT_EQ(gattn::io::hf_layer_prefix(j, 0), "model.layers.0.linear_attn.");
  j["layer_types"] = {"full_attention", "linear_attention", "linear_attention", "linear_attention",
                      "full_attention", "linear_attention", "linear_attention", "linear_attention"};
  EXPECT_EQ(gattn::io::first_attention_layer(j), 0);
  EXPECT_EQ(gattn::io::hf_layer_prefix(j, 4), "model.layers.4.self_attn.");
  EXPECT_EQ(gattn::io::hf_layer_prefix(j, 1), "model.layers.1.linear_attn.");
  j["layer_types"][1] = "mamba";
  EXPECT_THAT(config_error_of([&] { gattn::io::hf_layer_prefix(j, 1); }), HasSubstr("'layer_types'[1]=\"mamba\""));
  EXPECT_EQ(gattn::io::hf_layer_prefix(deepseek_json(), 5), "model.layers.5.self_attn.");
  EXPECT_EQ(gattn::io::first_attention_layer(qwen3_json()), 0);
}

TEST(HfConfigLayers, LinearLayersAreDeltaRuleLayers) {
  json j = qwen3_next_json();
  j["linear_num_key_heads"] = 2;
  j["linear_num_value_heads"] = 32;
  j["linear_key_head_dim"] = 16;
  j["linear_value_head_dim"] = 8;
  const auto gdn = std::get<gattn::delta_config>(parse_hf_config(j, 2));
  EXPECT_EQ(gdn.kind, gattn::delta_kind::gated_deltanet);
  EXPECT_EQ(gdn.value_heads, 32);
  j["hidden_act"] = "gelu";
  EXPECT_THAT(config_error_of([&] { parse_hf_config(j, 2); }), HasSubstr("'hidden_act'=\"gelu\""));
  // The paper's qwen3 release has no linear layers.
  json q = qwen3_json();
  q["layer_types"] = {"full_attention", "linear_attention", "full_attention", "full_attention"};
  EXPECT_THAT(config_error_of([&] { parse_hf_config(q, 1); }), HasSubstr("qwen3_next"));
}

TEST(HfConfigLayers, AttentionLayersCountsOnlyGattnLayers) {
  const auto next = gattn::io::attention_layers(read_json(data_path("hf_qwen3_next/config.json")));
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->attention, (std::vector<gattn::index>{3, 7}));
  EXPECT_EQ(next->linear, (std::vector<gattn::index>{0, 1, 2, 4, 5, 6}));
  EXPECT_EQ(next->total, 8);
  json j = qwen3_next_json();
  j["layer_types"] = {"linear_attention", "full_attention", "linear_attention", "full_attention"};
  EXPECT_EQ(gattn::io::attention_layers(j)->attention, (std::vector<gattn::index>{1, 3}));
  EXPECT_EQ(gattn::io::attention_layers(j)->total, 4);
  json windowed = qwen3_json();
  windowed["use_sliding_window"] = true;
  windowed["max_window_layers"] = 2;  // layers 2 and 3 use the window: not gattn layers
  EXPECT_EQ(gattn::io::attention_layers(windowed)->attention, (std::vector<gattn::index>{0, 1}));
  EXPECT_EQ(gattn::io::attention_layers(qwen3_json())->attention.size(), 4u);
  EXPECT_FALSE(gattn::io::attention_layers(deepseek_json()).has_value());  // no num_hidden_layers
  j = qwen3_next_json();
  j["num_hidden_layers"] = 1 << 30;
  EXPECT_THROW(gattn::io::attention_layers(j), config_error);
}

// A hybrid model's config without a layer index does not say which layer is meant: refused, with
// the layers of each kind named, instead of silently describing the first softmax layer.
TEST(HfConfigLayers, HybridModelWithoutALayerIsRefusedNamingTheLayers) {
  const std::string path = data_path("hf_qwen3_next/config.json");
  EXPECT_TRUE(gattn::io::needs_layer_index(read_json(path)));
  const std::string m = config_error_of([&] { gattn::io::load_layer_config(path); });
  EXPECT_THAT(m, HasSubstr(path));
  EXPECT_THAT(m, HasSubstr("full_attention (gqa) layers 3, 7"));
  EXPECT_THAT(m, HasSubstr("linear_attention (gated_deltanet) layers 0, 1, 2, 4, 5, 6"));
  const std::string kimi = data_path("hf_kimi_linear/config.json");
  EXPECT_TRUE(gattn::io::needs_layer_index(read_json(kimi)));
  const std::string k = config_error_of([&] { gattn::io::load_layer_config(kimi); });
  EXPECT_THAT(k, HasSubstr("(mla) layers"));
  EXPECT_THAT(k, HasSubstr("(kda) layers"));
  // Without a layer count the rule is named instead of a list.
  json j = qwen3_next_json();
  j.erase("num_hidden_layers");
  EXPECT_THAT(hf_error(j), HasSubstr("full_attention (gqa) layers 3, 7, ..."));
  // One kind of layer: no index needed.
  j["full_attention_interval"] = 1;
  EXPECT_FALSE(gattn::io::needs_layer_index(j));
  EXPECT_NO_THROW(parse_hf_config(j));
  for (const json& one_kind : {qwen3_json(), deepseek_json()}) {
    EXPECT_FALSE(gattn::io::needs_layer_index(one_kind));
    EXPECT_NO_THROW(parse_hf_config(one_kind));
  }
}

// ---------------------------------------------------------------------------------------------
// The file dispatcher

TEST(HfConfigFile, LoadLayerConfigTakesALayerIndex) {
  const std::string path = data_path("hf_qwen3_next/config.json");
  expect_same(gattn::io::load_layer_config(path, 3), load_hf_vector("hf_qwen3_next").expected);
  expect_same(gattn::io::load_layer_config(path, 7), load_hf_vector("hf_qwen3_next").expected);
  EXPECT_THAT(config_error_of([&] { gattn::io::load_layer_config(path, 2); }), HasSubstr("linear_num_key_heads"));
  const std::string linear = data_path("hf_qwen3_next_linear/config.json");
  EXPECT_TRUE(std::holds_alternative<gattn::delta_config>(gattn::io::load_layer_config(linear, 0)));
  EXPECT_THAT(config_error_of([&] { gattn::io::load_layer_config(path, 8); }), HasSubstr("num_hidden_layers"));
  // A gattn config is one layer: an index is a mistake, not something to ignore.
  EXPECT_THAT(config_error_of([&] { gattn::io::load_layer_config(data_path("gqa_plain.config.json"), 0); }),
              HasSubstr("gattn config describes one layer"));
}

/// A scratch file removed at scope exit.
struct temp_file {
  std::string path;
  explicit temp_file(const std::string& text) {
    path = (std::filesystem::temp_directory_path() /
            ("gattn_hf_config_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++) + ".json"))
               .string();
    std::ofstream(path) << text;
  }
  ~temp_file() { std::remove(path.c_str()); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

TEST(HfConfigFile, DispatchesOnModelType) {
  const std::string gattn_file = data_path("gqa_plain.config.json");
  expect_same(gattn::io::load_layer_config(gattn_file), parse_gattn_config(read_json(gattn_file)));
  const auto v = load_hf_vector("hf_qwen3_next");
  expect_same(gattn::io::load_layer_config(data_path("hf_qwen3_next/config.json"), 3), v.expected);
  const auto w = load_hf_vector("hf_deepseek_v3_gated");
  expect_same(gattn::io::load_layer_config(data_path("hf_deepseek_v3_gated/config.json")), w.expected);
}

TEST(HfConfigFile, UnreadableOrMalformedIsFormatError) {
  const std::string missing = data_path("no_such_config.json");
  EXPECT_THAT([&] {
    try {
      gattn::io::load_layer_config(missing);
    } catch (const format_error& e) {
      return std::string(e.what());
    }
    return std::string();
  }(), HasSubstr(missing));
  for (const char* text : {"{\"model_type\": ", "[1, 2]", "", "\"qwen3\""}) {
    const temp_file f(text);
    try {
      gattn::io::load_layer_config(f.path);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const format_error& e) {
      EXPECT_THAT(e.what(), HasSubstr(f.path)) << text;
    }
  }
  EXPECT_THROW(gattn::io::load_layer_config(GATTN_TEST_DATA), format_error);  // a directory
}

TEST(HfConfigFile, DeepNestingRefusedWithoutRecursion) {
  // Error messages dump offending values, and json::dump() recurses: the dispatcher refuses depth first.
  constexpr int depth = 100000;
  const temp_file f("{\"model_type\": \"qwen3\", \"hidden_size\": " + std::string(depth, '[') +
                    std::string(depth, ']') + "}");
  try {
    gattn::io::load_layer_config(f.path);
    ADD_FAILURE() << "accepted";
  } catch (const format_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(f.path));
    EXPECT_THAT(e.what(), HasSubstr("nested"));
  }
  EXPECT_THROW(gattn::io::parse_layer_config(json::array()), config_error);  // not an object
  json deep = {{"attention", "gqa"}};
  json* at = &deep["extra"];
  for (int i = 0; i < 100; ++i) at = &(*at)["x"];
  EXPECT_THROW(gattn::io::parse_layer_config(deep), format_error);
}

TEST(HfConfigFile, RefusedContentNamesFileAndKey) {
  const temp_file f(R"({"model_type": "qwen3", "hidden_size": 64, "num_attention_heads": 4,
                        "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}})");
  try {
    gattn::io::load_layer_config(f.path);
    ADD_FAILURE() << "accepted";
  } catch (const config_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(f.path));
    EXPECT_THAT(e.what(), HasSubstr("rope_scaling"));
  }
  const temp_file g(R"({"attention": "gqa", "hidden_size": 64, "num_attention_heads": 4, "head_dim": "16"})");
  try {
    gattn::io::load_layer_config(g.path);
    ADD_FAILURE() << "accepted";
  } catch (const config_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(g.path));
    EXPECT_THAT(e.what(), HasSubstr("head_dim"));
  }
}


// ---------------------------------------------------------------------------------------------
// Qwen3.5 / Qwen3.6 (docs/spec.md §14): the text model's keys at the top or under a wrapper's
// text_config, weights under model.layers. or model.language_model.layers.

const json::array_t eight_layer_types = {"linear_attention", "linear_attention", "linear_attention", "full_attention",
                                         "linear_attention", "linear_attention", "linear_attention", "full_attention"};

json qwen3_5_text_json(const char* type = "qwen3_5_text") {
  return {{"model_type", type},
          {"hidden_size", 64},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 32},
          {"rms_norm_eps", 1e-6},
          {"num_hidden_layers", 8},
          {"attn_output_gate", true},
          {"hidden_act", "silu"},
          {"linear_num_key_heads", 2},
          {"linear_num_value_heads", 4},
          {"linear_key_head_dim", 16},
          {"linear_value_head_dim", 24},
          {"linear_conv_kernel_dim", 4},
          {"layer_types", eight_layer_types},
          {"rope_parameters",
           {{"rope_type", "default"}, {"rope_theta", 1e7}, {"partial_rotary_factor", 0.25},
            {"mrope_section", {2, 1, 1}}, {"mrope_interleaved", true}}},
          {"vocab_size", 248320},
          {"dtype", "bfloat16"}};
}

/// The multimodal wrapper around `text` (its vision keys do not concern the layers).
json qwen3_5_wrapper(json text, const char* type = "qwen3_5") {
  return {{"architectures", {"Qwen3_5ForConditionalGeneration"}},
          {"model_type", type},
          {"text_config", std::move(text)},
          {"vision_config", {{"model_type", type}, {"depth", 27}, {"hidden_size", 1152}}},
          {"image_token_id", 248056},
          {"tie_word_embeddings", false}};
}

TEST(HfConfigVectors, Qwen3_5FoldersMatchTheirGattnConfigs) {
  for (const char* name : {"hf_qwen3_5", "hf_qwen3_5_linear", "extra_hf_qwen3_5_text_linear_r4",
                           "extra_hf_qwen3_5_moe_linear_mha", "extra_hf_qwen3_5_moe_full_7",
                           "extra_hf_qwen3_5_text_ungated"}) {
    SCOPED_TRACE(name);
    const auto v = load_hf_vector(name);
    ASSERT_GE(v.layer, 0);
    expect_same(parse_hf_config(v.hf, v.layer), v.expected);
    expect_same(gattn::io::load_layer_config(data_path(std::string(name) + "/config.json"), v.layer), v.expected);
    EXPECT_EQ(gattn::io::hf_layer_prefix(v.hf, v.layer), v.prefix);
    EXPECT_TRUE(gattn::io::needs_layer_index(v.hf));
  }
  const auto v = load_hf_vector("hf_qwen3_5");
  EXPECT_EQ(gattn::io::first_attention_layer(v.hf), 3);
  const auto census = gattn::io::attention_layers(v.hf);
  ASSERT_TRUE(census.has_value());
  EXPECT_EQ(census->attention, (std::vector<gattn::index>{3, 7}));
  EXPECT_EQ(census->linear, (std::vector<gattn::index>{0, 1, 2, 4, 5, 6}));
  EXPECT_EQ(gattn::io::hf_gdn_layout(v.hf), gattn::gdn_layout::split);
  EXPECT_EQ(gattn::io::hf_gdn_layout(read_json(data_path("hf_qwen3_next_linear/config.json"))), gattn::gdn_layout::fused);
}

// The same text model, alone or wrapped, dense or MoE: the same layers, under its own weight prefix.
TEST(HfConfigQwen3_5, WrapperAndTextOnlyDescribeTheSameLayers) {
  for (const char* moe : {"", "_moe"}) {
    const json text = qwen3_5_text_json((std::string("qwen3_5") + moe + "_text").c_str());
    const json wrapped = qwen3_5_wrapper(text, (std::string("qwen3_5") + moe).c_str());
    for (gattn::index layer = 0; layer < 8; ++layer) {
      SCOPED_TRACE(std::string(moe) + " layer " + std::to_string(layer));
      const layer_config a = parse_hf_config(text, layer);
      expect_same(a, parse_hf_config(wrapped, layer));
      const std::string kind = layer % 4 == 3 ? "self_attn." : "linear_attn.";
      EXPECT_EQ(gattn::io::hf_layer_prefix(text, layer), "model.layers." + std::to_string(layer) + "." + kind);
      EXPECT_EQ(gattn::io::hf_layer_prefix(wrapped, layer),
                "model.language_model.layers." + std::to_string(layer) + "." + kind);
    }
  }
  const json text = qwen3_5_text_json();
  const auto full = std::get<gqa_config>(parse_hf_config(text, 3));
  expect_same(layer_config(full), parse_hf_config(qwen3_next_json(), 3));  // Qwen3-Next's layer exactly
  EXPECT_EQ(full.gate.source, gattn::gate_source::fused_q);
  EXPECT_EQ(full.gate.layout, gattn::fused_layout::per_head);
  EXPECT_EQ(full.qk_norm, gattn::norm_kind::rms_zero_centered);
  EXPECT_EQ(full.rope.rotary_dim, 8);
  EXPECT_DOUBLE_EQ(full.rope.theta, 1e7);
  const auto linear = std::get<gattn::delta_config>(parse_hf_config(text, 0));
  EXPECT_EQ(linear.kind, gattn::delta_kind::gated_deltanet);
  EXPECT_EQ(linear.value_heads, 4);
  EXPECT_EQ(linear.value_head_dim, 24);
}

TEST(HfConfigQwen3_5, LayerKindsFromLayerTypesElseTheInterval) {
  json text = qwen3_5_text_json();
  text.erase("layer_types");  // the interval then decides, 4 by default
  const json wrapped = qwen3_5_wrapper(text);
  EXPECT_EQ(gattn::io::first_attention_layer(wrapped), 3);
  EXPECT_EQ(gattn::io::hf_layer_prefix(wrapped, 7), "model.language_model.layers.7.self_attn.");
  EXPECT_EQ(gattn::io::hf_layer_prefix(wrapped, 6), "model.language_model.layers.6.linear_attn.");
  EXPECT_THAT(hf_error(wrapped), HasSubstr("full_attention (gqa) layers 3, 7"));
  EXPECT_THAT(hf_error(wrapped), HasSubstr("linear_attention (gated_deltanet) layers 0, 1, 2, 4, 5, 6"));
  text["full_attention_interval"] = 2;
  EXPECT_EQ(gattn::io::attention_layers(text)->attention, (std::vector<gattn::index>{1, 3, 5, 7}));
  text["full_attention_interval"] = 1;  // every layer full attention: one kind, no index needed
  EXPECT_FALSE(gattn::io::needs_layer_index(text));
  EXPECT_NO_THROW(parse_hf_config(text));
  text.erase("num_hidden_layers");
  text["full_attention_interval"] = 4;
  EXPECT_THAT(hf_error(text), HasSubstr("full_attention (gqa) layers 3, 7, ..."));
  // Qwen3.5 has two layer kinds: another entry is refused, and not counted.
  json typed = qwen3_5_text_json();
  typed["layer_types"][5] = "sliding_attention";
  EXPECT_THAT(hf_error(typed, 5), HasSubstr("'layer_types'[5]=\"sliding_attention\""));
  EXPECT_EQ(gattn::io::attention_layers(typed)->attention, (std::vector<gattn::index>{3, 7}));
}

TEST(HfConfigQwen3_5, TextConfigIsRequiredAndMustBeItsTextModel) {
  json j = qwen3_5_wrapper(qwen3_5_text_json());
  j.erase("text_config");
  EXPECT_THAT(hf_error(j, 3), HasSubstr("missing required key 'text_config'"));
  j["text_config"] = 5;
  EXPECT_THAT(hf_error(j, 3), HasSubstr("'text_config' must be an object"));
  for (const char* inner : {"qwen3_next", "qwen3_5_moe_text", "qwen3_5"}) {
    const std::string m = hf_error(qwen3_5_wrapper(qwen3_5_text_json(inner)), 3);
    EXPECT_THAT(m, HasSubstr("'text_config.model_type'")) << inner;
    EXPECT_THAT(m, HasSubstr(inner));
  }
  json no_inner_type = qwen3_5_text_json();
  no_inner_type.erase("model_type");
  EXPECT_NO_THROW(parse_hf_config(qwen3_5_wrapper(no_inner_type), 3));
  // A key of the text model is named with where it sits.
  json bad = qwen3_5_text_json();
  bad["hidden_size"] = "64";
  const std::string m = hf_error(qwen3_5_wrapper(bad), 3);
  EXPECT_THAT(m, HasSubstr("text_config"));
  EXPECT_THAT(m, HasSubstr("'hidden_size'"));
}

TEST(HfConfigQwen3_5, VisionAndOtherMultimodalKeysAreIgnored) {
  json j = qwen3_5_wrapper(qwen3_5_text_json());
  j["vision_config"] = {{"depth", "many"}, {"hidden_act", "gelu_pytorch_tanh"}, {"rope_theta", "x"}};
  j["image_token_id"] = "an image";
  j["video_token_id"] = nullptr;
  j["vision_start_token_id"] = 1;
  expect_same(parse_hf_config(j, 3), parse_hf_config(qwen3_5_text_json(), 3));
  expect_same(parse_hf_config(j, 2), parse_hf_config(qwen3_5_text_json(), 2));
}

// mrope_section / mrope_interleaved reduce to plain RoPE for text tokens: accepted, types checked.
TEST(HfConfigQwen3_5, MropeKeysAreAcceptedAndTypeChecked) {
  const layer_config plain = parse_hf_config(qwen3_5_text_json(), 3);
  for (const json& section : {json{11, 11, 10}, json::array(), json{4, 0, 0}}) {
    json j = qwen3_5_text_json();
    j["rope_parameters"]["mrope_section"] = section;
    j["rope_parameters"]["mrope_interleaved"] = false;
    expect_same(parse_hf_config(j, 3), plain);
  }
  for (const json& bad : {json("2,1,1"), json{2, -1, 1}, json{1.5, 1}, json{{"t", 2}}, json{"2"}}) {
    json j = qwen3_5_text_json();
    j["rope_parameters"]["mrope_section"] = bad;
    const std::string m = hf_error(j, 3);
    EXPECT_THAT(m, HasSubstr("mrope_section")) << bad.dump();
    EXPECT_THAT(m, HasSubstr("rope_parameters")) << bad.dump();
  }
  json j = qwen3_5_text_json();
  j["rope_parameters"]["mrope_interleaved"] = "yes";
  EXPECT_THAT(hf_error(j, 3), HasSubstr("'mrope_interleaved'"));
  j = qwen3_5_text_json();
  j["rope_parameters"]["rope_type"] = "linear";
  j["rope_parameters"]["factor"] = 2.0;
  EXPECT_THAT(hf_error(j, 3), HasSubstr("linear"));
}

// attn_output_gate false is Qwen3.5's layer without the gate: q_proj holds the queries alone.
TEST(HfConfigQwen3_5, AttnOutputGateFalseIsTheUngatedLayer) {
  json j = qwen3_5_text_json();
  j["attn_output_gate"] = false;
  const auto ungated = std::get<gqa_config>(parse_hf_config(j, 3));
  EXPECT_FALSE(ungated.gate.enabled);
  gqa_config expected = std::get<gqa_config>(parse_hf_config(qwen3_5_text_json(), 3));
  expected.gate = gattn::gate_config{};
  expect_same(ungated, expected);
  j.erase("attn_output_gate");  // absent: Qwen3.5's gate
  EXPECT_TRUE(std::get<gqa_config>(parse_hf_config(j, 3)).gate.enabled);
  j["attn_output_gate"] = "false";
  EXPECT_THAT(hf_error(j, 3), HasSubstr("'attn_output_gate'"));
}

// The recurrent state is stored in float32: mamba_ssm_dtype may say so, and nothing else yet.
TEST(HfConfigQwen3_5, MambaSsmDtypeMustBeFloat32) {
  json j = qwen3_5_text_json();
  j["mamba_ssm_dtype"] = "float32";
  EXPECT_NO_THROW(parse_hf_config(j, 0));
  j["mamba_ssm_dtype"] = "bfloat16";
  const std::string m = hf_error(qwen3_5_wrapper(j), 0);
  EXPECT_THAT(m, HasSubstr("'mamba_ssm_dtype'=\"bfloat16\""));
  EXPECT_THAT(m, HasSubstr("bf16 state storage"));
  EXPECT_NO_THROW(parse_hf_config(j, 3));  // a full-attention layer keeps no recurrent state
  j["mamba_ssm_dtype"] = "float16";
  EXPECT_THAT(hf_error(j, 0), HasSubstr("'mamba_ssm_dtype'=\"float16\""));
  j["mamba_ssm_dtype"] = 32;
  EXPECT_THAT(hf_error(j, 0), HasSubstr("'mamba_ssm_dtype' must be a string"));
}

TEST(HfConfigQwen3_5, KeysThatWouldChangeTheArithmeticAreRefused) {
  const struct {
    const char* key;
    json value;
    gattn::index layer;
  } cases[] = {{"use_sliding_window", true, 3},       {"sliding_window", 4096, 3},
               {"headwise_attn_output_gate", true, 3}, {"mla_use_output_gate", true, 3},
               {"hidden_act", "gelu", 0},             {"num_key_value_heads", 3, 3}};
  for (const auto& c : cases) {
    json j = qwen3_5_text_json();
    j[c.key] = c.value;
    EXPECT_THAT(hf_error(qwen3_5_wrapper(j), c.layer), HasSubstr(c.key)) << c.key;
  }
}

// ---------------------------------------------------------------------------------------------
// Layer walks stay inside what a config can hold, and Kimi's 1-indexed KDA list is checked.

json kimi_json() {
  json j = deepseek_json();
  j["model_type"] = "kimi_linear";
  j["num_hidden_layers"] = 8;
  j["linear_attn_config"] = {{"num_heads", 4},
                             {"head_dim", 16},
                             {"short_conv_kernel_size", 4},
                             {"kda_layers", {1, 2, 3, 5, 6, 7}},
                             {"full_attn_layers", {4, 8}}};
  return j;
}

// Without num_hidden_layers (and layer_types) a layer index is bounded only by what any config can
// state: beyond it, `layer + 1` would overflow in the families' rules. Refused, every entry point.
TEST(HfConfigLayerBounds, LayersBeyondWhatAConfigCanHoldAreRefused) {
  json next = qwen3_next_json(), q35 = qwen3_5_text_json(), kimi = kimi_json();
  next.erase("num_hidden_layers");
  q35.erase("num_hidden_layers");
  q35.erase("layer_types");
  kimi.erase("num_hidden_layers");
  const gattn::index huge = std::numeric_limits<std::int64_t>::max();
  for (const json& j : {next, q35, kimi, qwen3_json(), deepseek_json()}) {
    json k = j;
    k.erase("num_hidden_layers");
    SCOPED_TRACE(k.at("model_type").get<std::string>());
    for (gattn::index layer : {huge, huge - 1, gattn::index(std::numeric_limits<std::int32_t>::max())}) {
      EXPECT_THAT(hf_error(k, layer), HasSubstr("layer " + std::to_string(layer) + " is beyond"));
      EXPECT_THAT(config_error_of([&] { gattn::io::hf_layer_prefix(k, layer); }), HasSubstr("32-bit"));
    }
    const temp_file f(k.dump());
    EXPECT_THAT(config_error_of([&] { gattn::io::load_layer_config(f.path, huge); }), HasSubstr("is beyond"));
  }
  // The last layer a config could hold is still a layer.
  EXPECT_EQ(gattn::io::hf_layer_prefix(next, std::numeric_limits<std::int32_t>::max() - 1),
            "model.layers.2147483646.linear_attn.");
  json negative = qwen3_next_json();
  negative["num_hidden_layers"] = -1;
  EXPECT_THAT(hf_error(negative, 3), HasSubstr("'num_hidden_layers'=-1 must be >= 0"));
}

// kda_layers counts from 1: 0 (the 0-vs-1 confusion), an entry past the model's layers, a negative
// one, INT64_MIN (whose `- 1` overflows) and 2^64 - 1 (no int64) name no layer. Refused, naming the
// list and the entry, wherever the list is read.
TEST(HfConfigLayerBounds, KdaLayersEntriesMustNameALayer) {
  const struct {
    json list;
    const char* says;
  } cases[] = {{{1, 0}, "'linear_attn_config.kda_layers'[1]=0: the list counts layers from 1"},
               {{1, 9}, "'linear_attn_config.kda_layers'[1]=9 is beyond the 8 layers of the model"},
               {{-2}, "'linear_attn_config.kda_layers'[0]=-2 is negative"},
               {{std::numeric_limits<std::int64_t>::min()}, "[0]=-9223372036854775808 is negative"},
               {{std::numeric_limits<std::uint64_t>::max()}, "[0]=18446744073709551615 is beyond"},
               {{2.0}, "[0]=2.0 must be an integer"},
               {{"3"}, "[0]=\"3\" must be an integer"}};
  for (const auto& c : cases) {
    json j = kimi_json();
    j["linear_attn_config"]["kda_layers"] = c.list;
    SCOPED_TRACE(c.list.dump());
    EXPECT_THAT(hf_error(j, 0), HasSubstr(c.says));
    EXPECT_THAT(hf_error(j, 3), HasSubstr(c.says));
    EXPECT_THAT(config_error_of([&] { gattn::io::needs_layer_index(j); }), HasSubstr(c.says));
    EXPECT_THAT(config_error_of([&] { gattn::io::attention_layers(j); }), HasSubstr(c.says));
    j.erase("num_hidden_layers");  // without a layer count only the representable layers bound it
    if (c.list != json{1, 9}) {
      EXPECT_THAT(config_error_of([&] { gattn::io::first_attention_layer(j); }),
                  HasSubstr("'linear_attn_config.kda_layers'"));
    }
  }
  json j = kimi_json();
  j.erase("num_hidden_layers");
  j["linear_attn_config"]["kda_layers"] = {1, 9};
  EXPECT_EQ(gattn::io::hf_layer_prefix(j, 8), "model.layers.8.self_attn.");
  EXPECT_TRUE(std::holds_alternative<gattn::delta_config>(parse_hf_config(j, 8)));
  // A valid list: KDA at layers 0-2, 4-6; MLA at 3 and 7.
  const auto census = gattn::io::attention_layers(kimi_json());
  EXPECT_EQ(census->linear, (std::vector<gattn::index>{0, 1, 2, 4, 5, 6}));
  EXPECT_EQ(census->attention, (std::vector<gattn::index>{3, 7}));
  EXPECT_EQ(gattn::io::first_attention_layer(kimi_json()), 3);
}

}  // namespace

}  // namespace test_hf_config
