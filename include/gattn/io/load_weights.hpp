// Layer weights from a checkpoint (a safetensors file, shards or a directory): the tensors under a
// name prefix, as typed views into the mapped files (no copy).
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>

#include "gattn/core/weights.hpp"
#include "gattn/io/checkpoint.hpp"
#include "gattn/io/safetensors.hpp"

namespace gattn::io {

namespace detail {

/// "'a.', 'b.'": the distinct prefixes of the tensor names, a weight name being its last two
/// components (`NAME.weight`, `NAME.bias`); at most `shown` of them, then "...".
inline std::string prefixes_present(const checkpoint& file, std::size_t shown = 6) {
  std::set<std::string> prefixes;
  for (const tensor_info& t : file.tensors()) {
    const auto last = t.name.rfind('.');
    const auto leaf = last == std::string::npos || last == 0 ? std::string::npos : t.name.rfind('.', last - 1);
    prefixes.insert(leaf == std::string::npos ? "" : t.name.substr(0, leaf + 1));
  }
  std::string list;
  std::size_t n = 0;
  for (const std::string& p : prefixes) {
    if (n++ == shown) return list + ", ...";
    list += (list.empty() ? "'" : ", '") + p + "'";
  }
  return list;
}

}  // namespace detail

/// A weight_view of the stored tensor `t` of `file`. F32/BF16/F16 are views into the mapping
/// itself, which they keep alive; F64 (no fast path reads it) is rounded to nearest into an owned
/// fp32 copy, and so is an F32/BF16/F16 tensor at an address not aligned to its element size
/// (safetensors does not promise alignment; files written by the reference writer are aligned).
inline weight_view stored_weight_view(const checkpoint& file, const tensor_info& t) {
  std::vector<index> shape(t.shape.begin(), t.shape.end());
  const tensor_view v = file.view(t.name);
  const storage_type st = t.type == dtype::bf16 ? storage_type::bf16
                          : t.type == dtype::f16 ? storage_type::f16 : storage_type::f32;
  const auto address = reinterpret_cast<std::uintptr_t>(v.data());
  if (t.type != dtype::f64 && address % std::uintptr_t(storage_bytes(st)) == 0 && v.data() != nullptr)
    return weight_view(st, v.data(), std::move(shape), -1, v.shared_data());
  auto owned = std::make_shared<const std::vector<float>>(v.to_f32());
  return weight_view(storage_type::f32, owned->data(), std::move(shape), -1, owned);
}

/// Every floating-point tensor whose name starts with `prefix` (e.g. "model.layers.3.self_attn."),
/// keyed by the rest of its name, as views into the checkpoint's mapping: nothing is copied or
/// widened (see stored_weight_view for the two exceptions), and each view keeps its shard mapped,
/// so the map -- and a layer built from it -- stays valid after `file` is gone. Tensors of other
/// dtypes under the prefix are refused (a weight_error naming them), never reinterpreted, unless
/// `skip_non_float`. A prefix that no tensor name starts with is a weight_error naming it, the file
/// and the prefixes present: it is a wrong prefix, not a layer without weights. A safetensors_file
/// converts to a checkpoint implicitly (sharing its bytes).
inline weight_map load_weights(const checkpoint& file, const std::string& prefix = "",
                               bool skip_non_float = false) {
  weight_map w;
  bool matched = false;
  for (const tensor_info& t : file.tensors()) {
    if (t.name.compare(0, prefix.size(), prefix) != 0) continue;
    matched = true;
    const bool is_float = t.type == dtype::f32 || t.type == dtype::f16 || t.type == dtype::bf16 || t.type == dtype::f64;
    if (!is_float) {
      if (skip_non_float) continue;
      throw weight_error("weight '" + t.name + "' has dtype " + std::string(dtype_name(t.type)) +
                         "; layer weights must be F32, F16, BF16 or F64");
    }
    w.set(t.name.substr(prefix.size()), stored_weight_view(file, t));
  }
  if (!matched) {
    throw weight_error(file.tensors().empty()
                           ? gattn::detail::concat(file.origin(), ": holds no tensors (looked for prefix '", prefix, "')")
                           : gattn::detail::concat(file.origin(), ": no tensor name starts with prefix '", prefix,
                                                   "' (prefixes present: ", detail::prefixes_present(file), ")"));
  }
  return w;
}

}  // namespace gattn::io
