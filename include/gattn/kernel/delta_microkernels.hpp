// Register-blocked products of the delta-rule kernel's chunked form (docs/spec.md §13): dense and
// lower-triangular products and the chunk's forward substitution, written once over the simd layer.
#pragma once

#include <algorithm>
#include <type_traits>

#include "gattn/core/types.hpp"
#include "gattn/kernel/scratch.hpp"
#include "gattn/simd/arch.hpp"
#include "gattn/simd/simd.hpp"

GATTN_NAMESPACE_BEGIN
namespace detail {

/// Register blocks of the delta-rule products: mr rows × nv vectors of accumulators, plus nv loaded
/// vectors and a broadcast: 24 + 4 + 1 of 32 registers (AVX-512), 12 + 3 + 1 of 16 (AVX2, SSE).
template <class Arch>
struct delta_traits {
  static constexpr index width = index(simd::width<Arch>);
  static constexpr bool big_regfile = width >= 16;
  static constexpr int mr = big_regfile ? 6 : 4;
  static constexpr int nv = big_regfile ? 4 : (width == 1 ? 4 : 3);
};

/// exp(x) for x ≤ 0 with no denormal result (it would slow the products that use it).
inline float delta_exp(float x) { return simd::exp_nonpositive(simd::scalar_batch<float>(x)).v; }

/// Left operand of a product, element (r, c) at p[r·rs + c·cs] (a transposed view is cs = 1).
struct delta_lhs {
  const float* p;
  index rs, cs;
  const float* at(index r, index c) const { return p + r * rs + c * cs; }
};

/// Destination of a product: d(r, x) = alpha_r·d(r, x) + Σ (alpha_r = alpha[r·astride]) when alpha is
/// set, else d(r, x) = Σ. The sum starts from 0 and is added at the end (blocked summation).
struct delta_dst {
  float* p;
  index ld;
  const float* alpha = nullptr;
  index astride = 0;
  delta_dst rows_from(index r) const { return {p + r * ld, ld, alpha ? alpha + r * astride : nullptr, astride}; }
  delta_dst cols_from(index x) const { return {p + x, ld, alpha, astride}; }
};

/// MR rows × NV vectors of d = a·b over c < n, where b is row-major (row c at b + c·ldb). Lower: the
/// MR columns c ∈ [n, n + MR) follow, column n + j added to rows m ≥ j only (a lower-triangular
/// product whose row m is row n + m of the triangle). Masked entries are never multiplied: 0·NaN
/// would carry a later token's NaN into an earlier row.
template <class Arch, int MR, int NV, bool Lower>
inline void delta_micro(delta_lhs a, index n, const float* b, index ldb, delta_dst d) {
  using B = simd::batch<float, Arch>;
  constexpr index W = index(B::size);
  B acc[MR][NV];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) acc[m][x] = B(0.0f);
  for (index c = 0; c < n; ++c) {
    B bv[NV];
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) bv[x] = simd::load_reg<Arch>(b + c * ldb + x * W);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const B am = simd::broadcast<Arch>(*a.at(m, c));
#pragma GCC unroll 8
      for (int x = 0; x < NV; ++x) acc[m][x] = simd::fma(am, bv[x], acc[m][x]);
    }
  }
  if constexpr (Lower) {
#pragma GCC unroll 8
    for (int j = 0; j < MR; ++j) {
      B bv[NV];
#pragma GCC unroll 8
      for (int x = 0; x < NV; ++x) bv[x] = simd::load<Arch>(b + (n + j) * ldb + x * W);
#pragma GCC unroll 8
      for (int m = j; m < MR; ++m) {
        const B am = simd::broadcast<Arch>(*a.at(m, n + j));
#pragma GCC unroll 8
        for (int x = 0; x < NV; ++x) acc[m][x] = simd::fma(am, bv[x], acc[m][x]);
      }
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    float* row = d.p + m * d.ld;
    if (d.alpha) {
      const B al = simd::broadcast<Arch>(d.alpha[m * d.astride]);
#pragma GCC unroll 8
      for (int x = 0; x < NV; ++x) simd::store(row + x * W, simd::fma(simd::load<Arch>(row + x * W), al, acc[m][x]));
    } else {
#pragma GCC unroll 8
      for (int x = 0; x < NV; ++x) simd::store(row + x * W, acc[m][x]);
    }
  }
}

/// Rows of the row block starting at r0 of `rows`: MR, except that a short remainder shares the last
/// two blocks evenly (32 rows as 6,6,6,6,4,4 rather than 6,6,6,6,6,2: a 2-row block loads as many
/// vectors per FMA as it does FMAs).
template <int MR>
inline int delta_block_rows(index r0, index rows) {
  const index left = rows - r0;
  if (left >= 2 * MR || left <= MR) return int(std::min<index>(MR, left));
  const index rest = left - MR;
  return rest >= MR - 2 ? MR : int((left + 1) / 2);
}

