// Prefill attention in docs/spec.md §10 `fast` numerics: Q·Kᵀ and P·V on bf16 operands with fp32 accumulation.
//
// The unit path of fused_sdpa.hpp with its two products swapped (the softmax, its statistics m and
// l, the rescale and the epilogue stay fp32, unchanged):
//   - scale·Q is rounded to bf16 once per unit and packed as pairs along d_qk: for pair q and
//     row m, the 32-bit lane (Q[m][2q], Q[m][2q + 1]) at qt16 + (q·M_pad + m)·2;
//   - each K tile is rounded to bf16 rows (a bf16 cache with even d_qk is read in place), so
//     (K[j][2q], K[j][2q + 1]) is one 32-bit value to broadcast;
//   - P is rounded to bf16 after the exponentials (l sums the fp32 values) and packed as key
//     pairs (P[m][2i], P[m][2i + 1]), and each V tile as key pairs (V[2i][c], V[2i + 1][c]);
//     an odd tile's last pair has a zero second half.
// Each pair step is acc = fma(x_even, y_even, fma(x_odd, y_odd, acc)): one vdpbf16ps (AVX512-BF16,
// which computes exactly that on Zen 5, see linalg/packed_gemm_fast.hpp) or two fp32 FMAs (the
// portable engine, every arch). The engines differ only where a denormal appears (vdpbf16ps
// flushes them). On a tile crossing the causal diagonal a row takes only its visible keys: a pair
// half past the row's limit meets a zero V half, so a hidden key's V (NaN included) is never used.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "gattn/core/config.hpp"
#include "gattn/core/cpu.hpp"
#include "gattn/core/types.hpp"
#include "gattn/kernel/kernel_traits.hpp"
#include "gattn/kernel/microkernels.hpp"
#include "gattn/kernel/scratch.hpp"
#include "gattn/kernel/sdpa_params.hpp"
#include "gattn/simd/arch.hpp"
#include "gattn/simd/avx512_bf16.hpp"
#include "gattn/simd/convert.hpp"
#include "gattn/simd/simd.hpp"

