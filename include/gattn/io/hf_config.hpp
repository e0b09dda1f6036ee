// Hugging Face config.json (docs/spec.md §8) -> the gqa_config / mla_config of one softmax-attention layer.
#pragma once

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gattn/core/rope_frequencies.hpp"
#include "gattn/core/validate.hpp"
#include "gattn/gate/policy.hpp"
#include "gattn/io/gattn_config.hpp"
#include "gattn/io/json_fields.hpp"

GATTN_NAMESPACE_BEGIN namespace io {
namespace detail {

/// The model types docs/spec.md §8 maps, as listed in error messages.
inline constexpr const char* hf_supported_model_types =
    "qwen3_next, qwen3 (plain or with the paper's headwise/elementwise_attn_output_gate), deepseek_v2, "
    "deepseek_v3, kimi_k2, kimi_k3, kimi_linear";

/// Families share one mapping each; the MLA family differs only in model_type.
enum class hf_family { qwen3_next, qwen3, mla };

/// "hf config (model_type)": the prefix every message starts with, so the user knows which reader spoke.
inline std::string hf_where(const json& j) {
  gattn::detail::require<config_error>(j.is_object(), "hf config: must be a JSON object");
  const std::string type = get_string(j, "model_type", "hf config", "");
  gattn::detail::require<config_error>(!type.empty(), "hf config: missing required key 'model_type'");
  return "hf config (" + type + ")";
}

inline hf_family hf_family_of(const json& j) {
  const std::string type = get_string(j, "model_type", "hf config", "");
  if (type == "qwen3_next") return hf_family::qwen3_next;
  if (type == "qwen3") return hf_family::qwen3;
  if (type == "deepseek_v2" || type == "deepseek_v3" || type == "kimi_k2" || type == "kimi_k3" ||
      type == "kimi_linear")
    return hf_family::mla;
  throw config_error(gattn::detail::concat("hf config: 'model_type'=\"", type, "\" is not supported (supported: ",
                                           hf_supported_model_types, ")"));
}

/// Kimi Linear (and K3-style configs): `linear_attn_config.kda_layers` lists the KDA layers,
/// 1-indexed (layer i is KDA when i + 1 is listed); without the block every layer is MLA.
inline bool hf_kimi_delta_layer(const json& j, index layer, const std::string& w) {
  if (!has(j, "linear_attn_config")) return false;
  const json& l = j.at("linear_attn_config");
  gattn::detail::require<config_error>(l.is_object(), w, ": 'linear_attn_config' must be an object");
  if (!has(l, "kda_layers")) return false;
  const json& kda = l.at("kda_layers");
  gattn::detail::require<config_error>(kda.is_array() && kda.size() <= 65536, w,
                                       ": 'linear_attn_config.kda_layers' must be an array of layer numbers");
  for (const json& n : kda) {
    gattn::detail::require<config_error>(n.is_number_integer(), w,
                                         ": 'linear_attn_config.kda_layers' must hold integers (1-indexed layers)");
    if (n.get<std::int64_t>() == std::int64_t(layer) + 1) return true;
  }
  return false;
}

/// Layer kind in Hugging Face's words ("full_attention", "linear_attention", "sliding_attention"):
/// `layer_types[i]` when the config lists them (newer transformers), else the family's own rule.
inline std::string hf_layer_kind(const json& j, hf_family f, index layer, const std::string& w) {
  gattn::detail::require<config_error>(layer >= 0, w, ": layer ", layer, " must be >= 0");
  if (has(j, "num_hidden_layers")) {
    const index n = get_index(j, "num_hidden_layers", w);
    gattn::detail::require<config_error>(layer < n, w, ": layer ", layer, " is out of range ('num_hidden_layers'=", n,
                                         ")");
  }
  if (has(j, "layer_types")) {
    const json& types = j.at("layer_types");
    gattn::detail::require<config_error>(types.is_array(), w, ": 'layer_types' must be an array of strings");
    gattn::detail::require<config_error>(std::size_t(layer) < types.size(), w, ": layer ", layer,
                                         " is out of range ('layer_types' has ", types.size(), " entries)");
    const json& t = types.at(std::size_t(layer));
    gattn::detail::require<config_error>(t.is_string(), w, ": 'layer_types'[", layer, "] must be a string");
    return t.get<std::string>();
  }
  switch (f) {
    case hf_family::qwen3_next: {
      // Qwen3-Next interleaves Gated DeltaNet layers with one full-attention layer every `interval`.
      const index interval = get_index(j, "full_attention_interval", w, 4);
      gattn::detail::require<config_error>(interval > 0, w, ": 'full_attention_interval'=", interval, " must be > 0");
      return (layer + 1) % interval == 0 ? "full_attention" : "linear_attention";
    }
    case hf_family::qwen3: {
      // Qwen2/Qwen3: with use_sliding_window, layers from max_window_layers on use the window.
      const index max_window_layers = get_index(j, "max_window_layers", w, 28);
      return layer >= max_window_layers ? "sliding_attention" : "full_attention";
    }
    case hf_family::mla: return hf_kimi_delta_layer(j, layer, w) ? "linear_attention" : "full_attention";
  }
  return "full_attention";
}

/// True when a Qwen3-style window is switched on: HF keeps `sliding_window` only when
/// `use_sliding_window` is true (stock Qwen configs ship a number there with the switch off).
inline bool hf_qwen3_window_on(const json& j, const std::string& w) {
  return get_bool(j, "use_sliding_window", w, false) && has(j, "sliding_window");
}

/// See first_attention_layer(); also how parse_hf_config(j) checks `layer_types` / the interval.
inline index hf_first_attention_layer(const json& j, hf_family f, const std::string& w) {
  const index n = get_index(j, "num_hidden_layers", w, -1);
  if (has(j, "layer_types")) {
    const json& types = j.at("layer_types");
    gattn::detail::require<config_error>(types.is_array(), w, ": 'layer_types' must be an array of strings");
    for (std::size_t i = 0; i < types.size() && (n < 0 || index(i) < n); ++i) {
      gattn::detail::require<config_error>(types[i].is_string(), w, ": 'layer_types'[", i, "] must be a string");
      if (types[i].get<std::string>() != "linear_attention") return index(i);
    }
    throw config_error(w + ": 'layer_types' lists no softmax-attention layer");
  }
  if (f == hf_family::mla) {
    // Kimi Linear lists its KDA layers: the first layer not listed (bounded like every layer walk).
    const index limit = n < 0 ? 65536 : std::min<index>(n, 65536);
    for (index i = 0; i < limit; ++i)
      if (!hf_kimi_delta_layer(j, i, w)) return i;
    throw config_error(w + ": 'linear_attn_config.kda_layers' lists every layer: there is no MLA layer");
  }
  if (f != hf_family::qwen3_next) return 0;
  const index interval = get_index(j, "full_attention_interval", w, 4);
  gattn::detail::require<config_error>(interval > 0, w, ": 'full_attention_interval'=", interval, " must be > 0");
  gattn::detail::require<config_error>(n < 0 || interval - 1 < n, w, ": no full-attention layer among ",
                                       "'num_hidden_layers'=", n, " with 'full_attention_interval'=", interval);
  return interval - 1;
}

/// The layers gattn computes: softmax attention with no sliding window in use, and the gated
/// delta-rule (linear-attention) layers. Known only when the config says how many layers there are
/// (`layer_types`, else `num_hidden_layers`).
struct hf_layer_census {
  std::vector<index> attention;  ///< the softmax-attention layers, ascending
  std::vector<index> linear;     ///< the gated delta-rule layers (Gated DeltaNet, KDA), ascending
  index total = 0;               ///< all layers of the model
};

inline std::optional<hf_layer_census> hf_attention_layers(const json& j, hf_family f, const std::string& w) {
  index n = get_index(j, "num_hidden_layers", w, -1);
  if (has(j, "layer_types")) {
    const json& types = j.at("layer_types");
    gattn::detail::require<config_error>(types.is_array(), w, ": 'layer_types' must be an array of strings");
    if (n < 0 || index(types.size()) < n) n = index(types.size());
  }
  if (n < 0) return std::nullopt;
  // Counting walks every layer: bound the walk a hostile file could ask for.
  gattn::detail::require<config_error>(n <= 65536, w, ": 'num_hidden_layers'=", n, " is more than 65536");
  const bool window_on = f == hf_family::qwen3 && hf_qwen3_window_on(j, w);
  hf_layer_census census;
  census.total = n;
  for (index i = 0; i < n; ++i) {
    const std::string kind = hf_layer_kind(j, f, i, w);
    if (kind == "full_attention" || (kind == "sliding_attention" && !window_on)) census.attention.push_back(i);
    if (kind == "linear_attention" && f != hf_family::qwen3) census.linear.push_back(i);
  }
  return census;
}

/// "3, 7, 11" (at most 16 numbers, then "...").
inline std::string hf_layer_list(const std::vector<index>& layers) {
  std::string list;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (i == 16) return list + ", ...";
    list += (i ? ", " : "") + std::to_string(layers[i]);
  }
  return list;
}

/// The kind of layer `layer` (full_attention, sliding_attention, or linear_attention: a Gated
/// DeltaNet layer of qwen3_next, a KDA layer of kimi_linear); any other kind is refused.
inline std::string hf_require_gattn_layer(const json& j, hf_family f, index layer, const std::string& w) {
  const std::string kind = hf_layer_kind(j, f, layer, w);
  if (kind == "linear_attention") {
    gattn::detail::require<config_error>(f != hf_family::qwen3, w, ": 'layer_types'[", layer,
                                         "]=\"linear_attention\" is supported for qwen3_next (Gated DeltaNet) and "
                                         "kimi_linear (KDA) only");
    return kind;
  }
  gattn::detail::require<config_error>(kind == "full_attention" || kind == "sliding_attention", w, ": 'layer_types'[",
                                       layer, "]=\"", kind,
                                       "\" is not supported (full_attention, sliding_attention or linear_attention)");
  return kind;
}

[[noreturn]] inline void hf_refuse_window(const std::string& w, const std::string& which) {
  throw config_error(gattn::detail::concat(w, ": 'sliding_window' (with 'use_sliding_window'=true) is in use for ",
                                           which, ": sliding-window attention is not implemented"));
}

/// Refuses a sliding window that would apply to `layer`, or to any attention layer when layer < 0.
/// qwen3: per HF, layer i is windowed iff use_sliding_window && sliding_window != null && (layer_types[i]
/// == "sliding_attention", or without layer_types i >= max_window_layers, default 28).
/// qwen3_next and the MLA family have no window in their reference code, so any `use_sliding_window:
/// true` or non-null `sliding_window` is refused rather than silently dropped (it would apply to every layer).
inline void hf_check_window(const json& j, hf_family f, index layer, const std::string& w) {
  if (f != hf_family::qwen3) {
    gattn::detail::require<config_error>(!get_bool(j, "use_sliding_window", w, false), w,
                                         ": 'use_sliding_window'=true: sliding-window attention is not implemented");
    gattn::detail::require<config_error>(!has(j, "sliding_window"), w,
                                         ": 'sliding_window' is set, but sliding-window attention is not implemented "
                                         "(this model type has no window switch, so it would apply to every layer)");
    return;
  }
  if (!hf_qwen3_window_on(j, w)) return;
  if (layer >= 0) {
    if (hf_layer_kind(j, f, layer, w) == "sliding_attention") hf_refuse_window(w, "layer " + std::to_string(layer));
    return;
  }
  // Any layer: scan layer_types, else compare max_window_layers with the layer count.
  if (has(j, "layer_types")) {
    const json& types = j.at("layer_types");
    gattn::detail::require<config_error>(types.is_array(), w, ": 'layer_types' must be an array of strings");
    for (const auto& t : types)
      if (t.is_string() && t.get<std::string>() == "sliding_attention")
        hf_refuse_window(w, "some layers ('layer_types'); pass a layer index to parse a full-attention one");
    return;
  }
  const index max_window_layers = get_index(j, "max_window_layers", w, 28);
  const bool some_windowed = !has(j, "num_hidden_layers") || get_index(j, "num_hidden_layers", w) > max_window_layers;
  if (some_windowed)
    hf_refuse_window(w, "layers >= 'max_window_layers'=" + std::to_string(max_window_layers) +
                            "; pass a layer index below it to parse a full-attention layer");
}

/// One source of RoPE scaling (`rope_scaling` or newer transformers' `rope_parameters`).
/// YaRN without original_max_position_embeddings falls back to max_position_embeddings, as HF does.
inline rope_scaling_config hf_parse_scaling(const json& j, const json& src, const std::string& w) {
  if (!src.is_object() || has(src, "original_max_position_embeddings") || !has(j, "max_position_embeddings"))
    return parse_rope_scaling(src, w);
  json copy = src;
  copy["original_max_position_embeddings"] = j.at("max_position_embeddings");
  return parse_rope_scaling(copy, w);
}

inline bool same_scaling(const rope_scaling_config& a, const rope_scaling_config& b) {
  return a.yarn == b.yarn && a.factor == b.factor &&
         a.original_max_position_embeddings == b.original_max_position_embeddings && a.beta_fast == b.beta_fast &&
         a.beta_slow == b.beta_slow && a.mscale == b.mscale && a.mscale_all_dim == b.mscale_all_dim &&
         a.attention_factor == b.attention_factor && a.truncate == b.truncate;
}

/// `rope_parameters` as an object: newer transformers may nest it per layer kind ({"full_attention": {...}}).
inline const json* hf_rope_parameters(const json& j, const std::string& w) {
  if (!has(j, "rope_parameters")) return nullptr;
  const json& p = j.at("rope_parameters");
  gattn::detail::require<config_error>(p.is_object(), w, ": 'rope_parameters' must be an object or null");
  if (!has(p, "rope_type") && !has(p, "type") && has(p, "full_attention")) {
    const json& full = p.at("full_attention");
    gattn::detail::require<config_error>(full.is_object(), w, ": 'rope_parameters.full_attention' must be an object");
    return &full;
  }
  return &p;
}

/// θ and scaling from the top level and/or `rope_parameters`; the two places must agree when both speak.
inline rope_config hf_parse_rope(const json& j, const std::string& w) {
  rope_config r;
  const json* params = hf_rope_parameters(j, w);
  const bool top_theta = has(j, "rope_theta");
  const bool param_theta = params && has(*params, "rope_theta");
  r.theta = top_theta ? get_double(j, "rope_theta", w) : 10000.0;
  if (param_theta) {
    const double t = get_double(*params, "rope_theta", w + ".rope_parameters");
    gattn::detail::require<config_error>(!top_theta || t == r.theta, w, ": 'rope_theta'=", r.theta,
                                         " disagrees with 'rope_parameters.rope_theta'=", t);
    r.theta = t;
  }
  const bool top_scaling = has(j, "rope_scaling");
  if (top_scaling) r.scaling = hf_parse_scaling(j, j.at("rope_scaling"), w);
  if (params) {
    const rope_scaling_config s = hf_parse_scaling(j, *params, w + ".rope_parameters");
    gattn::detail::require<config_error>(!top_scaling || !s.yarn || !r.scaling.yarn || same_scaling(s, r.scaling), w,
                                         ": 'rope_scaling' and 'rope_parameters' give different YaRN parameters");
    if (s.yarn) r.scaling = s;
  }
  return r;
}

/// A key that belongs to another family would change the math if honoured; refuse it when switched on.
inline void hf_refuse_foreign_flag(const json& j, const char* key, const std::string& w, const char* owner) {
  gattn::detail::require<config_error>(!get_bool(j, key, w, false), w, ": '", key, "'=true is only supported for ",
                                       owner);
}

/// The GQA part shared by qwen3_next and qwen3; head_dim defaults to hidden/heads, scale to 1/sqrt(D).
inline gqa_config hf_parse_gqa(const json& j, const std::string& w, double default_partial_rotary_factor) {
  gqa_config c;
  c.hidden = get_index(j, "hidden_size", w);
  c.q_heads = get_index(j, "num_attention_heads", w);
  gattn::detail::require<config_error>(c.q_heads > 0, w, ": 'num_attention_heads'=", c.q_heads, " must be > 0");
  c.kv_heads = get_index(j, "num_key_value_heads", w, c.q_heads);
  if (has(j, "head_dim")) {
    c.head_dim = get_index(j, "head_dim", w);
  } else {
    gattn::detail::require<config_error>(c.hidden % c.q_heads == 0, w, ": no 'head_dim' and 'hidden_size'=", c.hidden,
                                         " is not a multiple of 'num_attention_heads'=", c.q_heads);
    c.head_dim = c.hidden / c.q_heads;
  }
  c.rms_norm_eps = get_double(j, "rms_norm_eps", w, 1e-6);
  c.rope = hf_parse_rope(j, w);
  c.rope.style = rope_style::neox;
  const json* params = hf_rope_parameters(j, w);
  c.partial_rotary_factor =
      has(j, "partial_rotary_factor")
          ? get_double(j, "partial_rotary_factor", w)
          : (params ? get_double(*params, "partial_rotary_factor", w + ".rope_parameters", default_partial_rotary_factor)
                    : default_partial_rotary_factor);
  c.rope.rotary_dim = rotary_width(c.head_dim, c.partial_rotary_factor);
  // Biases, when the checkpoint has them, come with the weights: read only to check the type.
  (void)get_bool(j, "attention_bias", w, false);
  hf_refuse_foreign_flag(j, "mla_use_output_gate", w, "the MLA family (deepseek_v2/v3, kimi_k2/k3)");
  hf_refuse_foreign_flag(j, "mla_use_nope", w, "the MLA family (deepseek_v2/v3, kimi_k2/k3)");
  return c;
}

inline gqa_config hf_parse_qwen3_next(const json& j, const std::string& w) {
  hf_refuse_foreign_flag(j, "headwise_attn_output_gate", w, "model_type qwen3 (the paper's release)");
  hf_refuse_foreign_flag(j, "elementwise_attn_output_gate", w, "model_type qwen3 (the paper's release)");
  gqa_config c = hf_parse_gqa(j, w, 0.25);
  c.qk_norm = norm_kind::rms_zero_centered;
  // q_proj emits [q_h | gate_h] per head; the gate is elementwise sigmoid on the SDPA output.
  c.gate = qwen3_next_gate::config();
  return c;
}

inline gqa_config hf_parse_qwen3(const json& j, const std::string& w) {
  const bool headwise = get_bool(j, "headwise_attn_output_gate", w, false);
  const bool elementwise = get_bool(j, "elementwise_attn_output_gate", w, false);
  gattn::detail::require<config_error>(!(headwise && elementwise), w,
                                       ": 'headwise_attn_output_gate' and 'elementwise_attn_output_gate' are both "
                                       "true; the release defines one gate");
  gqa_config c = hf_parse_gqa(j, w, 1.0);
  // Stock Qwen3 always norms q and k; the paper's release can switch it off.
  c.qk_norm = get_bool(j, "use_qk_norm", w, true) ? norm_kind::rms : norm_kind::none;
  // qkv_bias biases q, k, v and o_proj in the release's code: all of it arrives with the weights.
  (void)get_bool(j, "qkv_bias", w, false);
  if (headwise) c.gate = paper_headwise_gate::config();
  if (elementwise) c.gate = paper_elementwise_gate::config();
  return c;
}

inline mla_config hf_parse_mla(const json& j, const std::string& w) {
  hf_refuse_foreign_flag(j, "headwise_attn_output_gate", w, "model_type qwen3 (the paper's release)");
  hf_refuse_foreign_flag(j, "elementwise_attn_output_gate", w, "model_type qwen3 (the paper's release)");
  mla_config c;
  c.hidden = get_index(j, "hidden_size", w);
  c.heads = get_index(j, "num_attention_heads", w);  // num_key_value_heads is meaningless for MLA: ignored
  c.qk_nope_head_dim = get_index(j, "qk_nope_head_dim", w);
  c.qk_rope_head_dim = get_index(j, "qk_rope_head_dim", w);
  c.v_head_dim = get_index(j, "v_head_dim", w);
  c.kv_lora_rank = get_index(j, "kv_lora_rank", w);
  // HF's class default for an absent q_lora_rank is 1536, not "none": demand the key, null meaning q_proj.
  gattn::detail::require<config_error>(j.contains("q_lora_rank"), w,
                                       ": missing required key 'q_lora_rank' (null for a plain q_proj)");
  c.q_lora_rank = get_index(j, "q_lora_rank", w, 0);
  c.rms_norm_eps = get_double(j, "rms_norm_eps", w, 1e-6);
  c.rope = hf_parse_rope(j, w);
  const bool interleave = get_bool(j, "rope_interleave", w, true);
  const bool nope = get_bool(j, "mla_use_nope", w, false);
  c.rope.style = nope ? rope_style::none : (interleave ? rope_style::interleaved : rope_style::neox);
  c.rope.rotary_dim = c.qk_rope_head_dim;
  const auto& s = c.rope.scaling;
  if (s.yarn && s.mscale_all_dim != 0 && c.qk_head_dim() > 0) {
    // HF DeepSeek multiplies the softmax scale by m(s, mscale_all_dim)^2 under YaRN.
    const double m = yarn_mscale(s.factor, s.mscale_all_dim);
    c.attention_scale = std::pow(double(c.qk_head_dim()), -0.5) * (m * m);
    gattn::detail::require<config_error>(c.attention_scale > 0 && std::isfinite(c.attention_scale), w,
                                         ": rope_scaling 'mscale_all_dim'=", s.mscale_all_dim,
                                         " gives a softmax scale of ", c.attention_scale, ", which must be > 0");
  }
  (void)get_bool(j, "attention_bias", w, false);
  if (get_bool(j, "mla_use_output_gate", w, false)) c.gate = separate_g1_gate::config();
  return c;
}

/// The short convolution's activation is SiLU in both families' code: another hidden_act would change it.
inline void hf_require_silu(const json& j, const std::string& w) {
  const std::string act = get_string(j, "hidden_act", w, "silu");
  gattn::detail::require<config_error>(act == "silu", w, ": 'hidden_act'=\"", act,
                                       "\": the gated delta-rule layers' convolution is implemented with silu only");
}

/// Qwen3-Next's Gated DeltaNet layers (docs/spec.md §13): the linear_* keys.
inline delta_config hf_parse_gdn(const json& j, const std::string& w) {
  hf_require_silu(j, w);
  delta_config c;
  c.kind = delta_kind::gated_deltanet;
  c.hidden = get_index(j, "hidden_size", w);
  c.key_heads = get_index(j, "linear_num_key_heads", w);
  c.value_heads = get_index(j, "linear_num_value_heads", w);
  c.key_head_dim = get_index(j, "linear_key_head_dim", w);
  c.value_head_dim = get_index(j, "linear_value_head_dim", w);
  c.conv_kernel = get_index(j, "linear_conv_kernel_dim", w, 4);
  c.rms_norm_eps = get_double(j, "rms_norm_eps", w, 1e-6);
  return c;
}

/// Kimi Linear's KDA layers (docs/spec.md §13): `linear_attn_config`; K3-style configs add
/// `gate_lower_bound` (the bounded decay) and `use_full_rank_gate` (g_proj instead of g_a → g_b).
inline delta_config hf_parse_kda(const json& j, const std::string& w) {
  hf_require_silu(j, w);
  if (!has(j, "linear_attn_config")) throw config_error(w + ": missing required key 'linear_attn_config' (a KDA layer's)");
  const json& l = j["linear_attn_config"];
  if (!l.is_object()) throw config_error(w + ": 'linear_attn_config' is " + l.type_name() + ", not an object");
  const std::string lw = w + ".linear_attn_config";
  delta_config c;
  c.kind = delta_kind::kda;
  c.hidden = get_index(j, "hidden_size", w);
  c.key_heads = c.value_heads = get_index(l, "num_heads", lw);
  c.key_head_dim = c.value_head_dim = get_index(l, "head_dim", lw);
  c.conv_kernel = get_index(l, "short_conv_kernel_size", lw, 4);
  c.rms_norm_eps = get_double(j, "rms_norm_eps", w, 1e-6);
  if (has(l, "gate_lower_bound")) {
    c.decay = decay_form::lower_bound;
    c.decay_lower_bound = get_double(l, "gate_lower_bound", lw);
  }
  c.gate = get_bool(l, "use_full_rank_gate", lw, false) ? gate_source::separate : gate_source::low_rank;
  return c;  // the low-rank gate's rank comes from g_a_proj's shape
}

/// The gattn kind of a model's softmax-attention layers and of its linear-attention layers.
inline const char* hf_softmax_kind(hf_family f) { return f == hf_family::mla ? "mla" : "gqa"; }
inline const char* hf_linear_kind(hf_family f) { return f == hf_family::qwen3_next ? "gated_deltanet" : "kda"; }

/// Kimi's `linear_attn_config.kda_layers` as 0-indexed layers (the integers of the list; what is
/// not an integer is refused where a layer's kind is asked for).
inline std::vector<index> hf_kimi_listed_layers(const json& j) {
  std::vector<index> layers;
  if (!has(j, "linear_attn_config") || !j.at("linear_attn_config").is_object()) return layers;
  const json& l = j.at("linear_attn_config");
  if (!has(l, "kda_layers") || !l.at("kda_layers").is_array()) return layers;
  for (const json& n : l.at("kda_layers"))
    if (n.is_number_integer() && layers.size() < 65536) layers.push_back(index(n.get<std::int64_t>()) - 1);
  return layers;
}

/// Whether the model has gated delta-rule layers beside its softmax-attention layers (Qwen3-Next,
/// Kimi Linear): then a config without a layer index does not say which layer is meant.
inline bool hf_is_hybrid(const json& j, hf_family f, const std::string& w) {
  if (f == hf_family::qwen3) return false;
  if (const auto census = hf_attention_layers(j, f, w)) return !census->linear.empty() && !census->attention.empty();
  if (f == hf_family::qwen3_next) return get_index(j, "full_attention_interval", w, 4) != 1;
  return !hf_kimi_listed_layers(j).empty();  // Kimi without a layer count: hybrid when it lists KDA layers
}

/// Refuses a hybrid model's config without a layer index, naming the layers of each kind.
inline void hf_refuse_hybrid_without_layer(const json& j, hf_family f, const std::string& w) {
  if (!hf_is_hybrid(j, f, w)) return;
  std::string kinds;
  if (const auto census = hf_attention_layers(j, f, w)) {
    kinds = gattn::detail::concat("full_attention (", hf_softmax_kind(f), ") layers ", hf_layer_list(census->attention),
                                  "; linear_attention (", hf_linear_kind(f), ") layers ", hf_layer_list(census->linear));
  } else if (f == hf_family::qwen3_next) {
    const index interval = get_index(j, "full_attention_interval", w, 4);
    kinds = gattn::detail::concat("full_attention (gqa) layers ", interval - 1, ", ", 2 * interval - 1,
                                  ", ... (every 'full_attention_interval'=", interval,
                                  "th); linear_attention (gated_deltanet) layers: the others");
  } else {
    kinds = gattn::detail::concat("linear_attention (kda) layers ", hf_layer_list(hf_kimi_listed_layers(j)),
                                  " ('linear_attn_config.kda_layers' counts from 1); full_attention (mla) layers: ",
                                  "the others, the first being ", hf_first_attention_layer(j, f, w));
  }
  throw config_error(gattn::detail::concat(
      w, ": the model has gattn layers of two kinds, so the layer must be given (a layer index): ", kinds));
}

/// The shared body of both parse_hf_config overloads; layer < 0 means "the model's one kind of
/// layer", refused for a hybrid model.
inline layer_config parse_hf_config_at(const json& j, index layer) {
  const std::string w = hf_where(j);
  const hf_family f = hf_family_of(j);
  // Without a layer: the model must have one kind of gattn layer, and a softmax-attention layer
  // (this also type-checks layer_types and full_attention_interval); the result describes it.
  if (layer < 0) hf_refuse_hybrid_without_layer(j, f, w);
  const index at = layer >= 0 ? layer : hf_first_attention_layer(j, f, w);
  if (hf_require_gattn_layer(j, f, at, w) == "linear_attention") {
    delta_config c = f == hf_family::qwen3_next ? hf_parse_gdn(j, w) : hf_parse_kda(j, w);
    validate(c);
    return c;
  }
  hf_check_window(j, f, layer, w);
  if (f == hf_family::mla) {
    mla_config c = hf_parse_mla(j, w);
    validate(c);
    return c;
  }
  gqa_config c = f == hf_family::qwen3_next ? hf_parse_qwen3_next(j, w) : hf_parse_qwen3(j, w);
  validate(c);
  return c;
}

}  // namespace detail

