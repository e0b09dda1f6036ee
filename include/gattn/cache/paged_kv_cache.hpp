// Paged KV cache (docs/spec.md §11): K/V rows of many sequences in one pool of fixed-size blocks, a block
// table per sequence, fork with reference-counted sharing and copy-on-write of a shared partly
// filled last block.
//
// Layout: block b holds `block_size` tokens; within a block, token t's key row is key_width
// elements at keys + b·block_size·key_width + t·key_width, exactly a contiguous kv_cache's rows
// (GQA: [H_kv, D] per token; MLA: the latent [d_c + d_rope]). K and V live in separate pools so
// that each is dense by itself. Element type f32/bf16/f16 with kv_cache's rounding (nearest even)
// and f16 range rule.
//
// Allocation: the pool, the reference counts and the free list are allocated at construction;
// each sequence's block table reserves num_blocks entries when the sequence is created (or forked)
// and the table storage of a released slot is kept for its reuse, so append never allocates.
//
// Threads: every operation holds the pool's lock (a recursive mutex), so threads may share a pool,
// each calling layers on its own sequences. A call reads its sequences' block tables and blocks
// without the lock: no other thread changes them meanwhile, because every change to a sequence's
// table is an append to that sequence (one call at a time per sequence), its fork's copy-on-write
// (which leaves the shared block to the parent) or its release.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "gattn/cache/pool_mutex.hpp"
#include "gattn/core/config.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/memory.hpp"
#include "gattn/core/types.hpp"
#include "gattn/core/validate.hpp"
#include "gattn/kernel/sdpa_params.hpp"
#include "gattn/simd/convert.hpp"

GATTN_NAMESPACE_BEGIN

class paged_kv_cache {
 public:
  /// A sequence handle: its slot in the low 32 bits, the slot's generation above them, so that the
  /// handle of a released sequence is refused even after create() reuses its slot. Handles of the
  /// first generation equal their slot (0, 1, 2, ...).
  using sequence_id = std::int64_t;

  /// value_width 0: keys only (MLA's latent; bind() makes V alias K).
  /// Throws config_error on non-positive sizes, cache_error when the pool cannot be allocated.
  paged_kv_cache(index num_blocks, index block_size, index key_width, index value_width,
                 storage_type type = storage_type::f32)
      : paged_kv_cache(num_blocks, block_size, key_width, value_width, 0, type) {}
  /// A GQA pool (rows of H_kv·D, element type c.kv_cache_type), c validated first.
  paged_kv_cache(const gqa_config& c, index num_blocks, index block_size)
      : paged_kv_cache(num_blocks, block_size, validated(c).kv_heads * c.head_dim, c.kv_heads * c.head_dim,
                       c.head_dim, c.kv_cache_type) {}
  /// An MLA latent pool (rows of d_c + d_rope, no value rows), c validated first.
  paged_kv_cache(const mla_config& c, index num_blocks, index block_size)
      : paged_kv_cache(num_blocks, block_size, validated(c).kv_lora_rank + c.qk_rope_head_dim, 0, 0,
                       c.kv_cache_type) {}

  index block_size() const { return block_size_; }
  index num_blocks() const { return num_blocks_; }
  index free_blocks() const {
    const std::lock_guard<std::recursive_mutex> hold(mutex());
    return index(free_.size());
  }
  index key_width() const { return key_width_; }
  index value_width() const { return value_width_; }
  storage_type storage() const { return type_; }

  /// The pool's lock, which every operation holds. Layers hold it while they append a batch's rows
  /// (so that the room checked is the room used); an engine may hold it (std::lock_guard) for
  /// several operations that no other thread may come between. Recursive: operations called while
  /// holding it take it again.
  std::recursive_mutex& mutex() const { return mutex_.get(); }

