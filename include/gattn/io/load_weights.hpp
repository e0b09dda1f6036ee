// Layer weights from a checkpoint (a safetensors file, shards or a directory): the tensors under a
// name prefix, as typed views into the mapped files (no copy).
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gattn/core/weights.hpp"
#include "gattn/io/checkpoint.hpp"
#include "gattn/io/safetensors.hpp"

GATTN_NAMESPACE_BEGIN namespace io {

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

namespace detail {
/// Why stored tensor `t` (at `data`) cannot be viewed in place, or nullptr when it can.
inline const char* in_place_obstacle(const tensor_info& t, const void* data) {
  if (t.type == dtype::f64) return "F64 data (no kernel reads F64): rounded to an fp32 copy";
  const storage_type st = t.type == dtype::bf16 ? storage_type::bf16
                          : t.type == dtype::f16 ? storage_type::f16 : storage_type::f32;
  const auto address = reinterpret_cast<std::uintptr_t>(data);
  if (data == nullptr || address % std::uintptr_t(storage_bytes(st)) != 0)
    return "data not aligned to its element size (safetensors does not promise alignment): widened to an fp32 copy";
  return nullptr;
}
}  // namespace detail

/// A weight_view of the stored tensor `t` of `file`. F32/BF16/F16 are views into the mapping
/// itself, which they keep alive; F64 (no fast path reads it) is rounded to nearest into an owned
/// fp32 copy, and so is an F32/BF16/F16 tensor at an address not aligned to its element size
/// (safetensors does not promise alignment; files written by the reference writer are aligned).
/// A copy says why in weight_view::conversion().
inline weight_view stored_weight_view(const checkpoint& file, const tensor_info& t) {
  std::vector<index> shape(t.shape.begin(), t.shape.end());
  const tensor_view v = file.view(t.name);
  const storage_type st = t.type == dtype::bf16 ? storage_type::bf16
                          : t.type == dtype::f16 ? storage_type::f16 : storage_type::f32;
  const char* obstacle = detail::in_place_obstacle(t, v.data());
  if (obstacle == nullptr) return weight_view(st, v.data(), std::move(shape), -1, v.shared_data());
  auto owned = std::make_shared<const std::vector<float>>(v.to_f32());
  return weight_view(storage_type::f32, owned->data(), std::move(shape), -1, owned).set_conversion(obstacle);
}

/// How load_weights treats tensors it cannot use as they are stored.
struct load_options {
  /// Leave out tensors under the prefix that are not floating point (instead of a weight_error).
  bool skip_non_float = false;
  /// Refuse (weight_error naming the tensor and why) a tensor that cannot be viewed in place: F64,
  /// or data not aligned to its element size. Without it such a tensor becomes an fp32 copy, which
  /// load_report() lists: a misaligned bf16 checkpoint then takes twice its size in memory.
  bool strict_in_place = false;
};

/// Every floating-point tensor whose name starts with `prefix` (e.g. "model.layers.3.self_attn."),
/// keyed by the rest of its name, as views into the checkpoint's mapping: nothing is copied or
/// widened (see stored_weight_view for the two exceptions, which `options.strict_in_place` refuses
/// and load_report() lists), and each view keeps its shard mapped, so the map -- and a layer built
/// from it -- stays valid after `file` is gone. Tensors of other dtypes under the prefix are refused
/// (a weight_error naming them), never reinterpreted, unless `options.skip_non_float`. A prefix that
/// no tensor name starts with is a weight_error naming it, the file and the prefixes present: it is
/// a wrong prefix, not a layer without weights. A safetensors_file converts to a checkpoint
/// implicitly (sharing its bytes).
inline weight_map load_weights(const checkpoint& file, const std::string& prefix, const load_options& options) {
  weight_map w;
  bool matched = false;
  for (const tensor_info& t : file.tensors()) {
    if (t.name.compare(0, prefix.size(), prefix) != 0) continue;
    matched = true;
    const bool is_float = t.type == dtype::f32 || t.type == dtype::f16 || t.type == dtype::bf16 || t.type == dtype::f64;
    if (!is_float) {
      if (options.skip_non_float) continue;
      throw weight_error("weight '" + t.name + "' has dtype " + std::string(dtype_name(t.type)) +
                         "; layer weights must be F32, F16, BF16 or F64");
    }
    if (options.strict_in_place)
      if (const char* obstacle = detail::in_place_obstacle(t, file.view(t.name).data()))
        throw weight_error(gattn::detail::concat(file.origin(), ": weight '", t.name, "' (", dtype_name(t.type), " ",
                                                 detail::shape_string(t.shape), ") cannot be viewed in place: ",
                                                 obstacle, "; load_options::strict_in_place refuses it"));
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

/// load_weights with default options, or `skip_non_float` alone.
inline weight_map load_weights(const checkpoint& file, const std::string& prefix = "", bool skip_non_float = false) {
  load_options options;
  options.skip_non_float = skip_non_float;
  return load_weights(file, prefix, options);
}

/// Which weights of a map are not what was stored: fp32 copies a loader made of tensors it could
/// not view in place (weight_view::conversion()).
struct weight_report {
  struct converted_tensor {
    std::string name;        ///< as in the map (without the prefix)
    const char* reason = "";  ///< why it could not be viewed
    index bytes = 0;         ///< memory of the fp32 copy
  };
  std::vector<converted_tensor> converted;
  index tensors = 0;  ///< every tensor of the map

  bool all_in_place() const { return converted.empty(); }
  index converted_bytes() const {
    index b = 0;
    for (const converted_tensor& c : converted) b += c.bytes;
    return b;
  }
  /// One line: "all 9 tensors are views of the checkpoint", or "2 of 9 tensors are fp32 copies
  /// (4096 bytes), not views of the checkpoint: 'q_proj.weight' (why), ...".
  std::string summary() const {
    if (converted.empty()) return gattn::detail::concat("all ", tensors, " tensors are views of the checkpoint");
    std::string text = gattn::detail::concat(converted.size(), " of ", tensors, " tensors are fp32 copies (",
                                             converted_bytes(), " bytes), not views of the checkpoint:");
    for (std::size_t i = 0; i < converted.size() && i < 4; ++i)
      text += gattn::detail::concat(i ? "; '" : " '", converted[i].name, "' (", converted[i].reason, ")");
    return converted.size() > 4 ? text + "; ..." : text;
  }
};

/// The report of a weight map (from load_weights, or any other).
inline weight_report load_report(const weight_map& w) {
  weight_report r;
  for (const auto& [name, v] : w.all()) {
    ++r.tensors;
    if (v.conversion() != nullptr) r.converted.push_back({name, v.conversion(), v.bytes()});
  }
  return r;
}

}  GATTN_NAMESPACE_END  // namespace gattn::io
