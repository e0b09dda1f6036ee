// bf16 dot products with fp32 accumulation (AVX512-BF16 vdpbf16ps) for docs/spec.md §10's `fast` numerics:
// both operands are bf16, so each product is exact in fp32 and only the sums round. In every
// AVX-512 build (simd/avx512_bf16.hpp); they run where bf16_dot_products_wanted(). Other archs have
// no such decode kernel here (NEON BFDOT serves the GEMM only), and `fast` runs `exact` on them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "gattn/core/types.hpp"
#include "gattn/simd/arch.hpp"
#include "gattn/simd/avx512_bf16.hpp"
#include "gattn/simd/convert.hpp"
#include "gattn/simd/simd.hpp"

GATTN_NAMESPACE_BEGIN namespace simd {

#if GATTN_AVX512_BF16_COMPILED
/// True when Arch can run the bf16 dot-product kernels below.
template <class Arch>
inline constexpr bool has_bf16_dot = std::is_base_of<xsimd::avx512bw, Arch>::value;

namespace detail {
// The first n of 32 16-bit lanes (n may be <= 0 or >= 32).
inline __mmask32 lanes16_mask(index n) {
  return n >= 32 ? ~__mmask32(0) : n <= 0 ? __mmask32(0) : (__mmask32(1) << n) - 1;
}
GATTN_AVX512_BF16_TARGET inline __m512 dot_pairs(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}
// 16 bf16 from p (n of them, the rest 0) widened to fp32: the exact value, for a key without a pair.
inline __m512 widen16(const std::uint16_t* p, index n) {
  const __mmask16 m = n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n < 0 ? 0 : unsigned(n))) - 1);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

/// Lane indices that interleave two rows a, b of 32 bf16 into pairs (a[i], b[i]) by
/// _mm512_permutex2var_epi16: pairs 0-15 (pairs 16-31: these + 16).
alignas(64) inline constexpr std::uint16_t pair_lanes[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                            8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
/// The two bf16 at p in every 32-bit lane.
inline __m512i broadcast_pair(const std::uint16_t* p) {
  std::uint32_t pair;
  std::memcpy(&pair, p, sizeof pair);
  return _mm512_set1_epi32(int(pair));
}
/// Two key rows' channels as pairs (one lane per channel: row 0's value, row 1's).
struct key_pair {
  __m512i lo, hi;  // channels 0-15, 16-31
};
/// The first n of 32 bf16 of rows a and a + ld (the rest 0) as a key_pair (lo_lanes, hi_lanes:
/// pair_lanes and pair_lanes + 16).
inline key_pair load_key_pair(const std::uint16_t* a, index ld, index n, __m512i lo_lanes, __m512i hi_lanes) {
  const __mmask32 mk = lanes16_mask(n);
  const __m512i ra = _mm512_maskz_loadu_epi16(mk, a);
  const __m512i rb = _mm512_maskz_loadu_epi16(mk, a + ld);
  return {_mm512_permutex2var_epi16(ra, lo_lanes, rb), _mm512_permutex2var_epi16(ra, hi_lanes, rb)};
}
/// True when a row that sees `lim` keys takes key j alone: j is visible and its pair partner is
/// not (keys in visible pairs are taken by the pairs).
inline bool taken_alone(index j, index lim) { return !(j >= lim || j - j % 2 + 2 <= lim); }
/// *dst = *dst·a + acc (16 floats).
inline void scale_add_store(float* dst, __m512 a, __m512 acc) {
  _mm512_storeu_ps(dst, _mm512_fmadd_ps(_mm512_loadu_ps(dst), a, acc));
}
/// One key pair (j, j + 1) of bf16_dot_pv: V's rows at v (ldv apart) into every row's accumulators;
/// Checked: a row whose limit hides key j + 1 skips the pair. A function, not a lambda, so that
/// it carries the AVX512-BF16 target (every index into acc is a constant after full unrolling:
/// acc stays in registers once inlined).
template <int MR, int NV, bool Checked>
GATTN_AVX512_BF16_TARGET inline void pv_pairs(__m512 (&acc)[MR][2 * NV], const std::uint16_t* p, index ldp,
                                              const index* rows_lim, const std::uint16_t* v, index ldv, index nch,
                                              index j, __m512i lo, __m512i hi) {
  key_pair kv[NV];
#pragma GCC unroll 8
  for (int x = 0; x < NV; ++x) kv[x] = load_key_pair(v + 32 * x, ldv, nch - 32 * x, lo, hi);
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    if (Checked && j + 2 > rows_lim[m]) continue;
    const __m512i pb = broadcast_pair(p + m * ldp + j);
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) {
      acc[m][2 * x] = dot_pairs(acc[m][2 * x], pb, kv[x].lo);
      acc[m][2 * x + 1] = dot_pairs(acc[m][2 * x + 1], pb, kv[x].hi);
    }
  }
}
}  // namespace detail

