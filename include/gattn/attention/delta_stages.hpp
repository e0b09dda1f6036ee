// The per-row stages of a gated delta-rule layer around its kernel (docs/spec.md §13): the causal
// short convolution with SiLU, the l2 normalisation of q and k, the write strength β and the decay g,
// and the output gate RMSNorm(o)·w·act(z). Each runs over rows of the layer's projection buffer.
#pragma once

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "gattn/core/config.hpp"
#include "gattn/core/types.hpp"
#include "gattn/gate/activation.hpp"
#include "gattn/gate/apply.hpp"
#include "gattn/simd/arch.hpp"
#include "gattn/simd/simd.hpp"
#include "gattn/simd/vector_ops.hpp"

GATTN_NAMESPACE_BEGIN
namespace detail {

template <class B>
inline B log1p_of(const B& x) noexcept {
  if constexpr (std::is_same<B, simd::scalar_batch<float>>::value) return B(std::log1p(x.v));
  else return xsimd::log1p(x);
}

/// softplus(x) = log(1 + eˣ) = max(x, 0) + log1p(e^−|x|): exact for every x, never exp(+large).
template <class B>
inline B softplus(const B& x) noexcept {
  return simd::max(x, B(0.0f)) + log1p_of(simd::exp(simd::min(x, -x)));
}

/// Input row j of a convolution over `rows`, continuing `tail` (K − 1 rows, oldest first): j < 0
/// reads the tail.
inline const float* conv_input(const float* rows, index stride, const float* tail, index tail_rows, index channels,
                               index j) {
  return j >= 0 ? rows + j * stride : tail + (tail_rows + j) * channels;
}

}  // namespace detail

/// Causal depthwise convolution with SiLU over n rows of `channels` values (row stride `stride`), in
/// place: out[t, c] = silu(Σ_i taps[i·channels + c] · in[t − (K−1) + i, c]), where inputs before the
/// first row come from `tail` (the K − 1 previous inputs, oldest first). `tail` is then advanced to
/// the last K − 1 inputs; `scratch` holds (K − 1)·channels floats. Rows are written last to first,
/// so each still reads unconvolved inputs, and a row never depends on a later one.
template <class Arch = default_arch>
inline void short_conv_silu(float* rows, index stride, index n, index channels, const float* taps, index kernel,
                            float* tail, float* scratch) {
  const index keep = kernel - 1;
  for (index r = 0; r < keep; ++r)  // the last K − 1 inputs of tail ++ rows
    std::copy_n(detail::conv_input(rows, stride, tail, keep, channels, n + r - keep), channels, scratch + r * channels);
  for (index t = n - 1; t >= 0; --t) {
    float* out = rows + t * stride;
    detail::for_each_lane_block<Arch>(channels, [&](index c, auto tag) {
      using B = decltype(tag);
      B acc(0.0f);
      for (index i = 0; i < kernel; ++i) {
        const float* in = detail::conv_input(rows, stride, tail, keep, channels, t - keep + i);
        acc = simd::fma(detail::load_as<B>(taps + i * channels + c), detail::load_as<B>(in + c), acc);
      }
      simd::store(out + c, act::silu{}(acc));
    });
  }
  std::copy_n(scratch, keep * channels, tail);
}

/// x / sqrt(Σx² + 1e-6) over each of `heads` heads of `dim` values.
template <class Arch = default_arch>
inline void l2_normalize_heads(float* x, index heads, index dim) {
  for (index h = 0; h < heads; ++h) {
    float* head = x + h * dim;
    scale_copy<Arch>(head, head, dim, 1.0f / std::sqrt(sum_squares<Arch>(head, dim) + 1e-6f));
  }
}

/// β = σ(b), in place over n values.
template <class Arch = default_arch>
inline void sigmoid_in_place(float* b, index n) {
  detail::for_each_lane_block<Arch>(n, [&](index i, auto tag) {
    using B = decltype(tag);
    simd::store(b + i, act::sigmoid{}(detail::load_as<B>(b + i)));
  });
}

/// Gated DeltaNet's decay per value head, in place over a: g = neg_a[h] · softplus(a[h] + dt_bias[h])
/// with neg_a = −exp(A_log).
template <class Arch = default_arch>
inline void softplus_decay(float* a, index n, const float* neg_a, const float* dt_bias) {
  detail::for_each_lane_block<Arch>(n, [&](index i, auto tag) {
    using B = decltype(tag);
    const B x = detail::load_as<B>(a + i) + detail::load_as<B>(dt_bias + i);
    simd::store(a + i, detail::load_as<B>(neg_a + i) * detail::softplus(x));
  });
}

/// KDA's decay per key channel of `heads` heads of `dim` channels, in place over f (docs/spec.md
/// §13): softplus g = −exp(A_log_h)·softplus(f + dt_bias); lower_bound g = L·σ(exp(A_log_h)·(f + dt_bias)).
template <class Arch = default_arch>
inline void channel_decay(float* f, index heads, index dim, const float* a_per_head, const float* dt_bias,
                          decay_form form, float lower_bound) {
  for (index h = 0; h < heads; ++h) {
    float* row = f + h * dim;
    const float* bias = dt_bias + h * dim;
    const float a = a_per_head[h];
    detail::for_each_lane_block<Arch>(dim, [&](index i, auto tag) {
      using B = decltype(tag);
      const B x = detail::load_as<B>(row + i) + detail::load_as<B>(bias + i);
      const B g = form == decay_form::softplus ? B(-a) * detail::softplus(x) : B(lower_bound) * act::sigmoid{}(B(a) * x);
      simd::store(row + i, g);
    });
  }
}

/// The output gate of one row, in place over o: per head, RMSNorm(o_h)·w ⊙ act(u_h).
template <class Arch = default_arch>
inline void gated_rms_norm(float* o, const float* u, index heads, index dim, const float* w, float eps, activation a) {
  for (index h = 0; h < heads; ++h) {
    rms_norm<Arch>(o + h * dim, w, dim, eps, false);
    apply_gate<Arch>(o + h * dim, u + h * dim, dim, a, combine::mul);
  }
}

GATTN_NAMESPACE_END  // namespace gattn
