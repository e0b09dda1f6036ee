// Config validation: every rule of docs/spec.md §2-§4 that a config can break, the size limits of
// core/config.hpp, and every float that enters fp32 math. Layers validate in their member
// initialisers (validated()), so nothing is built from a config that fails; the reference layers,
// the loaders and the KV cache call the same functions.
#pragma once

#include <algorithm>
#include <cmath>

#include "gattn/core/config.hpp"
#include "gattn/core/rope_frequencies.hpp"  // derived values are checked where they are computed

GATTN_NAMESPACE_BEGIN

namespace detail {

/// Refuses a size field outside [min, limits::max_size].
inline void require_size(const char* field, index v, index min = 1) {
  require<config_error>(v >= min && v <= limits::max_size, field, "=", v, " must be in [", min, ", ",
                        limits::max_size, "] (limits::max_size)");
}

}  // namespace detail

/// R = head_dim · partial_rotary_factor; refused unless it is an even integer in [0, head_dim].
inline index rotary_width(index head_dim, double partial_rotary_factor) {
  const double r = double(head_dim) * partial_rotary_factor;
  const double rounded = std::round(r);
  detail::require<config_error>(std::isfinite(r) && std::fabs(r - rounded) < 1e-9 && rounded >= 0 &&
                                    rounded <= double(head_dim) && index(rounded) % 2 == 0,
                                "partial_rotary_factor=", partial_rotary_factor, " with head_dim=", head_dim,
                                " gives a rotary width of ", r, ", which must be an even integer in [0, head_dim]");
  return index(rounded);
}

inline void validate(const rope_config& r, index max_rotary) {
  detail::require<config_error>(r.rotary_dim >= 0 && r.rotary_dim % 2 == 0 && r.rotary_dim <= max_rotary,
                                "rope: rotary width ", r.rotary_dim, " must be even and in [0, ", max_rotary, "]");
  detail::require<config_error>(r.theta > 0 && std::isfinite(r.theta), "rope_theta=", r.theta,
                                " must be finite and > 0");
  if (r.scaling.yarn) {
    const auto& s = r.scaling;
    auto positive = [](double v) { return v > 0 && std::isfinite(v); };
    auto absent_or_positive = [](double v) { return v >= 0 && std::isfinite(v); };
    detail::require<config_error>(r.theta > 1, "rope_theta=", r.theta,
                                  " must be > 1 with YaRN (ln rope_theta divides its correction range)");
    detail::require<config_error>(positive(s.factor), "rope_scaling.factor=", s.factor, " must be finite and > 0");
    detail::require<config_error>(positive(s.original_max_position_embeddings),
                                  "rope_scaling.original_max_position_embeddings=", s.original_max_position_embeddings,
                                  " must be finite and > 0 for yarn");
    detail::require<config_error>(positive(s.beta_fast), "rope_scaling.beta_fast=", s.beta_fast,
                                  " must be finite and > 0");
    detail::require<config_error>(positive(s.beta_slow), "rope_scaling.beta_slow=", s.beta_slow,
                                  " must be finite and > 0");
    detail::require<config_error>(absent_or_positive(s.mscale), "rope_scaling.mscale=", s.mscale,
                                  " must be finite and > 0 (or absent)");
    detail::require<config_error>(absent_or_positive(s.mscale_all_dim), "rope_scaling.mscale_all_dim=",
                                  s.mscale_all_dim, " must be finite and > 0 (or absent)");
    detail::require<config_error>(absent_or_positive(s.attention_factor), "rope_scaling.attention_factor=",
                                  s.attention_factor, " must be finite and > 0 (or absent)");
  }
  (void)make_rope_frequencies(r);  // refuses derived inv_freq / attention factors that are not finite
}

/// Refuses an rms_norm_eps that is negative or not a finite fp32 value (it is added in fp32).
inline void validate_eps(double eps) {
  detail::require<config_error>(detail::is_nonnegative_float(eps), "rms_norm_eps=", eps,
                                " must be >= 0 and a finite fp32 value");
}

/// Refuses a softmax scale that is not a finite fp32 value > 0 (the kernel takes it as float).
inline void validate_scale(double attention_scale, double scale) {
  detail::require<config_error>(attention_scale >= 0 && std::isfinite(attention_scale), "attention_scale=",
                                attention_scale, " must be finite and > 0 (or absent)");
  detail::require<config_error>(detail::is_positive_float(scale), "attention_scale=", attention_scale,
                                " gives a softmax scale of ", scale, ", which must be a finite fp32 value > 0");
}

