// The gattn config of a gated delta-rule layer (docs/spec.md §13): defaults, every delta vector config,
// and refusals that name the key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "gattn/io/delta_config.hpp"
#include "gattn/io/gattn_config.hpp"
#include "gattn/io/safetensors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_delta_config {

namespace {

using gattn::delta_config;
using gattn::delta_kind;
using gattn::io::detail::parse_delta_config;
using nlohmann::json;

std::string data_file(const std::string& rel) { return std::string(GATTN_TEST_DATA) + "/" + rel; }

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

delta_config parse(const std::string& text) { return parse_delta_config(json::parse(text)); }

#define GDN_BASE \
  R"("attention": "gated_deltanet", "hidden_size": 64, "num_key_heads": 2, "num_value_heads": 4, "key_head_dim": 16, "value_head_dim": 8)"
#define KDA_BASE \
  R"("attention": "kda", "hidden_size": 64, "num_key_heads": 2, "num_value_heads": 2, "key_head_dim": 16, "value_head_dim": 8)"

TEST(DeltaConfig, DefaultsFollowSpec) {
  const delta_config g = parse("{" GDN_BASE "}");
  EXPECT_EQ(g.kind, delta_kind::gated_deltanet);
  EXPECT_EQ(g.hidden, 64);
  EXPECT_EQ(g.key_heads, 2);
  EXPECT_EQ(g.value_heads, 4);
  EXPECT_EQ(g.key_head_dim, 16);
  EXPECT_EQ(g.value_head_dim, 8);
  EXPECT_EQ(g.conv_kernel, 4);
  EXPECT_DOUBLE_EQ(g.rms_norm_eps, 1e-6);
  const delta_config k = parse("{" KDA_BASE "}");
  EXPECT_EQ(k.kind, delta_kind::kda);
  EXPECT_EQ(k.decay, gattn::decay_form::softplus);
  EXPECT_EQ(k.gate, gattn::gate_source::separate);
  EXPECT_EQ(k.gate_rank, 0);
  EXPECT_EQ(parse("{" KDA_BASE R"(, "gate": null})").gate, gattn::gate_source::separate);
  EXPECT_EQ(parse("{" KDA_BASE R"(, "gate": {}})").gate, gattn::gate_source::separate);
}

TEST(DeltaConfig, KdaKeys) {
  const delta_config b = parse("{" KDA_BASE R"(, "decay": "lower_bound", "decay_lower_bound": -5, "conv_kernel": 3,
                                              "rms_norm_eps": 1e-5, "gate": {"source": "low_rank", "rank": 12}})");
  EXPECT_EQ(b.decay, gattn::decay_form::lower_bound);
  EXPECT_DOUBLE_EQ(b.decay_lower_bound, -5.0);
  EXPECT_EQ(b.conv_kernel, 3);
  EXPECT_DOUBLE_EQ(b.rms_norm_eps, 1e-5);
  EXPECT_EQ(b.gate, gattn::gate_source::low_rank);
  EXPECT_EQ(b.gate_rank, 12);
  // Without a rank the low-rank gate's width is read from g_a_proj's shape (as HF checkpoints leave it).
  const delta_config r = parse("{" KDA_BASE R"(, "decay": "softplus", "gate": {"source": "low_rank"}})");
  EXPECT_EQ(r.gate, gattn::gate_source::low_rank);
  EXPECT_EQ(r.gate_rank, 0);
  EXPECT_DOUBLE_EQ(parse("{" KDA_BASE R"(, "decay": "lower_bound", "decay_lower_bound": -0.001})").decay_lower_bound,
                   -0.001);
}