/// Rows [0, rows) of a column strip of nv vectors of Arch: row blocks of delta_block_rows.
/// Lower: row r sums c ≤ r (n is ignored), else c < n.
template <class Arch, bool Lower>
inline void delta_strip(int nv, index rows, index n, delta_lhs a, const float* b, index ldb, delta_dst d) {
  constexpr int MR = delta_traits<Arch>::mr;
  constexpr int NVmax = delta_traits<Arch>::nv > 4 ? delta_traits<Arch>::nv : 4;
  for (index r0 = 0, mr = 0; r0 < rows; r0 += mr) {
    mr = delta_block_rows<MR>(r0, rows);
    const delta_lhs ar{a.p + r0 * a.rs, a.rs, a.cs};
    static_switch<MR>(int(mr), [&](auto R) {
      static_switch<NVmax>(nv, [&](auto N) {
        delta_micro<Arch, decltype(R)::value, decltype(N)::value, Lower>(ar, Lower ? r0 : n, b, ldb, d.rows_from(r0));
      });
    });
  }
}

/// d(r, x) (+)= Σ_c a(r, c)·b(c, x) for r < rows, x < cols: column strips of the widest register
/// block, then the remaining whole vectors, then the columns past the last whole vector one lane at
/// a time (any cols works; b and d are never touched past cols). Lower: row r sums c ≤ r only.
template <class Arch, bool Lower = false>
inline void delta_product(index rows, index cols, index n, delta_lhs a, const float* b, index ldb, delta_dst d) {
  constexpr index W = delta_traits<Arch>::width;
  constexpr int NV = delta_traits<Arch>::nv;
  const index whole = cols / W;
  index x = 0;
  for (; x + NV <= whole; x += NV) delta_strip<Arch, Lower>(NV, rows, n, a, b + x * W, ldb, d.cols_from(x * W));
  if (x < whole) delta_strip<Arch, Lower>(int(whole - x), rows, n, a, b + x * W, ldb, d.cols_from(x * W));
  if constexpr (W > 1) {
    for (index c = whole * W; c < cols; c += 4) {
      const int nv = int(std::min<index>(4, cols - c));
      delta_strip<scalar_arch, Lower>(nv, rows, n, a, b + c, ldb, d.cols_from(c));
    }
  }
}

/// The lower part of d = a·bt over c < n, bt packed [n × ldb] with ldb ≥ ceil_W(first + rows): row r
/// (token first + r) gets the columns i ≤ first + r, rounded up to whole vectors (the extra entries
/// are computed, never read; bt is zero past its tokens).
template <class Arch>
inline void delta_lower_cols(index rows, index first, index n, delta_lhs a, const float* bt, index ldb, delta_dst d) {
  constexpr index W = delta_traits<Arch>::width;
  constexpr int MR = delta_traits<Arch>::mr;
  for (index r0 = 0; r0 < rows; r0 += MR) {
    const index mr = std::min<index>(MR, rows - r0);
    const index cols = (first + r0 + mr + W - 1) / W * W;
    delta_product<Arch>(mr, cols, n, {a.p + r0 * a.rs, a.rs, a.cs}, bt, ldb, d.rows_from(r0));
  }
}

#if defined(__AVX512F__)
/// In-register transpose of a 16 × 16 tile: r[i] = row i in, column i out.
inline void delta_transpose16(__m512 (&r)[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4i + k], 128-bit lane L: column 4L + k of rows 4i .. 4i + 3
  auto pd = [](__m512 x) { return _mm512_castps_pd(x); };
  __m512 u[16];
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(t[4 * i]), pd(t[4 * i + 2])));
    u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(t[4 * i]), pd(t[4 * i + 2])));
    u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(t[4 * i + 1]), pd(t[4 * i + 3])));
    u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(t[4 * i + 1]), pd(t[4 * i + 3])));
  }
  for (int k = 0; k < 4; ++k) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x44), v1 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xEE);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x44), v3 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xEE);
    r[k] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[4 + k] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    r[8 + k] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[12 + k] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
}

/// Channels [0, dk − dk % 16) of delta_transpose in 16 × 16 tiles (rows past L read as zero).
inline index delta_transpose_tiles(const float* rows, index L, index dk, float* t, index ldt) {
  const index lp = (L + 15) / 16 * 16, cw = dk / 16 * 16;
  for (index i0 = 0; i0 < lp; i0 += 16)
    for (index c0 = 0; c0 < cw; c0 += 16) {
      __m512 r[16];
      for (index i = 0; i < 16; ++i) r[i] = i0 + i < L ? _mm512_loadu_ps(rows + (i0 + i) * dk + c0) : _mm512_setzero_ps();
      delta_transpose16(r);
      for (index c = 0; c < 16; ++c) _mm512_storeu_ps(t + (c0 + c) * ldt + i0, r[c]);
    }
  return cw;
}
#endif

