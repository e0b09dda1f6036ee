// Scratch of the fused kernel: the call plan and the layout of a work unit's scratch.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <type_traits>
#include <utility>

#include "gattn/core/config.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/scratch_span.hpp"
#include "gattn/core/types.hpp"
#include "gattn/simd/arch.hpp"
#include "gattn/kernel/kernel_traits.hpp"
#include "gattn/simd/simd.hpp"
#include "gattn/kernel/sdpa_params.hpp"

GATTN_NAMESPACE_BEGIN
namespace detail {

/// Per-thread scratch of one work unit, one block (64-byte aligned); layout in floats:
///   qt    [d_qk][M_pad]      scaled Qᵀ of the unit
///   st    [Bc][M_pad]        Sᵀ tile, overwritten by Pᵀ
///   o     [M_pad][dv_pad]    unnormalised output accumulator
///   vpack [Bc][dv_pad]       V tile zero-padded to dv_pad (when d_v % W != 0 or K/V are bf16/f16)
///   kpack [Bc][d_qk]         K tile widened to fp32 (only when K/V are bf16/f16)
///   m, l, alpha, lim [M_pad] per-row softmax state, rescale factors, visible-key counts
///   pk    [Bc/2][M_pad][2] bf16 key pairs of P (only for bf16 products, kernel/prefill_bf16.hpp,
///         which also keeps its bf16 Q, K and V pairs in qt, kpack and vpack)
/// Carved from the worker's slot of the call's scratch (sdpa_params::scratch), so concurrent work
/// units never share it.
struct unit_scratch {
  float *qt, *st, *o, *vpack, *kpack, *m, *l, *alpha, *lim, *pk;
};

inline index round_up(index x, index m) { return (x + m - 1) / m * m; }

/// Static plan of one call (all sizes derived from the params and the Arch traits).
struct sdpa_plan {
  index group = 1;      // G
  index br = 1;         // queries per unit
  index unit_rows = 1;  // G·br, the rows of a full unit
  index rows_pad = 1;   // rounded up to W
  index dv_pad = 1;     // d_v rounded up to W
  index q_blocks = 0;   // ceil(t_q / br)
  index units = 0;      // kv_heads · q_blocks
  index splits = 1;     // key splits per unit (flash-decoding)
  index split_len = 0;  // keys per split (multiple of Bc)
  bool pack_v = false;
  bool pack_k = false;      // bf16/f16 K/V: each tile is widened into the scratch as it is read
  bool interleave = false;  // decode: a task runs every unit over its key split, tile by tile
  bool bf16_products = false;  // numerics fast: Q·Kᵀ and P·V on bf16 pairs (kernel/prefill_bf16.hpp)
  std::size_t scratch_floats = 0;
};

template <class Arch>
inline sdpa_plan make_plan(const sdpa_params& p, int threads) {
  using tr = kernel_traits<Arch>;
  sdpa_plan pl;
  pl.group = p.q_heads / p.kv_heads;
  pl.bf16_products = p.products == numerics::fast;
  // bf16 products round each K/V tile once per unit: 4x the rows spread that over 4x the work
  // (P1 on Zen 5: about 5% faster than 2x, which was about 10% faster than 1x).
  pl.br = std::max<index>(1, (pl.bf16_products ? 4 : 1) * tr::target_rows / pl.group);
  pl.br = std::min<index>(pl.br, std::max<index>(1, p.t_q));
  pl.unit_rows = pl.group * pl.br;
  pl.rows_pad = round_up(pl.unit_rows, tr::width);
  pl.dv_pad = round_up(p.d_v, tr::width);
  pl.q_blocks = (p.t_q + pl.br - 1) / pl.br;
  pl.units = p.kv_heads * pl.q_blocks;
  // A bf16/f16 cache is widened tile by tile into the unit's scratch (never a widened copy of
  // the whole cache); fp32 K is read in place and V packed only for a ragged d_v.
  pl.pack_k = p.kv_type != storage_type::f32 || pl.bf16_products;
  pl.pack_v = (p.d_v % tr::width) != 0 || pl.pack_k;
  // Decode (few rows per unit, long caches): flash-decoding over key splits, and interleaved
  // units. One head's rows are a page apart in a [T, H_kv, D] cache, so a task runs *every* unit
  // on each key tile in turn and prefetches the next tile of all heads: the cache streams
  // contiguously at memory bandwidth instead of one page-strided pass per head.
  // Prefill with few units and many threads: split the keys only to feed the threads.
  pl.splits = 1;
  pl.split_len = std::max<index>(p.t_k, 1);
  pl.interleave = pl.unit_rows <= 2 * tr::width;
  index want = 1;
  if (pl.interleave) want = threads > 1 ? 2 * threads : 1;
  else if (threads > 1 && pl.units < 2 * threads) want = (2 * threads + pl.units - 1) / pl.units;
  want = std::min(want, p.t_k / tr::min_split_keys);
  if (want > 1) {
    pl.split_len = round_up((p.t_k + want - 1) / want, tr::block_keys);
    pl.splits = (p.t_k + pl.split_len - 1) / pl.split_len;
  }
  const index bc = tr::block_keys;
  pl.scratch_floats = std::size_t(p.d_qk * pl.rows_pad + bc * pl.rows_pad + pl.rows_pad * pl.dv_pad +
                                  (pl.pack_v ? bc * pl.dv_pad : 0) + (pl.pack_k ? bc * p.d_qk : 0) +
                                  4 * pl.rows_pad) +
                      9 * 16;  // each array rounded up to 16 floats
  if (pl.bf16_products) pl.scratch_floats += std::size_t(bc / 2 * pl.rows_pad + 16);
  return pl;
}

inline unit_scratch carve(float* base, const sdpa_params& p, const sdpa_plan& pl, index bc) {
  auto take = [&base](index n) {
    float* r = base;
    base += round_up(n, 16);  // keep every array 64-byte aligned
    return r;
  };
  unit_scratch s{};
  s.qt = take(p.d_qk * pl.rows_pad);
  s.st = take(bc * pl.rows_pad);
  s.o = take(pl.rows_pad * pl.dv_pad);
  s.vpack = pl.pack_v ? take(bc * pl.dv_pad) : nullptr;
  s.kpack = pl.pack_k ? take(bc * p.d_qk) : nullptr;
  s.m = take(pl.rows_pad);
  s.l = take(pl.rows_pad);
  s.alpha = take(pl.rows_pad);
  s.lim = take(pl.rows_pad);
  s.pk = pl.bf16_products ? take(bc / 2 * pl.rows_pad) : nullptr;
  return s;
}

/// Calls f(std::integral_constant<int, n>) for a runtime n in [1, N].
template <int N, class F>
inline void static_switch(int n, F&& f) {
  if constexpr (N >= 1) {
    if (n == N) {
      f(std::integral_constant<int, N>{});
      return;
    }
    static_switch<N - 1>(n, std::forward<F>(f));
  }
}

}  // namespace detail
GATTN_NAMESPACE_END  // namespace gattn
