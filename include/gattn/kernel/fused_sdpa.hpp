// The fused SDPA-then-gate kernel: flash attention on a CPU (online softmax over key tiles, no
// T×T matrix), with the output norm and the G1 gate applied per row before the single store.
//
// Layout of the computation, per work unit = one KV head r × a block of Br queries of all G query
// heads of that group, stacked into M = G·Br rows (row m = query i0 + m / G, head r·G + m % G), so
// each K/V tile is read once per group:
//   Qt  = (scale·Q_unit)ᵀ, packed once per unit           [d_qk][M_pad]   (M_pad = M rounded up to W)
//   for each key tile [j0, j0 + nk), nk <= Bc, skipping tiles the causal mask hides entirely:
//     Sᵀ = K_tile · Qt      (microkernel: broadcast K[j][c], load Qt rows; K is read in place)
//     online softmax down each column of Sᵀ = across keys, W rows per vector, no horizontal ops;
//       masking only on tiles that cross the diagonal
//     O  = alpha·O + Pᵀᵀ·V  (microkernel: broadcast P[m][j] from Sᵀ, load V rows in place)
//   epilogue per row: O / l (0 for a row without keys), RMSNorm, gate, one store.
// Decode (t_q <= 4 and G·t_q <= 64, see use_decode_path): a dedicated path (decode_sdpa below):
// scores as dot products along d with the G·t_q rows of a KV head against KB keys at a time
// (register accumulators reduced by one haddp), token-row-major streaming of all KV heads (for
// both Q·Kᵀ and P·V), online softmax per row along a key block, key splits across threads
// (flash-decoding, several per thread, dynamic schedule) merged in split order (deterministic).
// Other few-row shapes (t_q > 4 with G·br <= 2W) use the interleaved unit path: a task runs every
// unit over its key split tile by tile, prefetching the next tile of all KV heads, and the partial
// (m, l, O) states of the splits are merged in split order before the epilogue.
// Scratch: thread_local, grown once (see unit_scratch for the per-unit layout); the split
// partials live in a thread_local buffer of the calling thread, [unit][split][row](O | m | l).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "gattn/core/config.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/types.hpp"
#include "gattn/kernel/arch.hpp"
#include "gattn/kernel/kernel_traits.hpp"
#include "gattn/kernel/online_softmax.hpp"
#include "gattn/kernel/simd.hpp"
#include "gattn/kernel/vector_ops.hpp"

namespace gattn {

/// Per-output-row epilogue, applied after O /= l and before the single store.
struct sdpa_epilogue {
  norm_kind out_norm = norm_kind::none;  ///< per-head RMSNorm over d_v (weight size d_v; nullptr = 1)
  const float* out_norm_weight = nullptr;
  float out_norm_eps = 1e-6f;
  const float* gate_scores = nullptr;  ///< nullptr = no gate; else pre-activation scores u
  index gate_token_stride = 0;         ///< u(t, h, c) = gate_scores[t*ts + h*hs + (headwise ? 0 : c)]
  index gate_head_stride = 0;          ///< 0 = head-shared gate
  bool gate_headwise = false;
  activation gate_activation = activation::sigmoid;
  combine gate_combine = combine::mul;
};

/// One attention problem over strided views (see the file comment and SPEC §2.5-§2.8).
struct sdpa_params {
  index t_q = 0, t_k = 0, q_heads = 0, kv_heads = 0, d_qk = 0, d_v = 0;
  const float* q = nullptr;
  index q_token_stride = 0, q_head_stride = 0;  ///< q[t*ts + h*hs + c]
  const float* k = nullptr;
  index k_token_stride = 0, k_head_stride = 0;  ///< k[j*ts + r*hs + c]
  const float* v = nullptr;
  index v_token_stride = 0, v_head_stride = 0;  ///< may alias k (MLA latent cache)
  float* out = nullptr;
  index out_token_stride = 0, out_head_stride = 0;
  float scale = 1.0f;
  bool causal = true;  ///< bottom-right: key j visible to query i iff j <= i + (t_k - t_q)
  sdpa_epilogue epilogue;
  float* lse = nullptr;  ///< optional [q_heads * t_q] at h*t_q + i: log-sum-exp of scaled scores (-inf: no key)
  int threads = 0;       ///< 0 = OpenMP default, 1 = serial
};

namespace detail {

/// Throws shape_error naming the field when the parameters cannot describe a valid problem.
inline void validate(const sdpa_params& p) {
  require<shape_error>(p.t_q >= 0 && p.t_k >= 0, "fused_sdpa: t_q=", p.t_q, " t_k=", p.t_k, " must be >= 0");
  require<shape_error>(p.q_heads > 0 && p.kv_heads > 0, "fused_sdpa: q_heads=", p.q_heads,
                       " kv_heads=", p.kv_heads, " must be > 0");
  require<shape_error>(p.q_heads % p.kv_heads == 0, "fused_sdpa: q_heads=", p.q_heads,
                       " is not a multiple of kv_heads=", p.kv_heads);
  require<shape_error>(p.d_qk > 0 && p.d_v > 0, "fused_sdpa: d_qk=", p.d_qk, " d_v=", p.d_v, " must be > 0");
  require<shape_error>(p.q_token_stride >= 0 && p.q_head_stride >= 0 && p.k_token_stride >= 0 &&
                           p.k_head_stride >= 0 && p.v_token_stride >= 0 && p.v_head_stride >= 0 &&
                           p.out_token_stride >= 0 && p.out_head_stride >= 0,
                       "fused_sdpa: strides must be >= 0 (q_token_stride=", p.q_token_stride,
                       " q_head_stride=", p.q_head_stride, " k_token_stride=", p.k_token_stride,
                       " k_head_stride=", p.k_head_stride, " v_token_stride=", p.v_token_stride,
                       " v_head_stride=", p.v_head_stride, " out_token_stride=", p.out_token_stride,
                       " out_head_stride=", p.out_head_stride, ")");
  if (p.t_q > 0) {
    require<shape_error>(p.q != nullptr, "fused_sdpa: q is null with t_q=", p.t_q);
    require<shape_error>(p.out != nullptr, "fused_sdpa: out is null with t_q=", p.t_q);
  }
  if (p.t_k > 0) require<shape_error>(p.k != nullptr && p.v != nullptr, "fused_sdpa: k or v is null with t_k=", p.t_k);
  require<shape_error>(std::isfinite(p.scale), "fused_sdpa: scale=", p.scale, " must be finite");
  require<shape_error>(p.threads >= 0, "fused_sdpa: threads=", p.threads, " must be >= 0");
  const sdpa_epilogue& e = p.epilogue;
  if (e.gate_scores) {
    require<shape_error>(e.gate_token_stride >= 0 && e.gate_head_stride >= 0,
                         "fused_sdpa: gate_token_stride=", e.gate_token_stride,
                         " gate_head_stride=", e.gate_head_stride, " must be >= 0");
  }
  require<shape_error>(e.out_norm == norm_kind::none || e.out_norm_eps >= 0.0f,
                       "fused_sdpa: out_norm_eps=", e.out_norm_eps, " must be >= 0");
}

/// 64-byte aligned float buffer that only grows (scratch reused across calls).
class aligned_buffer {
 public:
  float* get(std::size_t n) {
    if (n > size_) {
      const std::size_t bytes = ((n * sizeof(float) + 63) / 64) * 64;
      void* mem = std::aligned_alloc(64, bytes);
      if (mem == nullptr) throw std::bad_alloc();
      data_.reset(static_cast<float*>(mem));
      size_ = n;
    }
    return data_.get();
  }

