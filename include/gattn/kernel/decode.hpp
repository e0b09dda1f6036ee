// The decode path of the fused kernel (few queries, long caches): flash-decoding over key splits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>


#include "gattn/core/config.hpp"
#include "gattn/core/cpu.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/execution.hpp"
#include "gattn/core/scratch_span.hpp"
#include "gattn/core/types.hpp"
#include "gattn/kernel/cache_stream.hpp"
#include "gattn/kernel/decode_bf16_dot.hpp"
#include "gattn/kernel/epilogue.hpp"
#include "gattn/kernel/kernel_traits.hpp"
#include "gattn/kernel/microkernels.hpp"
#include "gattn/kernel/online_softmax.hpp"
#include "gattn/kernel/prefill_unit.hpp"
#include "gattn/kernel/scratch.hpp"
#include "gattn/kernel/sdpa_params.hpp"
#include "gattn/simd/arch.hpp"
#include "gattn/simd/convert.hpp"
#include "gattn/simd/simd.hpp"
#include "gattn/simd/vector_ops.hpp"

GATTN_NAMESPACE_BEGIN
namespace detail {

// ---- Decode path (few queries, long caches) ----------------------------------------------------
// Per KV head r the R = G·t_q query rows (row m = query m / G, head r·G + m % G) are few, so the
// scores are dot products along d: a microkernel keeps RB rows × KB keys of accumulators in
// registers, streams the KB key rows once (the RB query rows come from L1) and reduces the RB·KB
// accumulators with one haddp. Keys go in blocks of Bc: for each group of KB tokens the kernel
// visits every KV head, so a [T, H_kv, D] cache is read token group by token group. Then an
// online softmax per row along the block (scores stored [row][key]) and O = alpha·O + P·V, again
// token group by token group across all KV heads, with O in L1/L2 scratch. Keys are split across
// threads (flash-decoding, 4 splits per thread, dynamic schedule); the partial (O, m, l) of the
// splits are merged in split order (deterministic for a fixed thread count).
// Memory (measured on the benchmark machine of docs/performance.md): the hardware prefetchers keep the full read rate
// only while the demand loads ascend line by line. A cold 64 MiB read with 4 FMAs per line ran at
// 26 GB/s in address order, 16 GB/s reading 4 pages 512 B at a time (the order of a [T, H, D]
// cache here: each microkernel call reads one head's slice of several tokens), 10 GB/s reading
// 4 rows of 512 B interleaved inside one page, 16-23 GB/s alternating two sequential buffers every
// 16 KiB (K then V). Register blocking needs such interleaving (O stays in registers only while
// a head's slice of several tokens is read), so each microkernel call prefetches the slices it
// will read `ahead` tokens (128 KiB) later (cache_stream::prefetch_slices): D1 went from about 5
// ms to about 3.5 ms at one thread (AMD Zen 5) with address-ordered shares of each token group,
// and another 10-24% (by the measure) with each call's own slices. On Intel Emerald Rapids the (share)
// prefetch cost time (D1 fp32 4.3-4.9 ms with it, 3.2-3.4 without: its prefetchers already keep
// the rate), so it runs where it paid (core/cpu.hpp, decode_prefetch_wanted). Reading strictly in address order instead
// (scores token by token, P·V with O in L1) was slower: O's loads and stores made P·V
// compute-bound (1.9 ms for V alone, hot). M1 does 15 flop per cache byte: in fp32 it is bounded
// by the FMA rate (limits/fma), not by the read bandwidth.

/// Plan of the decode path.
struct decode_plan {
  index group = 1;          // G
  index rows_per_head = 1;  // R = G·t_q
  index rows_total = 1;     // H_kv·R
  index ldq = 1;         // row stride of the packed scaled Q
  index dv_pad = 1;
  index bc = 32;         // keys per block
  index qk_keys = 4;     // keys per QK microkernel call
  index splits = 1, split_len = 0, max_lim = 0;
  bool pack_v = false;
  bool bf16_dot = false;  // docs/spec.md §10 fast numerics with bf16 dot products (decode_bf16_dot.hpp)
  bool prefetch = true;   // software prefetch through K/V (core/cpu.hpp: not on Intel)
  std::size_t scratch_floats = 0;
  std::size_t scratch_bits = 0;  // bf16 scratch (bf16_dot): scale·q and the block's probabilities
};

/// Accumulators of one QK microkernel call (RB·KB): 16 zmm on AVX-512, 8 elsewhere.
template <class Arch>
inline constexpr int decode_acc = kernel_traits<Arch>::width >= 16 ? 16 : 8;

/// True when fused_sdpa takes the decode path: few query rows per KV head.
inline bool use_decode_path(const sdpa_params& p) {
  const index g = p.q_heads / p.kv_heads;
  return p.t_q <= 4 && g * p.t_q <= 64;
}

template <class Arch>
inline decode_plan make_decode_plan(const sdpa_params& p, int threads) {
  using tr = kernel_traits<Arch>;
  constexpr index W = tr::width;
  constexpr index NA = decode_acc<Arch>;
  decode_plan pl;
  pl.group = p.q_heads / p.kv_heads;
  pl.rows_per_head = pl.group * p.t_q;
  pl.rows_total = p.kv_heads * pl.rows_per_head;
  pl.bf16_dot = decode_uses_bf16_dot<Arch>(p);
  pl.prefetch = decode_prefetch_wanted();
  pl.ldq = round_up(p.d_qk, pl.bf16_dot ? 32 : 16);   // bf16 dot products take 32 channels at a time
  pl.dv_pad = round_up(p.d_v, pl.bf16_dot ? 32 : W);
  pl.pack_v = !pl.bf16_dot && (p.d_v % W) != 0;
  pl.bc = std::max<index>(32, W);
  pl.qk_keys = pl.rows_per_head >= 4 ? NA / 4 : (pl.rows_per_head >= 2 ? NA / 2 : NA);
  pl.max_lim = visible_keys(p, p.t_q - 1);
  // Several splits per thread, scheduled dynamically: a shared machine slows one thread down and
  // an even static split would wait for it. The split count depends only on the thread count, so
  // results stay deterministic per thread count.
  index want = threads > 1 ? 4 * index(threads) : 1;
  want = std::max<index>(1, std::min<index>(want, pl.max_lim / tr::min_split_keys));
  pl.split_len = round_up(std::max<index>(1, (pl.max_lim + want - 1) / want), pl.bc);
  pl.splits = std::max<index>(1, (pl.max_lim + pl.split_len - 1) / pl.split_len);
  const index rt = round_up(pl.rows_total, 16);
  pl.scratch_floats = std::size_t(rt * pl.ldq + rt * pl.bc + rt * pl.dv_pad + (pl.pack_v ? pl.bc * pl.dv_pad : 0) +
                                  3 * rt) + 8 * 16;
  if (pl.bf16_dot) pl.scratch_bits = std::size_t(rt * pl.ldq + rt * pl.bc);
  return pl;
}

struct decode_scratch {
  float *q, *s, *o, *vpack, *m, *l, *alpha;
  std::uint16_t *qbits = nullptr, *pbits = nullptr;  // bf16_dot only
};

/// Floats of one worker's slot on the decode path: its decode_scratch, then (bf16_dot) the bf16
/// scratch, two elements a float.
inline index decode_slot_floats(const decode_plan& pl) {
  return scratch_round(index(pl.scratch_floats)) + scratch_round((index(pl.scratch_bits) + 1) / 2);
}

/// The decode path's scratch: the splits' partial (O, m, l) rows, and a slot per worker.
inline worker_scratch_layout decode_layout(const decode_plan& pl, int concurrency) {
  worker_scratch_layout l;
  l.shared = pl.splits > 1 ? pl.splits * pl.rows_total * (pl.dv_pad + 2) : 0;
  l.slot = decode_slot_floats(pl);
  l.workers = pl.splits > 1 ? workers_for(pl.splits, concurrency) : 1;
  return l;
}

/// A worker's decode_scratch, carved from its slot.
inline decode_scratch carve_decode(float* base, const decode_plan& pl) {
  float* const slot = base;
  auto take = [&base](index n) {
    float* r = base;
    base += round_up(n, 16);
    return r;
  };
  const index rt = round_up(pl.rows_total, 16);
  decode_scratch s{};
  s.q = take(rt * pl.ldq);
  s.s = take(rt * pl.bc);
  s.o = take(rt * pl.dv_pad);
  s.vpack = pl.pack_v ? take(pl.bc * pl.dv_pad) : nullptr;
  s.m = take(rt);
  s.l = take(rt);
  s.alpha = take(rt);
  if (pl.bf16_dot) {
    s.qbits = reinterpret_cast<std::uint16_t*>(slot + scratch_round(index(pl.scratch_floats)));
    s.pbits = s.qbits + rt * pl.ldq;
  }
  return s;
}

/// s[r][t] = Σ_c q[r][c]·k_t[c] for RB query rows (stride ldq) × KB keys (row pointers k[t],
/// elements of storage type S, widened on load).
template <class Arch, int RB, int KB, storage_type S = storage_type::f32>
inline void decode_qk(const float* q, index ldq, const storage_element_t<S>* const* k, index d, float* s, index lds) {
  using B = simd::batch<float, Arch>;
  constexpr index W = index(B::size);
  constexpr int N = RB * KB;
  B acc[N];
#pragma GCC unroll 64
  for (int n = 0; n < N; ++n) acc[n] = B(0.0f);
  const index dvec = d / W * W;
  for (index c = 0; c < dvec; c += W) {
    B kv[KB];
#pragma GCC unroll 16
    for (int t = 0; t < KB; ++t) {
      if constexpr (S == storage_type::f32) kv[t] = simd::load_reg<Arch>(k[t] + c);
      else kv[t] = simd::load_widened<Arch, S>(k[t] + c);
    }
#pragma GCC unroll 16
    for (int r = 0; r < RB; ++r) {
      const B qv = simd::load_reg<Arch>(q + r * ldq + c);
#pragma GCC unroll 16
      for (int t = 0; t < KB; ++t) acc[r * KB + t] = simd::fma(qv, kv[t], acc[r * KB + t]);
    }
  }
  alignas(64) float sums[N];
  if constexpr (N % W == 0) {
#pragma GCC unroll 16
    for (int g = 0; g < int(N / W); ++g) simd::store(sums + g * W, simd::haddp(acc + g * W));
  } else {
#pragma GCC unroll 64
    for (int n = 0; n < N; ++n) sums[n] = simd::hadd(acc[n]);
  }
  for (index c = dvec; c < d; ++c)
    for (int r = 0; r < RB; ++r)
      for (int t = 0; t < KB; ++t) sums[r * KB + t] += q[r * ldq + c] * widen<S>(k[t][c]);
#pragma GCC unroll 16
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < KB; ++t) s[r * lds + t] = sums[r * KB + t];
}

