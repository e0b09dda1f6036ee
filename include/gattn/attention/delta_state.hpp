// The recurrent state of a gated delta-rule layer (docs/spec.md §13): per sequence, the fp32 state S
// [H_v, D_k, D_v] and the last K − 1 inputs of the short convolution, for one sequence
// (delta_state) or for many in a pool of fixed-size slots (delta_state_pool), and the handle a
// batched call takes for either (delta_sequence).
//
// Unlike a KV cache, the state does not grow with the sequence: a slot is all a sequence needs, so a
// pool has slots, not blocks; fork and snapshot are plain copies of a slot.
#pragma once

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "gattn/cache/pool_mutex.hpp"
#include "gattn/cache/workspace.hpp"
#include "gattn/core/config.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/memory.hpp"
#include "gattn/core/types.hpp"
#include "gattn/core/validate.hpp"

GATTN_NAMESPACE_BEGIN

/// Sizes of one sequence's state for a layer config (validated first).
struct delta_state_shape {
  index recurrent = 0;      ///< H_v · D_k · D_v floats of S
  index conv_rows = 0;      ///< K − 1 remembered input rows
  index conv_channels = 0;  ///< channels of the convolution, [q | k | v]

  static delta_state_shape of(const delta_config& c) {
    validate(c);
    return {c.state_values(), c.conv_kernel - 1, c.conv_channels()};
  }
  index conv() const { return conv_rows * conv_channels; }
  index total() const { return recurrent + conv(); }
  bool operator==(const delta_state_shape& o) const {
    return recurrent == o.recurrent && conv_rows == o.conv_rows && conv_channels == o.conv_channels;
  }
};

namespace detail {
/// Holds a value that a copy of its owner does not copy (a workspace: scratch, never state).
template <class T>
struct uncopied {
  T value;
  uncopied() = default;
  uncopied(const uncopied&) {}
  uncopied& operator=(const uncopied&) { return *this; }
  uncopied(uncopied&&) noexcept = default;
  uncopied& operator=(uncopied&&) noexcept = default;
};
}  // namespace detail

/// One sequence's state, zero at the start. Copying it is a snapshot (the workspace is not copied);
/// assigning a snapshot back restores it: the continuation is then bit-identical to the one after
/// the snapshot was taken.
class delta_state {
 public:
  delta_state() = default;
  explicit delta_state(const delta_config& c) : shape_(delta_state_shape::of(c)) {
    data_.assign(std::size_t(shape_.total()), 0.0f);
  }
  delta_state(const delta_state&) = default;
  delta_state& operator=(const delta_state&) = default;
  /// A moved-from state is empty (no shape, no values): every call refuses it, as it refuses a
  /// default-constructed one, instead of reading the values it no longer has.
  delta_state(delta_state&& o) noexcept
      : shape_(std::exchange(o.shape_, {})), tokens_(std::exchange(o.tokens_, 0)), data_(std::move(o.data_)) {
    o.data_.clear();
  }
  delta_state& operator=(delta_state&& o) noexcept {
    if (this != &o) {
      shape_ = std::exchange(o.shape_, {});
      tokens_ = std::exchange(o.tokens_, 0);
      data_ = std::move(o.data_);
      o.data_.clear();
    }
    return *this;
  }

  /// False for a default-constructed or moved-from state: it holds no values.
  bool holds_values() const { return !data_.empty() && index(data_.size()) == shape_.total(); }

  const delta_state_shape& shape() const { return shape_; }
  /// Tokens absorbed so far.
  index tokens() const { return tokens_; }
  float* recurrent() { return data_.data(); }
  const float* recurrent() const { return data_.data(); }
  float* conv_tail() { return data_.data() + shape_.recurrent; }
  const float* conv_tail() const { return data_.data() + shape_.recurrent; }
  /// Back to the state before any token.
  void clear() {
    std::fill(data_.begin(), data_.end(), 0.0f);
    tokens_ = 0;
  }
  /// Scratch of the one-sequence calls (prefill/decode) on this state.
  layer_workspace& workspace() { return ws_.value; }

