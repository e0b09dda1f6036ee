// Random weights for any delta_config (docs/spec.md §13), named and shaped by the layer's weight
// contract (core/delta_weights.hpp), so tests build Gated DeltaNet and KDA layers without files.
#pragma once

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
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
/// low-rank gate of rank key_head_dim (or c.gate_rank). A Gated DeltaNet layer's input projections
/// come in `layout` (docs/spec.md §14).
inline weight_map random_delta_weights(const delta_config& c, unsigned seed, delta_decay_init decay = {},
                                       bool biases = false, gdn_layout layout = gdn_layout::fused) {
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
  const std::vector<delta_weight_spec> specs =
      c.kind == delta_kind::kda ? detail::delta_weights(c, w).weights : detail::gdn_weight_specs(c, layout);
  for (const delta_weight_spec& s : specs) {
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

/// Rows [first, first + count) of several views of one element type and width, stacked in order
/// into one dense view that owns a copy of them in that element type.
inline weight_view stack_rows(const std::vector<std::pair<const weight_view*, std::pair<index, index>>>& parts) {
  const weight_view& first = *parts.front().first;
  const std::size_t row_bytes = std::size_t(first.cols() * storage_bytes(first.type()));
  index total = 0;
  for (const auto& p : parts) total += p.second.second;
  auto buffer = std::make_shared<std::vector<unsigned char>>(std::size_t(total) * row_bytes);
  unsigned char* dst = buffer->data();
  for (const auto& [view, run] : parts)
    for (index i = 0; i < run.second; ++i, dst += row_bytes) std::memcpy(dst, view->row(run.first + i), row_bytes);
  std::vector<index> shape = first.shape();
  shape[0] = total;
  return weight_view(first.type(), buffer->data(), shape, -1, std::shared_ptr<const void>(buffer, buffer->data()));
}

/// Qwen3-Next's fused in_proj_qkvz / in_proj_ba (docs/spec.md §13) built from Qwen3.5's split
/// projections (§14) of the same layer, rows copied in their stored element type (the biases too,
/// when the split ones have them); every other tensor is the same view.
inline weight_map fused_from_split(const delta_config& c, const weight_map& split) {
  const index Hk = c.key_heads, Dk = c.key_head_dim, Dv = c.value_head_dim, r = c.group_size();
  weight_map fused;
  for (const auto& [name, view] : split.all())
    if (name.rfind("in_proj_", 0) != 0) fused.set(name, view);
  for (const std::string part : {".weight", ".bias"}) {
    if (!split.contains("in_proj_qkv" + part)) continue;
    const auto& all = split.all();
    const weight_view *qkv = &all.at("in_proj_qkv" + part), *z = &all.at("in_proj_z" + part);
    const weight_view *b = &all.at("in_proj_b" + part), *a = &all.at("in_proj_a" + part);
    std::vector<std::pair<const weight_view*, std::pair<index, index>>> qkvz, ba;
    for (index g = 0; g < Hk; ++g) {  // per key-head group: [q | k | v of its r heads | z of its r heads]
      qkvz.push_back({qkv, {g * Dk, Dk}});
      qkvz.push_back({qkv, {Hk * Dk + g * Dk, Dk}});
      qkvz.push_back({qkv, {2 * Hk * Dk + g * r * Dv, r * Dv}});
      qkvz.push_back({z, {g * r * Dv, r * Dv}});
      ba.push_back({b, {g * r, r}});  // per group: [b of its r heads | a of its r heads]
      ba.push_back({a, {g * r, r}});
    }
    fused.set("in_proj_qkvz" + part, stack_rows(qkvz));
    fused.set("in_proj_ba" + part, stack_rows(ba));
  }
  return fused;
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
