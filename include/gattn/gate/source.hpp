// Where a layer's gate scores come from (docs/spec.md §4 sources), resolved once per call into a strided view.
#pragma once

#include <vector>

#include "gattn/core/config.hpp"
#include "gattn/core/memory.hpp"
#include "gattn/core/types.hpp"
#include "gattn/gate/gate.hpp"
#include "gattn/gate/shape.hpp"
#include "gattn/linalg/linear_map.hpp"

GATTN_NAMESPACE_BEGIN

/// The scores u of `tokens` rows. `raw` points at the scores (separate, fused_q) or at the g_a
/// output (low_rank) inside the layer's projection buffer, `raw_stride` apart; `gate_b` is the
/// low-rank up-projection, which writes into `low_rank_scores` (grown to fit, never shrunk) and runs
/// on `exec` with `scratch` and the layer's `numerics` (linear_map::apply). Head sharing averages in place (the buffers are
/// this call's scratch).
inline gate_scores resolve_gate_scores(const gate_config& g, const gate_shape& shape, float* raw, index raw_stride,
                                       index tokens, const linear_map& gate_b,
                                       streamed_vector<float>& low_rank_scores, const execution_context& exec = {},
                                       scratch_span scratch = {}, gemm_numerics numerics = gemm_numerics::exact) {
  gate_scores u{raw, raw_stride, shape.per_head};
  float* scores = raw;
  if (g.source == gate_source::low_rank) {
    if (index(low_rank_scores.size()) < tokens * shape.scores())
      low_rank_scores.resize(std::size_t(tokens * shape.scores()));
    scores = low_rank_scores.data();
    gate_b.apply(raw, tokens, raw_stride, scores, shape.scores(), numerics, exec, scratch);
    u = {scores, shape.scores(), shape.per_head};
  }
  if (g.shared) u = share_over_heads(scores, tokens, u.token_stride, shape);
  return u;
}

GATTN_NAMESPACE_END  // namespace gattn
