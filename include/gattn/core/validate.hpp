// Config validation: every rule of SPEC §2-§4 that a config can break, checked once at construction.
#pragma once

#include <cmath>

#include "gattn/core/config.hpp"

namespace gattn {

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
  detail::require<config_error>(r.theta > 0 && std::isfinite(r.theta), "rope_theta=", r.theta, " must be > 0");
  if (r.scaling.yarn) {
    const auto& s = r.scaling;
    detail::require<config_error>(s.factor > 0 && std::isfinite(s.factor), "rope_scaling.factor=", s.factor, " must be > 0");
    detail::require<config_error>(s.original_max_position_embeddings > 0,
                                  "rope_scaling.original_max_position_embeddings=", s.original_max_position_embeddings,
                                  " must be > 0 for yarn");
    detail::require<config_error>(s.beta_fast > 0 && s.beta_slow > 0, "rope_scaling.beta_fast=", s.beta_fast,
                                  " and beta_slow=", s.beta_slow, " must be > 0");
  }
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
  detail::require<config_error>(g.source != gate_source::low_rank || g.rank > 0, "gate.rank=", g.rank,
                                " must be > 0 for gate.source=low_rank");
  detail::require<config_error>(g.rounding == gate_rounding::none ||
                                    (g.position == gate_position::g1 && g.activation == activation::sigmoid &&
                                     g.combine == combine::mul),
                                "gate_rounding=", to_string(g.rounding), " needs the G1 gate with activation=sigmoid and combine=mul (got ",
                                to_string(g.position), ", ", to_string(g.activation), ", ", to_string(g.combine), ")");
}

inline void validate(const gqa_config& c) {
  detail::require<config_error>(c.hidden > 0, "hidden_size=", c.hidden, " must be > 0");
  detail::require<config_error>(c.q_heads > 0, "num_attention_heads=", c.q_heads, " must be > 0");
  detail::require<config_error>(c.kv_heads > 0, "num_key_value_heads=", c.kv_heads, " must be > 0");
  detail::require<config_error>(c.q_heads % c.kv_heads == 0, "num_attention_heads=", c.q_heads,
                                " must be a multiple of num_key_value_heads=", c.kv_heads);
  detail::require<config_error>(c.head_dim > 0, "head_dim=", c.head_dim, " must be > 0");
  detail::require<config_error>(c.rms_norm_eps >= 0 && std::isfinite(c.rms_norm_eps), "rms_norm_eps=",
                                c.rms_norm_eps, " must be >= 0");
  detail::require<config_error>(c.attention_scale >= 0 && std::isfinite(c.attention_scale), "attention_scale=",
                                c.attention_scale, " must be > 0 (or absent)");
  detail::require<config_error>(c.rope.rotary_dim == rotary_width(c.head_dim, c.partial_rotary_factor),
                                "rope.rotary_dim=", c.rope.rotary_dim, " disagrees with head_dim=", c.head_dim,
                                " * partial_rotary_factor=", c.partial_rotary_factor);
  validate(c.rope, c.head_dim);
  validate_gate(c.gate, false);
}

inline void validate(const mla_config& c) {
  detail::require<config_error>(c.hidden > 0, "hidden_size=", c.hidden, " must be > 0");
  detail::require<config_error>(c.heads > 0, "num_attention_heads=", c.heads, " must be > 0");
  detail::require<config_error>(c.qk_nope_head_dim >= 0 && c.qk_rope_head_dim >= 0 && c.qk_head_dim() > 0,
                                "qk_nope_head_dim=", c.qk_nope_head_dim, " and qk_rope_head_dim=", c.qk_rope_head_dim,
                                " must be >= 0 with a positive sum");
  detail::require<config_error>(c.qk_rope_head_dim % 2 == 0, "qk_rope_head_dim=", c.qk_rope_head_dim,
                                " must be even");
  detail::require<config_error>(c.v_head_dim > 0, "v_head_dim=", c.v_head_dim, " must be > 0");
  detail::require<config_error>(c.kv_lora_rank > 0, "kv_lora_rank=", c.kv_lora_rank, " must be > 0");
  detail::require<config_error>(c.q_lora_rank >= 0, "q_lora_rank=", c.q_lora_rank, " must be >= 0");
  detail::require<config_error>(c.rms_norm_eps >= 0 && std::isfinite(c.rms_norm_eps), "rms_norm_eps=",
                                c.rms_norm_eps, " must be >= 0");
  detail::require<config_error>(c.attention_scale >= 0 && std::isfinite(c.attention_scale), "attention_scale=",
                                c.attention_scale, " must be > 0 (or absent)");
  detail::require<config_error>(c.rope.rotary_dim == c.qk_rope_head_dim, "rope.rotary_dim=", c.rope.rotary_dim,
                                " must equal qk_rope_head_dim=", c.qk_rope_head_dim);
  validate(c.rope, c.qk_rope_head_dim);
  validate_gate(c.gate, true);
}

}  // namespace gattn
