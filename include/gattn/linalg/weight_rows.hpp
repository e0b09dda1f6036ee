// Weight rows read in their stored dtype (f32, bf16, f16, block-scaled E4M3) as fp32, the building
// blocks of the products in linalg/: a vector or a value of a row, a vector's lanes summed, and a
// panel of rows widened into fp32 (for a large GEMM).
// Templates on Arch so tests can run every ISA of the binary.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "gattn/core/block_scales.hpp"
#include "gattn/core/config.hpp"
#include "gattn/core/types.hpp"
#include "gattn/simd/convert.hpp"
#include "gattn/simd/simd.hpp"

GATTN_NAMESPACE_BEGIN namespace detail {

/// Bytes of one stored element of type S.
template <storage_type S>
inline constexpr index element_bytes = S == storage_type::f32 ? 4 : S == storage_type::f8_e4m3 ? 1 : 2;

/// One vector of weights at p (a row of dtype S), widened to fp32.
template <class Arch, storage_type S>
inline simd::batch<float, Arch> load_weights_as_f32(const unsigned char* p) noexcept {
  if constexpr (S == storage_type::f32) return simd::load<Arch>(reinterpret_cast<const float*>(p));
  else if constexpr (S == storage_type::bf16) return simd::load_bf16<Arch>(reinterpret_cast<const std::uint16_t*>(p));
  else return simd::load_f16<Arch>(reinterpret_cast<const std::uint16_t*>(p));
}

/// The weight at p (dtype S) as fp32.
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

/// Scales below this bound can take e4m3_raw_factor (2^8) without overflowing fp32.
inline constexpr float e4m3_foldable_scale = 0x1p100f;

/// The values [k0, k0 + kb) of row r of an E4M3 weight (its codes at `row`, its scales in sc)
/// widened exactly into out: each value e4m3 · scale rounded once to fp32, as weight_view::at
/// gives it. Within a run of one block the scale is one multiply per vector.
template <class Arch>
void widen_e4m3_row(const unsigned char* row, const block_scales& sc, index r, index k0, index kb, float* out) noexcept {
  using B = simd::batch<float, Arch>;
  constexpr index L = index(simd::width<Arch>);
  block_scales::row_runs run_of = sc.runs_of_row(r, k0);
  for (index k = k0; k < k0 + kb; run_of.next()) {
    const index end = std::min(k0 + kb, run_of.end);
    const float s = run_of.scale();
    index j = k;
    if (std::fabs(s) < e4m3_foldable_scale) {
      // raw = e4m3 · 2^-8 and s · 2^8 are exact: their product is e4m3 · s rounded once.
      const B f(s * simd::e4m3_raw_factor);
      for (; j + L <= end; j += L) simd::store(out + (j - k0), simd::load_e4m3_raw<Arch>(row + j) * f);
    }
    for (; j < end; ++j) out[j - k0] = e4m3_to_float(row[j]) * s;
    k = end;
  }
}

/// The lanes of v summed in lane order.
template <class B>
inline float lane_sum(const B& v) noexcept {
  alignas(64) float tmp[B::size];
  simd::store(tmp, v);
  float s = 0;
  for (std::size_t i = 0; i < B::size; ++i) s += tmp[i];
  return s;
}

/// The `count` rows at `w` (`stride` bytes apart, `in` values each) widened exactly into out
/// [count, in], dense.
template <class Arch, storage_type S>
void widen_rows(const unsigned char* w, index stride, index count, index in, float* out) noexcept {
  constexpr index L = index(simd::width<Arch>), E = element_bytes<S>;
  for (index r = 0; r < count; ++r) {
    const unsigned char* row = w + r * stride;
    float* o = out + r * in;
    index k = 0;
    for (; k + L <= in; k += L) simd::store(o + k, load_weights_as_f32<Arch, S>(row + k * E));
    for (; k < in; ++k) o[k] = weight_as_f32<S>(row + k * E);
  }
}

/// widen_rows for a runtime storage type; `sc`: the block scales of f8_e4m3 rows (row 0 at w).
template <class Arch>
void widen_rows(storage_type t, const void* w, index stride, index count, index in, float* out,
                const block_scales* sc = nullptr) noexcept {
  const auto* p = static_cast<const unsigned char*>(w);
  switch (t) {
    case storage_type::f32: widen_rows<Arch, storage_type::f32>(p, stride, count, in, out); break;
    case storage_type::bf16: widen_rows<Arch, storage_type::bf16>(p, stride, count, in, out); break;
    case storage_type::f16: widen_rows<Arch, storage_type::f16>(p, stride, count, in, out); break;
    case storage_type::f8_e4m3:
      for (index r = 0; r < count; ++r) widen_e4m3_row<Arch>(p + r * stride, *sc, r, 0, in, out + r * in);
      break;
  }
}

}  GATTN_NAMESPACE_END  // namespace gattn::detail