 private:
  struct freer {
    void operator()(float* f) const noexcept { std::free(f); }
  };
  std::unique_ptr<float, freer> data_;
  std::size_t size_ = 0;
};

/// Per-thread scratch of one work unit, one block (64-byte aligned); layout in floats:
///   qt    [d_qk][M_pad]      scaled Qᵀ of the unit
///   st    [Bc][M_pad]        Sᵀ tile, overwritten by Pᵀ
///   o     [M_pad][dv_pad]    unnormalised output accumulator
///   vpack [Bc][dv_pad]       V tile zero-padded to dv_pad (only when d_v % W != 0)
///   m, l, alpha, lim [M_pad] per-row softmax state, rescale factors, visible-key counts
/// thread_local, so concurrent calls from user threads and OpenMP workers never share it.
struct unit_scratch {
  float *qt, *st, *o, *vpack, *m, *l, *alpha, *lim;
};

inline index round_up(index x, index m) { return (x + m - 1) / m * m; }

/// Static plan of one call (all sizes derived from the params and the Arch traits).
struct sdpa_plan {
  index group = 1;      // G
  index br = 1;         // queries per unit
  index rows = 1;       // G·br
  index rows_pad = 1;   // rounded up to W
  index dv_pad = 1;     // d_v rounded up to W
  index q_blocks = 0;   // ceil(t_q / br)
  index units = 0;      // kv_heads · q_blocks
  index splits = 1;     // key splits per unit (flash-decoding)
  index split_len = 0;  // keys per split (multiple of Bc)
  index offset = 0;     // t_k - t_q (causal alignment)
  bool pack_v = false;
  bool interleave = false;  // decode: a task runs every unit over its key split, tile by tile
  std::size_t scratch_floats = 0;
};

template <class Arch>
inline sdpa_plan make_plan(const sdpa_params& p, int threads) {
  using tr = kernel_traits<Arch>;
  sdpa_plan pl;
  pl.group = p.q_heads / p.kv_heads;
  pl.br = std::max<index>(1, tr::target_rows / pl.group);
  pl.br = std::min<index>(pl.br, std::max<index>(1, p.t_q));
  pl.rows = pl.group * pl.br;
  pl.rows_pad = round_up(pl.rows, tr::width);
  pl.dv_pad = round_up(p.d_v, tr::width);
  pl.q_blocks = (p.t_q + pl.br - 1) / pl.br;
  pl.units = p.kv_heads * pl.q_blocks;
  pl.offset = p.t_k - p.t_q;
  pl.pack_v = (p.d_v % tr::width) != 0;
  // Decode (few rows per unit, long caches): flash-decoding over key splits, and interleaved
  // units. One head's rows are a page apart in a [T, H_kv, D] cache, so a task runs *every* unit
  // on each key tile in turn and prefetches the next tile of all heads: the cache streams
  // contiguously at memory bandwidth instead of one page-strided pass per head.
  // Prefill with few units and many threads: split the keys only to feed the threads.
  pl.splits = 1;
  pl.split_len = std::max<index>(p.t_k, 1);
  pl.interleave = pl.rows <= 2 * tr::width;
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
                                  (pl.pack_v ? bc * pl.dv_pad : 0) + 4 * pl.rows_pad) +
                      8 * 16;
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
  s.m = take(pl.rows_pad);
  s.l = take(pl.rows_pad);
  s.alpha = take(pl.rows_pad);
  s.lim = take(pl.rows_pad);
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

/// Sᵀ[j][v·W..] = Σ_c K[j][c] · Qt[c][v·W..] for MR keys × NV row vectors.
template <class Arch, int MR, int NV>
inline void qk_micro(const float* k, index ks, const float* qt, index ldq, index d, float* st, index lds) {
  using B = simd::batch<float, Arch>;
  constexpr index W = index(B::size);
  B acc[MR][NV];
#pragma GCC unroll 8
  for (int j = 0; j < MR; ++j)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[j][v] = B(0.0f);
  for (index c = 0; c < d; ++c) {
    B qv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) qv[v] = simd::load_reg<Arch>(qt + c * ldq + v * W);
#pragma GCC unroll 8
    for (int j = 0; j < MR; ++j) {
      const B kb = simd::broadcast<Arch>(k[j * ks + c]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[j][v] = simd::fma(kb, qv[v], acc[j][v]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < MR; ++j)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) simd::store(st + j * lds + v * W, acc[j][v]);
}

/// O[m][c..] = alpha[m]·O[m][c..] + Σ_j Pᵀ[j][m] · V[j][c..] for MR rows × NV channel vectors.
/// The tile's sum starts from 0 and is added to alpha·O at the end (blocked summation: the
/// rounding error grows with Bc + T/Bc instead of T).
template <class Arch, int MR, int NV>
inline void pv_micro(const float* pt, index ldp, index nk, const float* v, index vs, float* o, index ldo,
                     const float* alpha) {
  using B = simd::batch<float, Arch>;
  constexpr index W = index(B::size);
  B acc[MR][NV];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) acc[m][x] = B(0.0f);
  for (index j = 0; j < nk; ++j) {
    B vv[NV];
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) vv[x] = simd::load_reg<Arch>(v + j * vs + x * W);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const B pb = simd::broadcast<Arch>(pt[j * ldp + m]);
#pragma GCC unroll 8
      for (int x = 0; x < NV; ++x) acc[m][x] = simd::fma(pb, vv[x], acc[m][x]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    const B a = simd::broadcast<Arch>(alpha[m]);
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x)
      simd::store(o + m * ldo + x * W, simd::fma(simd::load<Arch>(o + m * ldo + x * W), a, acc[m][x]));
  }
}

/// Software prefetch of keys [j0, j0 + n): the K and V rows of every KV head (a contiguous span
/// per token in a [T, H_kv, D] cache). Decode reads each byte once with little arithmetic; one
/// head's rows are a page apart, which defeats the hardware prefetchers, so the interleaved decode
/// path asks for the next tile of all heads while it computes the current one.
inline void prefetch_keys(const sdpa_params& p, index j0, index n) {
  const index kspan = (p.kv_heads - 1) * p.k_head_stride + p.d_qk;
  const index vspan = (p.kv_heads - 1) * p.v_head_stride + p.d_v;
  for (index j = 0; j < n; ++j) {
    const char* kr = reinterpret_cast<const char*>(p.k + (j0 + j) * p.k_token_stride);
    const char* vr = reinterpret_cast<const char*>(p.v + (j0 + j) * p.v_token_stride);
    for (index b = 0; b < kspan * index(sizeof(float)); b += 64) __builtin_prefetch(kr + b);
    for (index b = 0; b < vspan * index(sizeof(float)); b += 64) __builtin_prefetch(vr + b);
  }
}

/// What unit_begin learns about a unit: its valid rows and the range of visible-key counts.
struct unit_info {
  index r = 0, rows = 0, min_lim = 0, max_lim = 0;
};

/// Starts a work unit: packs scale·Qᵀ and the per-row visible-key limits (padding rows are zeros
/// that see every key) and clears m, l and O.
template <class Arch>
inline unit_info unit_begin(const sdpa_params& p, const sdpa_plan& pl, const unit_scratch& sc, index r, index qb) {
  const index ldq = pl.rows_pad;
  const index i0 = qb * pl.br;
  const index rows = std::min(pl.br, p.t_q - i0) * pl.group;  // valid rows of this unit
  const float ninf = -std::numeric_limits<float>::infinity();
  index min_lim = p.t_k, max_lim = 0;
  for (index m = 0; m < pl.rows_pad; ++m) {
    if (m < rows) {
      const index i = i0 + m / pl.group;
      const index h = r * pl.group + m % pl.group;
      const float* qrow = p.q + i * p.q_token_stride + h * p.q_head_stride;
      for (index c = 0; c < p.d_qk; ++c) sc.qt[c * ldq + m] = qrow[c] * p.scale;
      const index lim = p.causal ? std::clamp<index>(i + pl.offset + 1, 0, p.t_k) : p.t_k;
      sc.lim[m] = float(lim);
      min_lim = std::min(min_lim, lim);
      max_lim = std::max(max_lim, lim);
    } else {
      for (index c = 0; c < p.d_qk; ++c) sc.qt[c * ldq + m] = 0.0f;
      sc.lim[m] = float(p.t_k);
    }
    sc.m[m] = ninf;
    sc.l[m] = 0.0f;
  }
  std::fill(sc.o, sc.o + pl.rows_pad * pl.dv_pad, 0.0f);
  return {r, rows, min_lim, max_lim};
}

/// One key tile [j0, j0 + nk) of a unit: Sᵀ = K·Qt, online softmax, O = alpha·O + P·V.
template <class Arch>
inline void unit_tile(const sdpa_params& p, const sdpa_plan& pl, const unit_scratch& sc, const unit_info& ui,
                      index j0, index nk) {
  using tr = kernel_traits<Arch>;
  using B = simd::batch<float, Arch>;
  constexpr index W = tr::width;
  const index ldq = pl.rows_pad;
  const index r = ui.r, rows = ui.rows, min_lim = ui.min_lim;
  const float ninf = -std::numeric_limits<float>::infinity();
  const index nvq = pl.rows_pad / W;
  {
    const float* kt = p.k + j0 * p.k_token_stride + r * p.k_head_stride;
    // 1. Sᵀ = K_tile · Qt
    for (index v0 = 0; v0 < nvq; v0 += tr::qk_nv) {
      const int nv = int(std::min<index>(tr::qk_nv, nvq - v0));
      for (index j = 0; j < nk; j += tr::qk_mr) {
        const int mr = int(std::min<index>(tr::qk_mr, nk - j));
        static_switch<tr::qk_mr>(mr, [&](auto MR) {
          static_switch<tr::qk_nv>(nv, [&](auto NV) {
            qk_micro<Arch, decltype(MR)::value, decltype(NV)::value>(kt + j * p.k_token_stride, p.k_token_stride,
                                                                      sc.qt + v0 * W, ldq, p.d_qk,
                                                                      sc.st + j * ldq + v0 * W, ldq);
          });
        });
      }
    }
    // 2. Online softmax down the key axis of Sᵀ, W rows per vector.
    const bool diag = p.causal && j0 + nk > min_lim;
    for (index v0 = 0; v0 < nvq; ++v0) {
      float* s = sc.st + v0 * W;
      online_softmax_state<B> st;
      st.m = simd::load<Arch>(sc.m + v0 * W);
      st.l = simd::load<Arch>(sc.l + v0 * W);
      B tmax = B(ninf);
      if (diag) {
        const B lim = simd::load<Arch>(sc.lim + v0 * W);
        for (index j = 0; j < nk; ++j) {
          B x = simd::load<Arch>(s + j * ldq);
          x = simd::select(B(float(j0 + j)) < lim, x, B(ninf));
          simd::store(s + j * ldq, x);
          tmax = simd::max(tmax, x);
        }
      } else {
        for (index j = 0; j < nk; ++j) tmax = simd::max(tmax, simd::load<Arch>(s + j * ldq));
      }
      B m_use;
      const B alpha = st.rescale(tmax, m_use);
      B tile_sum(0.0f);
      for (index j = 0; j < nk; ++j)
        simd::store(s + j * ldq, st.accumulate(simd::load<Arch>(s + j * ldq), m_use, tile_sum));
      st.end_tile(alpha, tile_sum);
      simd::store(sc.m + v0 * W, st.m);
      simd::store(sc.l + v0 * W, st.l);
      simd::store(sc.alpha + v0 * W, alpha);
    }
    // 3. O = alpha·O + P·V_tile
    const float* vt = p.v + j0 * p.v_token_stride + r * p.v_head_stride;
    index vs = p.v_token_stride;
    if (pl.pack_v) {
      for (index j = 0; j < nk; ++j) {
        float* dst = sc.vpack + j * pl.dv_pad;
        std::memcpy(dst, vt + j * p.v_token_stride, sizeof(float) * std::size_t(p.d_v));
        std::fill(dst + p.d_v, dst + pl.dv_pad, 0.0f);
      }
      vt = sc.vpack;
      vs = pl.dv_pad;
    }
    const index nvo = pl.dv_pad / W;
    for (index x0 = 0; x0 < nvo; x0 += tr::pv_nv) {
      const int nv = int(std::min<index>(tr::pv_nv, nvo - x0));
      for (index m = 0; m < rows; m += tr::pv_mr) {
        const int mr = int(std::min<index>(tr::pv_mr, rows - m));
        static_switch<tr::pv_mr>(mr, [&](auto MR) {
          static_switch<tr::pv_nv>(nv, [&](auto NV) {
            pv_micro<Arch, decltype(MR)::value, decltype(NV)::value>(sc.st + m, ldq, nk, vt + x0 * W, vs,
                                                                      sc.o + m * pl.dv_pad + x0 * W, pl.dv_pad,
                                                                      sc.alpha + m);
          });
        });
      }
    }
  }
}

/// Runs one work unit over keys [k_begin, k_end). Leaves the unnormalised O, m and l in the
/// scratch (rows < pl.rows are meaningful).
template <class Arch>
inline void run_unit(const sdpa_params& p, const sdpa_plan& pl, const unit_scratch& sc, index r, index qb,
                     index k_begin, index k_end) {
  constexpr index bc = kernel_traits<Arch>::block_keys;
  const unit_info ui = unit_begin<Arch>(p, pl, sc, r, qb);
  const index kend = std::min(k_end, ui.max_lim);  // keys past every row's limit are never visible
  for (index j0 = k_begin; j0 < kend; j0 += bc) unit_tile<Arch>(p, pl, sc, ui, j0, std::min(bc, kend - j0));
}

/// Epilogue of one output row: z = o·inv_l, RMSNorm, gate, then the single store to `dst`.
/// Works in place on the scratch row `o` (L1-resident).
template <class Arch>
inline void finish_row(const sdpa_params& p, float* o, float inv_l, index i, index h) {
  const sdpa_epilogue& e = p.epilogue;
  scale_copy<Arch>(o, o, p.d_v, inv_l);
  if (e.out_norm != norm_kind::none) rms_norm<Arch>(o, e.out_norm_weight, p.d_v, e.out_norm_eps, e.out_norm);
  if (e.gate_scores) {
    const float* u = e.gate_scores + i * e.gate_token_stride + h * e.gate_head_stride;
    if (e.gate_headwise) apply_gate_scalar<Arch>(o, p.d_v, *u, e.gate_activation, e.gate_combine);
    else apply_gate<Arch>(o, u, p.d_v, e.gate_activation, e.gate_combine);
  }
  std::memcpy(p.out + i * p.out_token_stride + h * p.out_head_stride, o, sizeof(float) * std::size_t(p.d_v));
}

/// Thread-local scratch of the calling thread (grows, never shrinks).
inline aligned_buffer& thread_scratch() {
  static thread_local aligned_buffer buf;
  return buf;
}
/// Split-KV partial states, owned by the calling thread and filled by its OpenMP team:
///   [unit][split][row_pad] blocks of (dv_pad floats of O, then m, l) = dv_pad + 2 floats per row.
inline aligned_buffer& thread_partials() {
  static thread_local aligned_buffer buf;
  return buf;
}

/// Per-unit bookkeeping of the interleaved decode path (grows, never shrinks).
inline std::vector<unit_info>& thread_unit_info() {
  static thread_local std::vector<unit_info> info;
  return info;
}

inline int resolve_threads(int requested) {
#ifdef _OPENMP
  return requested > 0 ? requested : omp_get_max_threads();
#else
  (void)requested;
  return 1;
#endif
}


// ---- Decode path (few queries, long caches) ----------------------------------------------------
// Per KV head r the R = G·t_q query rows (row m = query m / G, head r·G + m % G) are few, so the
// scores are dot products along d: a microkernel keeps RB rows × KB keys of accumulators in
// registers, streams the KB key rows once (the RB query rows come from L1) and reduces the RB·KB
// accumulators with one haddp. Keys go in blocks of Bc: for each group of KB tokens the kernel
// visits every KV head, so a [T, H_kv, D] cache is read token row by token row (contiguously; the
// hardware prefetcher sees a plain stream and the next block is software-prefetched). Then an
// online softmax per row along the block (scores stored [row][key]) and O = alpha·O + P·V, again
// token group by token group across all KV heads, with O in L1/L2 scratch. Keys are split across
// threads (flash-decoding, 4 splits per thread, dynamic schedule); the partial (O, m, l) of the
// splits are merged in split order (deterministic for a fixed thread count).
// Measured here (BENCH.md machine, loaded): the path is compute-bound when the cache is hot
// (D1 ≈ 28 GB/s-equivalent, M1 ≈ 92 GFLOP/s ≈ the FMA rate a thread gets) and, cold, pays the
// memory time on top (software prefetch of the next block, distance 1-4 blocks, T0/T2/NTA hints,
// and huge pages made no measurable difference). M1 does 15 flop per cache byte, so fp32 M1
// cannot reach the read bandwidth on this CPU: it is bounded by the FMA rate.

/// Plan of the decode path.
struct decode_plan {
  index group = 1;       // G
  index rows = 1;        // R = G·t_q rows per KV head
  index rows_total = 1;  // H_kv·R
  index ldq = 1;         // row stride of the packed scaled Q
  index dv_pad = 1;
  index bc = 32;         // keys per block
  index kb = 4;          // keys per QK microkernel call
  index splits = 1, split_len = 0, offset = 0, max_lim = 0;
  bool pack_v = false;
  std::size_t scratch_floats = 0;
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
  pl.rows = pl.group * p.t_q;
  pl.rows_total = p.kv_heads * pl.rows;
  pl.ldq = round_up(p.d_qk, 16);
  pl.dv_pad = round_up(p.d_v, W);
  pl.pack_v = (p.d_v % W) != 0;
  pl.bc = std::max<index>(32, W);
  pl.kb = pl.rows >= 4 ? NA / 4 : (pl.rows >= 2 ? NA / 2 : NA);
  pl.offset = p.t_k - p.t_q;
  pl.max_lim = p.causal ? std::clamp<index>(p.t_q + pl.offset, 0, p.t_k) : p.t_k;
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
  return pl;
}

struct decode_scratch {
  float *q, *s, *o, *vpack, *m, *l, *alpha;
};

inline decode_scratch carve_decode(float* base, const decode_plan& pl) {
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
  return s;
}

/// s[r][t] = Σ_c q[r][c]·k_t[c] for RB query rows (stride ldq) × KB keys (row pointers k[t]).
template <class Arch, int RB, int KB>
inline void decode_qk(const float* q, index ldq, const float* const* k, index d, float* s, index lds) {
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
    for (int t = 0; t < KB; ++t) kv[t] = simd::load_reg<Arch>(k[t] + c);
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
      for (int t = 0; t < KB; ++t) sums[r * KB + t] += q[r * ldq + c] * k[t][c];
#pragma GCC unroll 16
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < KB; ++t) s[r * lds + t] = sums[r * KB + t];
}