/// Dispatches decode_qk over the row count rb (1, 2 or 4) for the plan's keys per call (qk_keys).
template <class Arch, storage_type S = storage_type::f32>
inline void decode_qk_dispatch(int rb, index qk_keys, const float* q, index ldq, const storage_element_t<S>* const* k, index d,
                               float* s, index lds) {
  constexpr int NA = decode_acc<Arch>;
  if (qk_keys == NA / 4) {
    if (rb == 4) decode_qk<Arch, 4, NA / 4, S>(q, ldq, k, d, s, lds);
    else if (rb == 2) decode_qk<Arch, 2, NA / 4, S>(q, ldq, k, d, s, lds);
    else decode_qk<Arch, 1, NA / 4, S>(q, ldq, k, d, s, lds);
  } else if (qk_keys == NA / 2) {
    if (rb == 2) decode_qk<Arch, 2, NA / 2, S>(q, ldq, k, d, s, lds);
    else decode_qk<Arch, 1, NA / 2, S>(q, ldq, k, d, s, lds);
  } else {
    decode_qk<Arch, 1, NA, S>(q, ldq, k, d, s, lds);
  }
}

/// Visible-key count of decode row m of a KV head (query m / G).
inline index decode_lim(const sdpa_params& p, const decode_plan& pl, index m) {
  return visible_keys(p, m / pl.group);
}

