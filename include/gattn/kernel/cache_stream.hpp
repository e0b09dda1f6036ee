// The K/V cache stream the kernel walks with software prefetch (simd/prefetch.hpp).
#pragma once

#include <algorithm>
#include <cstdint>

#include "gattn/core/types.hpp"
#include "gattn/simd/prefetch.hpp"

GATTN_NAMESPACE_BEGIN
namespace detail {

/// The K or V cache as the kernel reads it: for token t and head h, a slice of d elements (fp32,
/// or 2-byte bf16/f16: strides count elements, lines count bytes) at p + t·token_stride + h·head_stride. Token-major layouts ([T, H, D], gattn's kv_cache) and
/// head-major ones ([H, T, D], Hugging Face's) are both views of this kind.
struct cache_stream {
  const char* base = nullptr;
  index tokens = 0;                         // tokens [0, tokens) exist
  index heads = 1;                          // distinct head slices per token
  index token_bytes = 0, head_bytes = 0;    // strides in bytes
  index slice_bytes = 0;                    // d elements
  bool heads_outer = false;                 // address order: head by head (head-major layouts)
  index ahead = 0;                          // prefetch distance in tokens
  const std::int32_t* table = nullptr;      // paged: token t at block table[t / block_size]
  index block_size = 0, block_bytes = 0;
  index element_bytes = 4;                  // 4 (fp32) or 2 (bf16/f16)

  /// `ahead_bytes` of slices ahead (at least one token). A zero head stride (MLA's one latent
  /// row read by every head) is one slice per token.
  template <class Element>
  cache_stream(const Element* p, index token_stride, index n_heads, index head_stride, index d, index t_k,
               index ahead_bytes) {
    constexpr index size = index(sizeof(Element));
    base = reinterpret_cast<const char*>(p);
    element_bytes = size;
    tokens = t_k;
    heads = head_stride == 0 ? 1 : n_heads;
    token_bytes = token_stride * size;
    head_bytes = head_stride * size;
    slice_bytes = d * size;
    heads_outer = heads > 1 && head_bytes > token_bytes;
    const index per_token = heads * slice_bytes;
    ahead = std::max<index>(1, (ahead_bytes + per_token - 1) / per_token);
  }

  /// The same stream over a paged view (block_table as in sdpa_params, block_stride in elements;
  /// nullptr = contiguous). A paged view is token-major; a head-major one gets no prefetch.
  cache_stream with_blocks(const std::int32_t* block_table, index bsize, index block_stride) const {
    cache_stream c = *this;
    if (block_table == nullptr) return c;
    c.table = block_table;
    c.block_size = bsize;
    c.block_bytes = block_stride * element_bytes;
    if (c.heads_outer) c.tokens = 0;
    return c;
  }
  /// This stream, or (on = false) one that prefetches nothing.
  cache_stream enabled(bool on) const {
    cache_stream c = *this;
    if (!on) c.tokens = 0;
    return c;
  }
  const char* token_address(index t) const {
    if (table == nullptr) return base + t * token_bytes;
    return base + index(table[t / block_size]) * block_bytes + (t % block_size) * token_bytes;
  }

  /// True when the head slices of a token are back to back and fill its row: the slices of
  /// consecutive tokens (of one block, when paged) are then one run of bytes.
  bool dense_rows() const {
    return !heads_outer && token_bytes == heads * slice_bytes && (heads == 1 || head_bytes == slice_bytes);
  }

  /// Calls f(line) for the 64-byte lines of the `bytes` bytes at p.
  template <class F>
  static void lines(const char* p, index bytes, F& f) {
    const auto first = reinterpret_cast<std::uintptr_t>(p) & ~std::uintptr_t(63);
    const auto last = reinterpret_cast<std::uintptr_t>(p) + std::uintptr_t(bytes);
    for (std::uintptr_t a = first; a < last; a += 64) f(reinterpret_cast<const char*>(a));
  }