  /// A new empty sequence (slots of released sequences are reused, under a new generation).
  sequence_id create() {
    const std::lock_guard<std::recursive_mutex> hold(mutex());
    const index s = new_slot();
    seqs_[std::size_t(s)].live = true;
    return id_of(s);
  }
  /// A new sequence holding the parent's tokens, sharing its blocks (reference counts).
  sequence_id fork(sequence_id parent) {
    const std::lock_guard<std::recursive_mutex> hold(mutex());
    const index p = slot_of(parent);
    const index s = new_slot();
    sequence& child = seqs_[std::size_t(s)];
    const sequence& from = seqs_[std::size_t(p)];  // after new_slot: seqs_ may have grown
    child.table.assign(from.table.begin(), from.table.end());
    child.size = from.size;
    child.live = true;
    for (const std::int32_t b : child.table) ++refs_[std::size_t(b)];
    return id_of(s);
  }
  /// Drops the sequence's references; blocks nobody references return to the pool. The id (and
  /// every copy of it) is refused from now on, also once create() has reused its slot.
  void release(sequence_id id) {
    const std::lock_guard<std::recursive_mutex> hold(mutex());
    const index s = slot_of(id);
    sequence& q = seqs_[std::size_t(s)];
    for (const std::int32_t b : q.table)
      if (--refs_[std::size_t(b)] == 0) free_.push_back(b);
    q.table.clear();
    q.size = 0;
    q.live = false;
    ++q.generation;
    free_slots_.push_back(s);
  }
  /// Tokens held by s.
  index size(sequence_id s) const {
    const std::lock_guard<std::recursive_mutex> hold(mutex());
    return seqs_[std::size_t(slot_of(s))].size;
  }
  /// Reference count of the b-th block of s's table (tests, diagnostics).
  index block_references(sequence_id s, index b) const {
    const std::lock_guard<std::recursive_mutex> hold(mutex());
    const sequence& q = seqs_[std::size_t(slot_of(s))];
    detail::require<cache_error>(b >= 0 && b < index(q.table.size()), "paged_kv_cache: block ", b, " of sequence ", s,
                                 " does not exist (it has ", q.table.size(), ")");
    return refs_[std::size_t(q.table[std::size_t(b)])];
  }

  /// Free blocks that appending n tokens to s takes: new blocks, plus one for the copy of a shared
  /// partly filled last block. A batch sums this over its sequences of one pool (an upper bound:
  /// two sequences sharing a last block need one copy, not two).
  index blocks_needed(sequence_id s, index n) const {
    const std::lock_guard<std::recursive_mutex> hold(mutex());
    const index slot = slot_of(s);
    detail::require<cache_error>(n >= 0, "paged_kv_cache: appending n=", n, " tokens to sequence ", s);
    return blocks_needed_unchecked(slot, n);
  }

  /// Throws cache_error unless n more tokens fit in the free blocks, counting new blocks and the
  /// copy of a shared partly filled last block.
  void check_room(sequence_id s, index n) const {
    const std::lock_guard<std::recursive_mutex> hold(mutex());
    const index slot = slot_of(s);
    detail::require<cache_error>(n >= 0, "paged_kv_cache: appending n=", n, " tokens to sequence ", s);
    const index need = blocks_needed_unchecked(slot, n);
    detail::require<cache_error>(need <= free_blocks(), "paged_kv_cache: appending ", n, " tokens to sequence ", s,
                                 " (", seqs_[std::size_t(slot)].size, " tokens) needs ", need, " free blocks of ",
                                 block_size_, " tokens, the pool has ", free_blocks(), " of ", num_blocks_);
  }

