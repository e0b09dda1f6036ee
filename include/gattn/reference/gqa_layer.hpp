// The reference GQA layer (docs/spec.md §2, §4): the whole layer in double precision, one sequence, no cache.
#pragma once

#include <vector>

#include "gattn/core/validate.hpp"
#include "gattn/reference/layer_ops.hpp"
#include "gattn/reference/sdpa.hpp"

GATTN_NAMESPACE_BEGIN namespace reference {

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

/// The projections of x: q [T, H_q·D], k and v [T, H_kv·D], and the gate's raw scores u
/// [T, gate_heads·per] (empty without a gate).
struct gqa_projections {
  dmatrix q, k, v, u;
};

/// q_proj's output qp [T, q_out] of a fused_q gate split into q [T, H_q, D] and u [T, H_q, per]:
/// per head [q_h | u_h], or per KV group [q of its G heads | u of its G heads].
inline void split_fused_q(const gqa_config& c, const dmatrix& qp, index T, index q_out, index per, dmatrix& q,
                          dmatrix& u) {
  const index Hq = c.q_heads, D = c.head_dim, G = c.group_size();
  u.resize(std::size_t(T * Hq * per));
  for (index t = 0; t < T; ++t)
    for (index h = 0; h < Hq; ++h) {
      index q_col, u_col;
      if (c.gate.layout == fused_layout::per_head) {
        q_col = h * (D + per);
        u_col = q_col + D;
      } else {
        const index group = h / G, i = h % G;
        q_col = group * G * (D + per) + i * D;
        u_col = group * G * (D + per) + G * D + i * per;
      }
      for (index k = 0; k < D; ++k) q[std::size_t((t * Hq + h) * D + k)] = qp[std::size_t(t * q_out + q_col + k)];
      for (index k = 0; k < per; ++k) u[std::size_t((t * Hq + h) * per + k)] = qp[std::size_t(t * q_out + u_col + k)];
    }
}

/// Step 1 of docs/spec.md §2: the projections (a fused_q gate's scores come out of q_proj).
inline gqa_projections gqa_project(const gqa_config& c, const weight_map& w, const dmatrix& x, index T) {
  const index d = c.hidden, Hq = c.q_heads, Hkv = c.kv_heads, D = c.head_dim;
  const gate_config& g = c.gate;
  const bool fused = g.enabled && g.source == gate_source::fused_q;
  const index per = g.enabled ? gate_per_head(c) : 0;
  const index q_out = fused ? Hq * (D + per) : Hq * D;
  gqa_projections p;
  dmatrix qp = linear(x, T, d, w, "q_proj", q_out);
  if (fused) {
    p.q.resize(std::size_t(T * Hq * D));
    split_fused_q(c, qp, T, q_out, per, p.q, p.u);
  } else {
    p.q = qp;
  }
  p.k = linear(x, T, d, w, "k_proj", Hkv * D);
  p.v = linear(x, T, d, w, "v_proj", Hkv * D);
  if (g.enabled && !fused) {
    const index width = gate_heads(c) * per;
    if (g.source == gate_source::low_rank) {
      dmatrix a = linear(x, T, d, w, "g_a_proj", g.rank);
      p.u = linear(a, T, g.rank, w, "g_b_proj", width);
    } else {
      p.u = linear(x, T, d, w, "g_proj", width);
    }
  }
  return p;
}

/// Steps 3 and 4: QK-norm, then RoPE, on q and k in place.
inline void gqa_norm_and_rope(const gqa_config& c, const weight_map& w, dmatrix& q, dmatrix& k, index T) {
  const index Hq = c.q_heads, Hkv = c.kv_heads, D = c.head_dim;
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
}

/// Steps 5-8: SDPA into r.sdpa (and r.probs_first), then the output norm and the G1 gate into r.gated.
inline void gqa_attention(const gqa_config& c, const weight_map& w, const gqa_projections& p, index T,
                          layer_result& r) {
  const index Hq = c.q_heads, Hkv = c.kv_heads, D = c.head_dim;
  const gate_config& g = c.gate;
  r.sdpa.resize(std::size_t(T * Hq * D));
  r.probs_first.resize(std::size_t(Hq * T));
  sdpa_shape s{T, T, Hq, Hkv, D, D, c.scale(), c.causal};
  sdpa(s, p.q.data(), p.k.data(), p.v.data(), r.sdpa.data(), r.probs_first.data());
  r.gated = r.sdpa;
  if (c.output_norm != norm_kind::none) {
    const std::vector<float> on = w.widened("o_norm.weight", {D});
    for (index t = 0; t < T * Hq; ++t)
      rms_norm(&r.gated[std::size_t(t * D)], on.data(), D, c.rms_norm_eps,
               c.output_norm == norm_kind::rms_zero_centered);
  }
  const index per = g.enabled ? gate_per_head(c) : 0;
  if (g.enabled && g.position == gate_position::g1) apply_gate(r.gated.data(), r.gate, T, Hq, D, per, g.combine);
}

/// Runs the layer on x [T, d] (positions 0..T-1): the projections, the gates on them (G2-G4),
/// QK-norm and RoPE, the attention (SDPA, output norm, G1), o_proj and G5.
inline layer_result gqa_forward(const gqa_config& c, const weight_map& w, const float* x_in, index T) {
  validate(c);
  detail::check_call_rows("reference::gqa_forward", T, 0, values_per_token(c));  // what the layer refuses
  const index d = c.hidden, Hq = c.q_heads, Hkv = c.kv_heads, D = c.head_dim;
  const gate_config& g = c.gate;
  const index per = g.enabled ? gate_per_head(c) : 0;
  dmatrix x(x_in, x_in + T * d);

  // 1. projections
  gqa_projections p = gqa_project(c, w, x, T);
  layer_result r;
  if (g.enabled) r.gate = activate_gate(p.u, T, gate_heads(c), per, g);

  // 2. G2 / G3 / G4 gate the projection outputs
  if (g.enabled && g.position == gate_position::g2) apply_gate(p.v.data(), r.gate, T, Hkv, D, per, g.combine);
  if (g.enabled && g.position == gate_position::g3) apply_gate(p.k.data(), r.gate, T, Hkv, D, per, g.combine);
  if (g.enabled && g.position == gate_position::g4) apply_gate(p.q.data(), r.gate, T, Hq, D, per, g.combine);

  // 3. QK-norm, 4. RoPE; 5.-7. SDPA, 8. output norm, then the G1 gate
  gqa_norm_and_rope(c, w, p.q, p.k, T);
  gqa_attention(c, w, p, T, r);

  // 9. o_proj, then G5
  r.y = linear(r.gated, T, Hq * D, w, "o_proj", d);
  if (g.enabled && g.position == gate_position::g5) apply_gate(r.y.data(), r.gate, T, 1, d, per, g.combine);
  return r;
}

}  GATTN_NAMESPACE_END  // namespace gattn::reference