GATTN_NAMESPACE_BEGIN
namespace detail {

/// How a prefill unit forms Q·Kᵀ and P·V: fp32 (exact numerics), or bf16 operands through two
/// FMAs per pair (portable) or vdpbf16ps.
enum class prefill_products { fp32, bf16_fma, bf16_dp };

/// True when Arch's bf16 engine can be vdpbf16ps (an AVX-512 arch, simd/avx512_bf16.hpp; it runs
/// where bf16_dot_products_wanted()).
template <class Arch>
inline constexpr bool prefill_native_bf16 =
#if GATTN_AVX512_BF16_COMPILED
    simd::detail::derives_v<Arch, xsimd::avx512f>;
#else
    false;
#endif

/// The engine of p's prefill on Arch: fp32 unless p.products is fast; then vdpbf16ps where Arch and
/// the CPU have it and it pays (core/cpu.hpp bf16_dot_products_wanted()), else the FMA engine.
template <class Arch>
inline prefill_products prefill_engine(const sdpa_params& p) {
  if (p.products == numerics::exact) return prefill_products::fp32;
  if constexpr (prefill_native_bf16<Arch>)
    if (bf16_dot_products_wanted()) return prefill_products::bf16_dp;
  return prefill_products::bf16_fma;
}

/// Name of an engine, as benchmarks label it.
inline const char* to_string(prefill_products e) {
  return e == prefill_products::fp32 ? "fp32" : e == prefill_products::bf16_fma ? "fma" : "avx512_bf16";
}

#if defined(__AVX512F__)
/// 16 pairs (round(a[i]), round(b[i])) as 32-bit lanes at out.
inline void store_bf16_pairs16(std::uint16_t* out, __m512 a, __m512 b) noexcept {
  const __m512i r = _mm512_or_si512(simd::detail::bf16_rne_bits(a), _mm512_slli_epi32(simd::detail::bf16_rne_bits(b), 16));
  _mm512_storeu_si512(out, r);
}
#endif

/// n pairs (a[i], b[i]) rounded to bf16 at out[2i], out[2i + 1]; b == nullptr: zero second halves.
template <class Arch, storage_type S>
inline void pack_bf16_pairs(const storage_element_t<S>* a, const storage_element_t<S>* b, index n, std::uint16_t* out) {
  index i = 0;
#if defined(__AVX512F__)
  if constexpr (simd::detail::derives_v<Arch, xsimd::avx512f>)
    for (; i + 16 <= n; i += 16)
      store_bf16_pairs16(out + 2 * i, __m512(simd::load_widened<Arch, S>(a + i)),
                         b ? __m512(simd::load_widened<Arch, S>(b + i)) : _mm512_setzero_ps());
#endif
  for (; i < n; ++i) {
    out[2 * i] = round_to_bf16(widen<S>(a[i]));
    out[2 * i + 1] = b ? round_to_bf16(widen<S>(b[i])) : std::uint16_t(0);
  }
}

/// Packs scale·Q of a unit's rows as bf16 pairs along d_qk into qt16 ([ceil(d_qk/2)][rows_pad][2]):
/// rows past valid_rows and the odd d_qk's last half are 0. Each row is rounded into `row`
/// (round_up(d_qk, 2) values of scratch) first, then its pairs are scattered.
template <class Arch>
inline void pack_q_bf16(const sdpa_params& p, const sdpa_plan& pl, std::uint16_t* qt16, index r, index i0,
                        index valid_rows, std::uint16_t* row) {
  using B = simd::batch<float, Arch>;
  constexpr index W = index(B::size);
  const index ldq = pl.rows_pad, dkp = (p.d_qk + 1) / 2;
  const B scale(p.scale);
  for (index m = 0; m < pl.rows_pad; ++m) {
    index c = 0;
    if (m < valid_rows) {
      const float* q = p.q + (i0 + m / pl.group) * p.q_token_stride + (r * pl.group + m % pl.group) * p.q_head_stride;
      for (; c + W <= p.d_qk; c += W) simd::store_bf16<Arch>(row + c, simd::load<Arch>(q + c) * scale);
      for (; c < p.d_qk; ++c) row[c] = round_to_bf16(q[c] * p.scale);
    }
    std::fill(row + c, row + 2 * dkp, std::uint16_t(0));
    for (index k = 0; k < dkp; ++k) std::memcpy(qt16 + (k * ldq + m) * 2, row + 2 * k, 2 * sizeof(std::uint16_t));
  }
}

/// Rounds n K rows (stride ld elements, d_qk values) into kp16 as rows of round_up(d_qk, 2) bf16.
template <class Arch, storage_type S>
inline void pack_k_bf16(const storage_element_t<S>* k, index ld, index n, index d_qk, std::uint16_t* kp16) {
  constexpr index W = index(simd::width<Arch>);
  const index ldo = round_up(d_qk, 2);
  for (index j = 0; j < n; ++j) {
    const storage_element_t<S>* src = k + j * ld;
    std::uint16_t* dst = kp16 + j * ldo;
    index c = 0;
    if constexpr (S == storage_type::bf16) {
      std::memcpy(dst, src, sizeof(std::uint16_t) * std::size_t(d_qk));
      c = d_qk;
    } else {
      for (; c + W <= d_qk; c += W) simd::store_bf16<Arch>(dst + c, simd::load_widened<Arch, S>(src + c));
    }
    for (; c < d_qk; ++c) dst[c] = round_to_bf16(widen<S>(src[c]));
    if (ldo > d_qk) dst[d_qk] = 0;
  }
}

/// Packs the n V rows at v (stride ld) as key pairs into vp16 ([ceil(n/2)][dv_pad][2]), channels
/// past d_v zero.
template <class Arch, storage_type S>
inline void pack_v_bf16(const storage_element_t<S>* v, index ld, index n, index d_v, index dv_pad, std::uint16_t* vp16) {
  for (index j = 0; j < n; j += 2) {
    std::uint16_t* dst = vp16 + (j / 2) * dv_pad * 2;
    pack_bf16_pairs<Arch, S>(v + j * ld, j + 1 < n ? v + (j + 1) * ld : nullptr, d_v, dst);
    std::fill(dst + 2 * d_v, dst + 2 * dv_pad, std::uint16_t(0));
  }
}

/// Packs the tile's probabilities Pᵀ (fp32, st[j][m], nk keys) as key pairs into pp16
/// ([ceil(nk/2)][rows_pad][2]).
template <class Arch>
inline void pack_p_bf16(const float* st, index ldq, index nk, std::uint16_t* pp16) {
  for (index j = 0; j < nk; j += 2)
    pack_bf16_pairs<Arch, storage_type::f32>(st + j * ldq, j + 1 < nk ? st + (j + 1) * ldq : nullptr, ldq,
                                             pp16 + (j / 2) * ldq * 2);
}

/// The 32-bit pair at p broadcast as the two halves (even, odd), widened (exact).
template <class Arch>
inline void broadcast_bf16_pair(const std::uint16_t* p, simd::batch<float, Arch>& even, simd::batch<float, Arch>& odd) {
  even = simd::broadcast<Arch>(bf16_to_float(p[0]));
  odd = simd::broadcast<Arch>(bf16_to_float(p[1]));
}

/// Sᵀ[j][v·W..] = Σ_q pair(K[j], q) · pair(Qt, q) for MR keys × NV row vectors, by FMAs (portable).
template <class Arch, int MR, int NV>
inline void qk_micro_bf16_fma(const std::uint16_t* k, index ldk, const std::uint16_t* qt, index ldq, index dkp, float* st,
                              index lds) {
  using B = simd::batch<float, Arch>;
  constexpr index W = index(B::size);
  B acc[MR][NV];
#pragma GCC unroll 8
  for (int j = 0; j < MR; ++j)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[j][v] = B(0.0f);
  for (index q = 0; q < dkp; ++q) {
    B qe[NV], qo[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      qe[v] = simd::load_bf16_even<Arch>(qt + (q * ldq + v * W) * 2);
      qo[v] = simd::load_bf16_odd<Arch>(qt + (q * ldq + v * W) * 2);
    }
#pragma GCC unroll 8
    for (int j = 0; j < MR; ++j) {
      B ke, ko;
      broadcast_bf16_pair<Arch>(k + j * ldk + 2 * q, ke, ko);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[j][v] = simd::fma(qe[v], ke, simd::fma(qo[v], ko, acc[j][v]));
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < MR; ++j)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) simd::store(st + j * lds + v * W, acc[j][v]);
}

#if GATTN_AVX512_BF16_COMPILED
/// The 32-bit pair at p in every lane.
inline __m512bh broadcast_pair_bh(const std::uint16_t* p) {
  std::uint32_t pair;
  std::memcpy(&pair, p, sizeof pair);
  return (__m512bh)_mm512_set1_epi32(int(pair));
}

/// qk_micro_bf16_fma by vdpbf16ps (16 lanes): one instruction per accumulator and pair.
template <int MR, int NV>
GATTN_AVX512_BF16_TARGET inline void qk_micro_bf16_dp(const std::uint16_t* k, index ldk, const std::uint16_t* qt,
                                                      index ldq, index dkp, float* st, index lds) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int j = 0; j < MR; ++j)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[j][v] = _mm512_setzero_ps();
  for (index q = 0; q < dkp; ++q) {
    __m512i qv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) qv[v] = _mm512_loadu_si512(qt + (q * ldq + v * 16) * 2);