/// t[c·ldt + i] = rows[i·dk + c] for i < L, zero for i in [L, ceil_W(L)). AVX-512 in register tiles;
/// otherwise in blocks of 16 channels (reading all L rows of one channel at a time would walk L lines
/// that share a few cache sets).
template <class Arch>
inline void delta_transpose(const float* rows, index L, index dk, float* t, index ldt) {
  constexpr index W = delta_traits<Arch>::width;
  const index lp = (L + W - 1) / W * W;
  index done = 0;
#if defined(__AVX512F__)
  if constexpr (W == 16 && std::is_base_of<xsimd::avx512f, Arch>::value) done = delta_transpose_tiles(rows, L, dk, t, ldt);
#endif
  for (index c0 = done; c0 < dk; c0 += 16) {
    const index c1 = std::min(dk, c0 + 16);
    for (index i = 0; i < L; ++i)
      for (index c = c0; c < c1; ++c) t[c * ldt + i] = rows[i * dk + c];
  }
  for (index c = done; c < dk; ++c) std::fill(t + c * ldt + L, t + c * ldt + lp, 0.0f);
}

/// Rows [j0, j0 + MR) of the forward substitution u_j = u_j + Σ_{i<j} l_ji·u_i (u holds r on entry;
/// l strictly lower, row j at l + j·ldl), NV vectors wide: the rows before j0 are final.
template <class Arch, int MR, int NV>
inline void delta_solve_block(const float* l, index ldl, index j0, float* u, index ldu) {
  using B = simd::batch<float, Arch>;
  constexpr index W = index(B::size);
  B acc[MR][NV];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) acc[m][x] = simd::load<Arch>(u + (j0 + m) * ldu + x * W);
  for (index i = 0; i < j0; ++i) {
    B uv[NV];
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) uv[x] = simd::load_reg<Arch>(u + i * ldu + x * W);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const B lm = simd::broadcast<Arch>(l[(j0 + m) * ldl + i]);
#pragma GCC unroll 8
      for (int x = 0; x < NV; ++x) acc[m][x] = simd::fma(lm, uv[x], acc[m][x]);
    }
  }
  // Inside the block, row m takes the rows above it once they are final (m' < m only).
#pragma GCC unroll 8
  for (int m = 1; m < MR; ++m)
#pragma GCC unroll 8
    for (int j = 0; j < m; ++j) {
      const B lm = simd::broadcast<Arch>(l[(j0 + m) * ldl + j0 + j]);
#pragma GCC unroll 8
      for (int x = 0; x < NV; ++x) acc[m][x] = simd::fma(lm, acc[j][x], acc[m][x]);
    }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) simd::store(u + (j0 + m) * ldu + x * W, acc[m][x]);
}

/// The forward substitution over rows [0, rows) of one column strip (nv vectors of Arch), in order.
template <class Arch>
inline void delta_solve_strip(int nv, index rows, const float* l, index ldl, float* u, index ldu) {
  constexpr int MR = delta_traits<Arch>::mr;
  constexpr int NVmax = delta_traits<Arch>::nv > 4 ? delta_traits<Arch>::nv : 4;
  for (index j0 = 0; j0 < rows; j0 += MR) {
    const int mr = int(std::min<index>(MR, rows - j0));
    static_switch<MR>(mr, [&](auto R) {
      static_switch<NVmax>(nv, [&](auto N) { delta_solve_block<Arch, decltype(R)::value, decltype(N)::value>(l, ldl, j0, u, ldu); });
    });
  }
}

/// Solves (I − L) U = R in place (u holds R [rows × cols], ld ldu; L strictly lower [rows × rows]):
/// columns are independent, so strips as in delta_product.
template <class Arch>
inline void delta_solve(index rows, index cols, const float* l, index ldl, float* u, index ldu) {
  constexpr index W = delta_traits<Arch>::width;
  constexpr int NV = delta_traits<Arch>::nv;
  const index whole = cols / W;
  index x = 0;
  for (; x + NV <= whole; x += NV) delta_solve_strip<Arch>(NV, rows, l, ldl, u + x * W, ldu);
  if (x < whole) delta_solve_strip<Arch>(int(whole - x), rows, l, ldl, u + x * W, ldu);
  if constexpr (W > 1) {
    for (index c = whole * W; c < cols; c += 4)
      delta_solve_strip<scalar_arch>(int(std::min<index>(4, cols - c)), rows, l, ldl, u + c, ldu);
  }
}

}  // namespace detail
GATTN_NAMESPACE_END  // namespace gattn
