// Benchmark inputs shared by the benchmark binaries: random normal data, docs/performance.md's L1 layer and its
// weights, and weights held as a checkpoint would give them (bf16/f16 views, not fp32 copies).
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "gattn/core/config.hpp"
#include "gattn/core/memory.hpp"
#include "gattn/core/weights.hpp"
#include "gattn/simd/convert.hpp"

namespace gattn_bench {

inline std::vector<float> normal(gattn::index n, float scale, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& e : v) e = nd(g);
  return v;
}

/// docs/performance.md's L1: d 2048, H_q 16, H_kv 2, D 256, partial RoPE 0.25, G1 elementwise gate fused in q_proj.
inline gattn::gqa_config l1_g1_elementwise() {
  gattn::gqa_config c;
  c.hidden = 2048;
  c.q_heads = 16;
  c.kv_heads = 2;
  c.head_dim = 256;
  c.qk_norm = gattn::norm_kind::rms_zero_centered;
  c.partial_rotary_factor = 0.25;
  c.rope.theta = 1e7;
  c.rope.rotary_dim = 64;
  c.gate.enabled = true;
  c.gate.source = gattn::gate_source::fused_q;
  c.gate.granularity = gattn::granularity::elementwise;
  return c;
}

/// Random fp32 weights of an L1-shaped layer with its gate fused in q_proj.
inline gattn::weight_map l1_weights(const gattn::gqa_config& c) {
  const gattn::index d = c.hidden, D = c.head_dim;
  gattn::weight_map w;
  const float s = 1.0f / std::sqrt(float(d));
  w.set("q_proj.weight", {c.q_heads * 2 * D, d}, normal(c.q_heads * 2 * D * d, s, 1));
  w.set("k_proj.weight", {c.kv_heads * D, d}, normal(c.kv_heads * D * d, s, 2));
  w.set("v_proj.weight", {c.kv_heads * D, d}, normal(c.kv_heads * D * d, s, 3));
  w.set("o_proj.weight", {d, c.q_heads * D}, normal(d * c.q_heads * D, 1.0f / std::sqrt(float(c.q_heads * D)), 4));
  w.set("q_norm.weight", {D}, normal(D, 0.1f, 5));
  w.set("k_norm.weight", {D}, normal(D, 0.1f, 6));
  return w;
}

/// `w` with every tensor rounded to `type` (f32: copied) and held as views of huge-page buffers the
/// returned map keeps alive: what io::load_weights gives for a bf16/f16 checkpoint, in the memory an
/// engine's own weight arena would use (a mapped checkpoint's 4 KiB pages read slower: README).
inline gattn::weight_map stored_as(const gattn::weight_map& w, gattn::storage_type type) {
  gattn::weight_map out;
  for (const auto& [name, v] : w.all()) {
    const std::vector<float> wide = v.widened();
    if (type == gattn::storage_type::f32) {
      auto vals = std::make_shared<gattn::streamed_vector<float>>(wide.begin(), wide.end());
      out.set(name, gattn::weight_view(type, vals->data(), v.shape(), -1, vals));
      continue;
    }
    auto bits = std::make_shared<gattn::streamed_vector<std::uint16_t>>(wide.size());
    for (std::size_t i = 0; i < wide.size(); ++i)
      (*bits)[i] = type == gattn::storage_type::bf16 ? gattn::round_to_bf16(wide[i]) : gattn::round_to_f16(wide[i]);
    out.set(name, gattn::weight_view(type, bits->data(), v.shape(), -1, bits));
  }
  return out;
}

}  // namespace gattn_bench
