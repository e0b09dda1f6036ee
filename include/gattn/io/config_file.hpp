// One entry point for a layer config file: a Hugging Face config.json or a gattn config (docs/spec.md §8, §9).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "gattn/io/file_access.hpp"
#include "gattn/io/gattn_config.hpp"
#include "gattn/io/hf_config.hpp"
#include "gattn/io/json_fields.hpp"

GATTN_NAMESPACE_BEGIN namespace io {

namespace detail {

/// Iterative (so itself stack-safe) check that `j` nests at most `limit` levels.
inline bool depth_at_most(const nlohmann::json& j, std::size_t limit) {
  std::vector<std::pair<const nlohmann::json*, std::size_t>> todo{{&j, 1}};
  while (!todo.empty()) {
    const auto [v, depth] = todo.back();
    todo.pop_back();
    if (!v->is_structured()) continue;
    if (depth >= limit) return false;
    for (const auto& child : *v) todo.emplace_back(&child, depth + 1);
  }
  return true;
}

}  // namespace detail

/// Parses an already-read JSON document: `model_type` present → parse_hf_config, else parse_gattn_config.
/// `layer` >= 0 picks that layer of a Hugging Face model (refused unless it is a gattn layer; a gattn
/// config describes one layer and takes none). Without it, a hybrid model (needs_layer_index: gated
/// delta-rule layers beside softmax ones) is refused with the layers of each kind.
/// Throws config_error for a refused config, format_error for a document nested absurdly deep.
inline layer_config parse_layer_config(const nlohmann::json& j, index layer = -1) {
  gattn::detail::require<config_error>(j.is_object(), "config must be a JSON object");
  gattn::detail::require<format_error>(detail::depth_at_most(j, detail::max_config_depth),
                                       "config: JSON nested deeper than ", detail::max_config_depth, " levels");
  // A null model_type still marks a Hugging Face file; parse_hf_config then names the bad key.
  if (!j.contains("model_type")) {
    gattn::detail::require<config_error>(layer < 0, "config: layer ", layer,
                                         " given, but a gattn config describes one layer (no 'model_type')");
    return parse_gattn_config(j);
  }
  return layer < 0 ? parse_hf_config(j) : parse_hf_config(j, layer);
}

/// The JSON object of a config file, read as load_layer_config reads it (for what a layer config
/// does not carry: the layer count, torch_dtype, needs_layer_index).
///
/// Throws format_error naming `path` when the file cannot be read, is not a regular file, is
/// larger than 16 MB, is not JSON, is not a JSON object or nests absurdly deep.
inline nlohmann::json read_config_json(const std::string& path) {
  const std::string text = detail::read_capped_file(path, path, detail::max_config_bytes);
  nlohmann::json j = detail::parse_json_text(text, path);
  gattn::detail::require<format_error>(j.is_object(), path, ": a config file must hold a JSON object, got ",
                                       j.type_name());
  gattn::detail::require<format_error>(detail::depth_at_most(j, detail::max_config_depth), path,
                                       ": JSON nested deeper than ", detail::max_config_depth, " levels");
  return j;
}

/// Reads a layer config file and dispatches as parse_layer_config does (`layer` likewise).
///
/// Throws format_error as read_config_json does; config_error (prefixed with `path`) when its
/// content is refused, including a key repeated within one object and a hybrid model's config
/// without a layer index.
inline layer_config load_layer_config(const std::string& path, index layer = -1) {
  const nlohmann::json j = read_config_json(path);
  try {
    return parse_layer_config(j, layer);
  } catch (const config_error& e) {
    // Keep the class (callers may catch config_error) and add which file was refused.
    throw config_error(path + ": " + e.what());
  }
}

}  GATTN_NAMESPACE_END  // namespace gattn::io
