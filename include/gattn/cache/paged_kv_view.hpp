// A view over caller-owned paged K/V memory (docs/spec.md §11): an inference engine's own blocks and
// block tables, which a layer's batched step() appends the new tokens' rows to and attends over.
//
// Ownership: the engine owns the memory, allocates blocks and keeps the lengths; gattn neither
// allocates nor frees blocks, and never keeps the view past the call. Within a call, the layer
// writes the new rows of sequence s at positions [context_lens[s], context_lens[s] + n_s) (n_s its
// rows of the batch), then attends over all context_lens[s] + n_s tokens: context_lens are the
// lengths BEFORE the call, and the engine adds n_s itself afterwards. Every block those positions
// reach must be in the sequence's table already; a view that lacks one (an entry outside
// [0, num_blocks), a table shorter than the positions need), has a null pointer or another
// element type than the layer's kv_cache_dtype is refused, naming the field, before anything is
// written. The engine must not give one writable block to two sequences of a batch (that is not
// checked), and must not change the memory while a call runs.
//
// Layout of a token's row, as in gattn's own caches: GQA keys [H_kv][D] (head h at h·head
// stride), values alike; MLA one latent row [c (d_c) | k_rope (d_rope)] per token, no values.
// Token t of block b starts at keys + b·key_block_stride + t·key_token_stride (elements of
// `dtype`: float for f32, std::uint16_t bits for bf16/f16), so token-major ([blocks][block_size]
// [H_kv][D]) and head-major ([blocks][H_kv][block_size][D]) block layouts are both views.
#pragma once

#include <cstdint>
#include <cstring>

#include "gattn/core/config.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/types.hpp"
#include "gattn/core/validate.hpp"
#include "gattn/kernel/sdpa_params.hpp"
#include "gattn/simd/convert.hpp"

GATTN_NAMESPACE_BEGIN

/// Caller-owned paged K/V memory and one batch's block tables (see the file comment). Strides are
/// in elements; a stride of 0 takes the dense default.
struct paged_kv_view {
  storage_type dtype = storage_type::f32;  ///< element type of every row; must be the layer's kv_cache_dtype
  void* keys = nullptr;    ///< GQA: the K blocks; MLA: the latent blocks
  void* values = nullptr;  ///< GQA: the V blocks; MLA: unused
  index num_blocks = 0;    ///< blocks the memory holds: table entries must lie in [0, num_blocks)
  index block_size = 0;    ///< tokens per block
  index key_token_stride = 0, value_token_stride = 0;  ///< between a block's tokens (0: the row width)
  index key_block_stride = 0, value_block_stride = 0;  ///< between blocks (0: block_size · token stride)
  index key_head_stride = 0, value_head_stride = 0;    ///< GQA: between a token's KV heads (0: head_dim)
  /// Sequence s of the batch: its table is the row block_tables + s·block_table_stride, whose
  /// entries [0, ceil((context_lens[s] + n_s) / block_size)) must name its blocks in order.
  const std::int32_t* block_tables = nullptr;
  index block_table_stride = 0;  ///< entries of each sequence's table (the 2-D table's row width)
  const index* context_lens = nullptr;  ///< tokens each sequence holds before the call
};

namespace detail {

/// A paged_kv_view with its defaults resolved, checked against a layer's rows: `heads` rows of
/// `head_dim` per key (MLA: one latent row), values alike (value heads 0: keys only).
struct resolved_kv_view {
  paged_kv_view v;
  index heads = 1, head_dim = 0, value_heads = 0;
  bool causal = true;