/// Dispatches decode_qk over the row count rb (1, 2 or 4) for a fixed key count kb of the plan.
template <class Arch>
inline void decode_qk_dispatch(int rb, index kb, const float* q, index ldq, const float* const* k, index d, float* s,
                               index lds) {
  constexpr int NA = decode_acc<Arch>;
  if (kb == NA / 4) {
    if (rb == 4) decode_qk<Arch, 4, NA / 4>(q, ldq, k, d, s, lds);
    else if (rb == 2) decode_qk<Arch, 2, NA / 4>(q, ldq, k, d, s, lds);
    else decode_qk<Arch, 1, NA / 4>(q, ldq, k, d, s, lds);
  } else if (kb == NA / 2) {
    if (rb == 2) decode_qk<Arch, 2, NA / 2>(q, ldq, k, d, s, lds);
    else decode_qk<Arch, 1, NA / 2>(q, ldq, k, d, s, lds);
  } else {
    decode_qk<Arch, 1, NA>(q, ldq, k, d, s, lds);
  }
}

/// O[m][c..] = alpha[m]·O[m][c..] + Σ_j P[m][j]·V[j][c..] for MR rows × NV channel vectors
/// (P row-major [row][key], stride ldp). alpha = nullptr: O += P·V.
template <class Arch, int MR, int NV>
inline void decode_pv(const float* pm, index ldp, index nk, const float* v, index vs, float* o, index ldo,
                      const float* alpha) {
  using B = simd::batch<float, Arch>;
  constexpr index W = index(B::size);
  B acc[MR][NV];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) acc[m][x] = B(0.0f);
  for (index j = 0; j < nk; ++j) {
    B vv[NV];
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) vv[x] = simd::load_reg<Arch>(v + j * vs + x * W);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const B pb = simd::broadcast<Arch>(pm[m * ldp + j]);
#pragma GCC unroll 8
      for (int x = 0; x < NV; ++x) acc[m][x] = simd::fma(pb, vv[x], acc[m][x]);
    }
  }
  if (alpha) {
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const B a = simd::broadcast<Arch>(alpha[m]);
#pragma GCC unroll 8
      for (int x = 0; x < NV; ++x)
        simd::store(o + m * ldo + x * W, simd::fma(simd::load<Arch>(o + m * ldo + x * W), a, acc[m][x]));
    }
  } else {
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
      for (int x = 0; x < NV; ++x)
        simd::store(o + m * ldo + x * W, simd::load<Arch>(o + m * ldo + x * W) + acc[m][x]);
  }
}

