// libFuzzer target: arbitrary bytes as config text -> JSON -> the HF / gattn config dispatch.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "gattn/core/error.hpp"
#include "gattn/diagnostics/cost_model.hpp"
#include "gattn/io/config_file.hpp"
#include "gattn/io/hf_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    // The same steps as load_layer_config after reading the file.
    const nlohmann::json j = gattn::io::detail::parse_json_text(text, "<fuzz>");
    if (!j.is_object()) return 0;
    try {
      const gattn::layer_config cfg = gattn::io::parse_layer_config(j);  // a hybrid model's is refused
      // What `gattn cost` does with an accepted config (every layer kind, the delta-rule ones included).
      (void)std::visit([](const auto& c) { return gattn::cost(c); }, cfg);
    } catch (const gattn::error&) {
      // The layer-aware entry points below still read the file.
    }
    if (j.contains("model_type")) {
      // The layer-aware entry points read keys parse_hf_config(j) may not reach.
      (void)gattn::io::needs_layer_index(j);
      const gattn::gdn_layout layout = gattn::io::hf_gdn_layout(j);
      // Layers 0-5, and layers at the edge of what any config can hold (their `layer + 1` must not overflow).
      for (gattn::index layer : {gattn::index(0), gattn::index(1), gattn::index(2), gattn::index(3), gattn::index(4),
                                 gattn::index(5), gattn::index(2147483646), gattn::index(9223372036854775807)}) {
        try {
          (void)gattn::io::hf_layer_prefix(j, layer);
          const gattn::layer_config at = gattn::io::parse_hf_config(j, layer);
          if (const auto* d = std::get_if<gattn::delta_config>(&at)) (void)gattn::cost(*d, layout);
          else (void)std::visit([](const auto& c) { return gattn::cost(c); }, at);
        } catch (const gattn::error&) {
          // One refused layer says nothing about the next.
        }
      }
      (void)gattn::io::first_attention_layer(j);
    }
  } catch (const gattn::error&) {
    // Refusing bad input with a gattn error is the expected outcome; anything else is a bug.
  }
  return 0;
}
