// See cli_layers.hpp.
#include "cli_layers.hpp"

#include <cctype>
#include <set>

#include "gattn/core/delta_weights.hpp"
#include "gattn/io/load_weights.hpp"

GATTN_NAMESPACE_BEGIN namespace cli {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// What the weights under `prefix` (which hold an output projection) make, by the tensors beside it.
std::string kind_under(const io::checkpoint& file, const std::string& prefix, bool gdn) {
  if (!gdn) {
    if (file.contains(prefix + "kv_a_proj_with_mqa.weight")) return "mla";
    return file.contains(prefix + "q_conv1d.weight") ? "kda" : "gqa";
  }
  try {
    // The layer's own rule for its input projections (core/delta_weights.hpp), on views of the file.
    const gdn_layout layout = detect_gdn_layout(io::load_weights(file, prefix, /*skip_non_float=*/true));
    return std::string("gated_deltanet, ") + to_string(layout) + " input projections";
  } catch (const error& e) {
    return std::string("gated_deltanet, not loadable: ") + e.what();
  }
}

}  // namespace

std::vector<held_layer> layers_in(const io::checkpoint& file) {
  std::vector<held_layer> layers;
  std::set<std::string> seen;
  for (const auto& t : file.tensors()) {
    const bool softmax_or_kda = ends_with(t.name, "o_proj.weight");
    const bool gdn = ends_with(t.name, "out_proj.weight");
    if (!softmax_or_kda && !gdn) continue;
    const std::string prefix = t.name.substr(0, t.name.size() - (gdn ? 15 : 13));
    if (gdn && !file.contains(prefix + "conv1d.weight")) continue;  // an out_proj of something else
    if (seen.insert(prefix).second) layers.push_back({prefix, kind_under(file, prefix, gdn)});
  }
  return layers;
}

std::optional<index> hf_layer_number(const std::string& prefix) {
  for (const std::string stem : {"model.layers.", "model.language_model.layers."}) {
    if (prefix.compare(0, stem.size(), stem) != 0) continue;
    std::size_t digits = 0;
    while (stem.size() + digits < prefix.size() && std::isdigit(static_cast<unsigned char>(prefix[stem.size() + digits])))
      ++digits;
    if (digits > 0 && digits < 9 && stem.size() + digits < prefix.size() && prefix[stem.size() + digits] == '.')
      return index(std::stoll(prefix.substr(stem.size(), digits)));
  }
  return std::nullopt;
}

}  GATTN_NAMESPACE_END  // namespace gattn::cli
