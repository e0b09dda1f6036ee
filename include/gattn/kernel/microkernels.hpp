// Register-blocked microkernels of the prefill path: Sᵀ = K·Qt and O = alpha·O + P·V.
#pragma once

#include "gattn/core/config.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/types.hpp"
#include "gattn/simd/arch.hpp"
#include "gattn/kernel/kernel_traits.hpp"
#include "gattn/simd/simd.hpp"

namespace gattn {
namespace detail {

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

/// O[m][c..] = alpha[m]·O[m][c..] + Σ_j P(m, j) · V[j][c..] for MR rows × NV channel vectors, with
/// P(m, j) = p[j·ldp + m] when KeyMajor (the prefill path's Pᵀ) or p[m·ldp + j] (decode's P);
/// alpha = nullptr: O += P·V. The tile's sum starts from 0 and is added to alpha·O at the end
/// (blocked summation: the rounding error grows with Bc + T/Bc instead of T).
template <class Arch, int MR, int NV, bool KeyMajor>
inline void pv_accumulate(const float* p, index ldp, index nk, const float* v, index vs, float* o, index ldo,
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
      const B pb = simd::broadcast<Arch>(KeyMajor ? p[j * ldp + m] : p[m * ldp + j]);
#pragma GCC unroll 8
      for (int x = 0; x < NV; ++x) acc[m][x] = simd::fma(pb, vv[x], acc[m][x]);
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

/// The prefill path's P·V: P stored transposed, Pᵀ[j][m].
template <class Arch, int MR, int NV>
inline void pv_micro(const float* pt, index ldp, index nk, const float* v, index vs, float* o, index ldo,
                     const float* alpha) {
  pv_accumulate<Arch, MR, NV, true>(pt, ldp, nk, v, vs, o, ldo, alpha);
}

}  // namespace detail
}  // namespace gattn