/// The V rows of n tokens from key j of KV head r, passed to f(rows, row stride) as the P·V
/// microkernel reads them: the stored rows in place (bf16/f16 widened in registers) when d_v is a
/// multiple of the width, else packed into `pack` as zero-padded fp32 rows.
template <class Arch, storage_type S, class F>
inline void with_v_tile(const sdpa_params& p, const decode_plan& pl, index j, index r, index n, float* pack, F&& f) {
  const storage_element_t<S>* v = value_row<S>(p, j, r);
  if (!pl.pack_v) {
    f(v, p.v_token_stride);
    return;
  }
  index ldv = pl.dv_pad;
  if constexpr (S == storage_type::f32) pack_v_tile(v, p.v_token_stride, n, p.d_v, pl.dv_pad, pack, ldv);
  else widen_tile<Arch, S>(v, p.v_token_stride, n, p.d_v, pack, pl.dv_pad);
  f(static_cast<const float*>(pack), ldv);
}

/// Packs scale·Q (row gr = r·R + m: query m / G, head r·G + m % G; bf16 with the dot products,
/// fp32 otherwise) and clears the state of every row.
template <class Arch>
inline void decode_begin(const sdpa_params& p, const decode_plan& pl, const decode_scratch& sc) {
  const index R = pl.rows_per_head;
  for (index r = 0; r < p.kv_heads; ++r)
    for (index m = 0; m < R; ++m) {
      const index gr = r * R + m, i = m / pl.group, h = r * pl.group + m % pl.group;
      const float* qrow = p.q + i * p.q_token_stride + h * p.q_head_stride;
      if (pl.bf16_dot) {
        std::uint16_t* dst = sc.qbits + gr * pl.ldq;
        for (index c = 0; c < p.d_qk; ++c) dst[c] = round_to_bf16(qrow[c] * p.scale);
        std::fill(dst + p.d_qk, dst + pl.ldq, std::uint16_t(0));
      } else {
        float* dst = sc.q + gr * pl.ldq;
        for (index c = 0; c < p.d_qk; ++c) dst[c] = qrow[c] * p.scale;
        std::fill(dst + p.d_qk, dst + pl.ldq, 0.0f);
      }
      sc.m[gr] = -std::numeric_limits<float>::infinity();
      sc.l[gr] = 0.0f;
    }
  std::fill(sc.o, sc.o + pl.rows_total * pl.dv_pad, 0.0f);
}

