// The `quantization_config` of a Hugging Face config.json (docs/spec.md §15): the block-FP8 format
// of the official FP8 releases (Qwen3-Next/3.5/3.6-FP8, DeepSeek-V3, Kimi K2), which load_weights
// needs to read their F8_E4M3 weights with their block scales.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "gattn/core/config.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/types.hpp"
#include "gattn/io/config_file.hpp"
#include "gattn/io/json_fields.hpp"

GATTN_NAMESPACE_BEGIN namespace io {

/// Block-scaled E4M3 weights: a scale per block_rows × block_cols block (`weight_block_size`).
struct fp8_format {
  index block_rows = 0;
  index block_cols = 0;
};

namespace detail {
inline const json* quantization_block(const json& j) {
  if (has(j, "quantization_config")) return &j.at("quantization_config");
  // A multimodal wrapper may keep it with the text model's keys.
  if (has(j, "text_config") && j.at("text_config").is_object() && has(j.at("text_config"), "quantization_config"))
    return &j.at("text_config").at("quantization_config");
  return nullptr;
}
}  // namespace detail

/// The FP8 format of a config.json's `quantization_config` (top level, or under `text_config`), or
/// nullopt when it has none. Accepted: `quant_method` "fp8", `fmt` "e4m3" (the default),
/// `activation_scheme` "dynamic" (the default: activations stay fp32 here, which is what dynamic
/// quantization approximates), `weight_block_size` [B0, B1] of positive sizes; `modules_to_not_convert`
/// needs nothing (those weights are stored BF16 and read as such). Anything else is a format gattn
/// does not implement: config_error naming the key and value.
inline std::optional<fp8_format> parse_quantization(const nlohmann::json& j) {
  using detail::json;
  const json* q = detail::quantization_block(j);
  if (q == nullptr) return std::nullopt;
  const std::string w = "quantization_config";
  gattn::detail::require<config_error>(q->is_object(), w, " must be an object, got ", detail::short_text(*q));
  const std::string method = detail::get_string(*q, "quant_method", w, "");
  gattn::detail::require<config_error>(method == "fp8", w, ".quant_method=\"", method,
                                       "\" is not implemented (block-scaled \"fp8\" is)");
  const std::string fmt = detail::get_string(*q, "fmt", w, "e4m3");
  gattn::detail::require<config_error>(fmt == "e4m3", w, ".fmt=\"", fmt, "\" is not implemented (\"e4m3\" is)");
  const std::string scheme = detail::get_string(*q, "activation_scheme", w, "dynamic");
  gattn::detail::require<config_error>(scheme == "dynamic", w, ".activation_scheme=\"", scheme,
                                       "\" is not implemented (\"dynamic\" is: activations are not quantized)");
  gattn::detail::require<config_error>(detail::has(*q, "weight_block_size"), w,
                                       ": missing 'weight_block_size' (per-tensor FP8 scales are not implemented)");
  const json& b = q->at("weight_block_size");
  gattn::detail::require<config_error>(b.is_array() && b.size() == 2 && b[0].is_number_integer() &&
                                           b[1].is_number_integer(),
                                       w, ".weight_block_size must be two integers [B0, B1], got ", detail::short_text(b));
  const std::int64_t b0 = b[0].get<std::int64_t>(), b1 = b[1].get<std::int64_t>();
  gattn::detail::require<config_error>(b0 > 0 && b1 > 0 && b0 <= limits::max_size && b1 <= limits::max_size, w,
                                       ".weight_block_size=[", b0, ", ", b1, "] must hold sizes in [1, ",
                                       limits::max_size, "]");
  return fp8_format{index(b0), index(b1)};
}

/// parse_quantization of the config file at `path` (read as read_config_json does).
inline std::optional<fp8_format> load_quantization(const std::string& path) {
  try {
    return parse_quantization(read_config_json(path));
  } catch (const config_error& e) {
    throw config_error(path + ": " + e.what());
  }
}

}  GATTN_NAMESPACE_END  // namespace gattn::io
