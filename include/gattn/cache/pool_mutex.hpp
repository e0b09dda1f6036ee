// The lock of a pool of sequences (paged_kv_cache, delta_state_pool), which threads may share.
#pragma once

#include <memory>
#include <mutex>
#include "gattn/core/arch_namespace.hpp"

GATTN_NAMESPACE_BEGIN namespace detail {

/// A recursive mutex that a copy or move of its owner does not take along: each pool object has a
/// lock of its own, and the lock's state is never copied. Recursive, so that an engine holding a
/// pool's lock across several operations can call them (each takes the lock again).
struct pool_mutex {
  std::unique_ptr<std::recursive_mutex> m = std::make_unique<std::recursive_mutex>();
  pool_mutex() = default;
  pool_mutex(const pool_mutex&) : pool_mutex() {}
  pool_mutex(pool_mutex&&) noexcept : pool_mutex() {}
  pool_mutex& operator=(const pool_mutex&) { return *this; }
  pool_mutex& operator=(pool_mutex&&) noexcept { return *this; }
  std::recursive_mutex& get() const { return *m; }
};

}  GATTN_NAMESPACE_END  // namespace gattn::detail