  /// Appends n tokens to s like kv_cache::append (key row t at k + t·k_stride, value row at
  /// v + t·v_stride, rounded to the element type). Every check (ids, pool room, f16 range) is made
  /// before any block is taken or anything is written, so a refused call changes nothing.
  void append(sequence_id s, const float* k, index k_stride, const float* v, index v_stride, index n) {
    const std::lock_guard<std::recursive_mutex> hold(mutex());
    check_room(s, n);
    detail::require<shape_error>(n == 0 || (k != nullptr && (value_width_ == 0 || v != nullptr)),
                                 "paged_kv_cache: append of ", n, " tokens without ", k == nullptr ? "key" : "value",
                                 " rows");
    const index slot = slot_of(s);
    if (type_ == storage_type::f16)
      for (index t = 0; t < n; ++t) {
        check_f16_row(k + t * k_stride, key_width_, "key", slot, t);
        if (value_width_ > 0 && v != nullptr) check_f16_row(v + t * v_stride, value_width_, "value", slot, t);
      }
    if (n == 0) return;
    unshare_last_block(slot);
    sequence& q = seqs_[std::size_t(slot)];
    for (index t = 0; t < n; ++t, ++q.size) {
      if (q.size % block_size_ == 0) q.table.push_back(take_block());  // within the reserved capacity
      const index block = q.table[std::size_t(q.size / block_size_)], row = q.size % block_size_;
      write_row(keys_, key_bits_, key_width_, block, row, k + t * k_stride);
      if (value_width_ > 0 && v != nullptr) write_row(values_, value_bits_, value_width_, block, row, v + t * v_stride);
    }
  }

  /// Fills p's K/V views for s: kv_type, k/v (f32) or k_bits/v_bits, token and block strides, the
  /// block table and t_k = size(s). GQA pools (from a gqa_config) also set the head strides (D);
  /// keys-only pools make V alias K (MLA's latent) with head strides 0; pools made from raw widths
  /// leave the head strides as the caller set them. Valid until the next append to s or release of
  /// s (the table may be rewritten by copy-on-write); other sequences' operations leave it valid.
  void bind(sequence_id s, sdpa_params& p) const {
    const std::lock_guard<std::recursive_mutex> hold(mutex());
    const sequence& q = seqs_[std::size_t(slot_of(s))];
    const bool alias = value_width_ == 0;
    p.kv_type = type_;
    p.k = type_ == storage_type::f32 ? keys_.data() : nullptr;
    p.v = type_ == storage_type::f32 ? (alias ? keys_.data() : values_.data()) : nullptr;
    p.k_bits = type_ == storage_type::f32 ? nullptr : key_bits_.data();
    p.v_bits = type_ == storage_type::f32 ? nullptr : (alias ? key_bits_.data() : value_bits_.data());
    p.k_token_stride = key_width_;
    p.v_token_stride = alias ? key_width_ : value_width_;
    p.k_block_stride = block_size_ * key_width_;
    p.v_block_stride = block_size_ * (alias ? key_width_ : value_width_);
    p.block_table = q.table.data();
    p.block_size = block_size_;
    if (alias) p.k_head_stride = p.v_head_stride = 0;
    else if (head_dim_ > 0) p.k_head_stride = p.v_head_stride = head_dim_;
    p.t_k = q.size;
  }

  /// Widens token t's key (value) row of s into dst, whatever the element type.
  void widen_key(sequence_id s, index t, float* dst) const { widen_row(s, t, keys_, key_bits_, key_width_, dst); }
  void widen_value(sequence_id s, index t, float* dst) const {
    detail::require<cache_error>(value_width_ > 0, "paged_kv_cache: widen_value on a keys-only (MLA latent) pool");
    widen_row(s, t, values_, value_bits_, value_width_, dst);
  }

 private:
  struct sequence {
    std::vector<std::int32_t> table;
    index size = 0;
    std::uint32_t generation = 0;  ///< of the slot: bumped by release
    bool live = false;
  };