inline void validate_gate(const gate_config& g, bool mla) {
  if (!g.enabled) return;
  detail::require<config_error>(!mla || g.position == gate_position::g1, "gate.position=", to_string(g.position),
                                ": MLA supports the G1 gate only");
  detail::require<config_error>(g.source != gate_source::fused_q || (g.position == gate_position::g1 && !mla),
                                "gate.source=fused_q needs gate.position=G1 on a GQA layer (got ", to_string(g.position),
                                mla ? " on MLA" : "", ")");
  detail::require<config_error>(g.source != gate_source::fused_q || !g.shared,
                                "gate.shared=true is not supported with gate.source=fused_q");
  detail::require<config_error>(g.rounding == gate_rounding::none ||
                                    (g.position == gate_position::g1 && g.activation == activation::sigmoid &&
                                     g.combine == combine::mul),
                                "gate_rounding=", to_string(g.rounding), " needs the G1 gate with activation=sigmoid and combine=mul (got ",
                                to_string(g.position), ", ", to_string(g.activation), ", ", to_string(g.combine), ")");
  if (g.source == gate_source::low_rank) detail::require_size("gate.rank", g.rank);
}

inline index low_rank_width(const gate_config& g) {
  return g.enabled && g.source == gate_source::low_rank ? g.rank : 0;
}

/// Upper bound of the values one token takes in any single buffer of a layer call, the
/// reference's included (the widest is the fused projection row). Needs a validated config.
inline index values_per_token(const gqa_config& c) {
  const index q = c.q_heads * c.head_dim, kv = c.kv_heads * c.head_dim;
  return q + 2 * kv + std::max(q, c.hidden) + low_rank_width(c.gate);
}
inline index values_per_token(const mla_config& c) {
  const index H = c.heads, Q = c.qk_head_dim(), dv = c.v_head_dim, dc = c.kv_lora_rank;
  const index latent = dc + c.qk_rope_head_dim;
  const index first = (c.q_lora_rank > 0 ? c.q_lora_rank : H * Q) + latent + H * dv + low_rank_width(c.gate);
  return std::max({first, H * (Q + dv), H * (latent + dc), H * (c.qk_nope_head_dim + dv + Q)});
}

inline void validate(const gqa_config& c) {
  detail::require<config_error>(c.kv_cache_type != storage_type::f8_e4m3, "kv_cache_dtype=f8_e4m3 is not a cache type");
  detail::require_size("hidden_size", c.hidden);
  detail::require_size("num_attention_heads", c.q_heads);
  detail::require_size("num_key_value_heads", c.kv_heads);
  detail::require<config_error>(c.q_heads % c.kv_heads == 0, "num_attention_heads=", c.q_heads,
                                " must be a multiple of num_key_value_heads=", c.kv_heads);
  detail::require_size("head_dim", c.head_dim);
  validate_eps(c.rms_norm_eps);
  validate_scale(c.attention_scale, c.scale());
  detail::require<config_error>(c.partial_rotary_factor >= 0 && c.partial_rotary_factor <= 1,
                                "partial_rotary_factor=", c.partial_rotary_factor, " must be in [0, 1]");
  detail::require<config_error>(c.rope.rotary_dim == rotary_width(c.head_dim, c.partial_rotary_factor),
                                "rope.rotary_dim=", c.rope.rotary_dim, " disagrees with head_dim=", c.head_dim,
                                " * partial_rotary_factor=", c.partial_rotary_factor);
  validate_gate(c.gate, false);
  detail::checked_values<config_error>(values_per_token(c), c.hidden, "gqa: the q/k/v/gate projection (num_attention_heads=",
                                       c.q_heads, ", num_key_value_heads=", c.kv_heads, ", head_dim=", c.head_dim,
                                       ", gate.rank=", low_rank_width(c.gate), ") * hidden_size");
  validate(c.rope, c.head_dim);
}

inline void validate(const mla_config& c) {
  detail::require<config_error>(c.kv_cache_type != storage_type::f8_e4m3, "kv_cache_dtype=f8_e4m3 is not a cache type");
  detail::require_size("hidden_size", c.hidden);
  detail::require_size("num_attention_heads", c.heads);
  detail::require_size("qk_nope_head_dim", c.qk_nope_head_dim, 0);
  detail::require_size("qk_rope_head_dim", c.qk_rope_head_dim, 0);
  detail::require<config_error>(c.qk_head_dim() > 0, "qk_nope_head_dim=", c.qk_nope_head_dim,
                                " and qk_rope_head_dim=", c.qk_rope_head_dim, " must have a positive sum");
  detail::require<config_error>(c.qk_rope_head_dim % 2 == 0, "qk_rope_head_dim=", c.qk_rope_head_dim,
                                " must be even");
  detail::require_size("v_head_dim", c.v_head_dim);
  detail::require_size("kv_lora_rank", c.kv_lora_rank);
  detail::require_size("q_lora_rank", c.q_lora_rank, 0);
  validate_eps(c.rms_norm_eps);
  validate_scale(c.attention_scale, c.scale());
  detail::require<config_error>(c.rope.rotary_dim == c.qk_rope_head_dim, "rope.rotary_dim=", c.rope.rotary_dim,
                                " must equal qk_rope_head_dim=", c.qk_rope_head_dim);
  validate_gate(c.gate, true);
  detail::checked_values<config_error>(
      values_per_token(c), std::max({c.hidden, c.kv_lora_rank, c.q_lora_rank}),
      "mla: the projections (num_attention_heads=", c.heads, ", qk_nope_head_dim=", c.qk_nope_head_dim,
      ", qk_rope_head_dim=", c.qk_rope_head_dim, ", v_head_dim=", c.v_head_dim, ", gate.rank=", low_rank_width(c.gate),
      ") * max(hidden_size, kv_lora_rank, q_lora_rank)");
  validate(c.rope, c.qk_rope_head_dim);
}

