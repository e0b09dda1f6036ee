// The layers a checkpoint holds, each found by its own weights (docs/spec.md §8, §13, §14): what
// `gattn run` reads when neither --layer nor --prefix says, and what `gattn info --weights` lists.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gattn/core/types.hpp"
#include "gattn/io/checkpoint.hpp"

GATTN_NAMESPACE_BEGIN namespace cli {

/// One layer of a checkpoint: the prefix its weights share and the kind they make ("gqa", "mla",
/// "kda", "gated_deltanet", the last with its projection layout).
struct held_layer {
  std::string prefix;
  std::string kind;
};

/// The layers `file` holds, by prefix: each is found by its output projection, `o_proj.weight`
/// (GQA, MLA, and Kimi's KDA under self_attn.) or `out_proj.weight` beside `conv1d.weight` (Gated
/// DeltaNet under linear_attn.), whatever comes before it (model.layers.N., the Qwen3.5 wrapper's
/// model.language_model.layers.N., or none).
std::vector<held_layer> layers_in(const io::checkpoint& file);

/// N of a Hugging Face layer prefix "model.layers.N." or "model.language_model.layers.N." (the
/// attention module's name may follow), else nullopt.
std::optional<index> hf_layer_number(const std::string& prefix);

}  GATTN_NAMESPACE_END  // namespace gattn::cli