  paged_kv_cache(index num_blocks, index block_size, index key_width, index value_width, index head_dim,
                 storage_type type)
      : num_blocks_(num_blocks), block_size_(block_size), key_width_(key_width), value_width_(value_width),
        head_dim_(head_dim), type_(type) {
    detail::require<config_error>(type != storage_type::f8_e4m3, "paged_kv_cache: f8_e4m3 is not a cache type");
    detail::require<config_error>(num_blocks > 0 && num_blocks <= 0x7fffffff, "paged_kv_cache: num_blocks=",
                                  num_blocks, " must be in [1, 2^31)");
    detail::require<config_error>(block_size > 0, "paged_kv_cache: block_size=", block_size, " must be > 0");
    detail::require<config_error>(key_width > 0 && value_width >= 0, "paged_kv_cache: key_width=", key_width,
                                  " value_width=", value_width, " are invalid");
    const index tokens = detail::checked_values<cache_error>(num_blocks, block_size, "paged_kv_cache: num_blocks * block_size");
    const index n_keys = detail::checked_values<cache_error>(tokens, key_width, "paged_kv_cache: tokens * key_width");
    const index n_values = detail::checked_values<cache_error>(tokens, value_width, "paged_kv_cache: tokens * value_width");
    try {
      if (type == storage_type::f32) {
        keys_.resize(std::size_t(n_keys));
        values_.resize(std::size_t(n_values));
      } else {
        key_bits_.resize(std::size_t(n_keys));
        value_bits_.resize(std::size_t(n_values));
      }
      refs_.assign(std::size_t(num_blocks), 0);
      free_.reserve(std::size_t(num_blocks));
      for (index b = num_blocks; b-- > 0;) free_.push_back(std::int32_t(b));  // block 0 is taken first
    } catch (const std::bad_alloc&) {
      throw cache_error(detail::concat("paged_kv_cache: cannot allocate num_blocks=", num_blocks, " blocks of block_size=",
                                       block_size, " tokens of key_width=", key_width, " and value_width=",
                                       value_width, " (", to_string(type), ")"));
    }
  }