// `numerics` (docs/spec.md §10) is every family's key: exact by default.
TEST(DeltaConfig, Numerics) {
  EXPECT_EQ(parse("{" GDN_BASE "}").numerics, gattn::numerics::exact);
  EXPECT_EQ(parse("{" GDN_BASE R"(, "numerics": "exact"})").numerics, gattn::numerics::exact);
  EXPECT_EQ(parse("{" GDN_BASE R"(, "numerics": "fast"})").numerics, gattn::numerics::fast);
  EXPECT_EQ(parse("{" KDA_BASE R"(, "numerics": "fast"})").numerics, gattn::numerics::fast);
}

TEST(DeltaConfig, KvCacheDtypeF32IsAccepted) {
  EXPECT_NO_THROW(parse("{" GDN_BASE R"(, "kv_cache_dtype": "f32"})"));
  EXPECT_NO_THROW(parse("{" KDA_BASE R"(, "kv_cache_dtype": null})"));
}

/// Every delta config in tests/data (NAME.config.json) parses to the fields its generator wrote, and
/// the same config sits in the vector's metadata.
TEST(DeltaConfig, EveryVectorConfigParses) {
  int seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(data_file(""))) {
    const std::string name = entry.path().filename().string();
    if (name.find("delta_") == std::string::npos || name.size() < 12 ||
        name.compare(name.size() - 12, 12, ".config.json") != 0)
      continue;
    const json j = read_json(entry.path().string());
    const delta_config c = parse_delta_config(j);
    EXPECT_EQ(gattn::to_string(c.kind), j.at("attention").get<std::string>()) << name;
    EXPECT_EQ(c.hidden, j.at("hidden_size").get<int>()) << name;
    EXPECT_EQ(c.key_heads, j.at("num_key_heads").get<int>()) << name;
    EXPECT_EQ(c.value_heads, j.at("num_value_heads").get<int>()) << name;
    EXPECT_EQ(c.key_head_dim, j.at("key_head_dim").get<int>()) << name;
    EXPECT_EQ(c.value_head_dim, j.at("value_head_dim").get<int>()) << name;
    EXPECT_EQ(c.conv_kernel, j.value("conv_kernel", 4)) << name;
    EXPECT_DOUBLE_EQ(c.rms_norm_eps, j.value("rms_norm_eps", 1e-6)) << name;
    if (c.kind == delta_kind::kda) {
      EXPECT_EQ(gattn::to_string(c.decay), j.value("decay", std::string("softplus"))) << name;
      EXPECT_DOUBLE_EQ(c.decay_lower_bound, j.value("decay_lower_bound", 0.0)) << name;
      EXPECT_EQ(gattn::to_string(c.gate), j.at("gate").value("source", std::string("separate"))) << name;
      EXPECT_EQ(c.gate_rank, j.at("gate").value("rank", 0)) << name;
    }
    const std::string stem = name.substr(0, name.size() - 12);
    const auto file = gattn::io::safetensors_file::open(data_file(stem + ".safetensors"));
    EXPECT_EQ(json::parse(file.metadata().at("config")), j) << name;
    ++seen;
  }
  EXPECT_GE(seen, 4);
}

TEST(DeltaConfig, PublicVectorFields) {
  const delta_config g = parse_delta_config(read_json(data_file("delta_gdn.config.json")));
  EXPECT_EQ(g.kind, delta_kind::gated_deltanet);
  EXPECT_EQ(g.group_size(), 2);
  EXPECT_EQ(g.conv_channels(), 2 * 2 * 32 + 4 * 32);
  const delta_config m = parse_delta_config(read_json(data_file("delta_gdn_mha.config.json")));
  EXPECT_EQ(m.value_head_dim, 48);
  EXPECT_EQ(m.group_size(), 1);
  const delta_config k = parse_delta_config(read_json(data_file("delta_kda.config.json")));
  EXPECT_EQ(k.gate, gattn::gate_source::low_rank);
  EXPECT_EQ(k.gate_rank, 16);
  EXPECT_EQ(k.decay, gattn::decay_form::softplus);
  const delta_config b = parse_delta_config(read_json(data_file("delta_kda_full_gate_bound.config.json")));
  EXPECT_EQ(b.gate, gattn::gate_source::separate);
  EXPECT_EQ(b.decay, gattn::decay_form::lower_bound);
  EXPECT_DOUBLE_EQ(b.decay_lower_bound, -5.0);
  for (const char* dir : {"hf_qwen3_next_linear", "hf_kimi_linear", "hf_qwen3_5_linear"}) {
    const auto io = gattn::io::safetensors_file::open(data_file(std::string(dir) + "/io.safetensors"));
    EXPECT_NO_THROW(parse_delta_config(json::parse(io.metadata().at("gattn_config")))) << dir;
  }
}

