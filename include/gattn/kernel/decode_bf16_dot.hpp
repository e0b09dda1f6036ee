// docs/spec.md §10 `fast` numerics on the decode path: a bf16 cache read with bf16 dot products
// (simd/bf16_dot.hpp). scale·q and each block's probabilities are rounded to bf16 once; the sums,
// the softmax state (m, l from the unrounded fp32 probabilities) and O stay fp32.
#pragma once

#include <cstdint>
#include <vector>

#include "gattn/core/config.hpp"
#include "gattn/core/cpu.hpp"
#include "gattn/core/types.hpp"
#include "gattn/kernel/sdpa_params.hpp"
#include "gattn/simd/bf16_dot.hpp"

GATTN_NAMESPACE_BEGIN
namespace detail {

/// True when the decode path reads p's cache with bf16 dot products on Arch: a bf16 cache with
/// `fast` numerics where the instruction exists and pays (core/cpu.hpp); elsewhere `fast` runs
/// the exact path.
template <class Arch>
inline bool decode_uses_bf16_dot(const sdpa_params& p) {
  return simd::has_bf16_dot<Arch> && p.kv_type == storage_type::bf16 && p.numerics == kv_numerics::fast &&
         bf16_dot_products_wanted();
}

/// s = q·kᵀ for rb (1, 2 or 4) rows of bf16 q × qk_keys key rows (16 accumulators per call).
template <class Arch>
inline void bf16_dot_qk_dispatch(int rb, index qk_keys, const std::uint16_t* q, index ldq, const std::uint16_t* const* k,
                                 index d, float* s, index lds) {
  if (qk_keys == 4) {
    if (rb == 4) simd::bf16_dot_qk<Arch, 4, 4>(q, ldq, k, d, s, lds);
    else if (rb == 2) simd::bf16_dot_qk<Arch, 2, 4>(q, ldq, k, d, s, lds);
    else simd::bf16_dot_qk<Arch, 1, 4>(q, ldq, k, d, s, lds);
  } else if (qk_keys == 8) {
    if (rb == 2) simd::bf16_dot_qk<Arch, 2, 8>(q, ldq, k, d, s, lds);
    else simd::bf16_dot_qk<Arch, 1, 8>(q, ldq, k, d, s, lds);
  } else {
    simd::bf16_dot_qk<Arch, 1, 16>(q, ldq, k, d, s, lds);
  }
}

/// O = alpha·O + P·V for rows [0, R) of one KV head over nk keys: bf16 P (row stride ldp), bf16 V
/// rows (stride ldv, d_v channels), O rows of ldo >= round_up(d_v, 32) floats. vis[m] = keys row
/// m sees (nullptr: all); alpha per row or nullptr.
template <class Arch>
inline void bf16_dot_pv_rows(index R, const std::uint16_t* p, index ldp, index nk, const index* vis, const std::uint16_t* v,
                             index ldv, index d_v, float* o, index ldo, const float* alpha) {
  index m = 0;
  auto rows = [&](auto mr, auto nv) {
    constexpr int MR = decltype(mr)::value, NV = decltype(nv)::value;
    for (index c0 = 0; c0 < d_v; c0 += 32 * NV)
      simd::bf16_dot_pv<Arch, MR, NV>(p + m * ldp, ldp, nk, vis ? vis + m : nullptr, v + c0, ldv, d_v - c0,
                                      o + m * ldo + c0, ldo, alpha ? alpha + m : nullptr);
    m += MR;
  };
  using one = std::integral_constant<int, 1>;
  using two = std::integral_constant<int, 2>;
  using four = std::integral_constant<int, 4>;
  while (m < R) {
    const index left = R - m;
    if (left >= 8) rows(std::integral_constant<int, 8>{}, one{});
    else if (left >= 4) rows(four{}, two{});
    else if (left >= 2) rows(two{}, four{});
    else rows(one{}, four{});
  }
}

}  // namespace detail
GATTN_NAMESPACE_END  // namespace gattn
