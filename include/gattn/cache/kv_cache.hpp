// KV cache for one sequence of one layer (docs/spec.md §5); it owns the scratch (cache/workspace.hpp) its
// single-sequence calls reuse.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "gattn/cache/workspace.hpp"
#include "gattn/core/config.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/memory.hpp"
#include "gattn/core/types.hpp"
#include "gattn/core/validate.hpp"
#include "gattn/kernel/sdpa_params.hpp"
#include "gattn/simd/convert.hpp"

GATTN_NAMESPACE_BEGIN

namespace detail {
/// Rounds n rows of `width` floats (row stride `stride`) in place to what a cache of element type
/// `type` would hold (round to `type`, widen back). f16: throws cache_error naming the token and
/// channel of the first value outside the range, before changing anything.
inline void round_rows_in_place(storage_type type, float* x, index stride, index n, index width) {
  if (type == storage_type::f32) return;
  if (type == storage_type::f16)
    for (index t = 0; t < n; ++t) {
      const index c = simd::find_f16_out_of_range(x + t * stride, width);
      require<cache_error>(c == width, "kv_cache_dtype=f16: K/V channel ", c, " of token ", t, " is ",
                           c < width ? x[t * stride + c] : 0.0f, ", outside the f16 range (|v| <= 65504)");
    }
  for (index t = 0; t < n; ++t) {
    float* row = x + t * stride;
    for (index c = 0; c < width; ++c)
      row[c] = type == storage_type::bf16 ? bf16_to_float(round_to_bf16(row[c])) : f16_to_float(round_to_f16(row[c]));
  }
}
}  // namespace detail

/// Rows of keys and values, appended in order; `size()` tokens are valid. GQA stores K (after
/// norm and RoPE) and V (after any G2 gate) as [capacity, H_kv·D] each; MLA stores the latent
/// [capacity, d_c + d_rope] as its key rows and no value rows (value_width 0).
/// Element type (docs/spec.md §10): f32 rows are floats (key()/value()); bf16/f16 rows are the bits of
/// the rounded values (key_bits()/value_bits()), written only by append().
class kv_cache {
 public:
  kv_cache() = default;
  /// Throws cache_error naming the size when capacity * width overflows, exceeds
  /// limits::max_values or cannot be allocated.
  kv_cache(index capacity, index key_width, index value_width, storage_type type = storage_type::f32)
      : kv_cache(capacity, widths{key_width, value_width, key_width, 0}, type) {}
  /// A GQA cache for `capacity` tokens of the layer described by `c` (validated first, so that
  /// the row widths cannot overflow), of element type c.kv_cache_type.
  kv_cache(const gqa_config& c, index capacity) : kv_cache(capacity, row_widths(validated(c)), c.kv_cache_type) {}
  /// An MLA latent cache: normalised c and roped k_rope, d_c + d_rope values per token, of element
  /// type c.kv_cache_type.
  kv_cache(const mla_config& c, index capacity) : kv_cache(capacity, row_widths(validated(c)), c.kv_cache_type) {}

  index size() const { return size_; }
  index capacity() const { return capacity_; }
  index key_width() const { return key_width_; }
  index value_width() const { return value_width_; }
  /// Element type of the stored rows.
  storage_type storage() const { return type_; }

  /// Rows of an f32 cache (throws cache_error on a bf16/f16 cache: its rows are bits).
  float* key(index t) { return f32_rows(keys_, key_width_, t); }
  const float* key(index t) const { return f32_rows(keys_, key_width_, t); }
  float* value(index t) { return f32_rows(values_, value_width_, t); }
  const float* value(index t) const { return f32_rows(values_, value_width_, t); }
  /// Rows of a bf16/f16 cache as stored bits (throws cache_error on an f32 cache).
  const std::uint16_t* key_bits(index t) const { return bit_rows(key_bits_, key_width_, t); }
  const std::uint16_t* value_bits(index t) const { return bit_rows(value_bits_, value_width_, t); }