#pragma GCC unroll 8
    for (int j = 0; j < MR; ++j) {
      const __m512bh kb = broadcast_pair_bh(k + j * ldk + 2 * q);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[j][v] = _mm512_dpbf16_ps(acc[j][v], (__m512bh)qv[v], kb);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < MR; ++j)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(st + j * lds + v * 16, acc[j][v]);
}
#endif

/// Step 1 in bf16: Sᵀ = K_tile · Qt over nk keys (bf16 K rows k16, stride ldk), Qt packed in sc.qt.
/// between(j, mr) runs after the first microkernel of keys [j, j + mr) (the caller's prefetch,
/// spread over the tile's products instead of one burst).
template <class Arch, prefill_products E, class Between>
inline void unit_scores_bf16(const sdpa_params& p, const sdpa_plan& pl, const unit_scratch& sc, const std::uint16_t* k16,
                             index ldk, index nk, Between&& between) {
  using tr = kernel_traits<Arch>;
  constexpr index W = tr::width;
  const index ldq = pl.rows_pad, nvq = pl.rows_pad / W, dkp = (p.d_qk + 1) / 2;
  const auto* qt16 = reinterpret_cast<const std::uint16_t*>(sc.qt);
  for (index v0 = 0; v0 < nvq; v0 += tr::qk_nv) {
    const int nv = int(std::min<index>(tr::qk_nv, nvq - v0));
    for (index j = 0; j < nk; j += tr::qk_mr) {
      const int mr = int(std::min<index>(tr::qk_mr, nk - j));
      static_switch<tr::qk_mr>(mr, [&](auto MR) {
        static_switch<tr::qk_nv>(nv, [&](auto NV) {
          constexpr int R = decltype(MR)::value, N = decltype(NV)::value;
          const std::uint16_t* q = qt16 + v0 * W * 2;
          float* s = sc.st + j * ldq + v0 * W;
#if GATTN_AVX512_BF16_COMPILED
          if constexpr (E == prefill_products::bf16_dp && prefill_native_bf16<Arch>) return qk_micro_bf16_dp<R, N>(k16 + j * ldk, ldk, q, ldq, dkp, s, ldq);
#endif
          qk_micro_bf16_fma<Arch, R, N>(k16 + j * ldk, ldk, q, ldq, dkp, s, ldq);
        });
      });
      if (v0 == 0) between(j, index(mr));
    }
  }
}

