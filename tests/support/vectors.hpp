// Loads one reference vector case (docs/spec.md §9): config, fp32 weights, x, and the float64 expectations.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gattn/io/gattn_config.hpp"
#include "gattn/io/load_weights.hpp"
#include "gattn/io/safetensors.hpp"

namespace gattn::test {

inline std::string data_path(const std::string& rel) { return std::string(GATTN_TEST_DATA) + "/" + rel; }

struct vector_case {
  std::string name;
  layer_config config;
  nlohmann::json stats;
  weight_map weights;
  std::vector<float> x;
  std::vector<double> y, sdpa, gated, probs_first;
  index tokens = 0, hidden = 0;
};

inline vector_case load_vector_case(const std::string& name) {
  const auto file = io::safetensors_file::open(data_path(name + ".safetensors"));
  vector_case c;
  c.name = name;
  c.config = io::parse_gattn_config(nlohmann::json::parse(file.metadata().at("config")));
  c.stats = nlohmann::json::parse(file.metadata().at("stats"));
  static const char* outputs[] = {"x", "y", "sdpa", "gated", "probs_first"};
  weight_map all = io::load_weights(file);
  for (const auto& [n, t] : all.all()) {
    bool is_output = false;
    for (const char* o : outputs) is_output = is_output || n == o;
    if (!is_output) c.weights.set(n, t);
  }
  c.x = file.read_f32("x");
  c.tokens = file.info("x").shape[0];
  c.hidden = file.info("x").shape[1];
  c.y = file.read_f64("y");
  c.sdpa = file.read_f64("sdpa");
  c.gated = file.read_f64("gated");
  c.probs_first = file.read_f64("probs_first");
  return c;
}

/// max |a − b| over two arrays of equal length.
template <class A, class B>
double max_abs_diff(const A& a, const B& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}
template <class A>
double max_abs(const A& a) {
  double m = 0;
  for (auto v : a) m = std::max(m, std::abs(double(v)));
  return m;
}

/// Every case name in tests/data (files NAME.safetensors with a `config` metadata entry).
inline std::vector<std::string> gqa_case_names() {
  return {"gqa_plain", "gqa_g1_elementwise_sigmoid", "gqa_g1_headwise_sigmoid", "gqa_g1_shared_elementwise",
          "gqa_g1_shared_headwise", "gqa_g2_elementwise", "gqa_g2_headwise", "gqa_g3_elementwise",
          "gqa_g4_elementwise", "gqa_g5_elementwise", "gqa_g5_headwise", "gqa_g1_silu", "gqa_g1_ns_sigmoid",
          "gqa_g1_additive_silu", "gqa_g1_additive_identity", "gqa_g1_constant", "gqa_g1_bias",
          "gqa_g1_low_rank", "gqa_g1_gated_rmsnorm", "gqa_per_head_rmsnorm", "gqa_mha_no_qknorm_bias",
          "gqa_mqa", "qwen3_next_layout", "qwen3_next_layout_headwise", "paper_layout_elementwise",
          "paper_layout_headwise", "gqa_noncausal", "gqa_yarn_partial", "gqa_interleaved_partial",
          "gqa_g1_headwise_output_norm",
          // tests/data/make_extra_vectors.py: other shapes, seeds and variants
          "extra_gqa_g3_headwise_add", "extra_gqa_g4_headwise_silu", "extra_gqa_g5_shared",
          "extra_gqa_lowrank_shared_headwise", "extra_gqa_mha_g2_shared", "extra_gqa_scale_bias",
          "extra_paper_per_kv_group_g3", "extra_yarn_truncate_false"};
}

inline std::vector<std::string> mla_case_names() {
  return {"mla_plain", "mla_gated", "mla_gated_no_q_lora", "mla_gated_headwise", "mla_gated_nope",
          "mla_gated_unrotated_rope_slots", "extra_mla_lowrank_gate", "extra_mla_shared_add", "extra_mla_yarn_neox"};
}

}  // namespace gattn::test