 private:
  friend class delta_sequence;
  friend class delta_state_pool;
  delta_state_shape shape_;
  index tokens_ = 0;
  std::vector<float> data_;
  detail::uncopied<layer_workspace> ws_;
};

/// States of many sequences in `slots` fixed-size slots allocated once. A sequence id carries its
/// slot's generation, so the id of a released sequence is refused even after its slot is reused.
/// Threads may share a pool, each running calls on its own sequences: every operation holds the
/// pool's lock (mutex()); a call updates its sequences' slots without it, since no other thread
/// touches them (one call at a time per sequence; fork, snapshot, restore and release of a
/// sequence must not overlap a call on it).
class delta_state_pool {
 public:
  using sequence_id = std::int64_t;

  delta_state_pool(const delta_config& c, index slots) : shape_(delta_state_shape::of(c)), slots_(slots) {
    detail::require<cache_error>(slots >= 1, "delta_state_pool: slots=", slots, " must be >= 1");
    detail::checked_values<cache_error>(slots, shape_.total(), "delta_state_pool: slots * state values per sequence");
    data_.resize(std::size_t(slots * shape_.total()));
    generation_.assign(std::size_t(slots), 0);
    tokens_.assign(std::size_t(slots), -1);  // -1: the slot is free
    free_.reserve(std::size_t(slots));
    for (index s = slots - 1; s >= 0; --s) free_.push_back(s);
  }

  const delta_state_shape& shape() const { return shape_; }
  index slots() const { return slots_; }
  index free_slots() const {
    const std::lock_guard<std::recursive_mutex> hold(mutex());
    return index(free_.size());
  }
  /// The pool's lock (recursive), held by every operation; see paged_kv_cache::mutex().
  std::recursive_mutex& mutex() const { return mutex_.get(); }

  /// A new sequence with a zero state; cache_error when every slot is taken.
  sequence_id create() {
    const std::lock_guard<std::recursive_mutex> hold(mutex());
    const index s = take_slot("create");
    std::fill_n(slot(s), shape_.total(), 0.0f);
    return id_of(s);
  }
  /// A new sequence whose state is a copy of `parent`'s (prefix reuse, parallel sampling).
  sequence_id fork(sequence_id parent) {
    const std::lock_guard<std::recursive_mutex> hold(mutex());
    const index p = slot_of(parent, "fork");
    const index s = take_slot("fork");
    std::copy_n(slot(p), shape_.total(), slot(s));
    tokens_[std::size_t(s)] = tokens_[std::size_t(p)];
    return id_of(s);
  }
  /// Frees the sequence's slot; its id (and every copy of it) is refused from now on.
  void release(sequence_id id) {
    const std::lock_guard<std::recursive_mutex> hold(mutex());
    const index s = slot_of(id, "release");
    tokens_[std::size_t(s)] = -1;
    ++generation_[std::size_t(s)];
    free_.push_back(s);
  }
  /// A copy of the sequence's state (speculative rollback, prefix caching).
  delta_state snapshot(sequence_id id) const {
    const std::lock_guard<std::recursive_mutex> hold(mutex());
    const index s = slot_of(id, "snapshot");
    delta_state out;
    out.shape_ = shape_;
    out.tokens_ = tokens_[std::size_t(s)];
    out.data_.assign(slot(s), slot(s) + shape_.total());
    return out;
  }
  /// Replaces the sequence's state with `snap` (from snapshot(), or a delta_state of this layer).
  void restore(sequence_id id, const delta_state& snap) {
    const std::lock_guard<std::recursive_mutex> hold(mutex());
    const index s = slot_of(id, "restore");
    detail::require<cache_error>(snap.holds_values(), "delta_state_pool: restore of an empty state "
                                 "(default-constructed or moved from)");
    detail::require<cache_error>(snap.shape() == shape_, "delta_state_pool: restore of a state of another shape (",
                                 snap.shape().recurrent, "+", snap.shape().conv(), " values, the pool's are ",
                                 shape_.recurrent, "+", shape_.conv(), ")");
    std::copy_n(snap.recurrent(), shape_.total(), slot(s));
    tokens_[std::size_t(s)] = snap.tokens();
  }
  index tokens(sequence_id id) const {
    const std::lock_guard<std::recursive_mutex> hold(mutex());
    return tokens_[std::size_t(slot_of(id, "tokens"))];
  }