/// Prefetches the K and V rows of tokens [j0, j0 + n) (all KV heads: one span per token).
inline void decode_prefetch(const sdpa_params& p, index j0, index n) {
  const index kspan = ((p.kv_heads - 1) * p.k_head_stride + p.d_qk) * index(sizeof(float));
  const index vspan = ((p.kv_heads - 1) * p.v_head_stride + p.d_v) * index(sizeof(float));
  const bool v_in_k = p.v == p.k && p.v_token_stride == p.k_token_stride && vspan <= kspan;
  for (index j = j0; j < j0 + n; ++j) {
    const char* kr = reinterpret_cast<const char*>(p.k + j * p.k_token_stride);
    for (index b = 0; b < kspan; b += 64) __builtin_prefetch(kr + b, 0, 1);
    if (v_in_k) continue;
    const char* vr = reinterpret_cast<const char*>(p.v + j * p.v_token_stride);
    for (index b = 0; b < vspan; b += 64) __builtin_prefetch(vr + b, 0, 1);
  }
}

/// Visible-key count of decode row m (query m / G).
inline index decode_lim(const sdpa_params& p, const decode_plan& pl, index m) {
  return p.causal ? std::clamp<index>(m / pl.group + pl.offset + 1, 0, p.t_k) : p.t_k;
}

