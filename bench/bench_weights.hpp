// Benchmark inputs shared by the benchmark binaries: random normal data, docs/performance.md's L1 layer and its
// weights, and weights held as a checkpoint would give them (bf16/f16 views, not fp32 copies).
#pragma once

#include <algorithm>
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

/// `v` (a matrix) in block FP8 as the official releases store it: blocks of 128 × 128, BF16 scales
/// s = amax / 448, codes e4m3(w / s); the codes in a huge-page buffer the view keeps alive.
inline gattn::weight_view stored_fp8(const gattn::weight_view& v) {
  constexpr gattn::index B = 128;
  const gattn::index R = v.rows(), C = v.cols(), g0 = (R + B - 1) / B, g1 = (C + B - 1) / B;
  const std::vector<float> wide = v.widened();
  struct storage {
    gattn::streamed_vector<std::uint8_t> codes;
    std::vector<std::uint16_t> scales;
  };
  auto st = std::make_shared<storage>();
  st->codes.resize(wide.size());
  st->scales.resize(std::size_t(g0 * g1));
  for (gattn::index i = 0; i < g0; ++i)
    for (gattn::index j = 0; j < g1; ++j) {
      float amax = 0.0f;
      for (gattn::index r = i * B; r < std::min(R, (i + 1) * B); ++r)
        for (gattn::index c = j * B; c < std::min(C, (j + 1) * B); ++c) amax = std::max(amax, std::fabs(wide[std::size_t(r * C + c)]));
      const std::uint16_t s = gattn::round_to_bf16(std::max(amax / 448.0f, 1e-30f));
      st->scales[std::size_t(i * g1 + j)] = s;
      for (gattn::index r = i * B; r < std::min(R, (i + 1) * B); ++r)
        for (gattn::index c = j * B; c < std::min(C, (j + 1) * B); ++c)
          st->codes[std::size_t(r * C + c)] = gattn::round_to_e4m3(wide[std::size_t(r * C + c)] / gattn::bf16_to_float(s));
    }
  const gattn::block_scales scales{gattn::storage_type::bf16, st->scales.data(), g0, g1, B, B, 0, 0};
  return gattn::weight_view(st->codes.data(), v.shape(), scales, -1, std::shared_ptr<const void>(st, st->codes.data()));
}

/// `w` with every tensor rounded to `type` (f32: copied; f8_e4m3: the matrices in block FP8, the
/// rest bf16) and held as views of huge-page buffers the returned map keeps alive: what
/// io::load_weights gives for a checkpoint of that type, in the memory an engine's own weight arena
/// would use (a mapped checkpoint's 4 KiB pages read slower: README).
inline gattn::weight_map stored_as(const gattn::weight_map& w, gattn::storage_type type) {
  gattn::weight_map out;
  for (const auto& [name, v] : w.all()) {
    if (type == gattn::storage_type::f8_e4m3 && v.shape().size() == 2) {
      out.set(name, stored_fp8(v));
      continue;
    }
    const std::vector<float> wide = v.widened();
    if (type == gattn::storage_type::f32) {
      auto vals = std::make_shared<gattn::streamed_vector<float>>(wide.begin(), wide.end());
      out.set(name, gattn::weight_view(type, vals->data(), v.shape(), -1, vals));
      continue;
    }
    auto bits = std::make_shared<gattn::streamed_vector<std::uint16_t>>(wide.size());
    const gattn::storage_type as = type == gattn::storage_type::f8_e4m3 ? gattn::storage_type::bf16 : type;
    for (std::size_t i = 0; i < wide.size(); ++i)
      (*bits)[i] = as == gattn::storage_type::bf16 ? gattn::round_to_bf16(wide[i]) : gattn::round_to_f16(wide[i]);
    out.set(name, gattn::weight_view(as, bits->data(), v.shape(), -1, bits));
  }
  return out;
}

}  // namespace gattn_bench
