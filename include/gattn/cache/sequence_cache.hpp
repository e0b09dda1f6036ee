// The cache of one sequence in a batched layer call (docs/spec.md §11): a handle, so that a layer reaches
// every kind of cache through the same five operations (size, check_room, append, bind, widen_key):
// a contiguous kv_cache, or one sequence of a paged pool (paged_kv_cache).
#pragma once

#include "gattn/cache/kv_cache.hpp"
#include "gattn/cache/paged_kv_cache.hpp"
#include "gattn/core/error.hpp"
#include "gattn/kernel/sdpa_params.hpp"

GATTN_NAMESPACE_BEGIN

/// Non-owning: the cache must outlive every call that uses the handle.
class sequence_cache {
 public:
  sequence_cache() = default;
  /// Implicit, so that `kv_cache*`-holding code can build a batch with `{cache_a, cache_b}`.
  sequence_cache(kv_cache& c) : contiguous_(&c) {}  // NOLINT(google-explicit-constructor)
  /// Sequence `id` of a paged pool (the pool checks the id on every use).
  sequence_cache(paged_kv_cache& pool, paged_kv_cache::sequence_id id) : pool_(&pool), id_(id) {}

  bool empty() const { return contiguous_ == nullptr && pool_ == nullptr; }
  /// Two handles of the same sequence (a batch must not hold one twice).
  bool same_as(const sequence_cache& o) const {
    return contiguous_ ? contiguous_ == o.contiguous_ : (pool_ == o.pool_ && id_ == o.id_);
  }

  index size() const { return contiguous_ ? contiguous_->size() : pool().size(id_); }
  index key_width() const { return contiguous_ ? contiguous_->key_width() : pool().key_width(); }
  index value_width() const { return contiguous_ ? contiguous_->value_width() : pool().value_width(); }
  storage_type storage() const { return contiguous_ ? contiguous_->storage() : pool().storage(); }
  void check_room(index n) const { contiguous_ ? contiguous_->check_room(n) : pool().check_room(id_, n); }
  void append(const float* k, index k_stride, const float* v, index v_stride, index n) {
    if (contiguous_) contiguous_->append(k, k_stride, v, v_stride, n);
    else const_cast<paged_kv_cache&>(pool()).append(id_, k, k_stride, v, v_stride, n);
  }
  /// The paged pool this sequence lives in (nullptr: a contiguous cache), and the free blocks of that
  /// pool that appending n tokens takes (a batch checks their sum per pool before any append).
  const paged_kv_cache* paged_pool() const { return pool_; }
  index blocks_needed(index n) const { return pool_ ? pool_->blocks_needed(id_, n) : 0; }
  /// K/V fields and t_k of p (see kv_cache::bind, paged_kv_cache::bind).
  void bind(sdpa_params& p) const { contiguous_ ? contiguous_->bind(p) : pool().bind(id_, p); }
  /// Key row t widened to floats (MLA's expanded form re-expands the stored latent).
  void widen_key(index t, float* dst) const {
    contiguous_ ? contiguous_->widen_key(t, dst) : pool().widen_key(id_, t, dst);
  }

 private:
  const paged_kv_cache& pool() const {
    detail::require<cache_error>(pool_ != nullptr, "sequence_cache: the handle holds no cache");
    return *pool_;
  }
  kv_cache* contiguous_ = nullptr;
  paged_kv_cache* pool_ = nullptr;
  paged_kv_cache::sequence_id id_ = -1;
};

GATTN_NAMESPACE_END  // namespace gattn
