// The gattn config JSON of a gated delta-rule layer (docs/spec.md §13 "Config") -> delta_config.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gattn/core/validate.hpp"
#include "gattn/io/json_fields.hpp"

GATTN_NAMESPACE_BEGIN namespace io::detail {

inline const std::vector<const char*>& delta_common_keys() {
  static const std::vector<const char*> keys = {"attention",     "hidden_size",    "num_key_heads",
                                                "num_value_heads", "key_head_dim", "value_head_dim",
                                                "conv_kernel",   "rms_norm_eps",   "kv_cache_dtype",
                                                "numerics"};
  return keys;
}
/// Keys only a KDA layer reads; in a gated_deltanet config they are refused as such.
inline const std::vector<const char*>& kda_only_keys() {
  static const std::vector<const char*> keys = {"decay", "decay_lower_bound", "gate"};
  return keys;
}
/// Keys of the softmax attention layers (docs/spec.md §9) that a delta-rule layer does not read.
inline const std::vector<const char*>& softmax_only_keys() {
  static const std::vector<const char*> keys = {
    "num_attention_heads", "num_key_value_heads", "head_dim",      "qk_norm",         "output_norm",
    "partial_rotary_factor", "rope_theta",      "rope_style",      "rope_scaling",    "causal",
    "attention_bias",      "attention_scale",   "sliding_window",  "kv_numerics",     "qk_nope_head_dim",
    "qk_rope_head_dim",    "v_head_dim",        "kv_lora_rank",    "q_lora_rank"};
  return keys;
}

inline std::vector<const char*> delta_keys(delta_kind kind) {
  std::vector<const char*> keys = delta_common_keys();
  if (kind == delta_kind::kda) keys.insert(keys.end(), kda_only_keys().begin(), kda_only_keys().end());
  return keys;
}

/// The key `numerics` every layer family reads (docs/spec.md §9, §10): exact (the default) or fast.
inline gattn::numerics parse_numerics(const json& obj, const std::string& where) {
  return get_enum(obj, "numerics", where, {gattn::numerics::exact, gattn::numerics::fast}, gattn::numerics::exact);
}

/// `kv_cache_dtype` is read only to refuse a low-precision state: the recurrent and conv states are
/// fp32 (docs/spec.md §13), and a file asking for bf16 would otherwise get a layer that differs from it
/// silently. "f32" (what the key means for every layer when absent) is accepted.
inline void check_delta_state_dtype(const json& j, const std::string& w) {
  const storage_type t = get_enum(j, "kv_cache_dtype", w, storage_types, storage_type::f32);
  gattn::detail::require<config_error>(t == storage_type::f32, w, ": 'kv_cache_dtype'=\"", to_string(t),
                                       "\" does not apply to a delta-rule layer: its recurrent and conv states are "
                                       "fp32 (use \"f32\" or leave the key out)");
}

/// KDA's `gate` object: {source: separate | low_rank, rank}. `rank` is optional with low_rank (0: read
/// from g_a_proj's shape, as Hugging Face checkpoints leave it) and refused with separate.
inline void parse_kda_gate(const json& j, delta_config& c) {
  const std::string w = "config.gate";
  if (j.is_null()) return;
  gattn::detail::require<config_error>(j.is_object(), w, " must be an object or null, got ", short_text(j));
  refuse_unknown_keys(j, w, {"source", "rank"},
                      {"position", "granularity", "shared", "activation", "combine", "layout", "gate_rounding"},
                      "is fixed for a KDA layer (an elementwise sigmoid gate on the normalised output, "
                      "docs/spec.md §13): only 'source' and 'rank' are read");
  c.gate = get_enum(j, "source", w, {gate_source::separate, gate_source::low_rank}, gate_source::separate);
  if (!has(j, "rank")) return;
  gattn::detail::require<config_error>(c.gate == gate_source::low_rank, w,
                                       ": 'rank' applies to source=low_rank only (source is ", to_string(c.gate), ")");
  c.gate_rank = get_index(j, "rank", w);
  gattn::detail::require<config_error>(c.gate_rank >= 1, w, ": 'rank'=", c.gate_rank,
                                       " must be >= 1 (leave it out to read the rank from g_a_proj's shape)");
}

/// KDA's decay form, its lower bound (required with, and only with, `lower_bound`), and the gate.
inline void parse_kda_keys(const json& j, const std::string& w, delta_config& c) {
  c.decay = get_enum(j, "decay", w, {decay_form::softplus, decay_form::lower_bound}, decay_form::softplus);
  if (c.decay == decay_form::lower_bound) {
    gattn::detail::require<config_error>(has(j, "decay_lower_bound"), w,
                                         ": missing required key 'decay_lower_bound' (decay=lower_bound)");
    c.decay_lower_bound = get_double(j, "decay_lower_bound", w);
  } else {
    gattn::detail::require<config_error>(!has(j, "decay_lower_bound"), w,
                                         ": 'decay_lower_bound' applies to decay=lower_bound only (decay is softplus)");
  }
  if (j.contains("gate")) parse_kda_gate(j.at("gate"), c);
}

/// Reads a delta-rule layer's gattn config (docs/spec.md §13): `attention` (gated_deltanet | kda,
/// required), the sizes, `conv_kernel` (default 4), `rms_norm_eps` (default 1e-6), `numerics`
/// (exact | fast, default exact), and for KDA
/// `decay` (default softplus), `decay_lower_bound` and `gate`. Unknown keys, keys of the softmax
/// layers or (in a gated_deltanet config) of KDA, wrong types and values validate() refuses are
/// config_errors naming the key.
inline delta_config parse_delta_config(const nlohmann::json& j) {
  const std::string w = "config";
  gattn::detail::require<config_error>(j.is_object(), "config must be a JSON object");
  gattn::detail::require<config_error>(has(j, "attention"), w,
                                       ": missing required key 'attention' (gated_deltanet or kda)");
  delta_config c;
  c.kind = get_enum(j, "attention", w, {delta_kind::gated_deltanet, delta_kind::kda}, delta_kind::gated_deltanet);
  if (c.kind == delta_kind::gated_deltanet)
    for (const char* key : kda_only_keys())
      gattn::detail::require<config_error>(!j.contains(key), w, ": '", key,
                                           "' is a KDA key; a gated_deltanet layer's decay and output gate are "
                                           "fixed (docs/spec.md §13)");
  refuse_unknown_keys(j, w, delta_keys(c.kind), softmax_only_keys(),
                      "is a key of the softmax attention layers (gqa, mla), not of a delta-rule layer");
  check_delta_state_dtype(j, w);
  c.hidden = get_index(j, "hidden_size", w);
  c.key_heads = get_index(j, "num_key_heads", w);
  c.value_heads = get_index(j, "num_value_heads", w);
  c.key_head_dim = get_index(j, "key_head_dim", w);
  c.value_head_dim = get_index(j, "value_head_dim", w);
  c.conv_kernel = get_index(j, "conv_kernel", w, 4);
  c.rms_norm_eps = get_double(j, "rms_norm_eps", w, 1e-6);
  c.numerics = parse_numerics(j, w);
  if (c.kind == delta_kind::kda) parse_kda_keys(j, w, c);
  validate(c);
  return c;
}

}  GATTN_NAMESPACE_END  // namespace gattn::io::detail
