// Software prefetch that the compiler keeps: one cache line into L2 or L1.
#pragma once

#include "gattn/core/arch_namespace.hpp"

GATTN_NAMESPACE_BEGIN
namespace detail {

/// Prefetches the line holding `p` into L2. Inline asm, because GCC deletes a loop whose body is
/// only __builtin_prefetch (the builtin counts as free of side effects, and C++ loops without side
/// effects may be assumed to terminate and removed: -ffinite-loops).
inline void prefetch_l2(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  __asm__ volatile("prefetcht2 %0" : : "m"(*static_cast<const char*>(p)));
#elif defined(__aarch64__)
  __asm__ volatile("prfm pldl2keep, [%0]" : : "r"(p));
#else
  __builtin_prefetch(p, 0, 1);
#endif
}

/// Prefetches the line holding `p` into L1 (inline asm, as prefetch_l2).
inline void prefetch_l1(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  __asm__ volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#elif defined(__aarch64__)
  __asm__ volatile("prfm pldl1keep, [%0]" : : "r"(p));
#else
  __builtin_prefetch(p, 0, 3);
#endif
}

}  // namespace detail
GATTN_NAMESPACE_END  // namespace gattn
