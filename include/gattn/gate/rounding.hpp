// The bit-exact bf16 G1 gate of Kimi K3 serving (docs/spec.md §10, gate_rounding = bf16):
//   gated = bf16(bf16(o) · bf16(σ(bf16(u)))), each product and σ evaluated in fp32, then rounded:
// the two roundings of an unfused PyTorch bf16 `o * torch.sigmoid(u)` on a CPU.
//
// σ is PyTorch's fp32 formula for bf16 tensors, 1 / (1 + exp(-u)), with exp rounded once to fp32.
// It is not act::sigmoid: that one never evaluates exp(+large) and keeps σ(u) ~ e^u for u < -88.7,
// where PyTorch's exp overflows and gives exactly 0 (u = -89: PyTorch 0, exact σ 2.2e-39, a
// nonzero bf16). Since its argument is a bf16, σ has 65536 possible inputs: a table of the bf16
// results, built once from the scalar formula, makes every arch agree with it bit for bit whatever
// the accuracy of its vector exp.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include "gattn/core/config.hpp"
#include "gattn/core/types.hpp"
#include "gattn/simd/arch.hpp"
#include "gattn/simd/simd.hpp"
#include "gattn/simd/convert.hpp"

GATTN_NAMESPACE_BEGIN

/// σ(u) as PyTorch evaluates it for a bf16 tensor on a CPU, before the result is rounded to bf16.
inline float pytorch_sigmoid_fp32(float u) noexcept {
  const float e = float(std::exp(-double(u)));  // exp(-u) rounded once (inf past FLT_MAX)
  return 1.0f / (1.0f + e);
}

namespace detail {
/// bf16 bits of σ for every bf16 bit pattern of u (128 KiB, built on first use, thread-safe).
inline const std::array<std::uint16_t, 65536>& sigmoid_bf16_table() {
  static const std::array<std::uint16_t, 65536> table = [] {
    std::array<std::uint16_t, 65536> t{};
    for (std::uint32_t h = 0; h < 65536; ++h)
      t[h] = round_to_bf16(pytorch_sigmoid_fp32(bf16_to_float(std::uint16_t(h))));
    return t;
  }();
  return table;
}
}  // namespace detail

/// bf16(σ(bf16(u))), widened.
inline float sigmoid_bf16(float u) { return bf16_to_float(detail::sigmoid_bf16_table()[round_to_bf16(u)]); }

/// bf16(bf16(z) · g) for a g that is already a bf16 value, widened.
inline float gate_product_bf16(float z, float g) { return bf16_to_float(round_to_bf16(bf16_to_float(round_to_bf16(z)) * g)); }

/// z[i] = bf16(bf16(z[i]) · bf16(σ(bf16(u[i])))), i < n (elementwise G1, gate_rounding = bf16).
template <class Arch = default_arch>
inline void apply_gate_bf16(float* z, const float* u, index n) {
  using B = simd::batch<float, Arch>;
  constexpr index w = index(B::size);
  const auto& table = detail::sigmoid_bf16_table();
  index i = 0;
  for (; i + w <= n; i += w) {
    alignas(64) std::uint16_t ub[w];
    alignas(64) float g[w];
    simd::store_bf16<Arch>(ub, simd::load<Arch>(u + i));
    for (index l = 0; l < w; ++l) g[l] = bf16_to_float(table[ub[l]]);
    const B zb = simd::round_bf16<Arch>(simd::load<Arch>(z + i));
    simd::store(z + i, simd::round_bf16<Arch>(zb * simd::load<Arch>(g)));
  }
  for (; i < n; ++i) z[i] = gate_product_bf16(z[i], sigmoid_bf16(u[i]));
}

/// Headwise: one score u for the n channels of a head.
template <class Arch = default_arch>
inline void apply_gate_scalar_bf16(float* z, index n, float u) {
  using B = simd::batch<float, Arch>;
  constexpr index w = index(B::size);
  const float g = sigmoid_bf16(u);
  index i = 0;
  for (; i + w <= n; i += w)
    simd::store(z + i, simd::round_bf16<Arch>(simd::round_bf16<Arch>(simd::load<Arch>(z + i)) * B(g)));
  for (; i < n; ++i) z[i] = gate_product_bf16(z[i], g);
}

GATTN_NAMESPACE_END  // namespace gattn