/// O[m][c..] = alpha[m]·O[m][c..] + Σ_i pair(P[m], i) · pair(V[..][c..], i) for MR rows × NV
/// channel vectors over nkp key pairs, by FMAs (portable); the tile's sum starts from 0 as in
/// pv_accumulate. Masked: row m takes keys j < vis[m] only (the half past it meets a zero V half).
template <class Arch, int MR, int NV, bool Masked>
inline void pv_micro_bf16_fma(const std::uint16_t* pp, index ldp, index nkp, const std::uint16_t* vp, index ldv, float* o,
                              index ldo, const float* alpha, const index* vis) {
  using B = simd::batch<float, Arch>;
  constexpr index W = index(B::size);
  B acc[MR][NV];
  index lim[MR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    lim[m] = Masked ? vis[m] : 2 * nkp;
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) acc[m][x] = B(0.0f);
  }
  for (index q = 0; q < nkp; ++q) {
    B ve[NV], vo[NV];
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) {
      ve[x] = simd::load_bf16_even<Arch>(vp + (q * ldv + x * W) * 2);
      vo[x] = simd::load_bf16_odd<Arch>(vp + (q * ldv + x * W) * 2);
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      if (Masked && 2 * q >= lim[m]) continue;
      B pe, po;
      broadcast_bf16_pair<Arch>(pp + (q * ldp + m) * 2, pe, po);
      const bool half = Masked && 2 * q + 1 >= lim[m];
#pragma GCC unroll 8
      for (int x = 0; x < NV; ++x) acc[m][x] = simd::fma(pe, ve[x], simd::fma(po, half ? B(0.0f) : vo[x], acc[m][x]));
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    const B a = simd::broadcast<Arch>(alpha ? alpha[m] : 1.0f);
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x)
      simd::store(o + m * ldo + x * W, simd::fma(simd::load<Arch>(o + m * ldo + x * W), a, acc[m][x]));
  }
}

#if GATTN_AVX512_BF16_COMPILED
/// pv_micro_bf16_fma by vdpbf16ps (16 lanes).
template <int MR, int NV, bool Masked>
GATTN_AVX512_BF16_TARGET inline void pv_micro_bf16_dp(const std::uint16_t* pp, index ldp, index nkp,
                                                      const std::uint16_t* vp, index ldv, float* o, index ldo,
                                                      const float* alpha, const index* vis) {
  __m512 acc[MR][NV];
  index lim[MR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    lim[m] = Masked ? vis[m] : 2 * nkp;
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) acc[m][x] = _mm512_setzero_ps();
  }
  const __m512i even_half = _mm512_set1_epi32(0xFFFF);
  for (index q = 0; q < nkp; ++q) {
    __m512i vv[NV];
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) vv[x] = _mm512_loadu_si512(vp + (q * ldv + x * 16) * 2);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      if (Masked && 2 * q >= lim[m]) continue;
      const __m512bh pb = broadcast_pair_bh(pp + (q * ldp + m) * 2);
      const bool half = Masked && 2 * q + 1 >= lim[m];
