// Allocation of large streamed buffers (KV caches): 64-byte aligned, and on Linux backed by
// transparent huge pages when the buffer spans at least one.
//
// Why: decode streams the whole cache once per token. With 4 KiB pages the hardware prefetchers
// stop at every page boundary and every page costs a TLB walk; on the benchmark machine of docs/performance.md a plain
// read of a 64 MiB buffer runs at about 16 GB/s on 4 KiB pages and 30 GB/s on 2 MiB pages (the
// kernel's THP mode there is `madvise`, so the request has to be explicit).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <limits>
#include <new>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include "gattn/core/arch_namespace.hpp"
#endif

GATTN_NAMESPACE_BEGIN

/// Bytes of one transparent huge page on x86-64 and AArch64 Linux (4 KiB granule).
inline constexpr std::size_t huge_page_bytes = std::size_t(2) << 20;

/// Allocates `bytes` aligned to 64 bytes, or to a huge page (and advised as huge-page backed)
/// when the buffer is at least one huge page long. Free with std::free. Throws std::bad_alloc.
inline void* allocate_streamed(std::size_t bytes) {
  const bool huge = bytes >= huge_page_bytes;
  const std::size_t align = huge ? huge_page_bytes : 64;
  // rounding up to the alignment must not wrap around to a small size
  if (bytes > std::numeric_limits<std::size_t>::max() - align) throw std::bad_alloc();
  const std::size_t rounded = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded == 0 ? align : rounded);
  if (p == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Advice only: without THP support the call fails and the pages stay 4 KiB.
  if (huge) (void)::madvise(p, rounded, MADV_HUGEPAGE);
#endif
  return p;
}

/// std::allocator-compatible allocator over allocate_streamed (for std::vector caches).
template <class T>
struct streamed_allocator {
  using value_type = T;
  streamed_allocator() noexcept = default;
  template <class U>
  streamed_allocator(const streamed_allocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(allocate_streamed(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t) noexcept { std::free(p); }
  template <class U>
  bool operator==(const streamed_allocator<U>&) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const streamed_allocator<U>&) const noexcept {
    return false;
  }
};

/// A vector whose storage is allocated by allocate_streamed.
template <class T>
using streamed_vector = std::vector<T, streamed_allocator<T>>;

GATTN_NAMESPACE_END  // namespace gattn
