// The gattn config JSON of docs/spec.md §9 -> gqa_config / mla_config.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "gattn/core/validate.hpp"
#include "gattn/io/delta_config.hpp"
#include "gattn/io/json_fields.hpp"

GATTN_NAMESPACE_BEGIN
namespace io {
namespace detail {

/// docs/spec.md §9's keys: common to both families, then each family's own.
inline const std::vector<const char*>& gqa_only_keys() {
  static const std::vector<const char*> keys = {"num_key_value_heads", "head_dim", "qk_norm", "output_norm",
                                                "partial_rotary_factor"};
  return keys;
}
inline const std::vector<const char*>& mla_only_keys() {
  static const std::vector<const char*> keys = {"qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                                                "kv_lora_rank", "q_lora_rank"};
  return keys;
}
inline std::vector<const char*> with_common_keys(const std::vector<const char*>& own) {
  std::vector<const char*> keys = {"attention",    "hidden_size",    "num_attention_heads", "rms_norm_eps",
                                   "rope_theta",   "rope_style",     "rope_scaling",        "causal",
                                   "attention_bias", "attention_scale", "kv_cache_dtype",   "gate",
                                   "sliding_window", "kv_numerics",     "numerics"};
  keys.insert(keys.end(), own.begin(), own.end());
  return keys;
}
inline const std::vector<const char*>& gqa_keys() {
  static const std::vector<const char*> keys = with_common_keys(gqa_only_keys());
  return keys;
}
inline const std::vector<const char*>& mla_keys() {
  static const std::vector<const char*> keys = with_common_keys(mla_only_keys());
  return keys;
}

inline norm_kind parse_norm(const std::string& s, const char* key) {
  if (s.empty() || s == "none") return norm_kind::none;
  if (s == "rms") return norm_kind::rms;
  if (s == "rms_zero_centered") return norm_kind::rms_zero_centered;
  throw config_error(gattn::detail::concat("config: '", key, "'=\"", s,
                                           "\" is not supported (use null, \"rms\" or \"rms_zero_centered\")"));
}

inline rope_style parse_rope_style(const std::string& s) {
  if (s == "neox") return rope_style::neox;
  if (s == "interleaved") return rope_style::interleaved;
  if (s == "none") return rope_style::none;
  throw config_error("config: 'rope_style'=\"" + s + "\" is not supported (use neox, interleaved or none)");
}

/// Hugging Face `rope_scaling` (or `rope_parameters`) object: yarn, or default/none.
inline rope_scaling_config parse_rope_scaling(const json& j, const std::string& where) {
  rope_scaling_config s;
  if (j.is_null()) return s;
  gattn::detail::require<config_error>(j.is_object(), where, ": 'rope_scaling' must be an object or null");
  std::string type = get_string(j, "type", where + ".rope_scaling", "");
  if (type.empty()) type = get_string(j, "rope_type", where + ".rope_scaling", "default");
  if (type == "default" || type == "none") return s;
  gattn::detail::require<config_error>(type == "yarn", where, ": rope_scaling type \"", type,
                                       "\" is not implemented (only yarn)");
  const std::string w = where + ".rope_scaling";
  s.yarn = true;
  s.factor = get_double(j, "factor", w);
  s.original_max_position_embeddings = get_double(j, "original_max_position_embeddings", w);
  s.beta_fast = get_double(j, "beta_fast", w, 32.0);
  s.beta_slow = get_double(j, "beta_slow", w, 1.0);
  s.mscale = get_double(j, "mscale", w, 0.0);
  s.mscale_all_dim = get_double(j, "mscale_all_dim", w, 0.0);
  s.attention_factor = get_double(j, "attention_factor", w, 0.0);
  s.truncate = get_bool(j, "truncate", w, true);
  return s;
}

inline gate_config parse_gate(const json& j) {
  const std::string w = "config.gate";
  gate_config g;
  if (j.is_null()) return g;
  gattn::detail::require<config_error>(j.is_object(), w, " must be an object or null");
  refuse_unknown_keys(j, w, {"position", "granularity", "shared", "activation", "combine", "source", "layout", "rank",
                             "gate_rounding"});
  g.enabled = true;
  const std::string pos = get_string(j, "position", w, "");
  gattn::detail::require<config_error>(!pos.empty(), w, ": missing required key 'position'");
  if (pos == "G1") g.position = gate_position::g1;
  else if (pos == "G2") g.position = gate_position::g2;
  else if (pos == "G3") g.position = gate_position::g3;
  else if (pos == "G4") g.position = gate_position::g4;
  else if (pos == "G5") g.position = gate_position::g5;
  else throw config_error(w + ": 'position'=\"" + pos + "\" must be one of G1..G5");
  const std::string gran = get_string(j, "granularity", w, "");
  gattn::detail::require<config_error>(!gran.empty(), w, ": missing required key 'granularity'");
  if (gran == "elementwise") g.granularity = granularity::elementwise;
  else if (gran == "headwise") g.granularity = granularity::headwise;
  else throw config_error(w + ": 'granularity'=\"" + gran + "\" must be elementwise or headwise");
  g.shared = get_bool(j, "shared", w, false);
  const std::string act = get_string(j, "activation", w, "sigmoid");
  if (act == "sigmoid") g.activation = activation::sigmoid;
  else if (act == "silu") g.activation = activation::silu;
  else if (act == "ns_sigmoid") g.activation = activation::ns_sigmoid;
  else if (act == "identity") g.activation = activation::identity;
  else throw config_error(w + ": 'activation'=\"" + act + "\" must be sigmoid, silu, ns_sigmoid or identity");
  const std::string comb = get_string(j, "combine", w, "mul");
  if (comb == "mul") g.combine = combine::mul;
  else if (comb == "add") g.combine = combine::add;
  else throw config_error(w + ": 'combine'=\"" + comb + "\" must be mul or add");
  const std::string src = get_string(j, "source", w, "separate");
  if (src == "separate") g.source = gate_source::separate;
  else if (src == "low_rank") g.source = gate_source::low_rank;
  else if (src == "fused_q") g.source = gate_source::fused_q;
  else throw config_error(w + ": 'source'=\"" + src + "\" must be separate, low_rank or fused_q");
  const std::string layout = get_string(j, "layout", w, "per_head");
  if (layout == "per_head") g.layout = fused_layout::per_head;
  else if (layout == "per_kv_group") g.layout = fused_layout::per_kv_group;
  else throw config_error(w + ": 'layout'=\"" + layout + "\" must be per_head or per_kv_group");
  g.rank = get_index(j, "rank", w, 0);
  g.rounding = get_enum(j, "gate_rounding", w, {gate_rounding::none, gate_rounding::bf16}, gate_rounding::none);
  return g;
}

}  // namespace detail

namespace detail {

/// Refuses keys no gattn config of attention family `kind` has (also inside `rope_scaling`).
inline void refuse_unknown_gattn_keys(const nlohmann::json& j, const std::string& w, const std::string& kind) {
  refuse_unknown_keys(j, w, kind == "mla" ? mla_keys() : gqa_keys(), kind == "mla" ? gqa_only_keys() : mla_only_keys(),
                      kind == "mla" ? "is a GQA key, not part of the MLA layer"
                                    : "is an MLA key, not part of a GQA layer (MLA needs \"attention\": \"mla\")");
  if (has(j, "rope_scaling") && j.at("rope_scaling").is_object())
    refuse_unknown_keys(j.at("rope_scaling"), w + ".rope_scaling",
                        {"type", "rope_type", "factor", "original_max_position_embeddings", "beta_fast", "beta_slow",
                         "mscale", "mscale_all_dim", "attention_factor", "truncate"});
}

/// The settings both attention families read the same way.
struct shared_settings {
  storage_type kv_cache_type = storage_type::f32;
  kv_numerics numerics = kv_numerics::exact;
  gattn::numerics layer_numerics = gattn::numerics::exact;  ///< key `numerics`: the projections' arithmetic
  rope_scaling_config scaling;
  gate_config gate;
};

inline shared_settings parse_shared_settings(const nlohmann::json& j, const std::string& w) {
  // Biases come with the weights (absent ones are zero); the key is only type-checked.
  (void)get_bool(j, "attention_bias", w, false);
  shared_settings s;
  s.kv_cache_type = get_enum(j, "kv_cache_dtype", w, storage_types, storage_type::f32);
  s.numerics = get_enum(j, "kv_numerics", w, {kv_numerics::exact, kv_numerics::fast}, kv_numerics::exact);
  s.layer_numerics = parse_numerics(j, w);
  gattn::detail::require<config_error>(!has(j, "sliding_window"), w, ": 'sliding_window' is not implemented");
  if (has(j, "rope_scaling")) s.scaling = parse_rope_scaling(j.at("rope_scaling"), w);
  if (has(j, "gate")) s.gate = parse_gate(j.at("gate"));
  return s;
}

/// 'attention_scale' (0: 1/sqrt(d_qk)); present, it must be > 0.
inline double parse_attention_scale(const nlohmann::json& j, const std::string& w) {
  const double scale = get_double(j, "attention_scale", w, 0.0);
  gattn::detail::require<config_error>(!has(j, "attention_scale") || scale > 0, w, ": 'attention_scale'=", scale,
                                       " must be > 0");
  return scale;
}

/// The fields GQA and MLA configs read alike: norm epsilon, rope (theta, style with the family's
/// default, scaling), causality, scale, gate, cache type and both numerics.
template <class Config>
void read_common_fields(Config& c, const nlohmann::json& j, const std::string& w, const shared_settings& s,
                        const char* default_rope_style) {
  c.rms_norm_eps = get_double(j, "rms_norm_eps", w, 1e-6);
  c.rope.theta = get_double(j, "rope_theta", w, 10000.0);
  c.rope.style = parse_rope_style(get_string(j, "rope_style", w, default_rope_style));
  c.rope.scaling = s.scaling;
  c.causal = get_bool(j, "causal", w, true);
  c.attention_scale = parse_attention_scale(j, w);
  c.gate = s.gate;
  c.kv_cache_type = s.kv_cache_type;
  c.kv_numerics = s.numerics;
  c.numerics = s.layer_numerics;
}

inline gqa_config parse_gqa_config(const nlohmann::json& j, const std::string& w, const shared_settings& s) {
  gqa_config c;
  c.hidden = get_index(j, "hidden_size", w);
  c.q_heads = get_index(j, "num_attention_heads", w);
  c.kv_heads = get_index(j, "num_key_value_heads", w, c.q_heads);
  c.head_dim = get_index(j, "head_dim", w);
  c.qk_norm = parse_norm(get_string(j, "qk_norm", w, ""), "qk_norm");
  c.output_norm = parse_norm(get_string(j, "output_norm", w, ""), "output_norm");
  read_common_fields(c, j, w, s, "neox");
  c.partial_rotary_factor = get_double(j, "partial_rotary_factor", w, 1.0);
  c.rope.rotary_dim = rotary_width(c.head_dim, c.partial_rotary_factor);
  validate(c);
  return c;
}

inline mla_config parse_mla_config(const nlohmann::json& j, const std::string& w, const shared_settings& s) {
  mla_config c;
  c.hidden = get_index(j, "hidden_size", w);
  c.heads = get_index(j, "num_attention_heads", w);
  c.qk_nope_head_dim = get_index(j, "qk_nope_head_dim", w);
  c.qk_rope_head_dim = get_index(j, "qk_rope_head_dim", w);
  c.v_head_dim = get_index(j, "v_head_dim", w);
  c.kv_lora_rank = get_index(j, "kv_lora_rank", w);
  c.q_lora_rank = get_index(j, "q_lora_rank", w, 0);
  read_common_fields(c, j, w, s, "interleaved");
  c.rope.rotary_dim = c.qk_rope_head_dim;
  validate(c);
  return c;
}

}  // namespace detail

/// Reads a gattn config (docs/spec.md §9). Unknown keys (also in `gate` and `rope_scaling`), keys of the other
/// attention family, wrong types and unsupported values are refused with a config_error naming the key.
inline layer_config parse_gattn_config(const nlohmann::json& j) {
  const std::string w = "config";
  gattn::detail::require<config_error>(j.is_object(), "config must be a JSON object");
  const std::string kind = detail::get_string(j, "attention", w, "gqa");
  if (kind == "gated_deltanet" || kind == "kda") return detail::parse_delta_config(j);
  detail::refuse_unknown_gattn_keys(j, w, kind);
  const detail::shared_settings s = detail::parse_shared_settings(j, w);
  if (kind == "gqa") return detail::parse_gqa_config(j, w, s);
  if (kind == "mla") return detail::parse_mla_config(j, w, s);
  throw config_error(w + ": 'attention'=\"" + kind + "\" must be gqa, mla, gated_deltanet or kda");
}

}  // namespace io
GATTN_NAMESPACE_END  // namespace gattn
