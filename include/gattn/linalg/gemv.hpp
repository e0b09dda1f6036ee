// The decode GEMV: y = W·x over a block of weight rows in their stored dtype, fp32 accumulation.
// Block-scaled E4M3 rows sum each run of one block unscaled and scale the run's sum.
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

/// y[r] = Σ_k W[r, k] · x[k] for row r of an E4M3 weight (codes at `row`, scales in sc): each run
/// of columns under one block scale is summed unscaled (the codes widened times 2^-8, four FMA
/// chains), then added times the run's scale · 2^8: one multiply per run, not per weight.
template <class Arch>
float gemv_row_e4m3(const unsigned char* row, const block_scales& sc, index r, const float* x, index in) noexcept {
  using B = simd::batch<float, Arch>;
  constexpr index L = index(simd::width<Arch>);
  B total(0.0f);
  float tail = 0.0f;
  for (index k = 0; k < in;) {
    const index end = std::min(in, sc.block_end_col(k));
    const float s = sc.of(r, k);
    B a0(0.0f), a1(0.0f), a2(0.0f), a3(0.0f);
    index j = k;
    for (; j + 4 * L <= end; j += 4 * L) {
      a0 = simd::fma(simd::load_e4m3_raw<Arch>(row + j), simd::load<Arch>(x + j), a0);
      a1 = simd::fma(simd::load_e4m3_raw<Arch>(row + j + L), simd::load<Arch>(x + j + L), a1);
      a2 = simd::fma(simd::load_e4m3_raw<Arch>(row + j + 2 * L), simd::load<Arch>(x + j + 2 * L), a2);
      a3 = simd::fma(simd::load_e4m3_raw<Arch>(row + j + 3 * L), simd::load<Arch>(x + j + 3 * L), a3);
    }
    for (; j + L <= end; j += L) a0 = simd::fma(simd::load_e4m3_raw<Arch>(row + j), simd::load<Arch>(x + j), a0);
    const B run = (a0 + a2) + (a1 + a3);
    if (std::fabs(s) < e4m3_foldable_scale) total = simd::fma(run, B(s * simd::e4m3_raw_factor), total);
    else total = simd::fma(run * B(simd::e4m3_raw_factor), B(s), total);
    for (; j < end; ++j) tail += e4m3_to_float(row[j]) * s * x[j];
    k = end;
  }
  return lane_sum(total) + tail;
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
    case storage_type::f8_e4m3:
      for (index r = 0; r < count; ++r) y[r] = gemv_row_e4m3<Arch>(p + r * stride, *sc, r, x, in);
      break;
  }
}

}  GATTN_NAMESPACE_END  // namespace gattn::detail