struct refusal {
  const char* json_text;
  const char* names;
};

class DeltaConfigRefusal : public ::testing::TestWithParam<refusal> {};

TEST_P(DeltaConfigRefusal, NamesTheKey) {
  try {
    parse_delta_config(json::parse(GetParam().json_text));
    FAIL() << "accepted: " << GetParam().json_text;
  } catch (const gattn::config_error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(GetParam().names));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, DeltaConfigRefusal,
    ::testing::Values(
        // head counts and sizes
        refusal{R"({"attention": "gated_deltanet", "hidden_size": 64, "num_key_heads": 2, "num_value_heads": 3, "key_head_dim": 16, "value_head_dim": 8})", "num_value_heads=3 must be a multiple of num_key_heads=2"},
        refusal{R"({"attention": "kda", "hidden_size": 64, "num_key_heads": 2, "num_value_heads": 4, "key_head_dim": 16, "value_head_dim": 8})", "num_value_heads=4 must equal num_key_heads=2"},
        refusal{R"({"attention": "gated_deltanet", "hidden_size": 64, "num_key_heads": 0, "num_value_heads": 4, "key_head_dim": 16, "value_head_dim": 8})", "num_key_heads=0"},
        refusal{R"({"attention": "gated_deltanet", "hidden_size": 64, "num_key_heads": 2, "num_value_heads": 0, "key_head_dim": 16, "value_head_dim": 8})", "num_value_heads=0"},
        refusal{R"({"attention": "gated_deltanet", "hidden_size": 64, "num_key_heads": 2, "num_value_heads": 4, "key_head_dim": 0, "value_head_dim": 8})", "key_head_dim=0"},
        refusal{R"({"attention": "gated_deltanet", "hidden_size": 64, "num_key_heads": 2, "num_value_heads": 4, "key_head_dim": 16, "value_head_dim": -8})", "value_head_dim=-8"},
        refusal{R"({"attention": "gated_deltanet", "hidden_size": 0, "num_key_heads": 2, "num_value_heads": 4, "key_head_dim": 16, "value_head_dim": 8})", "hidden_size=0"},
        refusal{"{" GDN_BASE R"(, "conv_kernel": 0})", "conv_kernel=0"},
        refusal{"{" GDN_BASE R"(, "conv_kernel": 1000})", "conv_kernel=1000"},
        refusal{"{" GDN_BASE R"(, "rms_norm_eps": -1e-6})", "rms_norm_eps"},
        // required keys
        refusal{R"({"hidden_size": 64, "num_key_heads": 2, "num_value_heads": 4, "key_head_dim": 16, "value_head_dim": 8})", "missing required key 'attention'"},
        refusal{R"({"attention": "kda", "num_key_heads": 2, "num_value_heads": 2, "key_head_dim": 16, "value_head_dim": 8})", "missing required key 'hidden_size'"},
        refusal{R"({"attention": "kda", "hidden_size": 64, "num_value_heads": 2, "key_head_dim": 16, "value_head_dim": 8})", "missing required key 'num_key_heads'"},
        refusal{R"({"attention": "kda", "hidden_size": 64, "num_key_heads": 2, "key_head_dim": 16, "value_head_dim": 8})", "missing required key 'num_value_heads'"},
        refusal{R"({"attention": "kda", "hidden_size": 64, "num_key_heads": 2, "num_value_heads": 2, "value_head_dim": 8})", "missing required key 'key_head_dim'"},
        refusal{R"({"attention": "kda", "hidden_size": 64, "num_key_heads": 2, "num_value_heads": 2, "key_head_dim": 16})", "missing required key 'value_head_dim'"},
        // the decay
        refusal{"{" KDA_BASE R"(, "decay": "lower_bound", "decay_lower_bound": -6})", "decay_lower_bound=-6 must be in [-5, 0)"},
        refusal{"{" KDA_BASE R"(, "decay": "lower_bound", "decay_lower_bound": 0})", "decay_lower_bound=0 must be in [-5, 0)"},
        refusal{"{" KDA_BASE R"(, "decay": "lower_bound", "decay_lower_bound": 0.5})", "decay_lower_bound=0.5"},
        refusal{"{" KDA_BASE R"(, "decay": "lower_bound"})", "missing required key 'decay_lower_bound'"},
        refusal{"{" KDA_BASE R"(, "decay_lower_bound": -1})", "'decay_lower_bound' applies to decay=lower_bound only"},
        refusal{"{" KDA_BASE R"(, "decay": "exp"})", "'decay'=\"exp\" must be softplus or lower_bound"},
        refusal{"{" KDA_BASE R"(, "decay": 1})", "'decay' must be a string"},
        refusal{"{" KDA_BASE R"(, "decay": "lower_bound", "decay_lower_bound": "-1"})", "'decay_lower_bound' must be a number"},
        // the output gate
        refusal{"{" KDA_BASE R"(, "gate": {"source": "fused_q"}})", "'source'=\"fused_q\" must be separate or low_rank"},
        refusal{"{" KDA_BASE R"(, "gate": {"source": "separate", "rank": 8}})", "'rank' applies to source=low_rank only"},
        refusal{"{" KDA_BASE R"(, "gate": {"source": "low_rank", "rank": 0}})", "'rank'=0 must be >= 1"},
        refusal{"{" KDA_BASE R"(, "gate": {"source": "low_rank", "rank": -3}})", "'rank'=-3 must be >= 1"},
        refusal{"{" KDA_BASE R"(, "gate": {"source": "low_rank", "rank": 2.5}})", "'rank'=2.5 must be an integer"},
        refusal{"{" KDA_BASE R"(, "gate": {"source": "low_rank", "rank": 4194304}})", "gate.rank=4194304"},
        refusal{"{" KDA_BASE R"(, "gate": {"position": "G1"}})", "'position' is fixed for a KDA layer"},
        refusal{"{" KDA_BASE R"(, "gate": {"sorce": "low_rank"}})", "unknown key 'sorce'"},
        refusal{"{" KDA_BASE R"(, "gate": "low_rank"})", "config.gate must be an object or null"},
        // keys of another layer
        refusal{"{" GDN_BASE R"(, "decay": "softplus"})", "'decay' is a KDA key"},
        refusal{"{" GDN_BASE R"(, "gate": {"source": "separate"}})", "'gate' is a KDA key"},
        refusal{"{" GDN_BASE R"(, "decay_lower_bound": -1})", "'decay_lower_bound' is a KDA key"},
        refusal{"{" KDA_BASE R"(, "num_attention_heads": 2})", "'num_attention_heads' is a key of the softmax attention layers"},
        refusal{"{" GDN_BASE R"(, "rope_theta": 10000})", "'rope_theta' is a key of the softmax attention layers"},
        refusal{"{" GDN_BASE R"(, "num_key_head": 2})", "unknown key 'num_key_head'"},
        // kv_cache_dtype: the state is fp32
        refusal{"{" GDN_BASE R"(, "kv_cache_dtype": "bf16"})", "'kv_cache_dtype'=\"bf16\" does not apply to a delta-rule layer"},
        refusal{"{" KDA_BASE R"(, "kv_cache_dtype": "f16"})", "'kv_cache_dtype'=\"f16\" does not apply"},
        refusal{"{" KDA_BASE R"(, "kv_cache_dtype": "fp8"})", "'kv_cache_dtype'=\"fp8\" must be f32, bf16 or f16"},
        refusal{"{" GDN_BASE R"(, "numerics": "approx"})", "'numerics'=\"approx\" must be exact or fast"},
        refusal{"{" KDA_BASE R"(, "numerics": 1})", "numerics"},
        refusal{"{" GDN_BASE R"(, "kv_numerics": "fast"})", "'kv_numerics' is a key of the softmax attention layers"},
        // wrong types and values
        refusal{R"({"attention": "mamba", "hidden_size": 64})", "'attention'=\"mamba\" must be gated_deltanet or kda"},
        refusal{R"({"attention": 3, "hidden_size": 64})", "'attention' must be a string"},
        refusal{R"({"attention": "gated_deltanet", "hidden_size": "64", "num_key_heads": 2, "num_value_heads": 4, "key_head_dim": 16, "value_head_dim": 8})", "'hidden_size' must be an integer"},
        refusal{R"({"attention": "gated_deltanet", "hidden_size": 64.5, "num_key_heads": 2, "num_value_heads": 4, "key_head_dim": 16, "value_head_dim": 8})", "'hidden_size'=64.5 must be an integer"},
        refusal{R"({"attention": "gated_deltanet", "hidden_size": 64, "num_key_heads": [2], "num_value_heads": 4, "key_head_dim": 16, "value_head_dim": 8})", "'num_key_heads' must be an integer"},
        refusal{R"({"attention": "gated_deltanet", "hidden_size": 64, "num_key_heads": 2, "num_value_heads": 4, "key_head_dim": 16, "value_head_dim": 8e12})", "'value_head_dim'"},
        refusal{"{" GDN_BASE R"(, "conv_kernel": true})", "'conv_kernel' must be an integer"},
        refusal{"{" GDN_BASE R"(, "rms_norm_eps": "1e-6"})", "'rms_norm_eps' must be a number"},
        refusal{R"([1, 2])", "config must be a JSON object"}));

