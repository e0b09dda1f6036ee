// Tests for gattn/diagnostics/cost_model.hpp: docs/spec.md §7's Table-1 numbers and hand-counted layers.
#include "gattn/diagnostics/cost_model.hpp"

#include <string>
#include <utility>

#include <gtest/gtest.h>

// One namespace per file: the test target is built as a few unity translation units.
namespace test_cost_model {

namespace {

// The paper's 15B MoE attention shape (docs/spec.md §7): L 24, d 2048, H_q 32, H_kv 4, D 128.
constexpr gattn::index paper_layers = 24;

gattn::gqa_config paper_config(gattn::gate_position pos, gattn::granularity gran) {
  gattn::gqa_config c;
  c.hidden = 2048;
  c.q_heads = 32;
  c.kv_heads = 4;
  c.head_dim = 128;
  c.gate.enabled = true;
  c.gate.position = pos;
  c.gate.granularity = gran;
  return c;
}

const gattn::projection_cost& find(const gattn::layer_cost& c, const std::string& name) {
  for (const auto& p : c.projections)
    if (p.name == name) return p;
  for (const auto& n : c.norms)
    if (n.name == name) return n;
  throw std::runtime_error("no projection " + name);
}

bool has(const gattn::layer_cost& c, const std::string& name) {
  for (const auto& p : c.projections)
    if (p.name == name) return true;
  return false;
}

template <class Config>
std::string error_message(const Config& c) {
  try {
    gattn::cost(c);
  } catch (const gattn::config_error& e) {
    return e.what();
  }
  return "";
}

TEST(CostModel, PaperTableOneGateParameters) {
  using gattn::gate_position;
  using gattn::granularity;
  EXPECT_EQ(gattn::cost(paper_config(gate_position::g1, granularity::elementwise)).gate_params * paper_layers,
            201'326'592);
  EXPECT_EQ(gattn::cost(paper_config(gate_position::g1, granularity::headwise)).gate_params * paper_layers, 1'572'864);
  EXPECT_EQ(gattn::cost(paper_config(gate_position::g2, granularity::elementwise)).gate_params * paper_layers,
            25'165'824);
  EXPECT_EQ(gattn::cost(paper_config(gate_position::g5, granularity::elementwise)).gate_params * paper_layers,
            100'663'296);
}

TEST(CostModel, HeadSharedAndFusedGatesCountTheSameRows) {
  using gattn::gate_position;
  using gattn::granularity;
  auto shared = paper_config(gate_position::g1, granularity::elementwise);
  shared.gate.shared = true;  // docs/spec.md §4: g_proj keeps all heads x width rows
  EXPECT_EQ(gattn::cost(shared).gate_params * paper_layers, 201'326'592);

  for (auto layout : {gattn::fused_layout::per_head, gattn::fused_layout::per_kv_group}) {
    auto fused = paper_config(gate_position::g1, granularity::headwise);
    fused.gate.source = gattn::gate_source::fused_q;
    fused.gate.layout = layout;
    const auto c = gattn::cost(fused);
    EXPECT_EQ(c.gate_params * paper_layers, 1'572'864);
    EXPECT_FALSE(has(c, "g_proj"));
    EXPECT_EQ(find(c, "q_proj").rows, 32 * 128 + 32);
    EXPECT_EQ(find(c, "q_proj").gate_params, 32 * 2048);
  }
  auto fused = paper_config(gate_position::g1, granularity::elementwise);
  fused.gate.source = gattn::gate_source::fused_q;
  const auto c = gattn::cost(fused);
  EXPECT_EQ(find(c, "q_proj").rows, 2 * 32 * 128);
  EXPECT_EQ(c.gate_params * paper_layers, 201'326'592);
  // Same layer whether the gate rows live in q_proj or in g_proj.
  EXPECT_EQ(c.total_params, gattn::cost(paper_config(gate_position::g1, granularity::elementwise)).total_params);
}

TEST(CostModel, PaperActivationExample) {
  using gattn::gate_position;
  using gattn::granularity;
  const auto elementwise = gattn::cost(paper_config(gate_position::g1, granularity::elementwise));
  const auto headwise = gattn::cost(paper_config(gate_position::g1, granularity::headwise));
  EXPECT_EQ(elementwise.gate_activation_values_per_token * 4096, 16'777'216);
  EXPECT_EQ(elementwise.gate_activation_values_per_token * 4096 * 2, 32 * 1024 * 1024);  // bf16 bytes
  EXPECT_EQ(headwise.gate_activation_values_per_token * 4096, 131'072);
  EXPECT_EQ(headwise.gate_activation_values_per_token * 4096 * 2, 1024 * 1024 / 4);

  const std::string report = gattn::format_cost_report(elementwise, paper_layers, 4096, 4096);
  EXPECT_NE(report.find("16,777,216 values per layer"), std::string::npos) << report;
  EXPECT_NE(report.find("33,554,432 B (32.00 MiB)"), std::string::npos) << report;
  EXPECT_NE(report.find("201,326,592"), std::string::npos) << report;
  const std::string head_report = gattn::format_cost_report(headwise, paper_layers, 4096, 4096);
  EXPECT_NE(head_report.find("262,144 B (0.25 MiB)"), std::string::npos) << head_report;
  EXPECT_NE(head_report.find("1,572,864"), std::string::npos) << head_report;
}

TEST(CostModel, GatePositionsActivationWidths) {
  using gattn::gate_position;
  using gattn::granularity;
  const std::pair<gate_position, std::int64_t> elementwise[] = {
      {gate_position::g1, 32 * 128}, {gate_position::g2, 4 * 128}, {gate_position::g3, 4 * 128},
      {gate_position::g4, 32 * 128}, {gate_position::g5, 2048}};
  const std::pair<gate_position, std::int64_t> headwise[] = {
      {gate_position::g1, 32}, {gate_position::g2, 4}, {gate_position::g3, 4}, {gate_position::g4, 32}, {gate_position::g5, 1}};
  for (const auto& [pos, width] : elementwise) {
    const auto c = gattn::cost(paper_config(pos, granularity::elementwise));
    EXPECT_EQ(c.gate_activation_values_per_token, width) << gattn::to_string(pos);
    EXPECT_EQ(c.gate_params, width * 2048) << gattn::to_string(pos);
  }
  for (const auto& [pos, width] : headwise) {
    const auto c = gattn::cost(paper_config(pos, granularity::headwise));
    EXPECT_EQ(c.gate_activation_values_per_token, width) << gattn::to_string(pos);
    EXPECT_EQ(c.gate_params, width * 2048) << gattn::to_string(pos);
  }
}

TEST(CostModel, SmallGqaByHand) {
  gattn::gqa_config c;
  c.hidden = 8;
  c.q_heads = 4;
  c.kv_heads = 2;
  c.head_dim = 3;
  c.qk_norm = gattn::norm_kind::rms;
  c.gate.enabled = true;
  c.gate.position = gattn::gate_position::g2;
  c.gate.granularity = gattn::granularity::headwise;
  c.gate.source = gattn::gate_source::low_rank;
  c.gate.rank = 2;
  const auto k = gattn::cost(c);

  EXPECT_EQ(find(k, "q_proj").params, 12 * 8);
  EXPECT_EQ(find(k, "k_proj").params, 6 * 8);
  EXPECT_EQ(find(k, "v_proj").params, 6 * 8);
  EXPECT_EQ(find(k, "o_proj").rows, 8);
  EXPECT_EQ(find(k, "o_proj").cols, 12);
  EXPECT_EQ(find(k, "g_a_proj").params, 2 * 8);   // d·r
  EXPECT_EQ(find(k, "g_b_proj").params, 2 * 2);   // r·width, width = H_kv (headwise G2)
  EXPECT_EQ(find(k, "q_norm").params, 3);
  EXPECT_FALSE(has(k, "g_proj"));
  EXPECT_EQ(k.attention_params, 96 + 48 + 48 + 96);
  EXPECT_EQ(k.norm_params, 6);
  EXPECT_EQ(k.gate_params, 20);
  EXPECT_EQ(k.total_params, 288 + 6 + 20);
  EXPECT_EQ(k.kv_cache_values_per_token, 2 * 2 * 3);
  EXPECT_EQ(k.gate_activation_values_per_token, 2);
  EXPECT_DOUBLE_EQ(k.attention_flops_per_key, 4.0 * 3 * 4);
  // 2 per weight + 5 keys x 4·D·H_q + gate (2 activations + 6 combined target values).
  EXPECT_DOUBLE_EQ(k.flops_per_token(5), 2.0 * 308 + 5 * 48.0 + 8.0);
  EXPECT_DOUBLE_EQ(k.flops_per_token(0), 2.0 * 308 + 8.0);

  c.gate.enabled = false;
  c.output_norm = gattn::norm_kind::rms_zero_centered;
  const auto plain = gattn::cost(c);
  EXPECT_EQ(plain.gate_params, 0);
  EXPECT_EQ(plain.gate_activation_values_per_token, 0);
  EXPECT_EQ(plain.norm_params, 9);
  EXPECT_EQ(plain.projections.size(), 4u);
  EXPECT_DOUBLE_EQ(plain.flops_per_token(5), 2.0 * 288 + 5 * 48.0);
}

TEST(CostModel, SmallMlaByHand) {
  gattn::mla_config c;
  c.hidden = 16;
  c.heads = 2;
  c.qk_nope_head_dim = 4;
  c.qk_rope_head_dim = 2;
  c.v_head_dim = 3;
  c.kv_lora_rank = 5;
  c.q_lora_rank = 6;
  c.gate.enabled = true;  // G1 elementwise sigmoid g_proj (Kimi K3)
  const auto k = gattn::cost(c);

  EXPECT_EQ(find(k, "q_a_proj").params, 6 * 16);
  EXPECT_EQ(find(k, "q_b_proj").params, 2 * 6 * 6);
  EXPECT_EQ(find(k, "kv_a_proj_with_mqa").params, 7 * 16);
  EXPECT_EQ(find(k, "kv_b_proj").params, 2 * 7 * 5);
  EXPECT_EQ(find(k, "g_proj").params, 6 * 16);
  EXPECT_EQ(find(k, "o_proj").params, 16 * 6);
  EXPECT_EQ(find(k, "q_a_layernorm").params, 6);
  EXPECT_EQ(find(k, "kv_a_layernorm").params, 5);
  EXPECT_EQ(k.attention_params, 96 + 72 + 112 + 70 + 96);
  EXPECT_EQ(k.gate_params, 96);
  EXPECT_EQ(k.norm_params, 11);
  EXPECT_EQ(k.total_params, 446 + 96 + 11);
  EXPECT_EQ(k.kv_cache_values_per_token, 5 + 2);
  EXPECT_EQ(k.gate_activation_values_per_token, 6);
  EXPECT_EQ(k.form, gattn::mla_form::absorbed);
  // Absorbed: per head 2·(d_c + d_rope) for scores + 2·d_c for the latent output.
  EXPECT_DOUBLE_EQ(k.attention_flops_per_key, 2 * (2.0 * 7 + 2.0 * 5));
  EXPECT_DOUBLE_EQ(k.flops_per_token(10), 2.0 * 542 + 10 * 48.0 + 12.0);
  // Expanded: 2·(d_nope + d_rope) + 2·d_v per head; the cache is still the latent one.
  const auto e = gattn::cost(c, gattn::mla_form::expanded);
  EXPECT_DOUBLE_EQ(e.attention_flops_per_key, 2 * (2.0 * 6 + 2.0 * 3));
  EXPECT_EQ(e.total_params, k.total_params);
  EXPECT_EQ(e.kv_cache_values_per_token, 7);

  c.q_lora_rank = 0;
  c.gate.granularity = gattn::granularity::headwise;
  const auto q = gattn::cost(c);
  EXPECT_EQ(find(q, "q_proj").params, 12 * 16);
  EXPECT_FALSE(has(q, "q_a_proj"));
  EXPECT_EQ(q.gate_params, 2 * 16);
  EXPECT_EQ(q.norm_params, 5);
  EXPECT_NE(gattn::format_cost_report(q, 3, 100, 10).find("kv_b_proj"), std::string::npos);
}

TEST(CostModel, InvalidConfigsThrowNamingTheField) {
  auto c = paper_config(gattn::gate_position::g1, gattn::granularity::elementwise);
  c.kv_heads = 5;
  EXPECT_NE(error_message(c).find("num_key_value_heads"), std::string::npos);
  c.kv_heads = 0;
  EXPECT_NE(error_message(c).find("num_key_value_heads"), std::string::npos);
  c = paper_config(gattn::gate_position::g1, gattn::granularity::elementwise);
  c.head_dim = 0;
  EXPECT_NE(error_message(c).find("head_dim"), std::string::npos);
  c = paper_config(gattn::gate_position::g1, gattn::granularity::elementwise);
  c.hidden = -1;
  EXPECT_NE(error_message(c).find("hidden_size"), std::string::npos);
  c = paper_config(gattn::gate_position::g3, gattn::granularity::elementwise);
  c.gate.source = gattn::gate_source::fused_q;
  EXPECT_NE(error_message(c).find("gate.source"), std::string::npos);
  c.gate.source = gattn::gate_source::low_rank;
  c.gate.rank = 0;
  EXPECT_NE(error_message(c).find("gate.rank"), std::string::npos);
  c = paper_config(gattn::gate_position::g1, gattn::granularity::elementwise);
  c.hidden = gattn::index(1) << 40;  // q_proj params overflow int64
  c.head_dim = gattn::index(1) << 40;
  EXPECT_NE(error_message(c).find("overflow"), std::string::npos);

  gattn::mla_config m;
  m.hidden = 16;
  m.heads = 2;
  m.qk_nope_head_dim = 4;
  m.v_head_dim = 3;
  m.kv_lora_rank = 0;
  EXPECT_NE(error_message(m).find("kv_lora_rank"), std::string::npos);
  m.kv_lora_rank = 5;
  m.gate.enabled = true;
  m.gate.position = gattn::gate_position::g2;
  EXPECT_NE(error_message(m).find("gate.position"), std::string::npos);

  const auto ok = gattn::cost(paper_config(gattn::gate_position::g1, gattn::granularity::headwise));
  EXPECT_THROW(gattn::format_cost_report(ok, 0, 10, 10), gattn::config_error);
  EXPECT_THROW(gattn::format_cost_report(ok, 1, -1, 10), gattn::config_error);
  EXPECT_THROW(gattn::format_cost_report(ok, 1, 10, -1), gattn::config_error);
  EXPECT_THROW(ok.flops_per_token(-1), gattn::config_error);
}

// A Gated DeltaNet layer counted by hand, in both layouts of its input projections (docs/spec.md §13,
// §14): the same parameters, gate share, FLOPs and state; only the names the projections go by differ.
TEST(CostModel, GatedDeltaNetInEitherLayout) {
  gattn::delta_config c;
  c.hidden = 64;
  c.key_heads = 2;
  c.value_heads = 4;
  c.key_head_dim = 16;
  c.value_head_dim = 8;  // q, k: 32 channels each; v, z: 32
  const gattn::layer_cost fused = gattn::cost(c);
  const gattn::layer_cost split = gattn::cost(c, gattn::gdn_layout::split);
  EXPECT_EQ(find(fused, "in_proj_qkvz").rows, 128);
  EXPECT_EQ(find(fused, "in_proj_qkvz").gate_params, 32 * 64);
  EXPECT_EQ(find(fused, "in_proj_ba").rows, 8);
  EXPECT_FALSE(has(fused, "in_proj_qkv"));
  EXPECT_EQ(find(split, "in_proj_qkv").rows, 96);
  EXPECT_EQ(find(split, "in_proj_qkv").gate_params, 0);
  EXPECT_EQ(find(split, "in_proj_z").rows, 32);
  EXPECT_EQ(find(split, "in_proj_z").gate_params, 32 * 64);
  EXPECT_EQ(find(split, "in_proj_b").rows, 4);
  EXPECT_EQ(find(split, "in_proj_a").rows, 4);
  EXPECT_FALSE(has(split, "in_proj_qkvz"));
  EXPECT_FALSE(has(split, "in_proj_ba"));
  EXPECT_EQ(split.total_params, fused.total_params);
  EXPECT_EQ(split.total_params, 64 * (128 + 8) + 64 * 32 + 96 * 4 + 4 + 4 + 8);
  EXPECT_EQ(split.gate_params, fused.gate_params);
  EXPECT_EQ(split.attention_params, fused.attention_params);
  EXPECT_DOUBLE_EQ(split.flops_per_token(100), fused.flops_per_token(100));
  EXPECT_EQ(split.state_values_per_sequence, fused.state_values_per_sequence);
  EXPECT_NE(split.description.find("split input projections"), std::string::npos) << split.description;
  EXPECT_NE(fused.description.find("fused input projections"), std::string::npos) << fused.description;
  const std::string report = gattn::format_cost_report(split, 3, 10, 10);
  EXPECT_NE(report.find("in_proj_z"), std::string::npos) << report;
}

TEST(CostModel, ThousandsSeparators) {
  using gattn::detail::with_commas;
  EXPECT_EQ(with_commas(std::int64_t{0}), "0");
  EXPECT_EQ(with_commas(std::int64_t{999}), "999");
  EXPECT_EQ(with_commas(std::int64_t{1000}), "1,000");
  EXPECT_EQ(with_commas(std::int64_t{-1234567}), "-1,234,567");
  EXPECT_EQ(with_commas(std::int64_t{201326592}), "201,326,592");
  EXPECT_EQ(with_commas(3.0e9), "3,000,000,000");
}

// Weight and cache bytes at a storage type (docs/spec.md §10): 4 bytes per f32 value, 2 per bf16/f16; the
// cache's type comes from the config's kv_cache_dtype, the weights' from the caller.
TEST(CostModel, BytesAtStorageTypes) {
  using gattn::storage_type;
  EXPECT_EQ(gattn::bytes_per_value(storage_type::f32), 4);
  EXPECT_EQ(gattn::bytes_per_value(storage_type::bf16), 2);
  EXPECT_EQ(gattn::bytes_per_value(storage_type::f16), 2);

  gattn::gqa_config c = paper_config(gattn::gate_position::g1, gattn::granularity::elementwise);
  const auto f32 = gattn::cost(c);
  EXPECT_EQ(f32.kv_cache_type, storage_type::f32);
  // q_proj, g_proj, o_proj 4096·2048 each; k_proj, v_proj 512·2048 each.
  EXPECT_EQ(f32.total_params, 3 * 8'388'608 + 2 * 1'048'576);
  EXPECT_EQ(f32.weight_bytes(storage_type::f32), 4 * f32.total_params);
  EXPECT_EQ(f32.weight_bytes(storage_type::bf16), 54'525'952);
  EXPECT_EQ(f32.weight_bytes(storage_type::f16), 54'525'952);
  EXPECT_EQ(f32.kv_cache_bytes_per_token(), 4 * 1024);  // K and V: 2·H_kv·D = 1024 values

  c.kv_cache_type = storage_type::bf16;
  const auto bf16 = gattn::cost(c);
  EXPECT_EQ(bf16.kv_cache_type, storage_type::bf16);
  EXPECT_EQ(bf16.kv_cache_bytes_per_token(), 2 * 1024);
  c.kv_cache_type = storage_type::f16;
  EXPECT_EQ(gattn::cost(c).kv_cache_bytes_per_token(), 2 * 1024);

  gattn::mla_config m;
  m.hidden = 16;
  m.heads = 2;
  m.qk_nope_head_dim = 4;
  m.qk_rope_head_dim = 2;
  m.v_head_dim = 3;
  m.kv_lora_rank = 5;
  m.kv_cache_type = storage_type::bf16;
  const auto mla = gattn::cost(m);
  EXPECT_EQ(mla.kv_cache_type, storage_type::bf16);
  EXPECT_EQ(mla.kv_cache_bytes_per_token(), 2 * (5 + 2));  // the latent row [c | k_rope]
  EXPECT_EQ(mla.weight_bytes(storage_type::bf16), 2 * mla.total_params);
}

TEST(CostModel, ReportPrintsWeightAndCacheBytesAtTheChosenTypes) {
  gattn::gqa_config c = paper_config(gattn::gate_position::g1, gattn::granularity::elementwise);
  c.kv_cache_type = gattn::storage_type::bf16;
  const std::string report = gattn::format_cost_report(gattn::cost(c), paper_layers, 4096, 4096, gattn::storage_type::bf16);
  // Weights: 54,525,952 B per layer in bf16, x 24 layers.
  EXPECT_NE(report.find("weight bytes (bf16)"), std::string::npos) << report;
  EXPECT_NE(report.find("54,525,952 B (52.00 MiB)"), std::string::npos) << report;
  EXPECT_NE(report.find("1,308,622,848 B (1.22 GiB)"), std::string::npos) << report;
  // Cache: 2,048 B per token per layer in bf16, 49,152 B over 24 layers.
  EXPECT_NE(report.find("kv_cache_dtype bf16"), std::string::npos) << report;
  const std::size_t cache = report.find("  bf16 (cache)");
  ASSERT_NE(cache, std::string::npos) << report;
  const std::string cache_line = report.substr(cache, report.find('\n', cache) - cache);
  EXPECT_NE(cache_line.find("2,048 B (2.00 KiB)"), std::string::npos) << cache_line;
  EXPECT_NE(cache_line.find("49,152 B (48.00 KiB)"), std::string::npos) << cache_line;

  // Defaults: f32 weights (4 bytes each), the config's f32 cache.
  const std::string plain = gattn::format_cost_report(gattn::cost(paper_config(gattn::gate_position::g1,
                                                                               gattn::granularity::elementwise)),
                                                      1, 10, 10);
  EXPECT_NE(plain.find("weight bytes (f32)"), std::string::npos) << plain;
  EXPECT_NE(plain.find("109,051,904 B"), std::string::npos) << plain;
  EXPECT_NE(plain.find("kv_cache_dtype f32"), std::string::npos) << plain;
  EXPECT_NE(plain.find("  f32 (cache)"), std::string::npos) << plain;
}

}  // namespace

}  // namespace test_cost_model