/// Scores of keys [j0, j0 + nk) for every row, token group by token group across all KV heads
/// (row-contiguous cache reads), K widened in registers (or bf16 dot products).
template <class Arch, storage_type S, bool Dot>
inline void decode_scores(const sdpa_params& p, const decode_plan& pl, const decode_scratch& sc,
                          const cache_stream& k_stream, index j0, index nk) {
  const index R = pl.rows_per_head, bc = pl.bc, qk_keys = pl.qk_keys;
  constexpr index NA = decode_acc<Arch>;
  const storage_element_t<S>* kp[64];
  auto call = [&](int rb, index row, index t0) {
    if constexpr (Dot)
      bf16_dot_qk_dispatch<Arch>(rb, qk_keys, sc.qbits + row * pl.ldq, pl.ldq, kp, p.d_qk, sc.s + row * bc + t0, bc);
    else
      decode_qk_dispatch<Arch, S>(rb, qk_keys, sc.q + row * pl.ldq, pl.ldq, kp, p.d_qk, sc.s + row * bc + t0, bc);
  };
  // The slices a key group's calls read `ahead` later are prefetched a share per call, not all
  // before the first: M1's 16 rows make 4 calls per group of 4 keys, and its 72 lines at once
  // filled the miss queue and stalled the core (in-process A/B: M1 fast -25..-35% at t:1, -24% at
  // t:2, fp32 -15%; BD32 and L1D, 2 calls per group, within noise).
  const index fours = qk_keys * 4 <= NA ? R / 4 : 0, twos = qk_keys * 2 <= NA ? (R - 4 * fours) / 2 : 0;
  const index calls = fours + twos + (R - 4 * fours - 2 * twos);  // score calls per key group and head
  for (index t0 = 0; t0 < nk; t0 += qk_keys) {
    const index keys = std::min(qk_keys, nk - t0);
    for (index r = 0; r < p.kv_heads; ++r) {
      index c = 0;
      auto prefetch_share = [&] {
        k_stream.prefetch_slices(j0 + t0 + c * keys / calls, (c + 1) * keys / calls - c * keys / calls, r);
        ++c;
      };
      prefetch_share();
      for (index t = 0; t < qk_keys; ++t) kp[t] = key_row<S>(p, j0 + std::min(t0 + t, nk - 1), r);
      index m = 0;
      auto paced_call = [&](int rb) {
        if (m > 0) prefetch_share();  // the first call's share went before
        call(rb, r * R + m, t0);
        m += rb;
      };
      for (index i = 0; i < fours; ++i) paced_call(4);
      for (index i = 0; i < twos; ++i) paced_call(2);
      while (m < R) paced_call(1);
    }
  }
}

