// The reference MLA layer (docs/spec.md §3): expanded form in double precision, one sequence, no cache.
#pragma once

#include <vector>

#include "gattn/core/validate.hpp"
#include "gattn/reference/gqa_layer.hpp"
#include "gattn/reference/layer_ops.hpp"
#include "gattn/reference/sdpa.hpp"

GATTN_NAMESPACE_BEGIN namespace reference {

/// Step 1 of docs/spec.md §3: the query [T, H·(d_nope + d_rope)], through the low-rank
/// q_a -> norm -> q_b path when q_lora_rank > 0.
inline dmatrix mla_query(const mla_config& c, const weight_map& w, const dmatrix& x, index T) {
  const index d = c.hidden, H = c.heads, dqk = c.qk_nope_head_dim + c.qk_rope_head_dim;
  if (c.q_lora_rank == 0) return linear(x, T, d, w, "q_proj", H * dqk);
  dmatrix cq = linear(x, T, d, w, "q_a_proj", c.q_lora_rank);
  const std::vector<float> qn = w.widened("q_a_layernorm.weight", {c.q_lora_rank});
  for (index t = 0; t < T; ++t) rms_norm(&cq[std::size_t(t * c.q_lora_rank)], qn.data(), c.q_lora_rank, c.rms_norm_eps, false);
  return linear(cq, T, c.q_lora_rank, w, "q_b_proj", H * dqk);
}

/// Every head's keys [T, H, d_nope + d_rope] and values [T, H, d_v].
struct mla_keys_values {
  dmatrix k, v;
};

/// Steps 2-4: the latent c (normalised) and the shared k_rope; per head [k_nope | v] from the
/// latent; RoPE on q_rope (in q, in place) and k_rope; the full keys [k_nope | k_rope].
inline mla_keys_values mla_keys_and_values(const mla_config& c, const weight_map& w, const dmatrix& x, dmatrix& q,
                                           index T) {
  const index d = c.hidden, H = c.heads, dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim, dv = c.v_head_dim;
  const index dc = c.kv_lora_rank, dqk = dn + dr;
  dmatrix kva = linear(x, T, d, w, "kv_a_proj_with_mqa", dc + dr);
  const std::vector<float> kvn = w.widened("kv_a_layernorm.weight", {dc});
  dmatrix latent(std::size_t(T * dc));
  for (index t = 0; t < T; ++t) {
    std::copy_n(&kva[std::size_t(t * (dc + dr))], dc, &latent[std::size_t(t * dc)]);
    rms_norm(&latent[std::size_t(t * dc)], kvn.data(), dc, c.rms_norm_eps, false);
  }
  dmatrix kv = linear(latent, T, dc, w, "kv_b_proj", H * (dn + dv));
  mla_keys_values r{dmatrix(std::size_t(T * H * dqk)), dmatrix(std::size_t(T * H * dv))};
  for (index t = 0; t < T; ++t) {
    double* k_rope = &kva[std::size_t(t * (dc + dr) + dc)];
    rope(k_rope, t, c.rope);
    for (index h = 0; h < H; ++h) {
      rope(&q[std::size_t((t * H + h) * dqk + dn)], t, c.rope);
      const double* src = &kv[std::size_t((t * H + h) * (dn + dv))];
      double* kh = &r.k[std::size_t((t * H + h) * dqk)];
      std::copy_n(src, dn, kh);
      std::copy_n(k_rope, dr, kh + dn);
      std::copy_n(src + dn, dv, &r.v[std::size_t((t * H + h) * dv)]);
    }
  }
  return r;
}

/// Step 6's G1 gate: the scores of x (g_proj, or g_a_proj then g_b_proj), activated into r.gate
/// and applied to r.gated.
inline void mla_gate(const mla_config& c, const weight_map& w, const dmatrix& x, index T, layer_result& r) {
  const gate_config& g = c.gate;
  const index d = c.hidden, H = c.heads, dv = c.v_head_dim;
  const index per = g.granularity == granularity::elementwise ? dv : 1;
  dmatrix u;
  if (g.source == gate_source::low_rank) {
    dmatrix a = linear(x, T, d, w, "g_a_proj", g.rank);
    u = linear(a, T, g.rank, w, "g_b_proj", H * per);
  } else {
    u = linear(x, T, d, w, "g_proj", H * per);
  }
  r.gate = activate_gate(u, T, H, per, g);
  apply_gate(r.gated.data(), r.gate, T, H, dv, per, g.combine);
}

/// Runs the MLA layer on x [T, d] (positions 0..T-1); fields as for gqa_forward (d_v per head).
inline layer_result mla_forward(const mla_config& c, const weight_map& w, const float* x_in, index T) {
  validate(c);
  detail::check_call_rows("reference::mla_forward", T, 0, values_per_token(c));  // what the layer refuses
  const index d = c.hidden, H = c.heads, dv = c.v_head_dim, dqk = c.qk_nope_head_dim + c.qk_rope_head_dim;
  dmatrix x(x_in, x_in + T * d);
  dmatrix q = mla_query(c, w, x, T);
  const mla_keys_values kv = mla_keys_and_values(c, w, x, q, T);
  // 6. SDPA, the G1 gate, o_proj
  layer_result r;
  r.sdpa.resize(std::size_t(T * H * dv));
  r.probs_first.resize(std::size_t(H * T));
  sdpa(sdpa_shape{T, T, H, H, dqk, dv, c.scale(), c.causal}, q.data(), kv.k.data(), kv.v.data(), r.sdpa.data(),
       r.probs_first.data());
  r.gated = r.sdpa;
  if (c.gate.enabled) mla_gate(c, w, x, T, r);
  r.y = linear(r.gated, T, H * dv, w, "o_proj", d);
  return r;
}

}  GATTN_NAMESPACE_END  // namespace gattn::reference
