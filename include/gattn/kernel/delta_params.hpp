// The delta-rule kernel's problem description (docs/spec.md §13): one sequence's new tokens, all
// value heads, as fp32 views, and how prefill runs.
#pragma once

#include "gattn/core/error.hpp"
#include "gattn/core/types.hpp"

GATTN_NAMESPACE_BEGIN

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

/// Key head read by value head h.
inline index delta_key_head(const delta_params& p, index h) { return h / (p.value_heads / p.key_heads); }

}  // namespace detail
GATTN_NAMESPACE_END  // namespace gattn
