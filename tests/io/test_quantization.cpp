// io/quantization.hpp: the quantization_config of the official FP8 releases is read, every other
// format is refused naming the key, and a config without one has none.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gattn/io/quantization.hpp"
#include "support/vectors.hpp"

namespace gattn {
// Named, not anonymous: the test target is built as a few unity translation units.
namespace test_quantization {

using nlohmann::json;

json fp8_config() {
  return json::parse(R"({"model_type": "qwen3_next", "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                         "activation_scheme": "dynamic", "weight_block_size": [128, 64]}})");
}

/// The message of the config_error `j` raises, or "" when it is accepted.
std::string refusal(const json& j) {
  try {
    (void)io::parse_quantization(j);
  } catch (const config_error& e) {
    return e.what();
  }
  return "";
}

TEST(Quantization, ReadsTheBlockSizeAndDefaults) {
  const auto f = io::parse_quantization(fp8_config());
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->block_rows, 128);
  EXPECT_EQ(f->block_cols, 64);
  json j = fp8_config();  // Qwen3-Next-FP8 names no fmt and lists modules kept in BF16
  j["quantization_config"].erase("fmt");
  j["quantization_config"].erase("activation_scheme");
  j["quantization_config"]["modules_to_not_convert"] = {"lm_head", "model.layers.0.mlp.gate"};
  EXPECT_TRUE(io::parse_quantization(j).has_value());
  EXPECT_FALSE(io::parse_quantization(json::parse(R"({"model_type": "qwen3_next"})")).has_value());
  EXPECT_FALSE(io::parse_quantization(json::parse(R"({"quantization_config": null})")).has_value());
  json wrapped = {{"model_type", "qwen3_5"}, {"text_config", fp8_config()}};
  EXPECT_EQ(io::parse_quantization(wrapped)->block_cols, 64);
}

TEST(Quantization, OtherFormatsAreRefusedNamingTheKey) {
  const auto with = [](const char* key, json value) {
    json j = fp8_config();
    j["quantization_config"][key] = value;
    return j;
  };
  EXPECT_NE(refusal(with("quant_method", "awq")).find("quant_method=\"awq\""), std::string::npos);
  EXPECT_NE(refusal(with("quant_method", "compressed-tensors")).find("quant_method"), std::string::npos);
  EXPECT_NE(refusal(with("fmt", "e5m2")).find("fmt=\"e5m2\""), std::string::npos);
  EXPECT_NE(refusal(with("activation_scheme", "static")).find("activation_scheme=\"static\""), std::string::npos);
  for (json bad : {json::array({128}), json::array({128, 0}), json::array({-1, 128}), json::array({128.5, 128}),
                   json("128"), json::array({128, 1 << 30})})
    EXPECT_NE(refusal(with("weight_block_size", bad)).find("weight_block_size"), std::string::npos) << bad.dump();
  json none = fp8_config();
  none["quantization_config"].erase("weight_block_size");
  EXPECT_NE(refusal(none).find("weight_block_size"), std::string::npos);
  EXPECT_NE(refusal(json::parse(R"({"quantization_config": [1]})")).find("must be an object"), std::string::npos);
}

TEST(Quantization, TheFp8FoldersDeclareTheirBlocks) {
  for (const char* dir : {"hf_qwen3_next_fp8", "hf_qwen3_next_linear_fp8", "hf_deepseek_v3_fp8"}) {
    const auto f = io::load_quantization(test::data_path(std::string(dir) + "/config.json"));
    ASSERT_TRUE(f.has_value()) << dir;
    EXPECT_EQ(f->block_rows, 128);
    EXPECT_EQ(f->block_cols, 128);
  }
  EXPECT_FALSE(io::load_quantization(test::data_path("hf_qwen3_next/config.json")).has_value());
}

}  // namespace test_quantization
}  // namespace gattn