/// Online softmax per row along the block (keys past nk or past the row's limit: -inf): the
/// scores become probabilities (also rounded to bf16 with the dot products), m, l and alpha update.
template <class Arch>
inline void decode_softmax(const sdpa_params& p, const decode_plan& pl, const decode_scratch& sc, index j0, index nk) {
  using B = simd::batch<float, Arch>;
  constexpr index W = kernel_traits<Arch>::width;
  const float ninf = -std::numeric_limits<float>::infinity();
  const index bc = pl.bc, R = pl.rows_per_head;
  alignas(64) float iota[64];
  for (index t = 0; t < 64; ++t) iota[t] = float(t);
  for (index gr = 0; gr < pl.rows_total; ++gr) {
    float* s = sc.s + gr * bc;
    const index lim = std::min(decode_lim(p, pl, gr % R) - j0, nk);  // visible keys in this block
    B tmax(ninf);
    if (lim >= bc) {
      for (index j = 0; j < bc; j += W) tmax = simd::max(tmax, simd::load<Arch>(s + j));
    } else {
      const B lb = B(float(lim));
      for (index j = 0; j < bc; j += W) {
        B x = simd::load<Arch>(s + j);
        x = simd::select(simd::load<Arch>(iota + j) < lb, x, B(ninf));
        simd::store(s + j, x);
        tmax = simd::max(tmax, x);
      }
    }
    const float mt = simd::hmax(tmax);
    const float m_old = sc.m[gr];
    const float m_new = std::max(m_old, mt);
    const float m_use = m_new == ninf ? 0.0f : m_new;
    const float alpha = m_new == m_old ? 1.0f : simd::exp_nonpositive(simd::scalar_batch<float>(m_old - m_use)).v;
    const B mu(m_use);
    B sum(0.0f);
    for (index j = 0; j < bc; j += W) {
      const B e = simd::exp_nonpositive(simd::load<Arch>(s + j) - mu);
      sum += e;
      simd::store(s + j, e);
    }
    if (pl.bf16_dot) simd::narrow_bf16<Arch>(s, sc.pbits + gr * bc, bc);
    sc.m[gr] = m_new;
    sc.l[gr] = sc.l[gr] * alpha + simd::hadd(sum);
    sc.alpha[gr] = alpha;
  }
}

