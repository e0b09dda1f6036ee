// The weights rank p of P keeps (docs/spec.md §12): rows of the projections that produce its heads, the
// columns of o_proj that read them, o_proj's bias on rank 0 only (so that y = Σ_p y_p).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "gattn/core/delta_weights.hpp"
#include "gattn/core/validate.hpp"
#include "gattn/core/weights.hpp"
#include "gattn/gate/shape.hpp"
#include "gattn/parallel/head_split.hpp"
#include "gattn/parallel/slice.hpp"

GATTN_NAMESPACE_BEGIN

namespace detail {

/// Copies `name` (and `name`'s bias when present) from `w` to `out` through slice_rows.
inline void put_rows(weight_map& out, const weight_map& w, const std::string& proj, std::vector<index> shape,
                     const std::vector<row_run>& runs) {
  out.set(proj + ".weight", slice_rows(w.get(proj + ".weight", shape), runs));
  if (const weight_view* b = w.find(proj + ".bias", {shape[0]})) out.set(proj + ".bias", slice_rows(*b, runs));
}

inline void put_whole(weight_map& out, const weight_map& w, const std::string& name, std::vector<index> shape) {
  out.set(name, slice_rows(w.get(name, shape), {{0, shape[0]}}));
}

/// A head-shared gate averages its scores over all heads before the activation (docs/spec.md §4). The
/// scores are linear in the weights, so the mean of the heads' rows gives the shared score; each
/// of the rank's `copies` gate heads gets those rows, and the rank-local mean over identical rows
/// is the global one: the shared gate is computed in full on every rank with no communication.
inline tensor mean_head_rows(const weight_view& v, index heads, index per, index copies) {
  const tensor t = v.to_tensor();  // the gate rows only (a head-shared gate is computed in full on every rank)
  const index cols = t.shape.size() == 2 ? t.shape[1] : 1;
  std::vector<double> sum(std::size_t(per * cols), 0.0);
  for (index h = 0; h < heads; ++h)
    for (index i = 0; i < per * cols; ++i) sum[std::size_t(i)] += t.data[std::size_t(h * per * cols + i)];
  tensor out;
  out.shape = t.shape;
  out.shape[0] = per * copies;
  out.data.resize(std::size_t(per * copies * cols));
  for (index c = 0; c < copies; ++c)
    for (index i = 0; i < per * cols; ++i)
      out.data[std::size_t(c * per * cols + i)] = float(sum[std::size_t(i)] / double(heads));
  return out;
}

/// The gate-score rows (g_proj, or g_b_proj) of gate heads [first, first + count) out of `heads`.
inline void put_gate_rows(weight_map& out, const weight_map& w, const std::string& proj, const gate_config& g,
                          index heads, index per, index in, index first, index count) {
  const weight_view& wt = w.get(proj + ".weight", {heads * per, in});
  const weight_view* b = w.find(proj + ".bias", {heads * per});
  if (g.shared) {
    out.set(proj + ".weight", mean_head_rows(wt, heads, per, count));
    if (b) out.set(proj + ".bias", mean_head_rows(*b, heads, per, count));
  } else {
    out.set(proj + ".weight", slice_rows(wt, {{first * per, count * per}}));
    if (b) out.set(proj + ".bias", slice_rows(*b, {{first * per, count * per}}));
  }
}

/// The rank's gate weights (separate or low-rank; fused_q travels with q_proj), over `heads` gate
/// heads of `per` scores each.
inline void put_gate(weight_map& out, const weight_map& w, const gate_config& g, index d, index heads, index per,
                     index first, index count) {
  if (g.source == gate_source::separate) {
    put_gate_rows(out, w, "g_proj", g, heads, per, d, first, count);
  } else if (g.source == gate_source::low_rank) {
    put_whole(out, w, "g_a_proj.weight", {g.rank, d});
    if (w.contains("g_a_proj.bias")) put_whole(out, w, "g_a_proj.bias", {g.rank});
    put_gate_rows(out, w, "g_b_proj", g, heads, per, g.rank, first, count);
  }
}

/// o_proj's columns [first, first + count); its bias on rank 0 only.
inline void put_o_proj(weight_map& out, const weight_map& w, const head_split& s, index d, index in, index first,
                       index count) {
  out.set("o_proj.weight", slice_cols(w.get("o_proj.weight", {d, in}), first, count));
  if (s.rank == 0 && w.contains("o_proj.bias")) put_whole(out, w, "o_proj.bias", {d});
}

/// Rows of the fused q_proj (q and gate scores interleaved, docs/spec.md §4) for the rank's heads, in the
/// same layout over the local heads.
inline std::vector<row_run> fused_q_runs(const gqa_config& c, const head_split& s, index per) {
  const index D = c.head_dim, G = c.group_size();
  if (c.gate.layout == fused_layout::per_head) return {{s.q_first * (D + per), s.q_count * (D + per)}};
  std::vector<row_run> runs;  // per KV group: [q of its heads | u of its heads]
  const index heads = std::min(G, s.q_count), first_in_group = s.q_first - s.kv_first * G;
  for (index kv = s.kv_first; kv < s.kv_first + s.kv_count; ++kv) {
    const index base = kv * G * (D + per);
    runs.push_back({base + first_in_group * D, heads * D});
    runs.push_back({base + G * D + first_in_group * per, heads * per});
  }
  return runs;
}

}  // namespace detail

