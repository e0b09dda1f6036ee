// A gate applied to the channels of one head: z ⊙ act(u) or z + act(u) in fp32, elementwise or
// with one score per head (headwise), and apply_head_gate, which every G1 path calls, choosing
// between that and the bf16-rounded gate of gate/rounding.hpp.
#pragma once

#include "gattn/core/config.hpp"
#include "gattn/core/types.hpp"
#include "gattn/gate/activation.hpp"
#include "gattn/gate/rounding.hpp"
#include "gattn/simd/arch.hpp"
#include "gattn/simd/simd.hpp"
#include "gattn/simd/vector_ops.hpp"

GATTN_NAMESPACE_BEGIN
namespace detail {

/// z ⊙ act(u) or z + act(u) on one batch.
template <class Fn, class B>
inline B gate_combine(const B& z, const B& u, Fn fn, combine c) noexcept {
  return c == combine::mul ? z * fn(u) : z + fn(u);
}

}  // namespace detail

/// z[i] = z[i] ⊙ act(u[i]) (mul) or z[i] + act(u[i]) (add), i < n.
template <class Arch = default_arch>
inline void apply_gate(float* z, const float* u, index n, activation a, combine c) {
  act::visit(a, [&](auto fn) {
    detail::for_each_lane_block<Arch>(n, [&](index i, auto tag) {
      using B = decltype(tag);
      simd::store(z + i, detail::gate_combine(detail::load_as<B>(z + i), detail::load_as<B>(u + i), fn, c));
    });
  });
}

/// Headwise gate: one score u broadcast over the n channels of a head.
template <class Arch = default_arch>
inline void apply_gate_scalar(float* z, index n, float u, activation a, combine c) {
  const float g = act::apply(a, u);
  detail::for_each_lane_block<Arch>(n, [&](index i, auto tag) {
    using B = decltype(tag);
    const B zi = detail::load_as<B>(z + i);
    simd::store(z + i, c == combine::mul ? zi * B(g) : zi + B(g));
  });
}

/// The gate of one head's n channels, as every G1 path applies it: u points at the head's scores
/// (one score when headwise). With rounding = bf16 the activation and combine are sigmoid and mul
/// (validate_gate and the kernel's validate refuse anything else).
template <class Arch = default_arch>
inline void apply_head_gate(float* z, const float* u, index n, bool headwise, activation a, combine c,
                            gate_rounding rounding) {
  if (rounding == gate_rounding::bf16) {
    if (headwise) apply_gate_scalar_bf16<Arch>(z, n, *u);
    else apply_gate_bf16<Arch>(z, u, n);
  } else if (headwise) {
    apply_gate_scalar<Arch>(z, n, *u, a, c);
  } else {
    apply_gate<Arch>(z, u, n, a, c);
  }
}

GATTN_NAMESPACE_END  // namespace gattn
