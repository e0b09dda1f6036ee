// Reusable array operations over Arch (RMSNorm, scaling, and the vector-body-then-tail loop the
// gates use too): the layers use them outside the kernel, and the fused kernel's epilogue uses the
// same code. Vector body + one-lane tail.
#pragma once

#include <cmath>

#include "gattn/core/config.hpp"
#include "gattn/core/types.hpp"
#include "gattn/simd/arch.hpp"
#include "gattn/simd/simd.hpp"

GATTN_NAMESPACE_BEGIN
namespace detail {

/// Applies `f(B)` to a float array in place, vector body then one-lane tail.
template <class Arch, class F>
inline void for_each_lane_block(index n, F&& f) {
  using B = simd::batch<float, Arch>;
  constexpr index w = index(B::size);
  index i = 0;
  for (; i + w <= n; i += w) f(i, B{});
  for (; i < n; ++i) f(i, simd::scalar_batch<float>{});
}

template <class B>
inline B load_as(const float* p) noexcept {
  if constexpr (std::is_same<B, simd::scalar_batch<float>>::value) return B(*p);
  else return B::load_unaligned(p);
}

}  // namespace detail

/// Sum of squares of x[0..n).
template <class Arch = default_arch>
inline float sum_squares(const float* x, index n) {
  using B = simd::batch<float, Arch>;
  constexpr index w = index(B::size);
  B acc(0.0f);
  index i = 0;
  for (; i + w <= n; i += w) {
    const B v = simd::load<Arch>(x + i);
    acc = simd::fma(v, v, acc);
  }
  float s = simd::hadd(acc);
  for (; i < n; ++i) s += x[i] * x[i];
  return s;
}

/// dst[i] = src[i]·s (dst may equal src).
template <class Arch = default_arch>
inline void scale_copy(float* dst, const float* src, index n, float s) {
  detail::for_each_lane_block<Arch>(n, [&](index i, auto tag) {
    using B = decltype(tag);
    simd::store(dst + i, detail::load_as<B>(src + i) * B(s));
  });
}

/// RMSNorm in place: z = z / sqrt(mean(z²) + eps) · w  (or · (1 + w) when zero_centered).
/// w may be nullptr (weight 1). A zero row stays exactly zero.
template <class Arch = default_arch>
inline void rms_norm(float* z, const float* w, index n, float eps, bool zero_centered) {
  if (n <= 0) return;
  const float inv = 1.0f / std::sqrt(sum_squares<Arch>(z, n) / float(n) + eps);
  if (w == nullptr) {
    scale_copy<Arch>(z, z, n, inv);
    return;
  }
  const float off = zero_centered ? 1.0f : 0.0f;
  detail::for_each_lane_block<Arch>(n, [&](index i, auto tag) {
    using B = decltype(tag);
    const B wi = detail::load_as<B>(w + i) + B(off);
    simd::store(z + i, detail::load_as<B>(z + i) * B(inv) * wi);
  });
}

/// RMSNorm with a gattn::norm_kind (none = no-op).
template <class Arch = default_arch>
inline void rms_norm(float* z, const float* w, index n, float eps, norm_kind kind) {
  if (kind == norm_kind::none) return;
  rms_norm<Arch>(z, w, n, eps, kind == norm_kind::rms_zero_centered);
}

GATTN_NAMESPACE_END  // namespace gattn
