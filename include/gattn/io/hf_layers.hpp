// The layers a Hugging Face config.json describes (docs/spec.md §8, §13, §14): which model family it
// is, which JSON object holds the text model's keys (the file, or a multimodal wrapper's
// `text_config`), the kind of each layer and where its weights are.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gattn/core/error.hpp"
#include "gattn/io/json_fields.hpp"

GATTN_NAMESPACE_BEGIN namespace io {
namespace detail {

/// The model types docs/spec.md §8 and §14 map, as listed in error messages.
inline constexpr const char* hf_supported_model_types =
    "qwen3_next, qwen3_5, qwen3_5_moe, qwen3_5_text, qwen3_5_moe_text, qwen3 (plain or with the paper's "
    "headwise/elementwise_attn_output_gate), deepseek_v2, deepseek_v3, kimi_k2, kimi_k3, kimi_linear";

/// Families share one mapping each; the MLA family differs only in model_type. qwen3_5 is the
/// Qwen3.5 / Qwen3.6 text model (dense or MoE), alone or inside its multimodal wrapper.
enum class hf_family { qwen3_next, qwen3_5, qwen3, mla };

/// The most layers a config can state ('num_hidden_layers' is a 32-bit integer): no layer index at or
/// beyond it names a layer of any config, and below it `layer + 1` cannot overflow.
inline constexpr index hf_max_layers = std::numeric_limits<std::int32_t>::max();

/// Longest list or layer walk a config may ask for: a hostile file must not make one run for hours.
inline constexpr index hf_walk_limit = 65536;

/// A Hugging Face config seen as the text model it describes. `keys` points into the JSON it was
/// made from, which must outlive it.
struct hf_model {
  const json* keys = nullptr;   ///< the text model's keys: the file itself, or its `text_config`
  hf_family family = hf_family::qwen3;
  std::string where;            ///< how messages name it: "hf config (qwen3_5).text_config"
  std::string layers_root;      ///< layer i's weights are named layers_root + "layers.{i}." + ...
};

/// The multimodal wrapper (qwen3_5, qwen3_5_moe): the text model's keys are its `text_config`, whose
/// own model_type, when given, must be the wrapper's text model; the text layers' weights sit under
/// model.language_model. The vision tower's keys do not concern gattn's layers.
inline hf_model hf_wrapped_text(const json& j, const std::string& type, hf_model m) {
  gattn::detail::require<config_error>(has(j, "text_config"), m.where,
                                       ": missing required key 'text_config' (the text model's keys)");
  const json& text = j.at("text_config");
  gattn::detail::require<config_error>(text.is_object(), m.where, ": 'text_config' must be an object, got ",
                                       short_text(text));
  const std::string expected = type + "_text";
  const std::string inner = get_string(text, "model_type", m.where + ".text_config", expected);
  gattn::detail::require<config_error>(inner == expected, m.where, ": 'text_config.model_type'=\"", inner,
                                       "\" is not the text model of ", type, " (", expected, ")");
  m.keys = &text;
  m.family = hf_family::qwen3_5;
  m.where += ".text_config";
  m.layers_root = "model.language_model.";
  return m;
}

/// The model `j` describes; config_error naming 'model_type' when it is missing or not supported.
inline hf_model hf_model_of(const json& j) {
  gattn::detail::require<config_error>(j.is_object(), "hf config: must be a JSON object");
  const std::string type = get_string(j, "model_type", "hf config", "");
  gattn::detail::require<config_error>(!type.empty(), "hf config: missing required key 'model_type'");
  hf_model m;
  m.keys = &j;
  m.where = "hf config (" + type + ")";
  m.layers_root = "model.";
  if (type == "qwen3_5" || type == "qwen3_5_moe") return hf_wrapped_text(j, type, m);
  if (type == "qwen3_next") m.family = hf_family::qwen3_next;
  else if (type == "qwen3_5_text" || type == "qwen3_5_moe_text") m.family = hf_family::qwen3_5;
  else if (type == "qwen3") m.family = hf_family::qwen3;
  else if (type == "deepseek_v2" || type == "deepseek_v3" || type == "kimi_k2" || type == "kimi_k3" ||
           type == "kimi_linear")
    m.family = hf_family::mla;
  else
    throw config_error(gattn::detail::concat("hf config: 'model_type'=\"", type, "\" is not supported (supported: ",
                                             hf_supported_model_types, ")"));
  return m;
}

/// Entry `i` of Kimi's 1-indexed `linear_attn_config.kda_layers`, checked to name one of the `last`
/// layers (`count_known`: the config says how many it has).
inline index hf_kimi_entry(const json& n, std::size_t i, index last, bool count_known, const std::string& w) {
  const std::string at = gattn::detail::concat(w, ": 'linear_attn_config.kda_layers'[", i, "]=", short_text(n));
  gattn::detail::require<config_error>(n.is_number_integer(), at, " must be an integer (a layer, counting from 1)");
  // Compared in the entry's own signedness: 2^64 - 1 read as int64 would be -1.
  const bool beyond = n.is_number_unsigned() ? n.get<std::uint64_t>() > std::uint64_t(last)
                                             : n.get<std::int64_t>() > std::int64_t(last);
  gattn::detail::require<config_error>(!beyond, at, " is beyond the ", last,
                                       count_known ? " layers of the model" : " layers any config can describe",
                                       " (the list counts from 1)");
  const std::int64_t v = n.get<std::int64_t>();
  gattn::detail::require<config_error>(v != 0, at, ": the list counts layers from 1 (layer i is KDA when i + 1 is ",
                                       "listed), so 0 names no layer");
  gattn::detail::require<config_error>(v > 0, at, " is negative: the list counts layers from 1");
  return index(v);
}

/// Kimi's `linear_attn_config.kda_layers` as 0-indexed layers, ascending (layer i is KDA when i + 1
/// is listed); every entry checked against the model's `count` layers (-1: not stated).
inline std::vector<index> hf_kimi_kda_layers(const json& j, index count, const std::string& w) {
  std::vector<index> layers;
  if (!has(j, "linear_attn_config")) return layers;
  const json& l = j.at("linear_attn_config");
  gattn::detail::require<config_error>(l.is_object(), w, ": 'linear_attn_config' must be an object");
  if (!has(l, "kda_layers")) return layers;
  const json& list = l.at("kda_layers");
  gattn::detail::require<config_error>(list.is_array() && index(list.size()) <= hf_walk_limit, w,
                                       ": 'linear_attn_config.kda_layers' must be an array of at most ", hf_walk_limit,
                                       " layer numbers");
  for (std::size_t i = 0; i < list.size(); ++i)
    layers.push_back(hf_kimi_entry(list[i], i, count >= 0 ? count : hf_max_layers, count >= 0, w) - 1);
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  return layers;
}

/// How a config assigns a kind to each layer, read and checked once, so that a walk over every layer
/// stays linear in the layer count. Kinds are Hugging Face's words ("full_attention",
/// "linear_attention", "sliding_attention", or whatever `layer_types` says).
struct hf_layer_plan {
  hf_family family = hf_family::qwen3;
  std::string where;
  index stated = -1;             ///< num_hidden_layers; -1 when absent
  const json* types = nullptr;   ///< layer_types, when given
  index interval = 4;            ///< qwen3_next, qwen3_5: one full-attention layer every `interval`
  index max_window_layers = 28;  ///< qwen3: from this layer on the window applies (when switched on)
  std::vector<index> kda;        ///< the MLA family (Kimi): the KDA layers, 0-indexed, ascending

  /// The layers the config says the model has (layer_types, else num_hidden_layers); -1 when unsaid.
  index count() const {
    if (!types) return stated;
    const index listed = index(types->size());
    return stated < 0 ? listed : std::min(stated, listed);
  }

  /// The kind of `layer`; config_error when it is negative or beyond the layers the config holds.
  std::string kind(index layer) const {
    gattn::detail::require<config_error>(layer >= 0, where, ": layer ", layer, " must be >= 0");
    gattn::detail::require<config_error>(stated < 0 || layer < stated, where, ": layer ", layer,
                                         " is out of range ('num_hidden_layers'=", stated, ")");
    if (types) {
      gattn::detail::require<config_error>(std::size_t(layer) < types->size(), where, ": layer ", layer,
                                           " is out of range ('layer_types' has ", types->size(), " entries)");
      const json& t = types->at(std::size_t(layer));
      gattn::detail::require<config_error>(t.is_string(), where, ": 'layer_types'[", layer, "] must be a string");
      return t.get<std::string>();
    }
    gattn::detail::require<config_error>(layer < hf_max_layers, where, ": layer ", layer, " is beyond the ",
                                         hf_max_layers, " layers any config can describe ('num_hidden_layers' ",
                                         "is a 32-bit integer)");
    switch (family) {
      case hf_family::qwen3_next:
      case hf_family::qwen3_5:  // Gated DeltaNet layers with one full-attention layer every `interval`
        return (layer + 1) % interval == 0 ? "full_attention" : "linear_attention";
      case hf_family::qwen3:  // with use_sliding_window, layers from max_window_layers on use the window
        return layer >= max_window_layers ? "sliding_attention" : "full_attention";
      case hf_family::mla:
        return std::binary_search(kda.begin(), kda.end(), layer) ? "linear_attention" : "full_attention";
    }
    return "full_attention";
  }
};

/// The layer plan of text-model keys `j` of family `f`; reads only the keys the family's rule uses.
inline hf_layer_plan hf_plan_layers(const json& j, hf_family f, const std::string& w) {
  hf_layer_plan p;
  p.family = f;
  p.where = w;
  p.stated = get_index(j, "num_hidden_layers", w, -1);
  gattn::detail::require<config_error>(!has(j, "num_hidden_layers") || p.stated >= 0, w, ": 'num_hidden_layers'=",
                                       p.stated, " must be >= 0");
  if (has(j, "layer_types")) {
    p.types = &j.at("layer_types");
    gattn::detail::require<config_error>(p.types->is_array(), w, ": 'layer_types' must be an array of strings");
  } else if (f == hf_family::qwen3_next || f == hf_family::qwen3_5) {
    p.interval = get_index(j, "full_attention_interval", w, 4);
    gattn::detail::require<config_error>(p.interval > 0, w, ": 'full_attention_interval'=", p.interval, " must be > 0");
  } else if (f == hf_family::qwen3) {
    p.max_window_layers = get_index(j, "max_window_layers", w, 28);
  }
  // Kimi's list is checked whenever it is given, layer_types or not: a malformed list is a malformed config.
  if (f == hf_family::mla) p.kda = hf_kimi_kda_layers(j, p.count(), w);
  return p;
}

/// See first_attention_layer(); also how parse_hf_config(j) checks `layer_types` / the interval.
inline index hf_first_attention_layer(const hf_layer_plan& p) {
  const std::string& w = p.where;
  const index n = p.count();
  if (p.types) {
    for (index i = 0; i < n; ++i)
      if (p.kind(i) != "linear_attention") return i;
    throw config_error(w + ": 'layer_types' lists no softmax-attention layer");
  }
  if (p.family == hf_family::mla) {
    // The first layer Kimi's KDA list leaves out (the list is ascending and without repeats).
    index i = 0;
    while (i < index(p.kda.size()) && p.kda[std::size_t(i)] == i) ++i;
    gattn::detail::require<config_error>(n < 0 || i < n, w,
                                         ": 'linear_attn_config.kda_layers' lists every layer: there is no MLA layer");
    return i;
  }
  if (p.family == hf_family::qwen3) return 0;
  gattn::detail::require<config_error>(n < 0 || p.interval - 1 < n, w, ": no full-attention layer among ",
                                       "'num_hidden_layers'=", n, " with 'full_attention_interval'=", p.interval);
  return p.interval - 1;
}

/// The layers gattn computes: softmax attention with no sliding window in use, and the gated
/// delta-rule (linear-attention) layers. Known only when the config says how many layers there are
/// (`layer_types`, else `num_hidden_layers`).
struct hf_layer_census {
  std::vector<index> attention;  ///< the softmax-attention layers, ascending
  std::vector<index> linear;     ///< the gated delta-rule layers (Gated DeltaNet, KDA), ascending
  index total = 0;               ///< all layers of the model
};

/// The census of plan `p`; `window_on`: a qwen3 sliding window is switched on, so its
/// "sliding_attention" layers are not gattn layers. Qwen3.5 knows only its two kinds.
inline std::optional<hf_layer_census> hf_attention_layers(const hf_layer_plan& p, bool window_on) {
  const index n = p.count();
  if (n < 0) return std::nullopt;
  gattn::detail::require<config_error>(n <= hf_walk_limit, p.where, ": 'num_hidden_layers'=", n, " is more than ",
                                       hf_walk_limit);
  hf_layer_census census;
  census.total = n;
  const bool sliding_counts = !window_on && p.family != hf_family::qwen3_5;
  for (index i = 0; i < n; ++i) {
    const std::string kind = p.kind(i);
    if (kind == "full_attention" || (kind == "sliding_attention" && sliding_counts)) census.attention.push_back(i);
    if (kind == "linear_attention" && p.family != hf_family::qwen3) census.linear.push_back(i);
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
/// DeltaNet layer of qwen3_next / qwen3_5, a KDA layer of the Kimi family); any other kind is refused.
inline std::string hf_require_gattn_layer(const hf_layer_plan& p, index layer) {
  const std::string kind = p.kind(layer);
  const std::string& w = p.where;
  if (kind == "linear_attention") {
    gattn::detail::require<config_error>(p.family != hf_family::qwen3, w, ": 'layer_types'[", layer,
                                         "]=\"linear_attention\" is supported for qwen3_next and qwen3_5 (Gated ",
                                         "DeltaNet) and kimi_linear (KDA) only");
    return kind;
  }
  if (p.family == hf_family::qwen3_5)
    gattn::detail::require<config_error>(kind == "full_attention", w, ": 'layer_types'[", layer, "]=\"", kind,
                                         "\" is not a Qwen3.5 layer kind (full_attention or linear_attention)");
  gattn::detail::require<config_error>(kind == "full_attention" || kind == "sliding_attention", w, ": 'layer_types'[",
                                       layer, "]=\"", kind,
                                       "\" is not supported (full_attention, sliding_attention or linear_attention)");
  return kind;
}

/// Weight-name prefix of layer `layer` of model `m` whose kind is `kind`: "<root>layers.{i}.self_attn.",
/// or for a Gated DeltaNet layer "<root>layers.{i}.linear_attn." (Kimi keeps KDA under self_attn).
inline std::string hf_prefix_of(const hf_model& m, index layer, const std::string& kind) {
  const bool gdn = kind == "linear_attention" && (m.family == hf_family::qwen3_next || m.family == hf_family::qwen3_5);
  return m.layers_root + "layers." + std::to_string(layer) + (gdn ? ".linear_attn." : ".self_attn.");
}

}  // namespace detail
}  GATTN_NAMESPACE_END  // namespace gattn::io
