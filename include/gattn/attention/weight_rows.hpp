// Inner loops of the projections over weight rows in their stored dtype (f32, bf16, f16), with
// fp32 accumulation: the decode GEMV (y = W·x over a block of rows), the register-blocked GEMM for a
// few rows of x (batched decode), and the widening of a panel of rows into fp32 for a large GEMM.
// Templates on Arch so tests can run every ISA of the binary.
#pragma once

#include <cstdint>
#include <cstring>

#include "gattn/core/config.hpp"
#include "gattn/core/types.hpp"
#include "gattn/simd/convert.hpp"
#include "gattn/simd/simd.hpp"

namespace gattn::detail {

template <class Arch, storage_type S>
inline simd::batch<float, Arch> load_weights_as_f32(const unsigned char* p) noexcept {
  if constexpr (S == storage_type::f32) return simd::load<Arch>(reinterpret_cast<const float*>(p));
  else if constexpr (S == storage_type::bf16) return simd::load_bf16<Arch>(reinterpret_cast<const std::uint16_t*>(p));
  else return simd::load_f16<Arch>(reinterpret_cast<const std::uint16_t*>(p));
}

template <storage_type S>
inline float weight_as_f32(const unsigned char* p) noexcept {
  if constexpr (S == storage_type::f32) {
    float f;
    std::memcpy(&f, p, sizeof f);
    return f;
  } else {
    std::uint16_t h;
    std::memcpy(&h, p, sizeof h);
    return S == storage_type::bf16 ? bf16_to_float(h) : f16_to_float(h);
  }
}

template <class B>
inline float lane_sum(const B& v) noexcept {
  alignas(64) float tmp[B::size];
  simd::store(tmp, v);
  float s = 0;
  for (std::size_t i = 0; i < B::size; ++i) s += tmp[i];
  return s;
}

/// y[r] = Σ_k W[r, k] · x[k] for the `count` rows at `w`, `stride` bytes apart. Four rows share
/// each load of x; two vectors per row keep enough FMA chains in flight for a memory-bound loop.
template <class Arch, storage_type S>
void gemv_rows(const unsigned char* w, index stride, index count, const float* x, index in, float* y) noexcept {
  using B = simd::batch<float, Arch>;
  constexpr index L = index(simd::width<Arch>), E = S == storage_type::f32 ? 4 : 2;
  const index body = in - in % (2 * L);
  index r = 0;
  for (; r + 4 <= count; r += 4) {
    const unsigned char* row[4] = {w + r * stride, w + (r + 1) * stride, w + (r + 2) * stride, w + (r + 3) * stride};
    B acc[4][2] = {{B(0.0f), B(0.0f)}, {B(0.0f), B(0.0f)}, {B(0.0f), B(0.0f)}, {B(0.0f), B(0.0f)}};
    for (index k = 0; k < body; k += 2 * L) {
      const B x0 = simd::load<Arch>(x + k), x1 = simd::load<Arch>(x + k + L);
      for (int i = 0; i < 4; ++i) {
        acc[i][0] = simd::fma(load_weights_as_f32<Arch, S>(row[i] + k * E), x0, acc[i][0]);
        acc[i][1] = simd::fma(load_weights_as_f32<Arch, S>(row[i] + (k + L) * E), x1, acc[i][1]);
      }
    }
    for (int i = 0; i < 4; ++i) {
      float s = lane_sum(acc[i][0] + acc[i][1]);
      for (index k = body; k < in; ++k) s += weight_as_f32<S>(row[i] + k * E) * x[k];
      y[r + i] = s;
    }
  }
  for (; r < count; ++r) {
    const unsigned char* row = w + r * stride;
    B a0(0.0f), a1(0.0f);
    for (index k = 0; k < body; k += 2 * L) {
      a0 = simd::fma(load_weights_as_f32<Arch, S>(row + k * E), simd::load<Arch>(x + k), a0);
      a1 = simd::fma(load_weights_as_f32<Arch, S>(row + (k + L) * E), simd::load<Arch>(x + k + L), a1);
    }
    float s = lane_sum(a0 + a1);
    for (index k = body; k < in; ++k) s += weight_as_f32<S>(row + k * E) * x[k];
    y[r] = s;
  }
}

/// gemv_rows for a runtime storage type.
template <class Arch>
void gemv_rows(storage_type t, const void* w, index stride, index count, const float* x, index in, float* y) noexcept {
  const auto* p = static_cast<const unsigned char*>(w);
  switch (t) {
    case storage_type::f32: gemv_rows<Arch, storage_type::f32>(p, stride, count, x, in, y); break;
    case storage_type::bf16: gemv_rows<Arch, storage_type::bf16>(p, stride, count, x, in, y); break;
    case storage_type::f16: gemv_rows<Arch, storage_type::f16>(p, stride, count, x, in, y); break;
  }
}

/// One block of the small-N GEMM: y[n, r] = Σ_k W[r, k] · x[n, k] for R weight rows × N x rows.
/// Every (r, n) pair has its own vector accumulator along k, reduced once at the end: each weight
/// load is shared by N rows of x and each x load by R weight rows, and the summation order of a
/// pair does not depend on the block shape (so tiling never changes a bit).
template <class Arch, storage_type S, int R, int N>
void gemm_block(const unsigned char* w, index stride, const float* x, index x_stride, index in, float* y,
                index y_stride) noexcept {
  using B = simd::batch<float, Arch>;
  constexpr index L = index(simd::width<Arch>), E = S == storage_type::f32 ? 4 : 2;
  const index body = in - in % L;
  B acc[R][N];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < N; ++j) acc[i][j] = B(0.0f);
  for (index k = 0; k < body; k += L) {
    B xv[N];
    for (int j = 0; j < N; ++j) xv[j] = simd::load<Arch>(x + j * x_stride + k);
    for (int i = 0; i < R; ++i) {
      const B wv = load_weights_as_f32<Arch, S>(w + i * stride + k * E);
      for (int j = 0; j < N; ++j) acc[i][j] = simd::fma(wv, xv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < N; ++j) {
      float s = lane_sum(acc[i][j]);
      for (index k = body; k < in; ++k) s += weight_as_f32<S>(w + i * stride + k * E) * x[j * x_stride + k];
      y[j * y_stride + i] = s;
    }
}

/// x rows per block: 4 · N accumulators, 4 weight vectors and N x vectors must fit the register
/// file (32 vector registers on AVX-512, 16 on AVX2 and SSE).
template <class Arch>
inline constexpr int gemm_x_rows = simd::width<Arch> >= 16 ? 4 : 2;

/// y[n, r] (row stride y_stride) = Σ_k W[r, k] · x[n, k] for the `count` weight rows at `w`
/// (`stride` bytes apart) and `rows` rows of x: the GEMM for a few rows (batched decode), reading
/// the weights in their stored dtype. A block of 4 weight rows stays in L1 while every x row
/// passes over it.
template <class Arch, storage_type S>
void gemm_rows(const unsigned char* w, index stride, index count, const float* x, index x_stride, index rows,
               index in, float* y, index y_stride) noexcept {
  constexpr int NX = gemm_x_rows<Arch>;
  index r = 0;
  for (; r + 4 <= count; r += 4) {
    index n = 0;
    for (; n + NX <= rows; n += NX)
      gemm_block<Arch, S, 4, NX>(w + r * stride, stride, x + n * x_stride, x_stride, in, y + n * y_stride + r, y_stride);
    for (; n < rows; ++n)
      gemm_block<Arch, S, 4, 1>(w + r * stride, stride, x + n * x_stride, x_stride, in, y + n * y_stride + r, y_stride);
  }
  for (; r < count; ++r) {
    index n = 0;
    for (; n + NX <= rows; n += NX)
      gemm_block<Arch, S, 1, NX>(w + r * stride, stride, x + n * x_stride, x_stride, in, y + n * y_stride + r, y_stride);
    for (; n < rows; ++n)
      gemm_block<Arch, S, 1, 1>(w + r * stride, stride, x + n * x_stride, x_stride, in, y + n * y_stride + r, y_stride);
  }
}

/// gemm_rows for a runtime storage type.
template <class Arch>
void gemm_rows(storage_type t, const void* w, index stride, index count, const float* x, index x_stride, index rows,
               index in, float* y, index y_stride) noexcept {
  const auto* p = static_cast<const unsigned char*>(w);
  switch (t) {
    case storage_type::f32: gemm_rows<Arch, storage_type::f32>(p, stride, count, x, x_stride, rows, in, y, y_stride); break;
    case storage_type::bf16: gemm_rows<Arch, storage_type::bf16>(p, stride, count, x, x_stride, rows, in, y, y_stride); break;
    case storage_type::f16: gemm_rows<Arch, storage_type::f16>(p, stride, count, x, x_stride, rows, in, y, y_stride); break;
  }
}

/// y[n, c] (row stride y_stride) = Σ_k x[n, k] · W[k, c] for the `k_count` weight rows at `w`
/// (`stride` bytes apart, `cols` values used of each) and `rows` rows of x: a product with the
/// weight NOT transposed (MLA's q_nope · W_uk), reading W in its stored dtype. Each x element is
/// broadcast over four vectors of a weight row; the sum over k runs in order, in fp32.
template <class Arch, storage_type S>
void gemm_cols(const unsigned char* w, index stride, index k_count, index cols, const float* x, index x_stride,
               index rows, float* y, index y_stride) noexcept {
  using B = simd::batch<float, Arch>;
  constexpr index L = index(simd::width<Arch>), E = S == storage_type::f32 ? 4 : 2;
  for (index n = 0; n < rows; ++n) {
    const float* xn = x + n * x_stride;
    float* yn = y + n * y_stride;
    index c = 0;
    for (; c + 4 * L <= cols; c += 4 * L) {
      B acc[4] = {B(0.0f), B(0.0f), B(0.0f), B(0.0f)};
      for (index k = 0; k < k_count; ++k) {
        const B xb = simd::broadcast<Arch>(xn[k]);
        for (int i = 0; i < 4; ++i)
          acc[i] = simd::fma(load_weights_as_f32<Arch, S>(w + k * stride + (c + i * L) * E), xb, acc[i]);
      }
      for (int i = 0; i < 4; ++i) simd::store(yn + c + i * L, acc[i]);
    }
    for (; c + L <= cols; c += L) {
      B acc(0.0f);
      for (index k = 0; k < k_count; ++k)
        acc = simd::fma(load_weights_as_f32<Arch, S>(w + k * stride + c * E), simd::broadcast<Arch>(xn[k]), acc);
      simd::store(yn + c, acc);
    }
    for (; c < cols; ++c) {
      float s = 0.0f;
      for (index k = 0; k < k_count; ++k) s += xn[k] * weight_as_f32<S>(w + k * stride + c * E);
      yn[c] = s;
    }
  }
}

/// gemm_cols for a runtime storage type.
template <class Arch>
void gemm_cols(storage_type t, const void* w, index stride, index k_count, index cols, const float* x, index x_stride,
               index rows, float* y, index y_stride) noexcept {
  const auto* p = static_cast<const unsigned char*>(w);
  switch (t) {
    case storage_type::f32: gemm_cols<Arch, storage_type::f32>(p, stride, k_count, cols, x, x_stride, rows, y, y_stride); break;
    case storage_type::bf16: gemm_cols<Arch, storage_type::bf16>(p, stride, k_count, cols, x, x_stride, rows, y, y_stride); break;
    case storage_type::f16: gemm_cols<Arch, storage_type::f16>(p, stride, k_count, cols, x, x_stride, rows, y, y_stride); break;
  }
}

/// The `count` rows at `w` (`stride` bytes apart, `in` values each) widened exactly into out
/// [count, in], dense.
template <class Arch, storage_type S>
void widen_rows(const unsigned char* w, index stride, index count, index in, float* out) noexcept {
  constexpr index L = index(simd::width<Arch>), E = S == storage_type::f32 ? 4 : 2;
  for (index r = 0; r < count; ++r) {
    const unsigned char* row = w + r * stride;
    float* o = out + r * in;
    index k = 0;
    for (; k + L <= in; k += L) simd::store(o + k, load_weights_as_f32<Arch, S>(row + k * E));
    for (; k < in; ++k) o[k] = weight_as_f32<S>(row + k * E);
  }
}

template <class Arch>
void widen_rows(storage_type t, const void* w, index stride, index count, index in, float* out) noexcept {
  const auto* p = static_cast<const unsigned char*>(w);
  switch (t) {
    case storage_type::f32: widen_rows<Arch, storage_type::f32>(p, stride, count, in, out); break;
    case storage_type::bf16: widen_rows<Arch, storage_type::bf16>(p, stride, count, in, out); break;
    case storage_type::f16: widen_rows<Arch, storage_type::f16>(p, stride, count, in, out); break;
  }
}

}  // namespace gattn::detail
