// The gated delta rule (docs/spec.md §13) over one sequence's new tokens: the kernel's interface and
// its recurrent form (one token at a time, the state updated in place).
//
// Per value head h (key head h / (H_v / H_k)), with the fp32 state S [D_k, D_v]:
//   S ← Diag(exp(g_t)) S;   S ← S + β_t k_t (v_t − Sᵀ k_t)ᵀ;   o_t = Sᵀ (scale · q_t)
// q and k arrive l2-normalised (the layer does it after the convolution), unscaled.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "gattn/core/error.hpp"
#include "gattn/core/types.hpp"

namespace gattn {

/// One sequence's delta-rule problem over `tokens` new tokens, all value heads (fp32 views).
/// Element (t, head, c) of q/k is at q[t·q_stride + head·d_k + c]; of v at v[t·v_stride + h·d_v + c];
/// β at beta[t·beta_stride + h]; the log-decay g (≤ 0) at g[t·g_stride + h] (one per value head) or,
/// with per_channel_decay, at g[t·g_stride + h·d_k + c]; o at out[t·out_stride + h·d_v + c].
struct delta_params {
  index tokens = 0;
  index key_heads = 0, value_heads = 0, d_k = 0, d_v = 0;
  const float* q = nullptr;
  index q_stride = 0;
  const float* k = nullptr;
  index k_stride = 0;
  const float* v = nullptr;
  index v_stride = 0;
  const float* beta = nullptr;
  index beta_stride = 0;
  const float* g = nullptr;
  index g_stride = 0;
  bool per_channel_decay = false;  ///< KDA: one decay per key channel; GDN: one per value head
  float scale = 1.0f;              ///< applied to q (1/sqrt(d_k))
  float* state = nullptr;          ///< [value_heads, d_k, d_v], updated to the state after the last token
  float* out = nullptr;
  index out_stride = 0;
};

/// How prefill runs: one token at a time, or in chunks whose work is dense products.
enum class delta_form { automatic, recurrent, chunked };

namespace detail {

inline void validate(const delta_params& p) {
  require<shape_error>(p.tokens >= 0 && p.key_heads > 0 && p.value_heads > 0 && p.d_k > 0 && p.d_v > 0,
                       "delta_rule: tokens=", p.tokens, ", key_heads=", p.key_heads, ", value_heads=", p.value_heads,
                       ", d_k=", p.d_k, ", d_v=", p.d_v, " must be positive (tokens >= 0)");
  require<shape_error>(p.value_heads % p.key_heads == 0, "delta_rule: value_heads=", p.value_heads,
                       " must be a multiple of key_heads=", p.key_heads);
  require<shape_error>(p.state != nullptr, "delta_rule: state is null");
  require<shape_error>(p.tokens == 0 || (p.q && p.k && p.v && p.beta && p.g && p.out),
                       "delta_rule: a q/k/v/beta/g/out pointer is null");
}

}  // namespace detail

/// Scratch floats one head task of the kernel needs (see delta_rule_head).
inline index delta_scratch_floats(index d_k, index d_v) { return 2 * (d_k + d_v); }

/// Value head h of `p`, on the calling thread; `scratch` holds delta_scratch_floats(d_k, d_v).
inline void delta_rule_head(const delta_params& p, index h, delta_form /*form*/, float* scratch) {
  const index dk = p.d_k, dv = p.d_v, kh = h / (p.value_heads / p.key_heads);
  float* S = p.state + h * dk * dv;
  float* alpha = scratch;       // [d_k]
  float* pred = scratch + dk;   // [d_v]: Sᵀ k
  for (index t = 0; t < p.tokens; ++t) {
    const float* q = p.q + t * p.q_stride + kh * dk;
    const float* k = p.k + t * p.k_stride + kh * dk;
    const float* v = p.v + t * p.v_stride + h * dv;
    const float beta = p.beta[t * p.beta_stride + h];
    const float* g = p.g + t * p.g_stride + (p.per_channel_decay ? h * dk : h);
    for (index c = 0; c < dk; ++c) alpha[c] = std::exp(p.per_channel_decay ? g[c] : g[0]);
    std::fill(pred, pred + dv, 0.0f);
    for (index c = 0; c < dk; ++c) {
      float* row = S + c * dv;
      for (index j = 0; j < dv; ++j) {
        row[j] *= alpha[c];
        pred[j] += row[j] * k[c];
      }
    }
    for (index j = 0; j < dv; ++j) pred[j] = beta * (v[j] - pred[j]);  // the update's value u
    float* o = p.out + t * p.out_stride + h * dv;
    std::fill(o, o + dv, 0.0f);
    for (index c = 0; c < dk; ++c) {
      float* row = S + c * dv;
      const float qc = q[c] * p.scale;
      for (index j = 0; j < dv; ++j) {
        row[j] += k[c] * pred[j];
        o[j] += row[j] * qc;
      }
    }
  }
}

}  // namespace gattn