/// Maps a Hugging Face config.json (docs/spec.md §8) of a model with one kind of gattn layer to the
/// config of its softmax-attention layers.
///
/// Supported `model_type`s: `qwen3_next`, `qwen3` (plain, or the paper's release with
/// `headwise_attn_output_gate` / `elementwise_attn_output_gate`), `deepseek_v2`, `deepseek_v3`,
/// `kimi_k2`, `kimi_k3`, `kimi_linear`. Keys that do not change the layer's math are ignored; keys that would and are
/// not implemented (another rope type than yarn/default, a sliding window in use, a foreign family's
/// switch) and wrong types throw config_error naming the key. The result must hold for every attention
/// layer, so a Qwen3 config whose window applies to some layers is refused: use the layer overload.
/// A hybrid model (gated delta-rule layers beside softmax ones: Qwen3-Next, Kimi Linear) is refused
/// with a config_error that lists the layers of each kind: use the layer overload.
inline layer_config parse_hf_config(const nlohmann::json& j) { return detail::parse_hf_config_at(j, -1); }

/// As parse_hf_config(j), for layer `layer`: a softmax-attention layer gives a gqa_config or an
/// mla_config, a linear-attention layer a delta_config (Qwen3-Next: Gated DeltaNet; Kimi Linear: KDA);
/// the sliding window is checked for this layer alone.
inline layer_config parse_hf_config(const nlohmann::json& j, index layer) {
  gattn::detail::require<config_error>(layer >= 0, "hf config: layer ", layer, " must be >= 0");
  return detail::parse_hf_config_at(j, layer);
}

