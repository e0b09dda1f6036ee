// Random weights for any delta_config (docs/spec.md §13), named and shaped by the layer's weight
// contract (core/delta_weights.hpp), so tests build Gated DeltaNet and KDA layers without files.
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gattn/core/delta_weights.hpp"
#include "support/random_layer.hpp"

namespace gattn::test {

/// How strongly the random layer decays: A = exp(A_log) drawn from [a_low, a_high], dt_bias around
/// `dt_bias` (softplus(a + dt_bias) ≈ e^dt_bias for very negative values: a vanishing decay).
struct delta_decay_init {
  float a_low = 1.0f, a_high = 16.0f;
  float dt_bias = -3.0f;
};

/// Weights for `c`: projections N(0, 1/in), conv taps N(0, 1/K), norm weights near 1; f_a_proj and a
/// low-rank gate of rank key_head_dim (or c.gate_rank).
inline weight_map random_delta_weights(const delta_config& c, unsigned seed, delta_decay_init decay = {},
                                       bool biases = false) {
  std::mt19937 gen(seed);
  weight_map w;
  // The contract reads the ranks from f_a_proj and g_a_proj: set those first.
  const index rank = c.gate_rank > 0 ? c.gate_rank : c.key_head_dim;
  if (c.kind == delta_kind::kda) {
    w.set("f_a_proj.weight", {c.key_head_dim, c.hidden}, random_values(gen, c.key_head_dim * c.hidden, 1.0f / std::sqrt(float(c.hidden))));
    if (c.gate == gate_source::low_rank)
      w.set("g_a_proj.weight", {rank, c.hidden}, random_values(gen, rank * c.hidden, 1.0f / std::sqrt(float(c.hidden))));
  }
  std::uniform_real_distribution<float> a(decay.a_low, decay.a_high);
  for (const delta_weight_spec& s : detail::delta_weights(c, w).weights) {
    if (w.contains(s.name)) continue;
    const std::vector<index>& shape = s.shapes.back();  // the plain form ([H] for KDA's A_log)
    index n = 1;
    for (index e : shape) n *= e;
    std::vector<float> v;
    if (s.name == "A_log") {
      for (index i = 0; i < n; ++i) v.push_back(std::log(a(gen)));
    } else if (s.name == "dt_bias") {
      v = random_values(gen, n, 0.5f, decay.dt_bias);
    } else if (s.name.find("norm") != std::string::npos) {
      v = random_values(gen, n, 0.1f, 1.0f);
    } else {
      const index fan_in = shape.size() == 3 ? shape[2] : shape.back();
      v = random_values(gen, n, 1.0f / std::sqrt(float(fan_in)));
    }
    w.set(s.name, shape, v);
    if (biases && !s.bias.empty()) w.set(s.bias, {shape.front()}, random_values(gen, shape.front(), 0.1f));
  }
  return w;
}

/// A small layer of `kind`: GDN with 2 key heads of 4 value heads each, KDA with 3 heads.
inline delta_config small_delta(delta_kind kind, index key_dim = 16, index value_dim = 12, index hidden = 40) {
  delta_config c;
  c.kind = kind;
  c.hidden = hidden;
  c.key_heads = kind == delta_kind::kda ? 3 : 2;
  c.value_heads = kind == delta_kind::kda ? 3 : 8;
  c.key_head_dim = key_dim;
  c.value_head_dim = value_dim;
  if (kind == delta_kind::kda) c.gate = gate_source::low_rank;
  return c;
}

}  // namespace gattn::test