  /// The slot of a live sequence's id; cache_error for an id that is unknown, or whose sequence was
  /// released (its generation is past).
  index slot_of(sequence_id id) const {
    const index s = index(id & 0xffffffff);
    const bool live = id >= 0 && std::size_t(s) < seqs_.size() && seqs_[std::size_t(s)].live &&
                      std::uint32_t(id >> 32) == seqs_[std::size_t(s)].generation;
    if (!live) refuse_id(id);
    return s;
  }
  [[noreturn]] void refuse_id(sequence_id id) const {
    const index s = index(id & 0xffffffff);
    // An id of a past generation of an existing slot was released (the slot is reused or empty).
    if (id >= 0 && std::size_t(s) < seqs_.size() && std::uint32_t(id >> 32) < seqs_[std::size_t(s)].generation)
      throw cache_error(detail::concat("paged_kv_cache: sequence id ", id, " (slot ", s, ", generation ", id >> 32,
                                       ") was released; the slot now holds generation ", seqs_[std::size_t(s)].generation));
    throw cache_error(detail::concat("paged_kv_cache: sequence id ", id, " is unknown or released"));
  }
  sequence_id id_of(index s) const { return (sequence_id(seqs_[std::size_t(s)].generation) << 32) | sequence_id(s); }
  index new_slot() {
    if (!free_slots_.empty()) {
      const index s = free_slots_.back();
      free_slots_.pop_back();
      return s;
    }
    detail::require<cache_error>(seqs_.size() < 0x7fffffff, "paged_kv_cache: 2^31 sequences exist at once");
    seqs_.emplace_back();
    seqs_.back().table.reserve(std::size_t(num_blocks_));
    return index(seqs_.size() - 1);
  }
  index blocks_needed_unchecked(index s, index n) const {
    const sequence& q = seqs_[std::size_t(s)];
    if (n == 0) return 0;
    const index have = (q.size + block_size_ - 1) / block_size_;
    const index want = (q.size + n + block_size_ - 1) / block_size_;
    return want - have + (shared_partial_last(q) ? 1 : 0);
  }
  bool shared_partial_last(const sequence& q) const {
    return q.size % block_size_ != 0 && refs_[std::size_t(q.table.back())] > 1;
  }
  std::int32_t take_block() {
    const std::int32_t b = free_.back();
    free_.pop_back();
    refs_[std::size_t(b)] = 1;
    return b;
  }
  // Copy-on-write: the first write into a shared partly filled block goes to a private copy.
  void unshare_last_block(index s) {
    sequence& q = seqs_[std::size_t(s)];
    if (!shared_partial_last(q)) return;
    const std::int32_t old = q.table.back(), copy = take_block();
    copy_block(keys_, key_bits_, key_width_, old, copy);
    copy_block(values_, value_bits_, value_width_, old, copy);
    --refs_[std::size_t(old)];
    q.table.back() = copy;
  }
  void copy_block(streamed_vector<float>& f, streamed_vector<std::uint16_t>& b, index width, index from, index to) {
    const std::size_t n = std::size_t(block_size_ * width);
    if (n == 0) return;
    if (type_ == storage_type::f32) std::memcpy(f.data() + std::size_t(to) * n, f.data() + std::size_t(from) * n, n * sizeof(float));
    else std::memcpy(b.data() + std::size_t(to) * n, b.data() + std::size_t(from) * n, n * sizeof(std::uint16_t));
  }
  std::size_t row_offset(index block, index row, index width) const {
    return std::size_t((block * block_size_ + row) * width);
  }
  void write_row(streamed_vector<float>& f, streamed_vector<std::uint16_t>& b, index width, index block, index row,
                 const float* src) {
    const std::size_t at = row_offset(block, row, width);
    if (type_ == storage_type::f32) std::copy_n(src, width, f.data() + at);
    else if (type_ == storage_type::bf16) simd::narrow_bf16(src, b.data() + at, width);
    else simd::narrow_f16(src, b.data() + at, width);
  }
  void widen_row(sequence_id s, index t, const streamed_vector<float>& f, const streamed_vector<std::uint16_t>& b,
                 index width, float* dst) const {
    const std::lock_guard<std::recursive_mutex> hold(mutex());
    const sequence& q = seqs_[std::size_t(slot_of(s))];
    detail::require<cache_error>(t >= 0 && t < q.size, "paged_kv_cache: token ", t, " of sequence ", s,
                                 " does not exist (size ", q.size, ")");
    const std::size_t at = row_offset(q.table[std::size_t(t / block_size_)], t % block_size_, width);
    if (type_ == storage_type::f32) std::copy_n(f.data() + at, width, dst);
    else if (type_ == storage_type::bf16) simd::widen_bf16(b.data() + at, dst, width);
    else simd::widen_f16(b.data() + at, dst, width);
  }
  void check_f16_row(const float* x, index width, const char* side, index s, index t) const {
    const index c = simd::find_f16_out_of_range(x, width);
    detail::require<cache_error>(c == width, "paged_kv_cache: ", side, " channel ", c, " of token ",
                                 seqs_[std::size_t(s)].size + t, " of sequence ", s, " (row ", t, " of this call) is ",
                                 c < width ? x[c] : 0.0f,
                                 ", outside the f16 range (|v| <= 65504); nothing of the call was appended");
  }

  index num_blocks_ = 0, block_size_ = 0, key_width_ = 0, value_width_ = 0, head_dim_ = 0;
  storage_type type_ = storage_type::f32;
  streamed_vector<float> keys_, values_;
  streamed_vector<std::uint16_t> key_bits_, value_bits_;
  std::vector<index> refs_;              // per block
  std::vector<std::int32_t> free_;       // free blocks (a stack)
  std::vector<sequence> seqs_;           // by slot
  std::vector<index> free_slots_;        // released slots, reused
  detail::pool_mutex mutex_;
};

GATTN_NAMESPACE_END  // namespace gattn