  /// Throws cache_error unless `id` names a live sequence of this pool.
  void check(sequence_id id) const {
    const std::lock_guard<std::recursive_mutex> hold(mutex());
    (void)slot_of(id, "a call");
  }

 private:
  friend class delta_sequence;
  float* slot(index s) { return data_.data() + s * shape_.total(); }
  const float* slot(index s) const { return data_.data() + s * shape_.total(); }
  sequence_id id_of(index s) const { return (sequence_id(generation_[std::size_t(s)]) << 32) | sequence_id(s); }
  index slot_of(sequence_id id, const char* what) const {
    const index s = index(id & 0xffffffff);
    const bool live = id >= 0 && s < slots_ && tokens_[std::size_t(s)] >= 0 &&
                      std::uint32_t(id >> 32) == generation_[std::size_t(s)];
    detail::require<cache_error>(live, "delta_state_pool: ", what, " with sequence id ", id,
                                 ", which is unknown or released");
    return s;
  }
  index take_slot(const char* what) {
    detail::require<cache_error>(!free_.empty(), "delta_state_pool: ", what, " needs a free slot; all ", slots_,
                                 " are taken (release a sequence or make a larger pool)");
    const index s = free_.back();
    free_.pop_back();
    tokens_[std::size_t(s)] = 0;
    return s;
  }

  delta_state_shape shape_;
  index slots_ = 0;
  streamed_vector<float> data_;
  std::vector<std::uint32_t> generation_;
  std::vector<index> tokens_;
  std::vector<index> free_;
  detail::pool_mutex mutex_;
};

/// One sequence's state in a call: a delta_state, or a sequence of a pool. Non-owning.
class delta_sequence {
 public:
  delta_sequence() = default;
  delta_sequence(delta_state& s) : single_(&s) {}  // NOLINT(google-explicit-constructor)
  delta_sequence(delta_state_pool& pool, delta_state_pool::sequence_id id) : pool_(&pool), id_(id) {}

  bool empty() const { return single_ == nullptr && pool_ == nullptr; }
  bool same_as(const delta_sequence& o) const {
    return single_ ? single_ == o.single_ : (pool_ == o.pool_ && slot() == o.slot());
  }
  /// Throws cache_error unless the handle names a live state of `shape`.
  void check(const delta_state_shape& shape, const char* who, index seq) const {
    detail::require<cache_error>(!empty(), who, ": states[", seq, "] holds no state");
    detail::require<cache_error>(pool_ || single_->holds_values(), who, ": states[", seq,
                                 "] is an empty delta_state (default-constructed or moved from)");
    if (pool_) pool_->check(id_);
    const delta_state_shape& have = single_ ? single_->shape() : pool_->shape();
    detail::require<cache_error>(have == shape, who, ": states[", seq, "] is a state of ", have.recurrent, "+",
                                 have.conv(), " values, the layer's is ", shape.recurrent, "+", shape.conv(),
                                 " (a state of another layer)");
  }
  index tokens() const { return single_ ? single_->tokens_ : pool_->tokens_[std::size_t(slot())]; }
  float* recurrent() const { return single_ ? single_->recurrent() : pool_->slot(slot()); }
  float* conv_tail() const { return recurrent() + (single_ ? single_->shape_ : pool_->shape_).recurrent; }
  void advance(index n) const { (single_ ? single_->tokens_ : pool_->tokens_[std::size_t(slot())]) += n; }

 private:
  index slot() const { return index(id_ & 0xffffffff); }
  delta_state* single_ = nullptr;
  delta_state_pool* pool_ = nullptr;
  delta_state_pool::sequence_id id_ = -1;
};

GATTN_NAMESPACE_END  // namespace gattn