  /// Throws cache_error unless `n` more tokens fit: a full cache is never overwritten silently.
  void check_room(index n) const {
    detail::require<cache_error>(n >= 0 && size_ + n <= capacity_, "kv_cache: appending ", n, " tokens at position ",
                                 size_, " exceeds the capacity of ", capacity_, " tokens");
  }
  /// Marks `n` rows past size() (already written through key()/value(), f32 only) as valid.
  void commit(index n) {
    check_room(n);
    size_ += n;
  }
  /// Appends n tokens: key row t at k + t·k_stride (key_width floats), value row at v + t·v_stride
  /// (value_width floats; v unused when value_width is 0), rounded to the element type (nearest
  /// even, NaN stays NaN). An f16 cache refuses |x| > 65504 with a cache_error naming the row
  /// (key/value, head, channel) and the token; every row is checked before any is written, so a
  /// refused call appends nothing.
  void append(const float* k, index k_stride, const float* v, index v_stride, index n) {
    check_room(n);
    detail::require<shape_error>(n == 0 || (k != nullptr && (value_width_ == 0 || v != nullptr)),
                                 "kv_cache: append of ", n, " tokens without ", k == nullptr ? "key" : "value", " rows");
    if (type_ == storage_type::f16) {
      for (index t = 0; t < n; ++t) {
        check_f16_row(k + t * k_stride, key_width_, true, t, n);
        if (value_width_ > 0 && v != nullptr) check_f16_row(v + t * v_stride, value_width_, false, t, n);
      }
    }
    write_rows(keys_, key_bits_, key_width_, k, k_stride, n);
    if (value_width_ > 0 && v != nullptr) write_rows(values_, value_bits_, value_width_, v, v_stride, n);
    size_ += n;
  }
  /// Widens key row t (key_width values) into dst, whatever the element type.
  void widen_key(index t, float* dst) const { widen_row(keys_, key_bits_, key_width_, t, dst); }
  void widen_value(index t, float* dst) const { widen_row(values_, value_bits_, value_width_, t, dst); }

  /// Fills p's K/V views for this cache, as paged_kv_cache::bind does for a sequence: kv_type,
  /// k/v (f32) or k_bits/v_bits, token strides, no block table, t_k = size(). GQA caches (from a
  /// gqa_config) also set the head strides (D); a keys-only cache makes V alias K (MLA's latent)
  /// with head strides 0. A cache made from raw widths leaves the head strides as the caller set them.
  void bind(sdpa_params& p) const {
    const bool alias = value_width_ == 0, f32 = type_ == storage_type::f32;
    p.kv_type = type_;
    p.k = f32 ? keys_.data() : nullptr;
    p.v = f32 ? (alias ? keys_.data() : values_.data()) : nullptr;
    p.k_bits = f32 ? nullptr : key_bits_.data();
    p.v_bits = f32 ? nullptr : (alias ? key_bits_.data() : value_bits_.data());
    p.k_token_stride = key_width_;
    p.v_token_stride = alias ? key_width_ : value_width_;
    p.block_table = nullptr;
    p.block_size = p.k_block_stride = p.v_block_stride = 0;
    if (alias) p.k_head_stride = p.v_head_stride = 0;
    else if (part_ > 0 && part_ < key_width_) p.k_head_stride = p.v_head_stride = part_;
    p.t_k = size_;
  }

  /// Forgets every token (keeps the memory).
  void clear() { size_ = 0; }
  /// Keeps the first `n` tokens and forgets the rest (e.g. rejected speculative tokens).
  void truncate(index n) {
    detail::require<cache_error>(n >= 0 && n <= size_, "kv_cache: cannot truncate to ", n, " tokens, it holds ", size_);
    size_ = n;
  }

  layer_workspace& workspace() { return workspace_; }

 private:
  // key/value widths; how a key row splits into named parts for error messages: GQA heads of
  // `part` channels (part_c = 0), or MLA's latent c (part_c channels) then k_rope.
  struct widths { index key, value, part, part_c; };
  static widths row_widths(const gqa_config& c) {
    return {c.kv_heads * c.head_dim, c.kv_heads * c.head_dim, c.head_dim, 0};
  }
  static widths row_widths(const mla_config& c) {
    return {c.kv_lora_rank + c.qk_rope_head_dim, 0, 0, c.kv_lora_rank};
  }

