// Hugging Face config.json (docs/spec.md §8, §13, §14) -> the layer config of one of its layers: a
// gqa_config / mla_config for a softmax-attention layer, a delta_config for a linear-attention one.
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
#include "gattn/io/hf_layers.hpp"
#include "gattn/io/json_fields.hpp"

GATTN_NAMESPACE_BEGIN namespace io {
namespace detail {

/// True when a Qwen3-style window is switched on: HF keeps `sliding_window` only when
/// `use_sliding_window` is true (stock Qwen configs ship a number there with the switch off).
inline bool hf_qwen3_window_on(const json& j, const std::string& w) {
  return get_bool(j, "use_sliding_window", w, false) && has(j, "sliding_window");
}

[[noreturn]] inline void hf_refuse_window(const std::string& w, const std::string& which) {
  throw config_error(gattn::detail::concat(w, ": 'sliding_window' (with 'use_sliding_window'=true) is in use for ",
                                           which, ": sliding-window attention is not implemented"));
}

/// Refuses a sliding window that would apply to `layer`, or to any attention layer when layer < 0.
/// qwen3: per HF, layer i is windowed iff use_sliding_window && sliding_window != null && (layer_types[i]
/// == "sliding_attention", or without layer_types i >= max_window_layers, default 28).
/// qwen3_next, qwen3_5 and the MLA family have no window in their reference code, so any
/// `use_sliding_window: true` or non-null `sliding_window` is refused rather than silently dropped (it
/// would apply to every layer).
inline void hf_check_window(const json& j, const hf_layer_plan& p, index layer) {
  const std::string& w = p.where;
  if (p.family != hf_family::qwen3) {
    gattn::detail::require<config_error>(!get_bool(j, "use_sliding_window", w, false), w,
                                         ": 'use_sliding_window'=true: sliding-window attention is not implemented");
    gattn::detail::require<config_error>(!has(j, "sliding_window"), w,
                                         ": 'sliding_window' is set, but sliding-window attention is not implemented "
                                         "(this model type has no window switch, so it would apply to every layer)");
    return;
  }
  if (!hf_qwen3_window_on(j, w)) return;
  if (layer >= 0) {
    if (p.kind(layer) == "sliding_attention") hf_refuse_window(w, "layer " + std::to_string(layer));
    return;
  }
  // Any layer: scan layer_types, else compare max_window_layers with the layer count.
  if (p.types) {
    for (const auto& t : *p.types)
      if (t.is_string() && t.get<std::string>() == "sliding_attention")
        hf_refuse_window(w, "some layers ('layer_types'); pass a layer index to parse a full-attention one");
    return;
  }
  if (p.stated < 0 || p.stated > p.max_window_layers)
    hf_refuse_window(w, "layers >= 'max_window_layers'=" + std::to_string(p.max_window_layers) +
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

/// The GQA part shared by qwen3_next, qwen3_5 and qwen3; head_dim defaults to hidden/heads, scale to 1/sqrt(D).
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

/// Qwen3.5's multimodal RoPE (`mrope_section`, `mrope_interleaved`) gives each rotary frequency to
/// a token's temporal, height or width position. A text token's three positions are equal, so the
/// rotation is plain RoPE and the keys change nothing here: only their types are checked.
inline void hf_check_mrope(const json* params, const std::string& w) {
  if (!params) return;
  const std::string pw = w + ".rope_parameters";
  (void)get_bool(*params, "mrope_interleaved", pw, false);
  if (!has(*params, "mrope_section")) return;
  const json& sections = params->at("mrope_section");
  gattn::detail::require<config_error>(sections.is_array() && sections.size() <= 16, pw,
                                       ": 'mrope_section' must be an array of frequency counts, got ",
                                       short_text(sections));
  for (std::size_t i = 0; i < sections.size(); ++i) {
    const json& n = sections[i];
    gattn::detail::require<config_error>(n.is_number_integer() && (n.is_number_unsigned() || n.get<std::int64_t>() >= 0),
                                         pw, ": 'mrope_section'[", i, "]=", short_text(n), " must be an integer >= 0");
  }
}

/// Qwen3.5's full-attention layers (docs/spec.md §14): Qwen3-Next's layer. `attn_output_gate: false`
/// leaves the gate out (q_proj then holds the queries alone, [H_q·D, d]), as Qwen3.5's code does.
inline gqa_config hf_parse_qwen3_5(const json& j, const std::string& w) {
  gqa_config c = hf_parse_qwen3_next(j, w);
  hf_check_mrope(hf_rope_parameters(j, w), w);
  if (!get_bool(j, "attn_output_gate", w, true)) c.gate = gate_config{};
  return c;
}

/// Qwen3.5's Gated DeltaNet layers: Qwen3-Next's keys (which layout the projections have is the
/// weights' to say). `mamba_ssm_dtype` is the recurrent state's storage type: float32 is what gattn keeps.
inline delta_config hf_parse_qwen3_5_gdn(const json& j, const std::string& w) {
  const std::string state = get_string(j, "mamba_ssm_dtype", w, "float32");
  gattn::detail::require<config_error>(state == "float32", w, ": 'mamba_ssm_dtype'=\"", state,
                                       "\" is not implemented: the recurrent state is stored in float32",
                                       state == "bfloat16" ? " (bf16 state storage is not available yet)" : "");
  return hf_parse_gdn(j, w);
}

/// The gattn kind of a model's softmax-attention layers and of its linear-attention layers.
inline const char* hf_softmax_kind(hf_family f) { return f == hf_family::mla ? "mla" : "gqa"; }
inline const char* hf_linear_kind(hf_family f) { return f == hf_family::mla ? "kda" : "gated_deltanet"; }

/// The census of plan `p` over text-model keys `j` (a qwen3 sliding window switched on takes its
/// windowed layers out).
inline std::optional<hf_layer_census> hf_census(const json& j, const hf_layer_plan& p) {
  return hf_attention_layers(p, p.family == hf_family::qwen3 && hf_qwen3_window_on(j, p.where));
}

/// Whether the model has gated delta-rule layers beside its softmax-attention layers (Qwen3-Next,
/// Qwen3.5, Kimi Linear): then a config without a layer index does not say which layer is meant.
inline bool hf_is_hybrid(const json& j, const hf_layer_plan& p) {
  if (p.family == hf_family::qwen3) return false;
  if (const auto census = hf_census(j, p)) return !census->linear.empty() && !census->attention.empty();
  if (p.family == hf_family::mla) return !p.kda.empty();  // Kimi without a layer count: when it lists KDA layers
  return p.interval != 1;
}

/// Refuses a hybrid model's config without a layer index, naming the layers of each kind.
inline void hf_refuse_hybrid_without_layer(const json& j, const hf_layer_plan& p) {
  if (!hf_is_hybrid(j, p)) return;
  const hf_family f = p.family;
  std::string kinds;
  if (const auto census = hf_census(j, p)) {
    kinds = gattn::detail::concat("full_attention (", hf_softmax_kind(f), ") layers ", hf_layer_list(census->attention),
                                  "; linear_attention (", hf_linear_kind(f), ") layers ", hf_layer_list(census->linear));
  } else if (f != hf_family::mla) {
    kinds = gattn::detail::concat("full_attention (gqa) layers ", p.interval - 1, ", ", 2 * p.interval - 1,
                                  ", ... (every 'full_attention_interval'=", p.interval,
                                  "th); linear_attention (gated_deltanet) layers: the others");
  } else {
    kinds = gattn::detail::concat("linear_attention (kda) layers ", hf_layer_list(p.kda),
                                  " ('linear_attn_config.kda_layers' counts from 1); full_attention (mla) layers: ",
                                  "the others, the first being ", hf_first_attention_layer(p));
  }
  throw config_error(gattn::detail::concat(
      p.where, ": the model has gattn layers of two kinds, so the layer must be given (a layer index): ", kinds));
}

/// A delta-rule layer of model family `f` from its text-model keys `j`.
inline delta_config hf_parse_linear(const json& j, hf_family f, const std::string& w) {
  delta_config c = f == hf_family::qwen3_next ? hf_parse_gdn(j, w)
                   : f == hf_family::qwen3_5  ? hf_parse_qwen3_5_gdn(j, w)
                                              : hf_parse_kda(j, w);
  validate(c);
  return c;
}

/// The shared body of both parse_hf_config overloads; layer < 0 means "the model's one kind of
/// layer", refused for a hybrid model.
inline layer_config parse_hf_config_at(const json& file, index layer) {
  const hf_model m = hf_model_of(file);
  const json& j = *m.keys;
  const std::string& w = m.where;
  const hf_family f = m.family;
  const hf_layer_plan plan = hf_plan_layers(j, f, w);
  // Without a layer: the model must have one kind of gattn layer, and a softmax-attention layer
  // (this also type-checks layer_types and full_attention_interval); the result describes it.
  if (layer < 0) hf_refuse_hybrid_without_layer(j, plan);
  const index at = layer >= 0 ? layer : hf_first_attention_layer(plan);
  if (hf_require_gattn_layer(plan, at) == "linear_attention") return hf_parse_linear(j, f, w);
  hf_check_window(j, plan, layer);
  if (f == hf_family::mla) {
    mla_config c = hf_parse_mla(j, w);
    validate(c);
    return c;
  }
  gqa_config c = f == hf_family::qwen3_next ? hf_parse_qwen3_next(j, w)
                 : f == hf_family::qwen3_5  ? hf_parse_qwen3_5(j, w)
                                            : hf_parse_qwen3(j, w);
  validate(c);
  return c;
}

/// The model a config describes and its layer plan, for the entry points below.
struct hf_reading {
  hf_model model;
  hf_layer_plan plan;
  explicit hf_reading(const json& j) : model(hf_model_of(j)), plan(hf_plan_layers(*model.keys, model.family, model.where)) {}
};

}  // namespace detail

/// Maps a Hugging Face config.json (docs/spec.md §8, §14) of a model with one kind of gattn layer to
/// the config of its softmax-attention layers.
///
/// Supported `model_type`s: `qwen3_next`; `qwen3_5` and `qwen3_5_moe` (Qwen3.5 / Qwen3.6, the text
/// model's keys under `text_config`) and `qwen3_5_text`, `qwen3_5_moe_text` (the text model alone);
/// `qwen3` (plain, or the paper's release with `headwise_attn_output_gate` /
/// `elementwise_attn_output_gate`); `deepseek_v2`, `deepseek_v3`, `kimi_k2`, `kimi_k3`, `kimi_linear`.
/// Keys that do not change the layer's math are ignored; keys that would and are not implemented
/// (another rope type than yarn/default, a sliding window in use, a foreign family's switch, a state
/// dtype other than float32) and wrong types throw config_error naming the key. The result must hold
/// for every attention layer, so a Qwen3 config whose window applies to some layers is refused: use
/// the layer overload. A hybrid model (gated delta-rule layers beside softmax ones: Qwen3-Next,
/// Qwen3.5, Kimi Linear) is refused with a config_error that lists the layers of each kind: use the
/// layer overload.
inline layer_config parse_hf_config(const nlohmann::json& j) { return detail::parse_hf_config_at(j, -1); }

/// As parse_hf_config(j), for layer `layer`: a softmax-attention layer gives a gqa_config or an
/// mla_config, a linear-attention layer a delta_config (Qwen3-Next, Qwen3.5: Gated DeltaNet; Kimi
/// Linear: KDA); the sliding window is checked for this layer alone. A layer beyond those the config
/// can hold is refused.
inline layer_config parse_hf_config(const nlohmann::json& j, index layer) {
  gattn::detail::require<config_error>(layer >= 0, "hf config: layer ", layer, " must be >= 0");
  return detail::parse_hf_config_at(j, layer);
}

/// Weight-name prefix of layer `layer`'s attention: "model.layers.{i}.self_attn.", or for a Gated
/// DeltaNet layer (Qwen3-Next, Qwen3.5) "model.layers.{i}.linear_attn."; a Qwen3.5 multimodal
/// wrapper's layers are under "model.language_model.layers.{i}.". Throws config_error when the layer
/// is out of range or of a kind gattn does not compute.
inline std::string hf_layer_prefix(const nlohmann::json& j, index layer) {
  const detail::hf_reading r(j);
  return detail::hf_prefix_of(r.model, layer, detail::hf_require_gattn_layer(r.plan, layer));
}

/// Whether the config describes a hybrid model (gated delta-rule layers beside softmax-attention
/// layers: Qwen3-Next, Qwen3.5, Kimi Linear), of which parse_hf_config(j) and load_layer_config(path)
/// without a layer index refuse to pick a layer.
inline bool needs_layer_index(const nlohmann::json& j) {
  const detail::hf_reading r(j);
  return detail::hf_is_hybrid(*r.model.keys, r.plan);
}

/// The layers gattn computes (softmax attention with no sliding window in use, and the gated
/// delta-rule layers) and the model's layer count, when the config gives it (`layer_types`, else
/// `num_hidden_layers`); nullopt otherwise.
inline std::optional<detail::hf_layer_census> attention_layers(const nlohmann::json& j) {
  const detail::hf_reading r(j);
  return detail::hf_census(*r.model.keys, r.plan);
}

/// Index of the first softmax-attention layer (qwen3_next, qwen3_5: full_attention_interval - 1, or
/// the first non-linear entry of `layer_types`; others 0). Throws config_error when the model has none.
inline index first_attention_layer(const nlohmann::json& j) {
  const detail::hf_reading r(j);
  return detail::hf_first_attention_layer(r.plan);
}

/// How the model's checkpoints store Gated DeltaNet input projections: `split` for the Qwen3.5 family
/// (docs/spec.md §14), else `fused`. For what has no weights to look at (a cost report from a config);
/// a layer follows its weights (detect_gdn_layout). Throws config_error as parse_hf_config does for
/// a bad model_type or text_config.
inline gdn_layout hf_gdn_layout(const nlohmann::json& j) {
  return detail::hf_model_of(j).family == detail::hf_family::qwen3_5 ? gdn_layout::split : gdn_layout::fused;
}

}  GATTN_NAMESPACE_END  // namespace gattn::io