  index rows_of(const index* cu, index s) const { return cu[s + 1] - cu[s]; }
  const std::int32_t* table(index s) const { return v.block_tables + s * v.block_table_stride; }
};

/// Resolves the view's default strides and checks every field a batch of `batch` sequences with
/// the rows of cu reads or writes, naming the field; throws before anything is written.
inline resolved_kv_view resolve_kv_view(const char* who, const paged_kv_view& view, storage_type layer_type,
                                        index heads, index head_dim, index value_heads, bool causal) {
  resolved_kv_view r{view, heads, head_dim, value_heads, causal};
  paged_kv_view& v = r.v;
  require<cache_error>(v.dtype == layer_type, who, ": paged_kv_view.dtype is ", to_string(v.dtype),
                       ", the layer's kv_cache_dtype is ", to_string(layer_type));
  require<shape_error>(v.keys != nullptr, who, ": paged_kv_view.keys is null");
  require<shape_error>(value_heads == 0 || v.values != nullptr, who, ": paged_kv_view.values is null");
  require<shape_error>(v.num_blocks > 0 && v.num_blocks <= 0x7fffffff, who, ": paged_kv_view.num_blocks=",
                       v.num_blocks, " must be in [1, 2^31)");
  require<shape_error>(v.block_size > 0, who, ": paged_kv_view.block_size=", v.block_size, " must be > 0");
  require<shape_error>(v.block_table_stride > 0, who, ": paged_kv_view.block_table_stride=", v.block_table_stride,
                       " must be > 0");
  require<shape_error>(v.key_token_stride >= 0 && v.value_token_stride >= 0 && v.key_block_stride >= 0 &&
                           v.value_block_stride >= 0 && v.key_head_stride >= 0 && v.value_head_stride >= 0,
                       who, ": paged_kv_view strides must be >= 0 (key_token_stride=", v.key_token_stride,
                       " value_token_stride=", v.value_token_stride, " key_block_stride=", v.key_block_stride,
                       " value_block_stride=", v.value_block_stride, " key_head_stride=", v.key_head_stride,
                       " value_head_stride=", v.value_head_stride, ")");
  if (v.key_head_stride == 0) v.key_head_stride = head_dim;
  if (v.value_head_stride == 0) v.value_head_stride = head_dim;
  if (heads == 1) v.key_head_stride = head_dim;  // one row: no heads to stride over
  if (v.key_token_stride == 0) v.key_token_stride = heads * head_dim;
  if (v.value_token_stride == 0) v.value_token_stride = value_heads * head_dim;
  if (v.key_block_stride == 0) v.key_block_stride = v.block_size * v.key_token_stride;
  if (v.value_block_stride == 0) v.value_block_stride = v.block_size * v.value_token_stride;
  if (value_heads == 0) v.values = nullptr;
  return r;
}

/// Checks the tables and lengths of a batch against its rows: every block the sequence's tokens
/// (old and new) live in is named by an entry in [0, num_blocks).
inline void check_kv_view_batch(const char* who, const resolved_kv_view& r, const index* cu, index batch,
                                index per_token) {
  const paged_kv_view& v = r.v;
  require<shape_error>(v.block_tables != nullptr, who, ": paged_kv_view.block_tables is null");
  require<shape_error>(v.context_lens != nullptr, who, ": paged_kv_view.context_lens is null");
  for (index s = 0; s < batch; ++s) {
    const index len = v.context_lens[s], n = r.rows_of(cu, s);
    require<cache_error>(len >= 0, who, ": paged_kv_view.context_lens[", s, "]=", len, " must be >= 0");
    require<cache_error>(r.causal || len == 0, who, ": a non-causal layer cannot continue a sequence (paged_kv_view.",
                         "context_lens[", s, "]=", len, "); run it on the whole sequence at once");
    check_call_rows(who, n, len, per_token);
    const index blocks = (len + n + v.block_size - 1) / v.block_size;
    require<cache_error>(blocks <= v.block_table_stride, who, ": sequence ", s, " holds ", len, " + ", n,
                         " tokens, which take ", blocks, " blocks of ", v.block_size,
                         " tokens; its block table has paged_kv_view.block_table_stride=", v.block_table_stride,
                         " entries");
    const std::int32_t* table = r.table(s);
    for (index b = 0; b < blocks; ++b)
      require<cache_error>(table[b] >= 0 && table[b] < v.num_blocks, who, ": paged_kv_view.block_tables[", s, "][",
                           b, "]=", table[b], " names no block of the ", v.num_blocks,
                           " (the engine allocates every block the call writes before the call)");
  }
}

/// Writes `width` floats as elements of `type` at dst (rounded to nearest even, as the caches do).
inline void store_row(storage_type type, void* dst, const float* src, index width) {
  if (type == storage_type::f32) std::memcpy(dst, src, sizeof(float) * std::size_t(width));
  else if (type == storage_type::bf16) simd::narrow_bf16(src, static_cast<std::uint16_t*>(dst), width);
  else simd::narrow_f16(src, static_cast<std::uint16_t*>(dst), width);
}
/// Reads `width` elements of `type` at src as floats.
inline void load_row(storage_type type, const void* src, float* dst, index width) {
  if (type == storage_type::f32) std::memcpy(dst, src, sizeof(float) * std::size_t(width));
  else if (type == storage_type::bf16) simd::widen_bf16(static_cast<const std::uint16_t*>(src), dst, width);
  else simd::widen_f16(static_cast<const std::uint16_t*>(src), dst, width);
}

/// Sequence s of a checked view, as a layer's batch reaches its caches (sequence_cache's
/// operations): its length (before the call's append, and after it once `appended`), the append
/// of its new rows, the kernel's view of its keys, a widened key row.
class view_sequence {
 public:
  view_sequence(const resolved_kv_view& r, index s, index n, bool appended) : r_(&r), s_(s), n_(n), appended_(appended) {}