  kv_cache(index capacity, widths w, storage_type type)
      : capacity_(capacity), key_width_(w.key), value_width_(w.value), part_(w.part), part_c_(w.part_c), type_(type) {
    detail::require<config_error>(type != storage_type::f8_e4m3, "kv_cache: f8_e4m3 is not a cache type");
    detail::require<config_error>(capacity >= 0 && w.key > 0 && w.value >= 0, "kv_cache: capacity=", capacity,
                                  " key_width=", w.key, " value_width=", w.value, " are invalid");
    const index n_keys = detail::checked_values<cache_error>(capacity, w.key, "kv_cache: capacity * key_width");
    const index n_values = detail::checked_values<cache_error>(capacity, w.value, "kv_cache: capacity * value_width");
    const index elem = type == storage_type::f32 ? index(sizeof(float)) : index(sizeof(std::uint16_t));
    try {
      if (type == storage_type::f32) {
        keys_.resize(std::size_t(n_keys));
        values_.resize(std::size_t(n_values));
      } else {
        key_bits_.resize(std::size_t(n_keys));
        value_bits_.resize(std::size_t(n_values));
      }
    } catch (const std::bad_alloc&) {
      throw cache_error(detail::concat("kv_cache: cannot allocate ", (n_keys + n_values) * elem, " bytes for capacity=",
                                       capacity, " tokens of key_width=", w.key, " and value_width=", w.value,
                                       " (", to_string(type), ")"));
    }
  }

  float* f32_rows(const streamed_vector<float>& v, index width, index t) const {
    detail::require<cache_error>(type_ == storage_type::f32, "kv_cache: the rows of a ", to_string(type_),
                                 " cache are bits (key_bits/value_bits), not floats");
    return const_cast<float*>(v.data()) + t * width;
  }
  const std::uint16_t* bit_rows(const streamed_vector<std::uint16_t>& v, index width, index t) const {
    detail::require<cache_error>(type_ != storage_type::f32, "kv_cache: the rows of an f32 cache are floats (key/value)");
    return v.data() + t * width;
  }
  // Rows [size_, size_ + n) of one side of the cache from n source rows, rounded to the type.
  void write_rows(streamed_vector<float>& f, streamed_vector<std::uint16_t>& b, index width, const float* src,
                  index stride, index n) {
    for (index t = 0; t < n; ++t) {
      const float* in = src + t * stride;
      const index at = (size_ + t) * width;
      if (type_ == storage_type::f32) std::copy_n(in, width, f.data() + at);
      else if (type_ == storage_type::bf16) simd::narrow_bf16(in, b.data() + at, width);
      else simd::narrow_f16(in, b.data() + at, width);
    }
  }
  void widen_row(const streamed_vector<float>& f, const streamed_vector<std::uint16_t>& b, index width, index t,
                 float* dst) const {
    if (type_ == storage_type::f32) std::copy_n(f.data() + t * width, width, dst);
    else if (type_ == storage_type::bf16) simd::widen_bf16(b.data() + t * width, dst, width);
    else simd::widen_f16(b.data() + t * width, dst, width);
  }
  void check_f16_row(const float* x, index width, bool is_key, index t, index n) const {
    const index c = simd::find_f16_out_of_range(x, width);
    if (c == width) return;
    std::string where;
    if (!is_key || part_c_ == 0) {
      const index part = part_ > 0 ? part_ : width;
      where = detail::concat(is_key ? "key" : "value", " head ", c / part, " channel ", c % part);
    } else if (c < part_c_) {
      where = detail::concat("latent c channel ", c);
    } else {
      where = detail::concat("latent k_rope channel ", c - part_c_);
    }
    throw cache_error(detail::concat("kv_cache: ", where, " of token ", size_ + t, " (row ", t, " of this call) is ",
                                     x[c], ", outside the f16 range (|v| <= 65504); nothing of the ", n,
                                     " tokens was appended"));
  }

  index capacity_ = 0, key_width_ = 0, value_width_ = 0, size_ = 0;
  index part_ = 0, part_c_ = 0;
  storage_type type_ = storage_type::f32;
  streamed_vector<float> keys_, values_;  // huge-page backed: decode streams them
  streamed_vector<std::uint16_t> key_bits_, value_bits_;
  layer_workspace workspace_;
};

GATTN_NAMESPACE_END  // namespace gattn