#pragma GCC unroll 8
      for (int x = 0; x < NV; ++x)
        acc[m][x] = _mm512_dpbf16_ps(acc[m][x], (__m512bh)(half ? _mm512_and_si512(vv[x], even_half) : vv[x]), pb);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    const __m512 a = _mm512_set1_ps(alpha ? alpha[m] : 1.0f);
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x)
      _mm512_storeu_ps(o + m * ldo + x * 16, _mm512_fmadd_ps(_mm512_loadu_ps(o + m * ldo + x * 16), a, acc[m][x]));
  }
}
#endif

/// The bf16 P·V microkernel of engine E for MR rows × NV vectors (runtime mr, nv), masked when
/// vis != nullptr.
template <class Arch, prefill_products E>
inline void pv_dispatch_bf16(int mr, int nv, const std::uint16_t* pp, index ldp, index nkp, const std::uint16_t* vp,
                             index ldv, float* o, index ldo, const float* alpha, const index* vis) {
  using tr = kernel_traits<Arch>;
  static_switch<tr::pv_mr>(mr, [&](auto MR) {
    static_switch<tr::pv_nv>(nv, [&](auto NV) {
      constexpr int R = decltype(MR)::value, N = decltype(NV)::value;
#if GATTN_AVX512_BF16_COMPILED
      if constexpr (E == prefill_products::bf16_dp && prefill_native_bf16<Arch>) {
        if (vis) pv_micro_bf16_dp<R, N, true>(pp, ldp, nkp, vp, ldv, o, ldo, alpha, vis);
        else pv_micro_bf16_dp<R, N, false>(pp, ldp, nkp, vp, ldv, o, ldo, alpha, nullptr);
        return;
      }
#endif
      if (vis) pv_micro_bf16_fma<Arch, R, N, true>(pp, ldp, nkp, vp, ldv, o, ldo, alpha, vis);
      else pv_micro_bf16_fma<Arch, R, N, false>(pp, ldp, nkp, vp, ldv, o, ldo, alpha, nullptr);
    });
  });
}

/// Step 3 in bf16: O = alpha·O + P·V_tile with P packed in sc.pk and V pairs vp16 (dv_pad apart);
/// on a diagonal tile each row takes only its visible keys.
template <class Arch, prefill_products E>
inline void unit_pv_bf16(const sdpa_plan& pl, const unit_scratch& sc, index valid_rows, bool diag, const std::uint16_t* vp16,
                         index j0, index nk) {
  using tr = kernel_traits<Arch>;
  static_assert(tr::block_keys % 2 == 0, "the scratch holds a tile's P and V as whole key pairs");
  constexpr index W = tr::width;
  const index nvo = pl.dv_pad / W;
  const auto* pp16 = reinterpret_cast<const std::uint16_t*>(sc.pk);
  for (index x0 = 0; x0 < nvo; x0 += tr::pv_nv) {
    const int nv = int(std::min<index>(tr::pv_nv, nvo - x0));
    for (index m = 0; m < valid_rows; m += tr::pv_mr) {
      const int mr = int(std::min<index>(tr::pv_mr, valid_rows - m));
      index vis[tr::pv_mr];
      const index most = diag ? visible_in_tile(mr, j0, nk, [&](int k) { return index(sc.lim[m + k]); }, vis) : -1;
      const index nkp = ((most < 0 ? nk : most) + 1) / 2;
      pv_dispatch_bf16<Arch, E>(mr, nv, pp16 + m * 2, pl.rows_pad, nkp, vp16 + x0 * W * 2, pl.dv_pad,
                                sc.o + m * pl.dv_pad + x0 * W, pl.dv_pad, sc.alpha + m, most < 0 ? nullptr : vis);
    }
  }
}

}  // namespace detail
GATTN_NAMESPACE_END  // namespace gattn
