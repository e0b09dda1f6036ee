// The reference GQA layer (SPEC §2, §4): the whole layer in double precision, one sequence, no cache.
#pragma once

#include <vector>

#include "gattn/core/validate.hpp"
#include "gattn/reference/layer_ops.hpp"
#include "gattn/reference/sdpa.hpp"

namespace gattn::reference {

/// Everything the vectors carry, in double: y [T, d], sdpa and gated [T, H_q·D], probs_first
/// [H_q, T], and the activated gate (empty without a gate).
struct layer_result {
  dmatrix y, sdpa, gated, probs_first, gate;
};

/// Width of the gate scores per head: D (or d for G5) when elementwise, 1 when headwise.
inline index gate_heads(const gqa_config& c) {
  switch (c.gate.position) {
    case gate_position::g1:
    case gate_position::g4: return c.q_heads;
    case gate_position::g2:
    case gate_position::g3: return c.kv_heads;
    case gate_position::g5: return 1;
  }
  return 0;
}
inline index gate_width(const gqa_config& c) { return c.gate.position == gate_position::g5 ? c.hidden : c.head_dim; }
inline index gate_per_head(const gqa_config& c) {
  return c.gate.granularity == granularity::elementwise ? gate_width(c) : 1;
}

/// Runs the layer on x [T, d] (positions 0..T-1).
inline layer_result gqa_forward(const gqa_config& c, const weight_map& w, const float* x_in, index T) {
  validate(c);
  detail::check_call_rows("reference::gqa_forward", T, 0, values_per_token(c));  // what the layer refuses
  const index d = c.hidden, Hq = c.q_heads, Hkv = c.kv_heads, D = c.head_dim, G = c.group_size();
  const gate_config& g = c.gate;
  dmatrix x(x_in, x_in + T * d);

  // 1. projections (the fused_q gate scores come out of q_proj)
  const bool fused = g.enabled && g.source == gate_source::fused_q;
  const index per = g.enabled ? gate_per_head(c) : 0;
  const index q_out = fused ? Hq * (D + per) : Hq * D;
  dmatrix qp = linear(x, T, d, w, "q_proj", q_out);
  dmatrix q(std::size_t(T * Hq * D)), u;
  if (fused) {
    u.resize(std::size_t(T * Hq * per));
    for (index t = 0; t < T; ++t)
      for (index h = 0; h < Hq; ++h) {
        index q_col, u_col;
        if (g.layout == fused_layout::per_head) {  // per head [q_h | u_h]
          q_col = h * (D + per);
          u_col = q_col + D;
        } else {  // per KV group [q of its G heads | u of its G heads]
          const index group = h / G, i = h % G;
          q_col = group * G * (D + per) + i * D;
          u_col = group * G * (D + per) + G * D + i * per;
        }
        for (index k = 0; k < D; ++k) q[std::size_t((t * Hq + h) * D + k)] = qp[std::size_t(t * q_out + q_col + k)];
        for (index k = 0; k < per; ++k) u[std::size_t((t * Hq + h) * per + k)] = qp[std::size_t(t * q_out + u_col + k)];
      }
  } else {
    q = qp;
  }
  dmatrix k = linear(x, T, d, w, "k_proj", Hkv * D);
  dmatrix v = linear(x, T, d, w, "v_proj", Hkv * D);
  if (g.enabled && !fused) {
    const index width = gate_heads(c) * per;
    if (g.source == gate_source::low_rank) {
      dmatrix a = linear(x, T, d, w, "g_a_proj", g.rank);
      u = linear(a, T, g.rank, w, "g_b_proj", width);
    } else {
      u = linear(x, T, d, w, "g_proj", width);
    }
  }
  layer_result r;
  if (g.enabled) r.gate = activate_gate(u, T, gate_heads(c), per, g);

  // 2. G2 / G3 / G4 gate the projection outputs
  if (g.enabled && g.position == gate_position::g2) apply_gate(v.data(), r.gate, T, Hkv, D, per, g.combine);
  if (g.enabled && g.position == gate_position::g3) apply_gate(k.data(), r.gate, T, Hkv, D, per, g.combine);
  if (g.enabled && g.position == gate_position::g4) apply_gate(q.data(), r.gate, T, Hq, D, per, g.combine);

  // 3. QK-norm, 4. RoPE
  const bool zc = c.qk_norm == norm_kind::rms_zero_centered;
  if (c.qk_norm != norm_kind::none) {
    const std::vector<float> qn = w.widened("q_norm.weight", {D});
    const std::vector<float> kn = w.widened("k_norm.weight", {D});
    for (index t = 0; t < T * Hq; ++t) rms_norm(&q[std::size_t(t * D)], qn.data(), D, c.rms_norm_eps, zc);
    for (index t = 0; t < T * Hkv; ++t) rms_norm(&k[std::size_t(t * D)], kn.data(), D, c.rms_norm_eps, zc);
  }
  for (index t = 0; t < T; ++t) {
    for (index h = 0; h < Hq; ++h) rope(&q[std::size_t((t * Hq + h) * D)], t, c.rope);
    for (index h = 0; h < Hkv; ++h) rope(&k[std::size_t((t * Hkv + h) * D)], t, c.rope);
  }

  // 5.-7. SDPA
  r.sdpa.resize(std::size_t(T * Hq * D));
  r.probs_first.resize(std::size_t(Hq * T));
  sdpa_shape s{T, T, Hq, Hkv, D, D, c.scale(), c.causal};
  sdpa(s, q.data(), k.data(), v.data(), r.sdpa.data(), r.probs_first.data());

  // 8. output norm, then the G1 gate
  r.gated = r.sdpa;
  if (c.output_norm != norm_kind::none) {
    const std::vector<float> on = w.widened("o_norm.weight", {D});
    for (index t = 0; t < T * Hq; ++t)
      rms_norm(&r.gated[std::size_t(t * D)], on.data(), D, c.rms_norm_eps,
               c.output_norm == norm_kind::rms_zero_centered);
  }
  if (g.enabled && g.position == gate_position::g1) apply_gate(r.gated.data(), r.gate, T, Hq, D, per, g.combine);

  // 9. o_proj, then G5
  r.y = linear(r.gated, T, Hq * D, w, "o_proj", d);
  if (g.enabled && g.position == gate_position::g5) apply_gate(r.y.data(), r.gate, T, 1, d, per, g.combine);
  return r;
}

}  // namespace gattn::reference