TEST(DeltaConfig, GattnConfigGivesADeltaConfig) {
  const auto gdn = gattn::io::parse_gattn_config(json::parse("{" GDN_BASE "}"));
  ASSERT_TRUE(std::holds_alternative<gattn::delta_config>(gdn));
  EXPECT_EQ(std::get<gattn::delta_config>(gdn).kind, gattn::delta_kind::gated_deltanet);
  const auto kda = gattn::io::parse_gattn_config(json::parse("{" KDA_BASE "}"));
  ASSERT_TRUE(std::holds_alternative<gattn::delta_config>(kda));
  EXPECT_EQ(std::get<gattn::delta_config>(kda).kind, gattn::delta_kind::kda);
}

// Every key docs/spec.md §13 names is accepted (so refusing unknown keys refuses nothing documented).
TEST(DeltaConfig, EveryDocumentedKeyIsAccepted) {
  EXPECT_NO_THROW(parse(R"({"attention": "gated_deltanet", "hidden_size": 64, "num_key_heads": 2, "num_value_heads": 4,
                            "key_head_dim": 16, "value_head_dim": 8, "conv_kernel": 4, "rms_norm_eps": 1e-6,
                            "kv_cache_dtype": "f32", "numerics": "fast"})"));
  EXPECT_NO_THROW(parse(R"({"attention": "kda", "hidden_size": 64, "num_key_heads": 2, "num_value_heads": 2,
                            "key_head_dim": 16, "value_head_dim": 8, "conv_kernel": 4, "rms_norm_eps": 1e-6,
                            "kv_cache_dtype": "f32", "decay": "lower_bound", "decay_lower_bound": -2.5,
                            "gate": {"source": "low_rank", "rank": 8}})"));
}

#undef GDN_BASE
#undef KDA_BASE

}  // namespace

}  // namespace test_delta_config