/// One decode task: every row of every KV head over keys [k_begin, k_end). Leaves the
/// unnormalised O, m and l of all rows in the scratch.
template <class Arch>
inline void decode_range(const sdpa_params& p, const decode_plan& pl, const decode_scratch& sc, index k_begin,
                         index k_end) {
  using tr = kernel_traits<Arch>;
  using B = simd::batch<float, Arch>;
  constexpr index W = tr::width;
  const float ninf = -std::numeric_limits<float>::infinity();
  const index R = pl.rows, bc = pl.bc, kb = pl.kb;
  // Pack scale·Q (row gr = r·R + m) and clear the state.
  for (index r = 0; r < p.kv_heads; ++r)
    for (index m = 0; m < R; ++m) {
      const index gr = r * R + m, i = m / pl.group, h = r * pl.group + m % pl.group;
      const float* qrow = p.q + i * p.q_token_stride + h * p.q_head_stride;
      float* dst = sc.q + gr * pl.ldq;
      for (index c = 0; c < p.d_qk; ++c) dst[c] = qrow[c] * p.scale;
      for (index c = p.d_qk; c < pl.ldq; ++c) dst[c] = 0.0f;
      sc.m[gr] = ninf;
      sc.l[gr] = 0.0f;
    }
  std::fill(sc.o, sc.o + pl.rows_total * pl.dv_pad, 0.0f);
  alignas(64) float iota[64];
  for (index t = 0; t < 64; ++t) iota[t] = float(t);
  const index nvo = pl.dv_pad / W;
  constexpr index pf_dist = 1;  // blocks ahead
  decode_prefetch(p, k_begin, std::min(pf_dist * bc, k_end - k_begin));
  for (index j0 = k_begin; j0 < k_end; j0 += bc) {
    const index nk = std::min(bc, k_end - j0);
    const index pf0 = j0 + pf_dist * bc;  // this block prefetches [pf0, pf0 + next)
    const index next = std::max<index>(0, std::min(bc, k_end - pf0));
    // 1. Scores, token group by token group across all KV heads (row-contiguous cache reads).
    const float* kp[64];
    for (index t0 = 0; t0 < nk; t0 += kb) {
      if (next > 0) {
        const index a = t0 * next / nk, b = std::min(next, (t0 + kb) * next / nk);
        if (b > a) decode_prefetch(p, pf0 + a, b - a);
      }
      for (index r = 0; r < p.kv_heads; ++r) {
        for (index t = 0; t < kb; ++t)
          kp[t] = p.k + (j0 + std::min(t0 + t, nk - 1)) * p.k_token_stride + r * p.k_head_stride;
        index m = 0;
        for (; m + 4 <= R && kb * 4 <= decode_acc<Arch>; m += 4)
          decode_qk_dispatch<Arch>(4, kb, sc.q + (r * R + m) * pl.ldq, pl.ldq, kp, p.d_qk, sc.s + (r * R + m) * bc + t0, bc);
        for (; m + 2 <= R && kb * 2 <= decode_acc<Arch>; m += 2)
          decode_qk_dispatch<Arch>(2, kb, sc.q + (r * R + m) * pl.ldq, pl.ldq, kp, p.d_qk, sc.s + (r * R + m) * bc + t0, bc);
        for (; m < R; ++m)
          decode_qk_dispatch<Arch>(1, kb, sc.q + (r * R + m) * pl.ldq, pl.ldq, kp, p.d_qk, sc.s + (r * R + m) * bc + t0, bc);
      }
    }
    // 2. Online softmax per row along the block (keys past nk or past the row's limit: -inf).
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
      sc.m[gr] = m_new;
      sc.l[gr] = sc.l[gr] * alpha + simd::hadd(sum);
      sc.alpha[gr] = alpha;
    }
    // 3. O = alpha·O + P·V, token group by token group across all KV heads (row-contiguous
    //    reads of the cache, like the scores; O stays in L1/L2 scratch). alpha applies once, at
    //    the block's first group.
    const index tg = p.kv_heads == 1 ? bc : 8;
    for (index g0 = 0; g0 < nk; g0 += tg) {
      const index ng = std::min(tg, nk - g0);
      for (index r = 0; r < p.kv_heads; ++r) {
        const float* vt = p.v + (j0 + g0) * p.v_token_stride + r * p.v_head_stride;
        index vs = p.v_token_stride;
        if (pl.pack_v) {
          for (index j = 0; j < ng; ++j) {
            float* dst = sc.vpack + j * pl.dv_pad;
            std::memcpy(dst, vt + j * p.v_token_stride, sizeof(float) * std::size_t(p.d_v));
            std::fill(dst + p.d_v, dst + pl.dv_pad, 0.0f);
          }
          vt = sc.vpack;
          vs = pl.dv_pad;
        }
        for (index x0 = 0; x0 < nvo; x0 += tr::pv_nv) {
          const int nv = int(std::min<index>(tr::pv_nv, nvo - x0));
          for (index m = 0; m < R; m += tr::pv_mr) {
            const int mr = int(std::min<index>(tr::pv_mr, R - m));
            const index gr = r * R + m;
            static_switch<tr::pv_mr>(mr, [&](auto MR) {
              static_switch<tr::pv_nv>(nv, [&](auto NV) {
                decode_pv<Arch, decltype(MR)::value, decltype(NV)::value>(sc.s + gr * bc + g0, bc, ng, vt + x0 * W, vs,
                                                                           sc.o + gr * pl.dv_pad + x0 * W, pl.dv_pad,
                                                                           g0 == 0 ? sc.alpha + gr : nullptr);
              });
            });
          }
        }
      }
    }
  }
}

