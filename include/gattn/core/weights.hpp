// Named weight tensors as a layer receives them (PyTorch nn.Linear layout [out, in]): typed views
// (f32, bf16, f16, and block-scaled E4M3) into memory someone else owns -- a mapped checkpoint, an
// engine's buffers, or an fp32 copy the weight_map keeps for tests and small models.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gattn/core/block_scales.hpp"
#include "gattn/core/config.hpp"
#include "gattn/core/e4m3.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/types.hpp"

GATTN_NAMESPACE_BEGIN

/// One dense row-major fp32 tensor (the owning form tests and small models build weights in).
struct tensor {
  std::vector<index> shape;
  std::vector<float> data;

  index numel() const {
    index n = 1;
    for (index d : shape) n *= d;
    return n;
  }
};

inline std::string shape_string(const std::vector<index>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Bytes of one element of type t.
inline index storage_bytes(storage_type t) {
  return t == storage_type::f32 ? 4 : t == storage_type::f8_e4m3 ? 1 : 2;
}

namespace detail {
// core/ cannot see simd/convert.hpp (the SIMD layer sits above it), and the reference layer needs
// widened weights too: these two scalar widenings are exact, like simd's bf16_to_float/f16_to_float.
inline float float_from_bits(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
inline float widen_bf16_scalar(std::uint16_t h) { return float_from_bits(std::uint32_t{h} << 16); }
inline float widen_f16_scalar(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  if (exp == 0x1F) return float_from_bits(sign | 0x7F800000u | (man << 13) | (man ? 0x400000u : 0u));
  if (exp != 0) return float_from_bits(sign | ((exp + 112) << 23) | (man << 13));
  const float sub = float(man) * (1.0f / 16777216.0f);  // man * 2^-24, exact
  return sign ? -sub : sub;
}
}  // namespace detail

/// A non-owning, typed, row-strided view of a weight tensor. Rank 0/1 tensors are one column
/// (a bias [n] has n rows); rank >= 2 flattens the trailing dims into the columns. Slices of rows
/// or of columns are views too (e.g. one head of q_proj, or one rank's input columns of o_proj).
/// `keep_alive`, when set, owns the memory (a mapping, a buffer): a view holding it can never
/// dangle. Without it the caller keeps the memory alive for as long as the view (and any layer
/// built from it) lives.
class weight_view {
 public:
  weight_view() = default;
  /// `row_stride` in elements; -1 means dense (the column count). `data` must be aligned to the
  /// element size.
  weight_view(storage_type type, const void* data, std::vector<index> shape, index row_stride = -1,
              std::shared_ptr<const void> keep_alive = {})
      : type_(type), data_(data), shape_(std::move(shape)), keep_alive_(std::move(keep_alive)) {
    detail::require<weight_error>(type != storage_type::f8_e4m3, "weight_view: an f8_e4m3 weight needs its block scales");
    check_layout(row_stride);
  }
  /// An f8_e4m3 weight (docs/spec.md §15): E4M3 codes at `data` and the scale of each element in
  /// `scales` (checked: they must cover the view and be finite). `keep_alive` owns both.
  weight_view(const void* data, std::vector<index> shape, block_scales scales, index row_stride = -1,
              std::shared_ptr<const void> keep_alive = {})
      : type_(storage_type::f8_e4m3), data_(data), shape_(std::move(shape)), keep_alive_(std::move(keep_alive)),
        scales_(scales) {
    check_layout(row_stride);
    detail::check_block_scales(scales_, rows(), cols(), "weight_view");
  }

  storage_type type() const { return type_; }
  const void* data() const { return data_; }
  /// The block scales of an f8_e4m3 view (nullptr for every other type).
  const block_scales* scales() const { return type_ == storage_type::f8_e4m3 ? &scales_ : nullptr; }
  const std::vector<index>& shape() const { return shape_; }
  index rows() const { return shape_.empty() ? 1 : shape_[0]; }
  index cols() const {
    index c = 1;
    for (std::size_t i = 1; i < shape_.size(); ++i) c *= shape_[i];
    return c;
  }
  index numel() const { return rows() * cols(); }
  index row_stride() const { return row_stride_; }
  bool dense() const { return rows() <= 1 || row_stride_ == cols(); }
  /// Bytes of the elements the view covers (what a pass over it reads).
  index bytes() const { return numel() * storage_bytes(type_); }
  const std::shared_ptr<const void>& keep_alive() const { return keep_alive_; }

  /// Why this view is an fp32 copy of a stored tensor that a loader could not view in place
  /// (io::load_weights: F64 data, or data not aligned to its element size), or nullptr for a view of
  /// the data as given. Sub-views keep it. `why` must be a string literal (it is not copied).
  const char* conversion() const { return conversion_; }
  weight_view& set_conversion(const char* why) {
    conversion_ = why;
    return *this;
  }

  /// Address of row r's first element.
  const void* row(index r) const {
    return static_cast<const unsigned char*>(data_) + std::size_t(r * row_stride_ * storage_bytes(type_));
  }

  /// Rows [first, first + count): the same columns, shape[0] = count.
  weight_view row_range(index first, index count) const {
    detail::require<shape_error>(first >= 0 && count >= 0 && first + count <= rows(), "weight_view: rows [", first,
                                 ", ", first + count, ") outside ", rows(), " rows (shape ", shape_string(shape_), ")");
    std::vector<index> s = shape_.empty() ? std::vector<index>{count} : shape_;
    s[0] = count;
    return sub_view(count ? row(first) : data_, std::move(s), scales_.from_row(first));
  }

  /// Columns [first, first + count) of a rank-2 view: shape [rows, count], same row stride.
  weight_view col_range(index first, index count) const {
    detail::require<shape_error>(shape_.size() == 2, "weight_view: a column range needs a rank-2 tensor, shape is ",
                                 shape_string(shape_));
    detail::require<shape_error>(first >= 0 && count >= 0 && first + count <= cols(), "weight_view: columns [",
                                 first, ", ", first + count, ") outside ", cols(), " columns");
    const void* p = static_cast<const unsigned char*>(data_) + std::size_t(first * storage_bytes(type_));
    return sub_view(p, {rows(), count}, scales_.from_col(first));
  }

  /// Element (r, c) widened exactly to fp32.
  float at(index r, index c) const {
    const unsigned char* p = static_cast<const unsigned char*>(row(r)) + std::size_t(c * storage_bytes(type_));
    if (type_ == storage_type::f32) {
      float f;
      std::memcpy(&f, p, sizeof f);
      return f;
    }
    if (type_ == storage_type::f8_e4m3) return e4m3_to_float(*p) * scales_.of(r, c);
    std::uint16_t h;
    std::memcpy(&h, p, sizeof h);
    return type_ == storage_type::bf16 ? detail::widen_bf16_scalar(h) : detail::widen_f16_scalar(h);
  }

  /// An owning fp32 copy, for code that transforms weights (averages, permutations).
  tensor to_tensor() const { return tensor{shape_, widened()}; }

  /// A dense fp32 copy, row-major (for norms, biases, the reference layer, tests).
  std::vector<float> widened() const {
    std::vector<float> out(static_cast<std::size_t>(numel()));
    const index n = cols();
    for (index r = 0; r < rows(); ++r)
      for (index c = 0; c < n; ++c) out[std::size_t(r * n + c)] = at(r, c);
    return out;
  }

 private:
  void check_layout(index row_stride) {
    for (index d : shape_) detail::require<weight_error>(d >= 0, "weight_view: negative dimension in shape ", shape_string(shape_));
    row_stride_ = row_stride < 0 ? cols() : row_stride;
    detail::require<weight_error>(rows() <= 1 || row_stride_ >= cols(), "weight_view: row_stride ", row_stride_,
                                  " is below the row width ", cols(), " (shape ", shape_string(shape_), ")");
    detail::require<weight_error>(data_ != nullptr || rows() * cols() == 0, "weight_view: null data for shape ",
                                  shape_string(shape_));
  }

  weight_view sub_view(const void* data, std::vector<index> shape, const block_scales& scales) const {
    weight_view v = type_ == storage_type::f8_e4m3 ? weight_view(data, std::move(shape), scales, row_stride_, keep_alive_)
                                                   : weight_view(type_, data, std::move(shape), row_stride_, keep_alive_);
    return v.set_conversion(conversion_);
  }

  storage_type type_ = storage_type::f32;
  const void* data_ = nullptr;
  std::vector<index> shape_;
  index row_stride_ = 0;
  std::shared_ptr<const void> keep_alive_;
  const char* conversion_ = nullptr;
  block_scales scales_;  // f8_e4m3 only
};

/// Weights by name (`q_proj.weight`, `q_proj.bias`, ...), without any checkpoint prefix. The map
/// holds views: copies of a map share the weights. set() from fp32 data keeps an owned copy
/// inside the map (shared by its copies, released with the last view of it).
class weight_map {
 public:
  void set(const std::string& name, weight_view v) { views_[name] = std::move(v); }
  void set(const std::string& name, tensor t) {
    detail::require<weight_error>(index(t.data.size()) == t.numel(), "weight '", name, "': shape ",
                                  shape_string(t.shape), " holds ", t.numel(), " values, data has ", t.data.size());
    auto owned = std::make_shared<const std::vector<float>>(std::move(t.data));
    views_[name] = weight_view(storage_type::f32, owned->data(), std::move(t.shape), -1, owned);
  }
  void set(const std::string& name, std::vector<index> shape, std::vector<float> data) {
    set(name, tensor{std::move(shape), std::move(data)});
  }

  bool contains(const std::string& name) const { return views_.count(name) != 0; }

  /// The weight `name` with exactly `shape`; weight_error naming both otherwise.
  const weight_view& get(const std::string& name, const std::vector<index>& shape) const {
    auto it = views_.find(name);
    detail::require<weight_error>(it != views_.end(), "missing weight '", name, "' (expected shape ",
                                  shape_string(shape), ")");
    detail::require<weight_error>(it->second.shape() == shape, "weight '", name, "' has shape ",
                                  shape_string(it->second.shape()), ", expected ", shape_string(shape));
    return it->second;
  }

  /// Like get(), but nullptr when absent (optional biases).
  const weight_view* find(const std::string& name, const std::vector<index>& shape) const {
    return contains(name) ? &get(name, shape) : nullptr;
  }

  /// get(name, shape) as a dense fp32 copy (norm weights and other small vectors).
  std::vector<float> widened(const std::string& name, const std::vector<index>& shape) const {
    return get(name, shape).widened();
  }

  const std::map<std::string, weight_view>& all() const { return views_; }

 private:
  std::map<std::string, weight_view> views_;
};

GATTN_NAMESPACE_END  // namespace gattn
