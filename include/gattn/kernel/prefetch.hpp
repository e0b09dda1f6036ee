// Software prefetch that the compiler keeps, and the K/V cache stream the kernel walks with it.
#pragma once

#include <algorithm>

#include "gattn/core/types.hpp"

namespace gattn {
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

/// A token-major stream of the cache (K or V): a row of `span` bytes every `stride` bytes.
struct cache_stream {
  const char* base = nullptr;
  index stride = 0, span = 0, tokens = 0;  // rows [0, tokens) exist
  index ahead = 0;                          // prefetch distance in tokens

  /// Rows of `heads` heads of d floats; `ahead_bytes` of rows ahead (at least one token).
  cache_stream(const float* p, index token_stride, index heads, index head_stride, index d, index t_k,
               index ahead_bytes) {
    base = reinterpret_cast<const char*>(p);
    stride = token_stride * index(sizeof(float));
    span = ((heads - 1) * head_stride + d) * index(sizeof(float));
    tokens = t_k;
    ahead = std::max<index>(1, (ahead_bytes + span - 1) / span);
  }

  /// Prefetches (into L2) the bytes [from, to) of the rows of tokens t + ahead, t + ahead + 1, ...
  /// taken as one concatenated range. Callers walk the range in address order as they consume
  /// the rows `ahead` tokens earlier: on the BENCH.md machine the hardware prefetchers lose a
  /// stream as soon as the reads interleave rows of different 4 KiB pages (the kernel reads one
  /// head's slice of several tokens at a time), and a cold D1 then ran at half the read rate.
  void prefetch(index t, index from, index to) const {
    const index t0 = t + ahead;
    if (t0 >= tokens) return;
    if (stride == span) {  // rows back to back: one linear range, no per-line bookkeeping
      const index end = std::min(to, (tokens - t0) * span);
      const char* row = base + t0 * stride;
      for (index b = from; b < end; b += 64) prefetch_l2(row + b);
      return;
    }
    index tok = t0 + from / span, off = from % span;
    for (index b = from; b < to && tok < tokens; b += 64) {
      prefetch_l2(base + tok * stride + off);
      off += 64;
      if (off >= span) {
        off -= span;
        ++tok;
      }
    }
  }

  /// Share `part` of `parts` of the rows of n tokens from t (ahead): callers that split one
  /// token group's work into `parts` calls prefetch an equal, address-ordered share per call
  /// (a burst of the whole group would overflow the miss queue).
  void prefetch_share(index t, index n, index part, index parts) const {
    const index bytes = n * span;
    prefetch(t, part * bytes / parts, (part + 1) * bytes / parts);
  }
};

}  // namespace detail
}  // namespace gattn
