// Layer weights from a checkpoint (a safetensors file, shards or a directory): the tensors under a
// name prefix, as typed views into the mapped files (no copy); block-FP8 weights with their block
// scales (docs/spec.md §15).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gattn/core/weights.hpp"
#include "gattn/io/checkpoint.hpp"
#include "gattn/io/quantization.hpp"
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
  /// The block size of F8_E4M3 weights: a config.json's quantization_config (load_quantization).
  /// Unset, a checkpoint opened as a directory takes it from the directory's config.json; else an
  /// F8_E4M3 weight is refused, naming this option.
  std::optional<fp8_format> fp8;
  /// Leave out tensors under the prefix that are not floating point (instead of a weight_error).
  bool skip_non_float = false;
  /// Refuse (weight_error naming the tensor and why) a tensor that cannot be viewed in place: F64,
  /// or data not aligned to its element size. Without it such a tensor becomes an fp32 copy, which
  /// load_report() lists: a misaligned bf16 checkpoint then takes twice its size in memory.
  bool strict_in_place = false;
};

namespace detail {
/// The suffix of an FP8 weight's block scales: `<name>_scale_inv`, which multiplies despite its name.
inline constexpr const char* fp8_scale_suffix = "_scale_inv";

inline bool is_fp8_scale(const std::string& name) {
  const std::string suffix = fp8_scale_suffix;
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// The FP8 format load_weights reads `file`'s F8_E4M3 tensors with: the option, else the
/// quantization_config of config.json in the checkpoint's directory.
inline fp8_format fp8_format_for(const checkpoint& file, const load_options& options, const tensor_info& t) {
  if (options.fp8) return *options.fp8;
  std::error_code ec;
  const std::filesystem::path config = std::filesystem::path(file.origin()) / "config.json";
  if (std::filesystem::is_directory(file.origin(), ec) && std::filesystem::is_regular_file(config, ec))
    if (const std::optional<fp8_format> f = load_quantization(config.string())) return *f;
  throw weight_error(gattn::detail::concat(
      file.origin(), ": weight '", t.name, "' is F8_E4M3, but no FP8 block size is known: give the config's "
      "quantization_config (load_options::fp8 = io::load_quantization(\"config.json\"))"));
}

/// A view of the F8_E4M3 weight `t` with its block scales `<name>_scale_inv` (F32 or BF16, shape
/// [⌈R/B0⌉, ⌈C/B1⌉]); weight_error naming the tensor when they are missing or do not fit.
inline weight_view fp8_weight_view(const checkpoint& file, const tensor_info& t, const fp8_format& f) {
  const std::string scale_name = t.name + fp8_scale_suffix;
  const auto where = [&] { return gattn::detail::concat(file.origin(), ": weight '", t.name, "' (F8_E4M3 ", shape_string(t.shape), ")"); };
  gattn::detail::require<weight_error>(t.shape.size() == 2, where(), ": FP8 weights must be matrices [rows, cols]");
  gattn::detail::require<weight_error>(file.contains(scale_name), where(), ": its block scales '", scale_name,
                                       "' are missing (an FP8 weight is never read unscaled)");
  const tensor_info& s = file.info(scale_name);
  gattn::detail::require<weight_error>(s.type == dtype::f32 || s.type == dtype::bf16, where(), ": its block scales '",
                                       scale_name, "' have dtype ", dtype_name(s.type), " (F32 or BF16 expected)");
  const index rows = index(t.shape[0]), cols = index(t.shape[1]);
  const std::vector<std::int64_t> grid = {(rows + f.block_rows - 1) / f.block_rows, (cols + f.block_cols - 1) / f.block_cols};
  gattn::detail::require<weight_error>(s.shape == grid, where(), ": its block scales '", scale_name, "' have shape ",
                                       shape_string(s.shape), ", expected ", shape_string(grid), " for blocks of [",
                                       f.block_rows, ", ", f.block_cols, "] (quantization_config.weight_block_size)");
  const tensor_view codes = file.view(t.name), scales = file.view(scale_name);
  block_scales b;
  b.type = s.type == dtype::bf16 ? storage_type::bf16 : storage_type::f32;
  b.data = scales.data();
  b.grid_rows = index(grid[0]);
  b.grid_cols = index(grid[1]);
  b.block_rows = f.block_rows;
  b.block_cols = f.block_cols;
  // Both mappings stay alive with the view (the scales may sit in another shard).
  auto both = std::make_shared<const std::pair<std::shared_ptr<const std::uint8_t>, std::shared_ptr<const std::uint8_t>>>(
      codes.shared_data(), scales.shared_data());
  try {
    return weight_view(codes.data(), {rows, cols}, b, -1, both);
  } catch (const weight_error& e) {
    throw weight_error(where() + ": " + e.what());
  }
}
}  // namespace detail

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
    if (detail::is_fp8_scale(t.name)) {  // read with its weight
      const std::string weight = t.name.substr(0, t.name.size() - std::string(detail::fp8_scale_suffix).size());
      gattn::detail::require<weight_error>(file.contains(weight) && file.info(weight).type == dtype::f8_e4m3,
                                           file.origin(), ": block scales '", t.name, "' belong to no F8_E4M3 weight '",
                                           weight, "' (a weight stored in another dtype is never rescaled)");
      continue;
    }
    if (t.type == dtype::f8_e4m3) {
      w.set(t.name.substr(prefix.size()), detail::fp8_weight_view(file, t, detail::fp8_format_for(file, options, t)));
      continue;
    }
    gattn::detail::require<weight_error>(t.type != dtype::f8_e5m2, file.origin(), ": weight '", t.name,
                                         "' has dtype F8_E5M2: FP8 weights are read as block-scaled E4M3 only");
    const bool is_float = t.type == dtype::f32 || t.type == dtype::f16 || t.type == dtype::bf16 || t.type == dtype::f64;
    if (!is_float) {
      if (options.skip_non_float) continue;
      throw weight_error("weight '" + t.name + "' has dtype " + std::string(dtype_name(t.type)) +
                         "; layer weights must be F32, F16, BF16, F64 or block-scaled F8_E4M3");
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
  /// The block-scaled FP8 weights (views of their E4M3 codes and scales, in place).
  std::vector<std::string> fp8;
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
    const std::string fp8_part =
        fp8.empty() ? std::string() : gattn::detail::concat(" (", fp8.size(), " of them block-scaled FP8)");
    if (converted.empty()) return gattn::detail::concat("all ", tensors, " tensors are views of the checkpoint", fp8_part);
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
    if (v.type() == storage_type::f8_e4m3) r.fp8.push_back(name);
  }
  return r;
}

}  GATTN_NAMESPACE_END  // namespace gattn::io
