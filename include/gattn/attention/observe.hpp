// Feeds a statistics_observer from a layer call: the activated gate values, and from one kernel
// call the attention each new query gives token 0.
#pragma once

#include <cmath>
#include <vector>

#include "gattn/cache/workspace.hpp"
#include "gattn/core/config.hpp"
#include "gattn/diagnostics/statistics.hpp"
#include "gattn/gate/gate.hpp"
#include "gattn/gate/shape.hpp"
#include "gattn/kernel/fused_sdpa.hpp"

GATTN_NAMESPACE_BEGIN

/// Element `at` of the stored keys of p, widened (bf16/f16 caches hold bits).
inline float stored_key(const sdpa_params& p, index at) {
  switch (p.kv_type) {
    case storage_type::bf16: return bf16_to_float(p.k_bits[at]);
    case storage_type::f16: return f16_to_float(p.k_bits[at]);
    case storage_type::f8_e4m3: break;  // refused before any kernel runs
    case storage_type::f32: break;
  }
  return p.k[at];
}

/// Reports the activated values of the gate scores u of `tokens` rows to `stats` (they are
/// computed into ws.activated).
inline void observe_gate_values(const gate_config& g, const gate_shape& shape, const gate_scores& u, index tokens,
                                layer_workspace& ws, statistics_observer& stats) {
  layer_workspace::fit(ws.activated, tokens * shape.scores());
  activated_gate_values(ws.activated.data(), tokens, shape, u, g.activation);
  stats.add_gate(ws.activated.data(), tokens * shape.scores());
}

/// p_{i,0} = exp(scale·q_i·k_0 − lse_i) for every query row and head of `p` (which must have run
/// with p.lse set). Key 0 is row 0 of p.k; rows that saw no key give 0.
inline void observe_first_token_attention(const sdpa_params& p, statistics_observer& stats) {
  const index group = p.q_heads / p.kv_heads;
  std::vector<float> first(std::size_t(p.q_heads));
  for (index i = 0; i < p.t_q; ++i) {
    for (index h = 0; h < p.q_heads; ++h) {
      const float* q = p.q + i * p.q_token_stride + h * p.q_head_stride;
      const index k0 = (h / group) * p.k_head_stride;
      double dot = 0;
      for (index c = 0; c < p.d_qk; ++c) dot += double(q[c]) * double(stored_key(p, k0 + c));
      const double lse = p.lse[h * p.t_q + i];
      first[std::size_t(h)] = std::isinf(lse) ? 0.0f : float(std::exp(double(p.scale) * dot - lse));
    }
    stats.add_first_token_probs(p.t_k - p.t_q + i, first.data(), p.q_heads);
  }
}

GATTN_NAMESPACE_END  // namespace gattn
