// Where a layer's gate scores come from (SPEC §4 sources), resolved once per call into a strided view.
#pragma once

#include "gattn/cache/kv_cache.hpp"
#include "gattn/linalg/linear_map.hpp"
#include "gattn/diagnostics/statistics.hpp"
#include "gattn/gate/gate.hpp"

namespace gattn {

/// The scores u of `tokens` rows. `raw` points at the scores (separate, fused_q) or at the g_a
/// output (low_rank) inside the layer's projection buffer, `raw_stride` apart; `gate_b` is the
/// low-rank up-projection. Head sharing averages in place (the buffers are this call's scratch);
/// with `stats`, the activated values are reported to it.
inline gate_scores resolve_gate_scores(const gate_config& g, const gate_shape& shape, float* raw, index raw_stride,
                                       index tokens, const linear_map& gate_b, layer_workspace& ws,
                                       statistics_observer* stats) {
  gate_scores u{raw, raw_stride, shape.per_head};
  float* scores = raw;
  if (g.source == gate_source::low_rank) {
    layer_workspace::fit(ws.gate_scores, tokens * shape.scores());
    scores = ws.gate_scores.data();
    gate_b.apply(raw, tokens, raw_stride, scores, shape.scores());
    u = {scores, shape.scores(), shape.per_head};
  }
  if (g.shared) u = share_over_heads(scores, tokens, u.token_stride, shape);
  if (stats) {
    layer_workspace::fit(ws.activated, tokens * shape.scores());
    activated_gate_values(ws.activated.data(), tokens, shape, u, g.activation);
    stats->add_gate(ws.activated.data(), tokens * shape.scores());
  }
  return u;
}

}  // namespace gattn