/// The weights of rank `s.rank` for the full layer `c` (validated first) from its full weights `w`.
/// A G5 gate's weights stay out: the tensor-parallel wrapper applies G5 after the all-reduce.
inline weight_map shard_weights(const gqa_config& c, const weight_map& w, const head_split& s) {
  validate(c);
  const index d = c.hidden, D = c.head_dim, Hq = c.q_heads, Hkv = c.kv_heads;
  const gate_config& g = c.gate;
  const gate_shape gs = shape_of_gate(c);
  weight_map out;
  if (g.enabled && g.source == gate_source::fused_q) {
    detail::put_rows(out, w, "q_proj", {Hq * (D + gs.per_head), d}, detail::fused_q_runs(c, s, gs.per_head));
  } else {
    detail::put_rows(out, w, "q_proj", {Hq * D, d}, {{s.q_first * D, s.q_count * D}});
  }
  detail::put_rows(out, w, "k_proj", {Hkv * D, d}, {{s.kv_first * D, s.kv_count * D}});
  detail::put_rows(out, w, "v_proj", {Hkv * D, d}, {{s.kv_first * D, s.kv_count * D}});
  if (g.enabled && (g.position == gate_position::g1 || g.position == gate_position::g4))
    detail::put_gate(out, w, g, d, Hq, gs.per_head, s.q_first, s.q_count);
  if (g.enabled && (g.position == gate_position::g2 || g.position == gate_position::g3))
    detail::put_gate(out, w, g, d, Hkv, gs.per_head, s.kv_first, s.kv_count);
  detail::put_o_proj(out, w, s, d, Hq * D, s.q_first * D, s.q_count * D);
  if (c.qk_norm != norm_kind::none) {
    detail::put_whole(out, w, "q_norm.weight", {D});
    detail::put_whole(out, w, "k_norm.weight", {D});
  }
  if (c.output_norm != norm_kind::none) detail::put_whole(out, w, "o_norm.weight", {D});
  return out;
}

/// MLA: the rank's heads of q_b_proj (or q_proj), kv_b_proj, the gate and o_proj; q_a, kv_a and
/// their norms replicated (every rank keeps the whole latent cache).
inline weight_map shard_weights(const mla_config& c, const weight_map& w, const head_split& s) {
  validate(c);
  const index d = c.hidden, H = c.heads, Q = c.qk_head_dim(), dn = c.qk_nope_head_dim, dv = c.v_head_dim;
  const index dc = c.kv_lora_rank, L = c.kv_lora_rank + c.qk_rope_head_dim;
  weight_map out;
  if (c.q_lora_rank > 0) {
    detail::put_whole(out, w, "q_a_proj.weight", {c.q_lora_rank, d});
    if (w.contains("q_a_proj.bias")) detail::put_whole(out, w, "q_a_proj.bias", {c.q_lora_rank});
    detail::put_whole(out, w, "q_a_layernorm.weight", {c.q_lora_rank});
    detail::put_rows(out, w, "q_b_proj", {H * Q, c.q_lora_rank}, {{s.q_first * Q, s.q_count * Q}});
  } else {
    detail::put_rows(out, w, "q_proj", {H * Q, d}, {{s.q_first * Q, s.q_count * Q}});
  }
  detail::put_whole(out, w, "kv_a_proj_with_mqa.weight", {L, d});
  if (w.contains("kv_a_proj_with_mqa.bias")) detail::put_whole(out, w, "kv_a_proj_with_mqa.bias", {L});
  detail::put_whole(out, w, "kv_a_layernorm.weight", {dc});
  detail::put_rows(out, w, "kv_b_proj", {H * (dn + dv), dc}, {{s.q_first * (dn + dv), s.q_count * (dn + dv)}});
  if (c.gate.enabled) {
    const gate_shape gs = shape_of_gate(c);
    detail::put_gate(out, w, c.gate, d, H, gs.per_head, s.q_first, s.q_count);
  }
  detail::put_o_proj(out, w, s, d, H * dv, s.q_first * dv, s.q_count * dv);
  return out;
}