/// Decode path of fused_sdpa (see use_decode_path).
template <class Arch>
inline void decode_sdpa(const sdpa_params& p, int threads) {
  const decode_plan pl = make_decode_plan<Arch>(p, threads);
  const index row_block = pl.dv_pad + 2;
  const index R = pl.rows;
  auto finish = [&](const float* o, index ldo, const float* m, const float* l, index stride_ml) {
    for (index gr = 0; gr < pl.rows_total; ++gr) {
      const index r = gr / R, mm = gr % R;
      const index i = mm / pl.group, h = r * pl.group + mm % pl.group;
      const softmax_row sr{m[gr * stride_ml], l[gr * stride_ml]};
      if (p.lse) p.lse[h * p.t_q + i] = sr.lse();
      // finish_row works in place on a scratch row: o must be writable scratch.
      finish_row<Arch>(p, const_cast<float*>(o) + gr * ldo, sr.inv_l(), i, h);
    }
  };
  if (pl.splits == 1) {
    float* base = thread_scratch().get(pl.scratch_floats);
    const decode_scratch sc = carve_decode(base, pl);
    decode_range<Arch>(p, pl, sc, 0, pl.max_lim);
    finish(sc.o, pl.dv_pad, sc.m, sc.l, 1);
    return;
  }
  float* partials = thread_partials().get(std::size_t(pl.splits * pl.rows_total * row_block));
  auto body = [&](index sp) {
    float* base = thread_scratch().get(pl.scratch_floats);
    const decode_scratch sc = carve_decode(base, pl);
    const index kb = sp * pl.split_len, ke = std::min(pl.max_lim, kb + pl.split_len);
    decode_range<Arch>(p, pl, sc, kb, ke);
    float* dst = partials + sp * pl.rows_total * row_block;
    for (index gr = 0; gr < pl.rows_total; ++gr) {
      std::memcpy(dst + gr * row_block, sc.o + gr * pl.dv_pad, sizeof(float) * std::size_t(pl.dv_pad));
      dst[gr * row_block + pl.dv_pad] = sc.m[gr];
      dst[gr * row_block + pl.dv_pad + 1] = sc.l[gr];
    }
  };
#ifdef _OPENMP
  const int team = int(std::min<index>(threads, pl.splits));
  if (team > 1) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(team)
    for (index sp = 0; sp < pl.splits; ++sp) body(sp);
  } else {
    for (index sp = 0; sp < pl.splits; ++sp) body(sp);
  }
