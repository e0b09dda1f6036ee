// Layer weights from a checkpoint (a safetensors file, shards or a directory): the tensors under a
// name prefix, widened exactly to fp32.
#pragma once

#include <string>

#include "gattn/core/weights.hpp"
#include "gattn/io/checkpoint.hpp"
#include "gattn/io/safetensors.hpp"

namespace gattn::io {

/// Every floating-point tensor whose name starts with `prefix` (e.g. "model.layers.3.self_attn."),
/// keyed by the rest of its name. BF16/F16/F32 widen exactly; F64 rounds to nearest. Tensors of
/// other dtypes under the prefix are refused (a weight_error naming them), never reinterpreted.
/// A safetensors_file converts to a checkpoint implicitly (sharing its bytes).
inline weight_map load_weights(const checkpoint& file, const std::string& prefix = "",
                               bool skip_non_float = false) {
  weight_map w;
  for (const tensor_info& t : file.tensors()) {
    if (t.name.compare(0, prefix.size(), prefix) != 0) continue;
    const bool is_float = t.type == dtype::f32 || t.type == dtype::f16 || t.type == dtype::bf16 || t.type == dtype::f64;
    if (!is_float) {
      if (skip_non_float) continue;
      throw weight_error("weight '" + t.name + "' has dtype " + std::string(dtype_name(t.type)) +
                         "; layer weights must be F32, F16, BF16 or F64");
    }
    std::vector<index> shape(t.shape.begin(), t.shape.end());
    w.set(t.name.substr(prefix.size()), std::move(shape), file.read_f32(t.name));
  }
  return w;
}

}  // namespace gattn::io
