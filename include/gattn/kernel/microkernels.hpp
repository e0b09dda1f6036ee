// Register-blocked microkernels of the prefill path: Sᵀ = K·Qt and O = alpha·O + P·V.
#pragma once

#include <algorithm>

#include "gattn/core/config.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/types.hpp"
#include "gattn/simd/arch.hpp"
#include "gattn/kernel/kernel_traits.hpp"
#include "gattn/kernel/scratch.hpp"
#include "gattn/simd/convert.hpp"
#include "gattn/simd/simd.hpp"

GATTN_NAMESPACE_BEGIN
namespace detail {

/// Sᵀ[j][v·W..] = Σ_c K[j][c] · Qt[c][v·W..] for MR keys × NV row vectors.
template <class Arch, int MR, int NV>
inline void qk_micro(const float* k, index ldk, const float* qt, index ldq, index d, float* st, index lds) {
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
      const B kj = simd::broadcast<Arch>(k[j * ldk + c]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[j][v] = simd::fma(kj, qv[v], acc[j][v]);
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
/// V stored as S (bf16/f16: widened in registers as it is loaded; the products are the fp32 ones).
/// Masked (tiles on the causal diagonal): row m takes keys j < vis[m] only. A masked key's p is 0,
/// but 0·V[j] is NaN when V[j] is NaN or Inf, so it must not be multiplied at all.
template <class Arch, int MR, int NV, bool KeyMajor, bool Masked, storage_type S = storage_type::f32>
inline void pv_accumulate(const float* p, index ldp, index nk, const storage_element_t<S>* v, index ldv, float* o, index ldo,
                          const float* alpha, const index* vis) {
  using B = simd::batch<float, Arch>;
  constexpr index W = index(B::size);
  B acc[MR][NV];
  index lim[MR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    lim[m] = Masked ? vis[m] : nk;
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) acc[m][x] = B(0.0f);
  }
  for (index j = 0; j < nk; ++j) {
    B vv[NV];
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) {
      if constexpr (S == storage_type::f32) vv[x] = simd::load_reg<Arch>(v + j * ldv + x * W);
      else vv[x] = simd::load_widened<Arch, S>(v + j * ldv + x * W);
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      if (Masked && j >= lim[m]) continue;
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

/// Visible keys of rows [m, m + mr) of a P·V call over keys [j0, j0 + nk), lim(m) = the row's
/// visible-key count: writes vis[] and returns the largest, or -1 when every row sees all nk keys
/// (the unmasked microkernel then applies).
template <class Lim>
inline index visible_in_tile(int mr, index j0, index nk, Lim&& lim, index* vis) {
  index most = 0;
  bool all = true;
  for (int r = 0; r < mr; ++r) {
    vis[r] = std::clamp<index>(lim(r) - j0, 0, nk);
    most = std::max(most, vis[r]);
    all = all && vis[r] == nk;
  }
  return all ? -1 : most;
}

/// Runs the P·V microkernel for MR rows × NV vectors (runtime mr, nv), masked when vis != nullptr
/// (nk then the largest vis).
template <class Arch, bool KeyMajor, storage_type S = storage_type::f32>
inline void pv_dispatch(int mr, int nv, const float* p, index ldp, index nk, const storage_element_t<S>* v, index ldv, float* o,
                        index ldo, const float* alpha, const index* vis) {
  using tr = kernel_traits<Arch>;
  static_switch<tr::pv_mr>(mr, [&](auto MR) {
    static_switch<tr::pv_nv>(nv, [&](auto NV) {
      constexpr int R = decltype(MR)::value, N = decltype(NV)::value;
      if (vis) pv_accumulate<Arch, R, N, KeyMajor, true, S>(p, ldp, nk, v, ldv, o, ldo, alpha, vis);
      else pv_accumulate<Arch, R, N, KeyMajor, false, S>(p, ldp, nk, v, ldv, o, ldo, alpha, nullptr);
    });
  });
}

}  // namespace detail
GATTN_NAMESPACE_END  // namespace gattn
