// Random weights for any gqa_config, named as docs/spec.md §9 expects (tests build layers without files).
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gattn/core/config.hpp"
#include "gattn/core/weights.hpp"
#include "gattn/gate/gate.hpp"

namespace gattn::test {

inline std::vector<float> random_values(std::mt19937& gen, index n, float scale, float mean = 0.0f) {
  std::normal_distribution<float> dist(mean, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& e : v) e = dist(gen);
  return v;
}

/// Weights for `c` (gate included) with N(0, 1/in) projections, norms near their identity.
inline weight_map random_gqa_weights(const gqa_config& c, unsigned seed, bool biases = false) {
  std::mt19937 gen(seed);
  weight_map w;
  const index d = c.hidden, D = c.head_dim;
  auto lin = [&](const std::string& name, index out, index in) {
    w.set(name + ".weight", {out, in}, random_values(gen, out * in, 1.0f / std::sqrt(float(in))));
    if (biases) w.set(name + ".bias", {out}, random_values(gen, out, 0.1f));
  };
  const gate_shape g = shape_of_gate(c);
  const bool fused = c.gate.enabled && c.gate.source == gate_source::fused_q;
  lin("q_proj", fused ? c.q_heads * (D + g.per_head) : c.q_heads * D, d);
  lin("k_proj", c.kv_heads * D, d);
  lin("v_proj", c.kv_heads * D, d);
  lin("o_proj", d, c.q_heads * D);
  const float centre = c.qk_norm == norm_kind::rms_zero_centered ? 0.0f : 1.0f;
  if (c.qk_norm != norm_kind::none) {
    w.set("q_norm.weight", {D}, random_values(gen, D, 0.1f, centre));
    w.set("k_norm.weight", {D}, random_values(gen, D, 0.1f, centre));
  }
  if (c.output_norm != norm_kind::none)
    w.set("o_norm.weight", {D}, random_values(gen, D, 0.1f, c.output_norm == norm_kind::rms_zero_centered ? 0.0f : 1.0f));
  if (c.gate.enabled && c.gate.source == gate_source::separate) lin("g_proj", g.scores(), d);
  if (c.gate.enabled && c.gate.source == gate_source::low_rank) {
    lin("g_a_proj", c.gate.rank, d);
    lin("g_b_proj", g.scores(), c.gate.rank);
  }
  return w;
}

inline gqa_config small_gqa(index q_heads = 4, index kv_heads = 2, index head_dim = 16, index hidden = 48) {
  gqa_config c;
  c.hidden = hidden;
  c.q_heads = q_heads;
  c.kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.qk_norm = norm_kind::rms;
  c.rope.rotary_dim = head_dim;
  return c;
}

}  // namespace gattn::test