/// Weight-name prefix of layer `layer`'s attention: "model.layers.{i}.self_attn.", or for a Qwen3-Next
/// Gated DeltaNet layer "model.layers.{i}.linear_attn.". Throws config_error when the layer is out of
/// range or of a kind gattn does not compute.
inline std::string hf_layer_prefix(const nlohmann::json& j, index layer) {
  const std::string w = detail::hf_where(j);
  const detail::hf_family f = detail::hf_family_of(j);
  const bool linear = detail::hf_require_gattn_layer(j, f, layer, w) == "linear_attention";
  return "model.layers." + std::to_string(layer) +
         (linear && f == detail::hf_family::qwen3_next ? ".linear_attn." : ".self_attn.");
}

/// Whether the config describes a hybrid model (gated delta-rule layers beside softmax-attention
/// layers: Qwen3-Next, Kimi Linear), of which parse_hf_config(j) and load_layer_config(path) without
/// a layer index refuse to pick a layer.
inline bool needs_layer_index(const nlohmann::json& j) {
  const std::string w = detail::hf_where(j);
  return detail::hf_is_hybrid(j, detail::hf_family_of(j), w);
}

/// The layers gattn computes (softmax attention with no sliding window in use, and the gated
/// delta-rule layers) and the model's layer count, when the config gives it (`layer_types`, else
/// `num_hidden_layers`); nullopt otherwise.
inline std::optional<detail::hf_layer_census> attention_layers(const nlohmann::json& j) {
  const std::string w = detail::hf_where(j);
  return detail::hf_attention_layers(j, detail::hf_family_of(j), w);
}

/// Index of the first softmax-attention layer (qwen3_next: full_attention_interval - 1, or the first
/// non-linear entry of `layer_types`; others 0). Throws config_error when the model has none.
inline index first_attention_layer(const nlohmann::json& j) {
  const std::string w = detail::hf_where(j);
  return detail::hf_first_attention_layer(j, detail::hf_family_of(j), w);
}

}  GATTN_NAMESPACE_END  // namespace gattn::io
