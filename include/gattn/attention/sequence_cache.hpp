// The cache of one sequence in a batched layer call (SPEC §11): a handle, so that a layer reaches
// every kind of cache through the same five operations (size, check_room, append, bind, widen_key).
// Today it holds a contiguous kv_cache; a paged pool's sequence plugs in here.
#pragma once

#include "gattn/attention/kv_cache.hpp"
#include "gattn/core/error.hpp"
#include "gattn/kernel/sdpa_params.hpp"

namespace gattn {

/// Non-owning: the cache must outlive every call that uses the handle.
class sequence_cache {
 public:
  sequence_cache() = default;
  /// Implicit, so that `kv_cache*`-holding code can build a batch with `{cache_a, cache_b}`.
  sequence_cache(kv_cache& c) : contiguous_(&c) {}  // NOLINT(google-explicit-constructor)

  bool empty() const { return contiguous_ == nullptr; }
  /// Two handles of the same sequence (a batch must not hold one twice).
  bool same_as(const sequence_cache& o) const { return contiguous_ == o.contiguous_; }

  index size() const { return cache().size(); }
  index key_width() const { return cache().key_width(); }
  index value_width() const { return cache().value_width(); }
  storage_type storage() const { return cache().storage(); }
  void check_room(index n) const { cache().check_room(n); }
  void append(const float* k, index k_stride, const float* v, index v_stride, index n) {
    contiguous_->append(k, k_stride, v, v_stride, n);
  }
  /// K/V fields and t_k of p (see kv_cache::bind).
  void bind(sdpa_params& p) const { cache().bind(p); }
  /// Key row t widened to floats (MLA's expanded form re-expands the stored latent).
  void widen_key(index t, float* dst) const { cache().widen_key(t, dst); }

 private:
  const kv_cache& cache() const {
    detail::require<cache_error>(contiguous_ != nullptr, "sequence_cache: the handle holds no cache");
    return *contiguous_;
  }
  kv_cache* contiguous_ = nullptr;
};

}  // namespace gattn