namespace detail {

/// The channels `runs` of a depthwise conv weight [C, 1, K], as [Σ count, 1, K].
inline weight_view slice_channels(const weight_view& conv, const std::vector<row_run>& runs) {
  const index K = conv.cols();
  const weight_view flat(conv.type(), conv.data(), {conv.rows(), K}, conv.row_stride(), conv.keep_alive());
  const weight_view rows = slice_rows(flat, runs);
  return weight_view(rows.type(), rows.data(), {rows.rows(), 1, K}, rows.row_stride(), rows.keep_alive());
}

/// Per-head vectors of `per` values (A_log, dt_bias) for the rank's heads; A_log may be [1, 1, H, 1].
inline void put_head_values(weight_map& out, const weight_map& w, const std::string& name, index heads, index per,
                            const head_split& s) {
  const weight_view& v = w.all().count(name) && w.all().at(name).shape().size() == 4 ? w.get(name, {1, 1, heads, 1})
                                                                                      : w.get(name, {heads * per});
  const weight_view flat(v.type(), v.data(), {heads * per}, -1, v.keep_alive());
  out.set(name, slice_rows(flat, {{s.q_first * per, s.q_count * per}}));
}

/// Gated DeltaNet's fused projections (Qwen3-Next): per key-head group, in_proj_qkvz [q | k | v of its
/// r heads | z of its r heads] and in_proj_ba [b of r | a of r]; the rank keeps its groups, or, when a
/// group is replicated across ranks, its q and k with the rank's value heads of that group.
inline void put_fused_gdn_projections(weight_map& out, const weight_map& w, const delta_config& c,
                                      const head_split& s) {
  const index Dk = c.key_head_dim, Dv = c.value_head_dim, r = c.group_size(), W = 2 * Dk + 2 * r * Dv;
  const index d = c.hidden, Hk = c.key_heads;
  std::vector<row_run> qkvz, ba;
  if (s.q_count == s.kv_count * r) {  // whole groups
    qkvz.push_back({s.kv_first * W, s.kv_count * W});
    ba.push_back({s.kv_first * 2 * r, s.kv_count * 2 * r});
  } else {  // a part of one group: j0.. of its r value heads
    const index g = s.kv_first, j0 = s.q_first - g * r, n = s.q_count;
    qkvz = {{g * W, 2 * Dk}, {g * W + 2 * Dk + j0 * Dv, n * Dv}, {g * W + 2 * Dk + r * Dv + j0 * Dv, n * Dv}};
    ba = {{g * 2 * r + j0, n}, {g * 2 * r + r + j0, n}};
  }
  put_rows(out, w, "in_proj_qkvz", {Hk * W, d}, qkvz);
  put_rows(out, w, "in_proj_ba", {2 * c.value_heads, d}, ba);
}

/// Gated DeltaNet's input projections and convolution for the rank's value heads and the key heads
/// they read, in the layout the weights have (docs/spec.md §14). Split (Qwen3.5): in_proj_qkv keeps
/// the rows of the rank's conv channels [q | k | v] (the same runs as conv1d, whole groups or part of
/// one alike; three runs, so those rows are copied), in_proj_z, in_proj_b and in_proj_a the rows of
/// its value heads (views).
inline void put_gdn_projections(weight_map& out, const weight_map& w, const delta_config& c, const head_split& s) {
  const index Dk = c.key_head_dim, Dv = c.value_head_dim, d = c.hidden, Hk = c.key_heads, Hv = c.value_heads;
  const std::vector<row_run> channels = {{s.kv_first * Dk, s.kv_count * Dk},
                                         {Hk * Dk + s.kv_first * Dk, s.kv_count * Dk},
                                         {2 * Hk * Dk + s.q_first * Dv, s.q_count * Dv}};
  if (detect_gdn_layout(w) == gdn_layout::split) {
    put_rows(out, w, "in_proj_qkv", {c.conv_channels(), d}, channels);
    put_rows(out, w, "in_proj_z", {Hv * Dv, d}, {{s.q_first * Dv, s.q_count * Dv}});
    put_rows(out, w, "in_proj_b", {Hv, d}, {{s.q_first, s.q_count}});
    put_rows(out, w, "in_proj_a", {Hv, d}, {{s.q_first, s.q_count}});
  } else {
    put_fused_gdn_projections(out, w, c, s);
  }
  out.set("conv1d.weight", slice_channels(w.get("conv1d.weight", {c.conv_channels(), 1, c.conv_kernel}), channels));
}

/// KDA's projections, convolutions and decay/gate inputs for the rank's heads (H_v = H_k: plain slices).
inline void put_kda_projections(weight_map& out, const weight_map& w, const delta_config& c, const head_split& s) {
  const index H = c.value_heads, Dk = c.key_head_dim, Dv = c.value_head_dim, d = c.hidden, K = c.conv_kernel;
  const std::vector<row_run> qk = {{s.q_first * Dk, s.q_count * Dk}}, v = {{s.q_first * Dv, s.q_count * Dv}};
  put_rows(out, w, "q_proj", {H * Dk, d}, qk);
  put_rows(out, w, "k_proj", {H * Dk, d}, qk);
  put_rows(out, w, "v_proj", {H * Dv, d}, v);
  out.set("q_conv1d.weight", slice_channels(w.get("q_conv1d.weight", {H * Dk, 1, K}), qk));
  out.set("k_conv1d.weight", slice_channels(w.get("k_conv1d.weight", {H * Dk, 1, K}), qk));
  out.set("v_conv1d.weight", slice_channels(w.get("v_conv1d.weight", {H * Dv, 1, K}), v));
  put_rows(out, w, "b_proj", {H, d}, {{s.q_first, s.q_count}});
  const index fa = w.contains("f_a_proj.weight") ? w.all().at("f_a_proj.weight").rows() : 0;
  put_whole(out, w, "f_a_proj.weight", {fa, d});
  if (w.contains("f_a_proj.bias")) put_whole(out, w, "f_a_proj.bias", {fa});
  put_rows(out, w, "f_b_proj", {H * Dk, fa}, qk);
  if (c.gate == gate_source::separate) {
    put_rows(out, w, "g_proj", {H * Dv, d}, v);
    return;
  }
  const index rank = w.contains("g_a_proj.weight") ? w.all().at("g_a_proj.weight").rows() : c.gate_rank;
  put_whole(out, w, "g_a_proj.weight", {rank, d});
  if (w.contains("g_a_proj.bias")) put_whole(out, w, "g_a_proj.bias", {rank});
  put_rows(out, w, "g_b_proj", {H * Dv, rank}, v);
}

}  // namespace detail