/// s[r·lds + t] = Σ_c q[r·ldq + c]·k[t][c], c < d, for RB rows of bf16 q × KB bf16 key rows.
template <class Arch, int RB, int KB>
GATTN_AVX512_BF16_TARGET inline void bf16_dot_qk(const std::uint16_t* q, index ldq, const std::uint16_t* const* k,
                                                 index d, float* s, index lds) {
  constexpr int N = RB * KB;
  static_assert(N % 16 == 0 || N < 16, "one haddp per 16 accumulators");
  __m512 acc[N];
#pragma GCC unroll 16
  for (int n = 0; n < N; ++n) acc[n] = _mm512_setzero_ps();
  for (index c = 0; c < d; c += 32) {
    const __mmask32 m = detail::lanes16_mask(d - c);
    __m512i kv[KB];
#pragma GCC unroll 16
    for (int t = 0; t < KB; ++t) kv[t] = _mm512_maskz_loadu_epi16(m, k[t] + c);
#pragma GCC unroll 16
    for (int r = 0; r < RB; ++r) {
      const __m512i qv = _mm512_maskz_loadu_epi16(m, q + r * ldq + c);
#pragma GCC unroll 16
      for (int t = 0; t < KB; ++t) acc[r * KB + t] = detail::dot_pairs(acc[r * KB + t], qv, kv[t]);
    }
  }
  alignas(64) float sums[N < 16 ? 16 : N];
  if constexpr (N % 16 == 0) {
    batch<float, Arch> b[N];
#pragma GCC unroll 16
    for (int n = 0; n < N; ++n) b[n] = acc[n];
#pragma GCC unroll 4
    for (int g = 0; g < N / 16; ++g) simd::store(sums + g * 16, simd::haddp(b + g * 16));
  } else {
#pragma GCC unroll 16
    for (int n = 0; n < N; ++n) sums[n] = _mm512_reduce_add_ps(acc[n]);
  }
#pragma GCC unroll 16
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < KB; ++t) s[r * lds + t] = sums[r * KB + t];
}

/// O[m][c] = alpha[m]·O[m][c] + Σ_j p[m·ldp + j]·v[j·ldv + c] for MR rows, channels c < 32·NV
/// (those >= nch read as 0), bf16 p and v, keys in pairs (one vdpbf16ps per pair, V's two rows
/// interleaved in registers). Row m takes keys j < lim[m] (lim = nullptr: all nk); a key whose
/// pair partner is hidden is taken alone (widened fma), so a hidden NaN/Inf V never meets p = 0.
/// alpha = nullptr: O += P·V. o needs 32·NV writable floats per row.
template <class Arch, int MR, int NV>
GATTN_AVX512_BF16_TARGET inline void bf16_dot_pv(const std::uint16_t* p, index ldp, index nk, const index* lim,
                                                 const std::uint16_t* v, index ldv, index nch, float* o, index ldo,
                                                 const float* alpha) {
  const __m512i lo = _mm512_load_si512(detail::pair_lanes);
  const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  __m512 acc[MR][2 * NV];
  index rows_lim[MR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    rows_lim[m] = lim ? lim[m] : nk;
#pragma GCC unroll 8
    for (int x = 0; x < 2 * NV; ++x) acc[m][x] = _mm512_setzero_ps();
  }
  index common = nk;  // keys every row sees
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) common = std::min(common, rows_lim[m]);
  index j = 0;
  for (; j + 2 <= common; j += 2)
    detail::pv_pairs<MR, NV, false>(acc, p, ldp, rows_lim, v + j * ldv, ldv, nch, j, lo, hi);
  if (j < nk) {  // diagonal tiles and an odd last key: rows past their limit, keys without a pair
    const index first_single = j;
    for (; j + 2 <= nk; j += 2)
      detail::pv_pairs<MR, NV, true>(acc, p, ldp, rows_lim, v + j * ldv, ldv, nch, j, lo, hi);
    for (index jj = first_single; jj < nk; ++jj) {
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) {
        if (!detail::taken_alone(jj, rows_lim[m])) continue;
        const __m512 pj = _mm512_set1_ps(bf16_to_float(p[m * ldp + jj]));
#pragma GCC unroll 8
        for (int x = 0; x < NV; ++x) {
          const std::uint16_t* row = v + jj * ldv + 32 * x;
          acc[m][2 * x] = _mm512_fmadd_ps(pj, detail::widen16(row, nch - 32 * x), acc[m][2 * x]);
          acc[m][2 * x + 1] = _mm512_fmadd_ps(pj, detail::widen16(row + 16, nch - 32 * x - 16), acc[m][2 * x + 1]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    const __m512 a = _mm512_set1_ps(alpha ? alpha[m] : 1.0f);
#pragma GCC unroll 8
    for (int x = 0; x < 2 * NV; ++x) {
      if (32 * (x / 2) >= nch) break;  // past the row (its 32-channel blocks end at round_up(nch, 32))
      detail::scale_add_store(o + m * ldo + 16 * x, a, acc[m][x]);
    }
  }
}
#else
template <class Arch>
inline constexpr bool has_bf16_dot = false;

// Declared only, for code behind `if constexpr (has_bf16_dot<Arch>)`.
template <class Arch, int RB, int KB>
void bf16_dot_qk(const std::uint16_t* q, index ldq, const std::uint16_t* const* k, index d, float* s, index lds);
template <class Arch, int MR, int NV>
void bf16_dot_pv(const std::uint16_t* p, index ldp, index nk, const index* lim, const std::uint16_t* v, index ldv,
                 index nch, float* o, index ldo, const float* alpha);
#endif

}  GATTN_NAMESPACE_END  // namespace gattn::simd
