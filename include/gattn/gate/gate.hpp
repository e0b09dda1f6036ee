// The gate module (docs/spec.md §4): where its scores live, their shape, head sharing, and its application
// to a target tensor outside the fused kernel (G2-G5, and the MLA gate after W_uv).
#pragma once

#include "gattn/core/config.hpp"
#include "gattn/gate/apply.hpp"
#include "gattn/gate/shape.hpp"
#include "gattn/simd/arch.hpp"

GATTN_NAMESPACE_BEGIN

/// Scores u of one chunk: u(t, h, k) = data[t·token_stride + h·head_stride + k].
struct gate_scores {
  const float* data = nullptr;
  index token_stride = 0;
  index head_stride = 0;
};

/// Head-shared gates average the scores over heads before the activation (docs/spec.md §4). The mean is
/// written over head 0's scores in place and the returned view has head stride 0, so every head
/// reads the same values with no copy.
inline gate_scores share_over_heads(float* u, index tokens, index token_stride, const gate_shape& s) {
  for (index t = 0; t < tokens; ++t) {
    float* row = u + t * token_stride;
    for (index k = 0; k < s.per_head; ++k) {
      double sum = 0;  // double: heads can be many, and the mean must not depend on their order much
      for (index h = 0; h < s.heads; ++h) sum += row[h * s.per_head + k];
      row[k] = float(sum / double(s.heads));
    }
  }
  return {u, token_stride, 0};
}

/// target(t, h, k) ← combine(target, act(u(t, h, ·))) for `tokens` rows of a [heads, width] target.
template <class Arch = default_arch>
void apply_gate_rows(float* target, index tokens, index target_token_stride, index target_head_stride,
                     const gate_shape& s, const gate_scores& u, activation act, combine comb,
                     gate_rounding rounding = gate_rounding::none) {
  for (index t = 0; t < tokens; ++t)
    for (index h = 0; h < s.heads; ++h) {
      float* z = target + t * target_token_stride + h * target_head_stride;
      const float* scores = u.data + t * u.token_stride + h * u.head_stride;
      apply_head_gate<Arch>(z, scores, s.width, s.per_head == 1, act, comb, rounding);
    }
}

/// act(u) for every gate value of `tokens` rows, dense [tokens, heads·per_head] (diagnostics).
template <class Arch = default_arch>
void activated_gate_values(float* out, index tokens, const gate_shape& s, const gate_scores& u, activation act) {
  const index n = s.per_head;
  for (index t = 0; t < tokens; ++t)
    for (index h = 0; h < s.heads; ++h) {
      float* o = out + (t * s.heads + h) * n;
      for (index k = 0; k < n; ++k) o[k] = 1.0f;
      apply_gate<Arch>(o, u.data + t * u.token_stride + h * u.head_stride, n, act, combine::mul);
    }
}

GATTN_NAMESPACE_END  // namespace gattn