/// O = alpha·O + P·V over keys [j0, j0 + nk), token group by token group across all KV heads
/// (row-contiguous reads of the cache, like the scores; O stays in L1/L2 scratch). alpha applies
/// once, at the block's first group. Rows of later queries see more keys: on a block crossing the
/// diagonal each row takes only its own (vis), so a hidden key's V is never multiplied.
template <class Arch, storage_type S, bool Dot>
inline void decode_pv(const sdpa_params& p, const decode_plan& pl, const decode_scratch& sc, const cache_stream& v_stream,
                      bool v_in_k, index j0, index nk) {
  using tr = kernel_traits<Arch>;
  constexpr index W = tr::width;
  const index R = pl.rows_per_head, bc = pl.bc, nvo = pl.dv_pad / W;
  const bool diag = j0 + nk > decode_lim(p, pl, 0);  // row 0 sees the fewest keys
  const index tg = p.kv_heads == 1 ? bc : 8;
  for (index g0 = 0, ng = 0; g0 < nk; g0 += ng) {
    ng = keys_in_block(p, j0 + g0, std::min(tg, nk - g0));  // paged: the V rows of one block
    for (index r = 0; r < p.kv_heads; ++r) {
      if (!v_in_k) v_stream.prefetch_slices(j0 + g0, ng, r);
      const float* alpha = g0 == 0 ? sc.alpha + r * R : nullptr;
      if constexpr (Dot) {
        index vis[64];
        for (index m = 0; m < R; ++m) vis[m] = std::clamp<index>(decode_lim(p, pl, m) - j0 - g0, 0, ng);
        bf16_dot_pv_rows<Arch>(R, sc.pbits + r * R * bc + g0, bc, ng, diag ? vis : nullptr, value_row<S>(p, j0 + g0, r),
                               p.v_token_stride, p.d_v, sc.o + r * R * pl.dv_pad, pl.dv_pad, alpha);
        continue;
      }
      with_v_tile<Arch, S>(p, pl, j0 + g0, r, ng, sc.vpack, [&](auto vt, index ldv) {
        constexpr storage_type SV = std::is_same<decltype(vt), const float*>::value ? storage_type::f32 : S;
        for (index x0 = 0; x0 < nvo; x0 += tr::pv_nv) {
          const int nv = int(std::min<index>(tr::pv_nv, nvo - x0));
          for (index m = 0; m < R; m += tr::pv_mr) {
            const int mr = int(std::min<index>(tr::pv_mr, R - m));
            const index gr = r * R + m;
            index vis[tr::pv_mr];
            const index most =
                diag ? visible_in_tile(mr, j0 + g0, ng, [&](int k) { return decode_lim(p, pl, m + k); }, vis) : -1;
            pv_dispatch<Arch, false, SV>(mr, nv, sc.s + gr * bc + g0, bc, most < 0 ? ng : most, vt + x0 * W, ldv,
                                         sc.o + gr * pl.dv_pad + x0 * W, pl.dv_pad, alpha ? alpha + m : nullptr,
                                         most < 0 ? nullptr : vis);
          }
        }
      });
    }
  }
}

/// One decode task: every row of every KV head over keys [k_begin, k_end), key block by key block,
/// with a software prefetch (where it pays): the range's first `ahead` tokens at once, then each
/// microkernel call's own slices `ahead` tokens later (cache_stream). Leaves
/// the unnormalised O, m and l of all rows in the scratch.
template <class Arch, storage_type S, bool Dot = false>
inline void decode_range(const sdpa_params& p, const decode_plan& pl, const decode_scratch& sc, index k_begin,
                         index k_end) {
  decode_begin<Arch>(p, pl, sc);
  const cache_stream k_stream = cache_stream(stored_k<S>(p), p.k_token_stride, p.kv_heads, p.k_head_stride, p.d_qk,
                                             k_end, decode_prefetch_bytes)
                                    .with_blocks(p.block_table, p.block_size, p.k_block_stride)
                                    .enabled(pl.prefetch);
  const cache_stream v_stream = cache_stream(stored_v<S>(p), p.v_token_stride, p.kv_heads, p.v_head_stride, p.d_v,
                                             k_end, decode_prefetch_bytes)
                                    .with_blocks(p.block_table, p.block_size, p.v_block_stride)
                                    .enabled(pl.prefetch);
  const bool v_in_k = v_inside_k<S>(p);
  k_stream.prefetch_range_start(k_begin);
  if (!v_in_k) v_stream.prefetch_range_start(k_begin);
  for (index j0 = k_begin; j0 < k_end; j0 += pl.bc) {
    const index nk = std::min(pl.bc, k_end - j0);
    decode_scores<Arch, S, Dot>(p, pl, sc, k_stream, j0, nk);
    decode_softmax<Arch>(p, pl, sc, j0, nk);
    decode_pv<Arch, S, Dot>(p, pl, sc, v_stream, v_in_k, j0, nk);
  }
}

