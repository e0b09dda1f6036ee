// KV cache for one sequence of one layer (SPEC §5), plus the per-sequence scratch the layer reuses.
#pragma once

#include <new>
#include <vector>

#include "gattn/core/config.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/memory.hpp"
#include "gattn/core/types.hpp"
#include "gattn/core/validate.hpp"

namespace gattn {

/// Scratch buffers a layer reuses across calls on one sequence, so that decode does not touch
/// fresh pages every token (4 KiB page faults are expensive). Contents are meaningless between calls.
struct layer_workspace {
  std::vector<float> projections, gate_scores, low_rank, attention, gated, activated, scratch;
  std::vector<float> lse;

  static void fit(std::vector<float>& v, index n) {
    if (index(v.size()) < n) v.resize(std::size_t(n));
  }
};

/// Rows of keys and values, appended in order; `size()` tokens are valid. GQA stores K (after
/// norm and RoPE) and V (after any G2 gate) as [capacity, H_kv·D] each; MLA stores the latent
/// [capacity, d_c + d_rope] as its key rows and no value rows (value_width 0).
class kv_cache {
 public:
  kv_cache() = default;
  /// Throws cache_error naming the size when capacity * width overflows, exceeds
  /// limits::max_values or cannot be allocated.
  kv_cache(index capacity, index key_width, index value_width)
      : capacity_(capacity), key_width_(key_width), value_width_(value_width) {
    detail::require<config_error>(capacity >= 0 && key_width > 0 && value_width >= 0, "kv_cache: capacity=",
                                  capacity, " key_width=", key_width, " value_width=", value_width, " are invalid");
    const index n_keys = detail::checked_values<cache_error>(capacity, key_width, "kv_cache: capacity * key_width");
    const index n_values =
        detail::checked_values<cache_error>(capacity, value_width, "kv_cache: capacity * value_width");
    try {
      keys_.resize(std::size_t(n_keys));
      values_.resize(std::size_t(n_values));
    } catch (const std::bad_alloc&) {
      throw cache_error(detail::concat("kv_cache: cannot allocate ", (n_keys + n_values) * index(sizeof(float)),
                                       " bytes for capacity=", capacity, " tokens of key_width=", key_width,
                                       " and value_width=", value_width));
    }
  }
  /// A GQA cache for `capacity` tokens of the layer described by `c` (validated first, so that
  /// the row widths cannot overflow).
  kv_cache(const gqa_config& c, index capacity) : kv_cache(capacity, row_widths(validated(c))) {}
  /// An MLA latent cache: normalised c and roped k_rope, d_c + d_rope values per token.
  kv_cache(const mla_config& c, index capacity) : kv_cache(capacity, row_widths(validated(c))) {}

  index size() const { return size_; }
  index capacity() const { return capacity_; }
  index key_width() const { return key_width_; }
  index value_width() const { return value_width_; }

  float* key(index t) { return keys_.data() + t * key_width_; }
  const float* key(index t) const { return keys_.data() + t * key_width_; }
  float* value(index t) { return values_.data() + t * value_width_; }
  const float* value(index t) const { return values_.data() + t * value_width_; }

  /// Throws cache_error unless `n` more tokens fit: a full cache is never overwritten silently.
  void check_room(index n) const {
    detail::require<cache_error>(n >= 0 && size_ + n <= capacity_, "kv_cache: appending ", n, " tokens at position ",
                                 size_, " exceeds the capacity of ", capacity_, " tokens");
  }
  /// Marks `n` rows past size() (already written) as valid.
  void commit(index n) {
    check_room(n);
    size_ += n;
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
  struct widths { index key, value; };
  static widths row_widths(const gqa_config& c) { return {c.kv_heads * c.head_dim, c.kv_heads * c.head_dim}; }
  static widths row_widths(const mla_config& c) { return {c.kv_lora_rank + c.qk_rope_head_dim, 0}; }
  kv_cache(index capacity, widths w) : kv_cache(capacity, w.key, w.value) {}

  index capacity_ = 0, key_width_ = 0, value_width_ = 0, size_ = 0;
  streamed_vector<float> keys_, values_;  // huge-page backed: decode streams them
  layer_workspace workspace_;
};

}  // namespace gattn