/// Upper bound of the values one token takes in any single buffer of a delta-rule layer call: the
/// projection row [q | k | v | gate scores | β | decay inputs] and the per-channel decay.
inline index values_per_token(const delta_config& c) {
  const index qk = c.key_heads * c.key_head_dim, v = c.value_heads * c.value_head_dim;
  const index decay_in = c.kind == delta_kind::kda ? c.key_head_dim + c.value_heads * c.key_head_dim : c.value_heads;
  const index gate_in = c.kind == delta_kind::kda && c.gate == gate_source::low_rank ? c.gate_rank : 0;
  return 2 * qk + 2 * v + c.value_heads + decay_in + gate_in + std::max(v, c.hidden);
}

/// Refuses a delta-rule config (docs/spec.md §13) that breaks a rule, naming the config key.
inline void validate(const delta_config& c) {
  detail::require_size("hidden_size", c.hidden);
  detail::require_size("num_key_heads", c.key_heads);
  detail::require_size("num_value_heads", c.value_heads);
  detail::require<config_error>(c.value_heads % c.key_heads == 0, "num_value_heads=", c.value_heads,
                                " must be a multiple of num_key_heads=", c.key_heads);
  detail::require<config_error>(c.kind != delta_kind::kda || c.value_heads == c.key_heads, "num_value_heads=",
                                c.value_heads, " must equal num_key_heads=", c.key_heads, " for attention=kda");
  detail::require_size("key_head_dim", c.key_head_dim);
  detail::require_size("value_head_dim", c.value_head_dim);
  // The conv state keeps K − 1 rows of every channel per sequence; no model uses more than a few taps.
  detail::require<config_error>(c.conv_kernel >= 1 && c.conv_kernel <= 256, "conv_kernel=", c.conv_kernel,
                                " must be in [1, 256]");
  validate_eps(c.rms_norm_eps);
  if (c.kind == delta_kind::kda && c.decay == decay_form::lower_bound)
    detail::require<config_error>(c.decay_lower_bound >= -5 && c.decay_lower_bound < 0, "decay_lower_bound=",
                                  c.decay_lower_bound, " must be in [-5, 0) for decay=lower_bound");
  detail::require<config_error>(c.gate == gate_source::separate || c.gate == gate_source::low_rank,
                                "gate.source=", to_string(c.gate), " must be separate or low_rank");
  detail::require_size("gate.rank", c.gate_rank, 0);
  detail::checked_values<config_error>(values_per_token(c), c.hidden, "delta: the projections (num_key_heads=",
                                       c.key_heads, ", num_value_heads=", c.value_heads, ", key_head_dim=",
                                       c.key_head_dim, ", value_head_dim=", c.value_head_dim, ") * hidden_size");
  detail::checked_values<config_error>(c.value_heads * c.key_head_dim, c.value_head_dim,
                                       "delta: the recurrent state, num_value_heads * key_head_dim * value_head_dim");
}

/// `c` once validate(c) has passed: for member initialisers, so that a layer builds nothing
/// (RoPE tables, weights) from a config that is refused.
inline const gqa_config& validated(const gqa_config& c) {
  validate(c);
  return c;
}
inline const mla_config& validated(const mla_config& c) {
  validate(c);
  return c;
}
inline const delta_config& validated(const delta_config& c) {
  validate(c);
  return c;
}

namespace detail {

/// Refuses (shape_error) a call of `rows` tokens over `cached` earlier ones whose workspace of
/// `per_token` values per token could not be allocated; `who` names the layer.
inline void check_call_rows(const char* who, index rows, index cached, index per_token) {
  require<shape_error>(rows >= 0, who, ": x has ", rows, " rows");
  // rows * per_token <= 2^40 first, so that cached + rows cannot overflow
  checked_values<shape_error>(rows, per_token, who, ": the workspace of a call, T (rows of x) * values per token");
  checked_values<shape_error>(cached + rows, per_token, who,
                              ": the workspace of a call, (cached tokens + T) * values per token");
}

}  // namespace detail

GATTN_NAMESPACE_END  // namespace gattn