  index size() const { return r_->v.context_lens[s_] + (appended_ ? n_ : 0); }
  storage_type storage() const { return r_->v.dtype; }

  /// Writes the n new rows at positions size() ... (before the append).
  void append(const float* k, index k_stride, const float* v, index v_stride, index n) const {
    const index len = r_->v.context_lens[s_];
    for (index t = 0; t < n; ++t) {
      write(r_->v.keys, key_offset(len + t), r_->v.key_head_stride, r_->heads, k + t * k_stride);
      if (r_->value_heads > 0) write(r_->v.values, value_offset(len + t), r_->v.value_head_stride, r_->value_heads, v + t * v_stride);
    }
  }

  /// Fills p's K/V fields like paged_kv_cache::bind (t_k = size()); keys-only views make V alias K.
  void bind(sdpa_params& p) const {
    const paged_kv_view& v = r_->v;
    const bool alias = r_->value_heads == 0, f32 = v.dtype == storage_type::f32;
    const void* values = alias ? v.keys : v.values;
    p.kv_type = v.dtype;
    p.k = f32 ? static_cast<const float*>(v.keys) : nullptr;
    p.v = f32 ? static_cast<const float*>(values) : nullptr;
    p.k_bits = f32 ? nullptr : static_cast<const std::uint16_t*>(v.keys);
    p.v_bits = f32 ? nullptr : static_cast<const std::uint16_t*>(values);
    p.k_token_stride = v.key_token_stride;
    p.v_token_stride = alias ? v.key_token_stride : v.value_token_stride;
    p.k_block_stride = v.key_block_stride;
    p.v_block_stride = alias ? v.key_block_stride : v.value_block_stride;
    p.block_table = r_->table(s_);
    p.block_size = v.block_size;
    p.k_head_stride = alias ? 0 : v.key_head_stride;
    p.v_head_stride = alias ? 0 : v.value_head_stride;
    p.t_k = size();
  }

  /// Key row t (all heads) widened into dst.
  void widen_key(index t, float* dst) const {
    const std::size_t elem = r_->v.dtype == storage_type::f32 ? sizeof(float) : sizeof(std::uint16_t);
    const auto* base = static_cast<const unsigned char*>(r_->v.keys) + std::size_t(key_offset(t)) * elem;
    for (index h = 0; h < r_->heads; ++h)
      load_row(r_->v.dtype, base + std::size_t(h * r_->v.key_head_stride) * elem, dst + h * r_->head_dim,
               r_->head_dim);
  }

 private:
  index key_offset(index t) const {
    const paged_kv_view& v = r_->v;
    return index(r_->table(s_)[t / v.block_size]) * v.key_block_stride + (t % v.block_size) * v.key_token_stride;
  }
  index value_offset(index t) const {
    const paged_kv_view& v = r_->v;
    return index(r_->table(s_)[t / v.block_size]) * v.value_block_stride + (t % v.block_size) * v.value_token_stride;
  }
  void write(void* base, index offset, index head_stride, index heads, const float* src) const {
    const std::size_t elem = r_->v.dtype == storage_type::f32 ? sizeof(float) : sizeof(std::uint16_t);
    auto* row = static_cast<unsigned char*>(base) + std::size_t(offset) * elem;
    for (index h = 0; h < heads; ++h)
      store_row(r_->v.dtype, row + std::size_t(h * head_stride) * elem, src + h * r_->head_dim, r_->head_dim);
  }

  const resolved_kv_view* r_;
  index s_, n_;
  bool appended_;
};

/// A batch's sequences over one checked view, indexed like an array of sequence_cache handles; its
/// sizes count the call's new rows once append_batch has written them.
class view_batch {
 public:
  view_batch(const resolved_kv_view& r, const index* cu) : r_(&r), cu_(cu) {}
  view_sequence operator[](index s) const { return view_sequence(*r_, s, cu_[s + 1] - cu_[s], appended_); }
  explicit operator bool() const { return true; }
  void mark_appended() const { appended_ = true; }

 private:
  const resolved_kv_view* r_;
  const index* cu_;
  mutable bool appended_ = false;
};

}  // namespace detail
GATTN_NAMESPACE_END  // namespace gattn