#else
  for (index sp = 0; sp < pl.splits; ++sp) body(sp);
#endif
  // Merge in split order into split 0's blocks, then finish.
  for (index gr = 0; gr < pl.rows_total; ++gr) {
    float mall = -std::numeric_limits<float>::infinity();
    for (index s = 0; s < pl.splits; ++s) mall = std::max(mall, partials[(s * pl.rows_total + gr) * row_block + pl.dv_pad]);
    float* o0 = partials + gr * row_block;
    const float w0 = softmax_row::weight(o0[pl.dv_pad], mall);
    float l = w0 * o0[pl.dv_pad + 1];
    for (index c = 0; c < pl.dv_pad; ++c) o0[c] *= w0;
    for (index s = 1; s < pl.splits; ++s) {
      const float* blk = partials + (s * pl.rows_total + gr) * row_block;
      const float w = softmax_row::weight(blk[pl.dv_pad], mall);
      if (w == 0.0f) continue;
      l += w * blk[pl.dv_pad + 1];
      for (index c = 0; c < pl.dv_pad; ++c) o0[c] += w * blk[c];
    }
    o0[pl.dv_pad] = mall;
    o0[pl.dv_pad + 1] = l;
  }
  finish(partials, row_block, partials + pl.dv_pad, partials + pl.dv_pad + 1, row_block);
}

}  // namespace detail