/// decode_range with the bf16 dot products when the plan takes them (only instantiated where
/// they exist: a bf16 cache on an AVX512-BF16 arch).
template <class Arch, storage_type S>
inline void decode_range_any(const sdpa_params& p, const decode_plan& pl, const decode_scratch& sc, index k_begin,
                             index k_end) {
  if constexpr (S == storage_type::bf16 && simd::has_bf16_dot<Arch>) {
    if (pl.bf16_dot) return decode_range<Arch, S, true>(p, pl, sc, k_begin, k_end);
  }
  decode_range<Arch, S, false>(p, pl, sc, k_begin, k_end);
}

/// Decode path of fused_sdpa (see use_decode_path) for K/V stored as S.
template <class Arch, storage_type S>
inline void decode_sdpa_stored(const sdpa_params& p, const execution_context& exec) {
  const decode_plan pl = make_decode_plan<Arch>(p, exec.concurrency());
  const index row_block = pl.dv_pad + 2;
  const index R = pl.rows_per_head;
  // o: the unnormalised rows, writable scratch (finish_row works on them in place).
  auto finish = [&](float* o, index ldo, const float* m, const float* l, index stride_ml) {
    for (index gr = 0; gr < pl.rows_total; ++gr) {
      const index r = gr / R, mm = gr % R;
      const index i = mm / pl.group, h = r * pl.group + mm % pl.group;
      const softmax_row sr{m[gr * stride_ml], l[gr * stride_ml], visible_keys(p, i) > 0};
      if (p.lse) p.lse[h * p.t_q + i] = sr.lse();
      finish_row<Arch>(p, o + gr * ldo, sr.inv_l(), i, h);
    }
  };
  const worker_scratch_layout layout = decode_layout(pl, exec.concurrency());
  std::vector<float> own;  // stays empty when p.scratch is large enough
  const worker_scratch scratch = carve_workers(p.scratch, layout, own);
  if (pl.splits == 1) {
    const decode_scratch sc = carve_decode(scratch.slot(0), pl);
    decode_range_any<Arch, S>(p, pl, sc, 0, pl.max_lim);
    finish(sc.o, pl.dv_pad, sc.m, sc.l, 1);
    return;
  }
  float* partials = scratch.shared;
  auto body = [&](index sp, index worker) {
    const decode_scratch sc = carve_decode(scratch.slot(worker), pl);
    const index k_begin = sp * pl.split_len, k_end = std::min(pl.max_lim, k_begin + pl.split_len);
    decode_range_any<Arch, S>(p, pl, sc, k_begin, k_end);
    float* dst = partials + sp * pl.rows_total * row_block;
    for (index gr = 0; gr < pl.rows_total; ++gr) {
      std::memcpy(dst + gr * row_block, sc.o + gr * pl.dv_pad, sizeof(float) * std::size_t(pl.dv_pad));
      dst[gr * row_block + pl.dv_pad] = sc.m[gr];
      dst[gr * row_block + pl.dv_pad + 1] = sc.l[gr];
    }
  };
  for_each_task(exec, pl.splits, layout.workers, body);
  // Merge in split order into split 0's blocks, then finish.
  const index split_stride = pl.rows_total * row_block;
  for (index gr = 0; gr < pl.rows_total; ++gr) {
    float* o0 = partials + gr * row_block;
    merge_splits(o0, split_stride, pl.splits, pl.dv_pad, o0, o0[pl.dv_pad], o0[pl.dv_pad + 1]);
  }
  finish(partials, row_block, partials + pl.dv_pad, partials + pl.dv_pad + 1, row_block);
}

/// Decode path of fused_sdpa (see use_decode_path): the K/V element type is a compile-time
/// parameter of everything below, so the fp32 loops are the same code as without it.
template <class Arch>
inline void decode_sdpa(const sdpa_params& p, const execution_context& exec) {
  switch (p.kv_type) {
    case storage_type::bf16: decode_sdpa_stored<Arch, storage_type::bf16>(p, exec); return;
    case storage_type::f16: decode_sdpa_stored<Arch, storage_type::f16>(p, exec); return;
    case storage_type::f8_e4m3: break;  // refused before any kernel runs
    case storage_type::f32: break;
  }
  decode_sdpa_stored<Arch, storage_type::f32>(p, exec);
}

}  // namespace detail
GATTN_NAMESPACE_END  // namespace gattn