  /// Calls f(line) for the 64-byte lines of share `part` of `parts` of the slices of the n tokens
  /// from t + ahead (those that exist), taken in address order and merged into runs where they
  /// are contiguous. The shares of all parts cover exactly the lines of those slices, so the work
  /// per call is bounded by the bytes it reads (whatever the layout).
  template <class F>
  void for_each_line(index t, index n, index part, index parts, F&& f) const {
    const index t0 = t + ahead;
    n = std::min(n, tokens - t0);
    if (n <= 0 || parts <= 0) return;
    const index total = n * heads, s_end = (part + 1) * total / parts;
    const index s_begin = part * total / parts;
    if (dense_rows()) {
      // Token rows back to back (within a block, when paged): the share is one run of bytes per
      // block it touches, and no slice is visited. (When the decode path still prefetched by
      // shares, the general walk below cost 4.5 of D1's 25 ns per token and head, bf16 hot in L2;
      // this way about 2.)
      for (index s = s_begin; s < s_end;) {
        const index tok = t0 + s / heads;
        const index piece_tokens = table ? block_size - tok % block_size : n;
        const index piece_end = std::min(s_end, (s / heads + piece_tokens) * heads);
        const char* a = token_address(tok) + (s % heads) * slice_bytes;
        lines(a, (piece_end - s) * slice_bytes, f);
        s = piece_end;
      }
      return;
    }
    const char* run = nullptr;
    index run_len = 0;
    auto flush = [&] { lines(run, run_len, f); };
    // Slice s is (token, head) in address order; step the pair instead of dividing per slice.
    const index inner_count = heads_outer ? n : heads;
    const index inner_bytes = heads_outer ? token_bytes : head_bytes, outer_bytes = heads_outer ? head_bytes : token_bytes;
    index outer = s_begin / inner_count, inner = s_begin % inner_count;
    const char* first_slice = table ? base : base + t0 * token_bytes;  // paged: addresses from the table
    for (index s = s_begin; s < s_end; ++s) {
      const char* a = (table ? token_address(t0 + outer) : first_slice + outer * outer_bytes) + inner * inner_bytes;
      if (++inner == inner_count) {
        inner = 0;
        ++outer;
      }
      if (run != nullptr && a == run + run_len) {
        run_len += slice_bytes;
        continue;
      }
      if (run != nullptr) flush();
      run = a;
      run_len = slice_bytes;
    }
    if (run != nullptr) flush();
  }

  /// Calls f(line) for the lines of head h's slices of the n tokens from t + ahead (those that
  /// exist), token by token: the slices a decode call that reads head h of tokens [t, t + n) reads
  /// `ahead` tokens later, in the order it will read them.
  template <class F>
  void for_each_slice_line(index t, index n, index h, F&& f) const {
    const index first = t + ahead, end = std::min(first + n, tokens);
    for (index u = first; u < end; ++u) lines(token_address(u) + h * head_bytes, slice_bytes, f);
  }

  /// Prefetches (into L2) head h's slices of the n tokens from t + ahead (for_each_slice_line).
  /// The decode path takes this per microkernel call. Prefetching the same bytes as address-ordered
  /// shares of the token group instead (prefetch_share) left D1 slower on the benchmark machine of
  /// docs/performance.md, in bf16 and fp32: by 21-24% in an in-process A/B, by about 10% between
  /// benchmark binaries. The lines then arrive in an order the calls do not read them in.
  void prefetch_slices(index t, index n, index h) const {
    for_each_slice_line(t, n, h, [](const char* line) { prefetch_l2(line); });
  }

  /// Prefetches (into L2), in address order, the lines of tokens [t, t + ahead) that exist: the
  /// start of a range, which no earlier call of that range prefetched. Each call prefetches the
  /// slices it will read `ahead` tokens later, so without this the range's first `ahead` tokens
  /// (64 of D1's bf16 keys) are read in the kernel's order with no prefetch, which the hardware
  /// prefetchers lose (2-3x slower per byte). Measured on the benchmark machine of docs/performance.md, in-process A/B:
  /// D1 t:2 (8 ranges) 0.7-2.4% faster, D1 t:1 1.4%, BD32 bf16 t:1 1.0-1.6% (32 sequences, one
  /// range each); M1 within noise.
  void prefetch_range_start(index t) const {
    for_each_range_start_line(t, [](const char* line) { prefetch_l2(line); });
  }
  /// Calls f(line) for the lines prefetch_range_start(t) prefetches.
  template <class F>
  void for_each_range_start_line(index t, F&& f) const {
    for_each_line(t - ahead, ahead, 0, 1, f);
  }

  /// Prefetches (into L2) share `part` of `parts` of the slices of the n tokens from t + ahead.
  /// Callers that split one token group's work into `parts` calls prefetch an equal,
  /// address-ordered share per call, as they consume the slices `ahead` tokens earlier (a burst
  /// of the whole group would overflow the miss queue). On the benchmark machine of docs/performance.md the hardware
  /// prefetchers lose a stream as soon as the reads interleave slices of different 4 KiB pages,
  /// and a cold D1 then ran at half the read rate.
  void prefetch_share(index t, index n, index part, index parts) const {
    for_each_line(t, n, part, parts, [](const char* line) { prefetch_l2(line); });
  }
};

}  // namespace detail
GATTN_NAMESPACE_END  // namespace gattn