/// Fused scaled-dot-product attention with the output norm and gate in the epilogue.
/// Validates shapes (throws gattn::shape_error naming the field), never allocates per call once
/// its thread-local scratch has grown to the problem size, and never forms a T×T matrix.
/// Deterministic: bitwise identical results for a fixed thread count.
template <class Arch = default_arch>
void fused_sdpa(const sdpa_params& p) {
  detail::validate(p);
  if (p.t_q == 0) return;
  using tr = kernel_traits<Arch>;
  const int threads = detail::resolve_threads(p.threads);
  if (detail::use_decode_path(p)) {
    detail::decode_sdpa<Arch>(p, threads);
    return;
  }
  const detail::sdpa_plan pl = detail::make_plan<Arch>(p, threads);
  const index tasks = pl.interleave ? pl.splits : pl.units * pl.splits;
  const int team = int(std::min<index>(threads, tasks));
  const index row_block = pl.dv_pad + 2;
  float* partials = nullptr;
  if (pl.splits > 1)
    partials = detail::thread_partials().get(std::size_t(pl.units * pl.splits * pl.rows_pad * row_block));

  auto unit_coords = [&](index u, index& r, index& qb) {
    // Causal: later query blocks see more keys, so they go first (better dynamic balance).
    const index rev = pl.units - 1 - u;
    r = rev % p.kv_heads;
    qb = rev / p.kv_heads;
  };

  auto finish_unit = [&](const detail::unit_scratch& sc, index r, index qb) {
    const index i0 = qb * pl.br;
    const index rows = std::min(pl.br, p.t_q - i0) * pl.group;
    for (index m = 0; m < rows; ++m) {
      const index i = i0 + m / pl.group;
      const index h = r * pl.group + m % pl.group;
      const softmax_row sr{sc.m[m], sc.l[m]};
      if (p.lse) p.lse[h * p.t_q + i] = sr.lse();
      detail::finish_row<Arch>(p, sc.o + m * pl.dv_pad, sr.inv_l(), i, h);
    }
  };

  auto save_partial = [&](const detail::unit_scratch& sc, index u, index sp) {
    float* dst = partials + (u * pl.splits + sp) * pl.rows_pad * row_block;
    for (index m = 0; m < pl.rows_pad; ++m) {
      std::memcpy(dst + m * row_block, sc.o + m * pl.dv_pad, sizeof(float) * std::size_t(pl.dv_pad));
      dst[m * row_block + pl.dv_pad] = sc.m[m];
      dst[m * row_block + pl.dv_pad + 1] = sc.l[m];
    }
  };

  // One task = one unit over one key split (prefill), or every unit over one key split,
  // interleaved tile by tile (decode; scratch = one unit_scratch per unit, back to back).
  auto body = [&](index task) {
    if (!pl.interleave) {
      float* base = detail::thread_scratch().get(pl.scratch_floats);
      const detail::unit_scratch sc = detail::carve(base, p, pl, tr::block_keys);
      const index sp = task / pl.units, u = task % pl.units;  // split-major
      index r, qb;
      unit_coords(u, r, qb);
      const index kb = sp * pl.split_len, ke = std::min(p.t_k, kb + pl.split_len);
      detail::run_unit<Arch>(p, pl, sc, r, qb, kb, ke);
      if (pl.splits == 1) finish_unit(sc, r, qb);
      else save_partial(sc, u, sp);
      return;
    }
    const index sp = task;
    float* base = detail::thread_scratch().get(std::size_t(pl.units) * pl.scratch_floats);
    std::vector<detail::unit_info>& info = detail::thread_unit_info();
    info.resize(std::size_t(pl.units));
    auto scratch_of = [&](index u) { return detail::carve(base + std::size_t(u) * pl.scratch_floats, p, pl, tr::block_keys); };
    const index kb = sp * pl.split_len, ke = std::min(p.t_k, kb + pl.split_len);
    index kend = kb;
    for (index u = 0; u < pl.units; ++u) {
      index r, qb;
      unit_coords(u, r, qb);
      info[std::size_t(u)] = detail::unit_begin<Arch>(p, pl, scratch_of(u), r, qb);
      kend = std::max(kend, std::min(ke, info[std::size_t(u)].max_lim));
    }
    constexpr index bc = tr::block_keys;
    detail::prefetch_keys(p, kb, std::min(bc, kend - kb));
    for (index j0 = kb; j0 < kend; j0 += bc) {
      // Prefetch the next tile spread over the units' work (a burst of thousands of prefetches
      // would overflow the miss queue and be dropped).
      const index next = std::min(bc, kend - j0 - bc), per_unit = (next + pl.units - 1) / pl.units;
      for (index u = 0; u < pl.units; ++u) {
        const index a = std::min(next, u * per_unit);
        detail::prefetch_keys(p, j0 + bc + a, std::min(next, a + per_unit) - a);
        const index ke_u = std::min(ke, info[std::size_t(u)].max_lim);
        if (j0 < ke_u) detail::unit_tile<Arch>(p, pl, scratch_of(u), info[std::size_t(u)], j0, std::min(bc, ke_u - j0));
      }
    }
    for (index u = 0; u < pl.units; ++u) {
      index r, qb;
      unit_coords(u, r, qb);
      if (pl.splits == 1) finish_unit(scratch_of(u), r, qb);
      else save_partial(scratch_of(u), u, sp);
    }
  };

  // Merge of the split partial states of one unit: M = max m_s, O = Σ w_s O_s, l = Σ w_s l_s with
  // w_s = exp(m_s - M) (0 for an empty split), in split order (deterministic).
  auto merge_unit = [&](index u) {
    float* base = detail::thread_scratch().get(pl.scratch_floats);
    const detail::unit_scratch sc = detail::carve(base, p, pl, tr::block_keys);
    index r, qb;
    unit_coords(u, r, qb);
    const float* part = partials + u * pl.splits * pl.rows_pad * row_block;
    for (index m = 0; m < pl.rows_pad; ++m) {
      float mall = -std::numeric_limits<float>::infinity();
      for (index s = 0; s < pl.splits; ++s) mall = std::max(mall, part[(s * pl.rows_pad + m) * row_block + pl.dv_pad]);
      float* o = sc.o + m * pl.dv_pad;
      std::fill(o, o + pl.dv_pad, 0.0f);
      float l = 0.0f;
      for (index s = 0; s < pl.splits; ++s) {
        const float* blk = part + (s * pl.rows_pad + m) * row_block;
        const float w = softmax_row::weight(blk[pl.dv_pad], mall);
        if (w == 0.0f) continue;
        l += w * blk[pl.dv_pad + 1];
        for (index c = 0; c < pl.dv_pad; ++c) o[c] += w * blk[c];
      }
      sc.m[m] = mall;
      sc.l[m] = l;
    }
    finish_unit(sc, r, qb);
  };

#ifdef _OPENMP
  if (team > 1) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(team)
    for (index t = 0; t < tasks; ++t) body(t);
    if (pl.splits > 1) {
#pragma omp parallel for schedule(static) num_threads(int(std::min<index>(threads, pl.units)))
      for (index u = 0; u < pl.units; ++u) merge_unit(u);
    }
    return;
  }
#endif
  for (index t = 0; t < tasks; ++t) body(t);
  if (pl.splits > 1)
    for (index u = 0; u < pl.units; ++u) merge_unit(u);
}

}  // namespace gattn
