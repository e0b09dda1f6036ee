// The shape of a gate (docs/spec.md §4): how many gate heads, how wide each one's target is, how many
// scores each head reads. One computation, used by the layers and by the cost model.
#pragma once

#include "gattn/core/config.hpp"

GATTN_NAMESPACE_BEGIN

/// Shape of a gate: `heads` groups of `width` target channels, `per_head` scores each
/// (width when elementwise, 1 when headwise).
struct gate_shape {
  index heads = 0;
  index width = 0;
  index per_head = 0;
  index scores() const { return heads * per_head; }  ///< score columns per token
};

/// The gate's shape for a GQA layer: G1/G4 over query heads, G2/G3 over KV heads, G5 over the model width.
inline gate_shape shape_of_gate(const gqa_config& c) {
  gate_shape s;
  switch (c.gate.position) {
    case gate_position::g1:
    case gate_position::g4: s = {c.q_heads, c.head_dim, 0}; break;
    case gate_position::g2:
    case gate_position::g3: s = {c.kv_heads, c.head_dim, 0}; break;
    case gate_position::g5: s = {1, c.hidden, 0}; break;
  }
  s.per_head = c.gate.granularity == granularity::elementwise ? s.width : 1;
  return s;
}

/// The G1 gate of an MLA layer: one group per head over d_v channels.
inline gate_shape shape_of_gate(const mla_config& c) {
  return {c.heads, c.v_head_dim, c.gate.granularity == granularity::elementwise ? c.v_head_dim : 1};
}

GATTN_NAMESPACE_END  // namespace gattn
