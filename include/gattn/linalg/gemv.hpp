// The decode GEMV: y = W·x over a block of weight rows in their stored dtype, fp32 accumulation.
// Block-scaled E4M3 rows are dot products of their codes with x scaled once per run of rows.
// Templates on Arch so tests can run every ISA of the binary.
#pragma once

#include <algorithm>
#include <cmath>

#include "gattn/core/block_scales.hpp"
#include "gattn/core/config.hpp"
#include "gattn/core/types.hpp"
#include "gattn/linalg/weight_rows.hpp"
#include "gattn/simd/simd.hpp"

GATTN_NAMESPACE_BEGIN namespace detail {

/// gemv_rows for fp32 weights: four rows share each load of x; two vectors per row keep enough
/// FMA chains in flight for a memory-bound loop.
template <class Arch>
void gemv_rows_f32(const unsigned char* w, index stride, index count, const float* x, index in, float* y) noexcept {
  using B = simd::batch<float, Arch>;
  constexpr storage_type S = storage_type::f32;
  constexpr index L = index(simd::width<Arch>), E = 4;
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

/// y[r] = Σ_k W[r, k] · x[k] for one row of 16-bit weights: the row read once in address order,
/// two lines per step on four FMA chains (about 32 bytes per cycle when the row is hot in L2).
template <class Arch, storage_type S>
float gemv_row_16bit(const unsigned char* row, const float* x, index in) noexcept {
  using B = simd::batch<float, Arch>;
  constexpr index L = index(simd::width<Arch>), E = 2;
  B a0(0.0f), a1(0.0f), a2(0.0f), a3(0.0f);
  index k = 0;
  for (; k + 4 * L <= in; k += 4 * L) {
    a0 = simd::fma(load_weights_as_f32<Arch, S>(row + k * E), simd::load<Arch>(x + k), a0);
    a1 = simd::fma(load_weights_as_f32<Arch, S>(row + (k + L) * E), simd::load<Arch>(x + k + L), a1);
    a2 = simd::fma(load_weights_as_f32<Arch, S>(row + (k + 2 * L) * E), simd::load<Arch>(x + k + 2 * L), a2);
    a3 = simd::fma(load_weights_as_f32<Arch, S>(row + (k + 3 * L) * E), simd::load<Arch>(x + k + 3 * L), a3);
  }
  for (; k + L <= in; k += L) a0 = simd::fma(load_weights_as_f32<Arch, S>(row + k * E), simd::load<Arch>(x + k), a0);
  float s = lane_sum((a0 + a2) + (a1 + a3));
  for (; k < in; ++k) s += weight_as_f32<S>(row + k * E) * x[k];
  return s;
}

/// Σ_k raw(codes[k]) · xs[k], k < n: the E4M3 codes widened times 2^-8 (simd::load_e4m3_raw2), four
/// FMA chains, the tail in order.
template <class Arch>
float gemv_e4m3_dot(const unsigned char* codes, const float* xs, index n) noexcept {
  using B = simd::batch<float, Arch>;
  constexpr index L = index(simd::width<Arch>);
  B a0(0.0f), a1(0.0f), a2(0.0f), a3(0.0f), w0, w1, w2, w3;
  index k = 0;
  for (; k + 4 * L <= n; k += 4 * L) {
    simd::load_e4m3_raw2<Arch>(codes + k, w0, w1);
    simd::load_e4m3_raw2<Arch>(codes + k + 2 * L, w2, w3);
    a0 = simd::fma(w0, simd::load<Arch>(xs + k), a0);
    a1 = simd::fma(w1, simd::load<Arch>(xs + k + L), a1);
    a2 = simd::fma(w2, simd::load<Arch>(xs + k + 2 * L), a2);
    a3 = simd::fma(w3, simd::load<Arch>(xs + k + 3 * L), a3);
  }
  for (; k + L <= n; k += L) a0 = simd::fma(simd::load_e4m3_raw<Arch>(codes + k), simd::load<Arch>(xs + k), a0);
  float s = lane_sum((a0 + a2) + (a1 + a3));
  for (; k < n; ++k) s += e4m3_to_float(codes[k]) * (1.0f / simd::e4m3_raw_factor) * xs[k];
  return s;
}

/// gemv_e4m3_dot where simd::e4m3_quads<Arch>, unreduced: the codes widened exactly by table, 64 at
/// a time in quad order, against xs laid out alike (gemv_e4m3_scale_x); the lanes' sum is the dot
/// product of the first n − n % 64 values (the caller adds the tail, gemv_e4m3_tail).
template <class Arch>
simd::batch<float, Arch> gemv_e4m3_dot_quads(const unsigned char* codes, const float* xs, index n) noexcept {
  using B = simd::batch<float, Arch>;
  constexpr index L = index(simd::width<Arch>);
  B a[4] = {B(0.0f), B(0.0f), B(0.0f), B(0.0f)}, q[4];
  for (index k = 0; k + 4 * L <= n; k += 4 * L) {
    simd::load_e4m3_quads<Arch>(codes + k, q);
    for (int j = 0; j < 4; ++j) a[j] = simd::fma(q[j], simd::load<Arch>(xs + k + j * L), a[j]);
  }
  return (a[0] + a[2]) + (a[1] + a[3]);
}

/// Σ codes[k] · xs[k] over the values past the last whole 64, in order.
inline float gemv_e4m3_tail(const unsigned char* codes, const float* xs, index n) noexcept {
  float s = 0.0f;
  for (index k = n - n % 64; k < n; ++k) s += e4m3_to_float(codes[k]) * xs[k];
  return s;
}

/// xs[k − k0] = x[k] · (scale of column k in block row `block_row`) · `factor`, k in [k0, k0 + n):
/// no division per value. `quads`: each whole 64 values in quad order (value 4i + e4m3_quad_offset[j]
/// at 16j + i), as gemv_e4m3_dot_quads reads them.
inline void gemv_e4m3_scale_x(const float* x, index k0, index n, const block_scales& sc, index row, float factor,
                              bool quads, float* xs) noexcept {
  block_scales::row_runs run = sc.runs_of_row(row, k0);
  for (index k = k0; k < k0 + n; run.next()) {
    const index end = std::min(k0 + n, run.end);
    const float s = run.scale();
    const bool fold = std::fabs(s) < e4m3_foldable_scale;
    const float f = fold ? s * factor : s;
    for (; k < end; ++k) xs[k - k0] = fold ? x[k] * f : (x[k] * f) * factor;
  }
  if (!quads) return;
  alignas(64) float block[64];
  for (index b = 0; b + 64 <= n; b += 64) {
    std::copy(xs + b, xs + b + 64, block);
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 16; ++i) xs[b + 16 * j + i] = block[4 * i + simd::e4m3_quad_offset[j]];
  }
}

/// Columns of x scaled at a time by gemv_rows_e4m3 (on the stack).
inline constexpr index gemv_e4m3_chunk = 4096;

/// y[r] = Σ_k W[r, k] · x[k] for the `count` E4M3 rows at w (`stride` bytes apart, scales in sc):
/// for each run of rows under one row of block scales, x is multiplied once by its columns' scales
/// (times 2^8), and every row of the run is a plain dot product of its codes with that: no scale
/// and no block edge inside the rows' loop. (Each product is e4m3 · (x · s): the dequantized
/// weight's product to fp32 rounding, not its bits.)
template <class Arch>
void gemv_rows_e4m3(const unsigned char* w, index stride, index count, const float* x, index in, float* y,
                    const block_scales& sc) noexcept {
  alignas(64) float xs[std::size_t(gemv_e4m3_chunk)];
  for (index r0 = 0; r0 < count;) {
    const index block_row = (sc.row0 + r0) / sc.block_rows;
    const index r1 = std::min(count, (block_row + 1) * sc.block_rows - sc.row0);
    for (index r = r0; r < r1; ++r) y[r] = 0.0f;
    for (index k0 = 0; k0 < in; k0 += gemv_e4m3_chunk) {
      const index n = std::min(gemv_e4m3_chunk, in - k0);
      if constexpr (simd::e4m3_quads<Arch>) {
        // Rows in groups of L: their accumulators summed by one transpose-and-add (simd::haddp)
        // instead of a lane sum per row, which cost a quarter of a 2048-value row's time.
        constexpr index L = index(simd::width<Arch>);
        gemv_e4m3_scale_x(x, k0, n, sc, r0, 1.0f, true, xs);
        for (index g = r0; g < r1; g += L) {
          simd::batch<float, Arch> acc[L];
          const index m = std::min(L, r1 - g);
          for (index i = 0; i < L; ++i)
            acc[i] = i < m ? gemv_e4m3_dot_quads<Arch>(w + (g + i) * stride + k0, xs, n) : simd::batch<float, Arch>(0.0f);
          alignas(64) float sums[L];
          simd::store(sums, simd::haddp(acc));
          for (index i = 0; i < m; ++i) y[g + i] += sums[i] + gemv_e4m3_tail(w + (g + i) * stride + k0, xs, n);
        }
      } else {
        gemv_e4m3_scale_x(x, k0, n, sc, r0, simd::e4m3_raw_factor, false, xs);
        for (index r = r0; r < r1; ++r) y[r] += gemv_e4m3_dot<Arch>(w + r * stride + k0, xs, n);
      }
    }
    r0 = r1;
  }
}

/// y[r] = Σ_k W[r, k] · x[k] for the `count` rows at `w`, `stride` bytes apart.
/// - 16-bit weights go row by row (gemv_row_16bit). Four rows side by side (each row of a bf16
///   layer with in = 2048 its own 4 KiB page) ran at 16-21 GB/s cold on the benchmark machine of
///   docs/performance.md, one row at a time at 22-27 on 4 KiB pages and 30-34 on huge pages; hot
///   in L2 (64 rows), 67 against 55-97 for four rows in different runs (decode weights are cold).
/// - fp32 rows go four side by side, sharing each load of x, two vectors per row: cold, one row at
///   a time read 17-19 GB/s on 4 KiB pages against 21-22 (27 against 29 on huge pages).
template <class Arch, storage_type S>
void gemv_rows(const unsigned char* w, index stride, index count, const float* x, index in, float* y) noexcept {
  if constexpr (S != storage_type::f32) {
    for (index r = 0; r < count; ++r) y[r] = gemv_row_16bit<Arch, S>(w + r * stride, x, in);
  } else {
    gemv_rows_f32<Arch>(w, stride, count, x, in, y);
  }
}

/// gemv_rows for a runtime storage type; `sc`: the block scales of f8_e4m3 rows (row 0 at w).
template <class Arch>
void gemv_rows(storage_type t, const void* w, index stride, index count, const float* x, index in, float* y,
               const block_scales* sc = nullptr) noexcept {
  const auto* p = static_cast<const unsigned char*>(w);
  switch (t) {
    case storage_type::f32: gemv_rows<Arch, storage_type::f32>(p, stride, count, x, in, y); break;
    case storage_type::bf16: gemv_rows<Arch, storage_type::bf16>(p, stride, count, x, in, y); break;
    case storage_type::f16: gemv_rows<Arch, storage_type::f16>(p, stride, count, x, in, y); break;
    case storage_type::f8_e4m3: gemv_rows_e4m3<Arch>(p, stride, count, x, in, y, *sc); break;
  }
}

}  GATTN_NAMESPACE_END  // namespace gattn::detail