/// Delta-rule layers (docs/spec.md §13): the rank's value heads with the key heads they read, their
/// conv channels, β/decay/gate rows and the output projection's columns (its bias on rank 0 only).
inline weight_map shard_weights(const delta_config& c, const weight_map& w, const head_split& s) {
  validate(c);
  const bool kda = c.kind == delta_kind::kda;
  const index Dv = c.value_head_dim, d = c.hidden;
  weight_map out;
  if (kda) detail::put_kda_projections(out, w, c, s);
  else detail::put_gdn_projections(out, w, c, s);
  detail::put_head_values(out, w, "A_log", c.value_heads, 1, s);
  detail::put_head_values(out, w, "dt_bias", c.value_heads, kda ? c.key_head_dim : 1, s);
  const std::string norm = kda ? "o_norm.weight" : "norm.weight", proj = kda ? "o_proj" : "out_proj";
  detail::put_whole(out, w, norm, {Dv});
  out.set(proj + ".weight", slice_cols(w.get(proj + ".weight", {d, c.value_heads * Dv}), s.q_first * Dv, s.q_count * Dv));
  if (s.rank == 0 && w.contains(proj + ".bias")) detail::put_whole(out, w, proj + ".bias", {d});
  return out;
}

GATTN_NAMESPACE_END  // namespace gattn
