// OCP float8 E4M3 ("fn": no infinities, S.1111.111 is NaN), the element type of FP8 checkpoints
// and FP8 KV caches (docs/spec.md §15): the exact widening and the saturating round to nearest
// even, as plain scalar code. Every SIMD path (simd/convert.hpp) must agree with these bit for bit.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "gattn/core/arch_namespace.hpp"

GATTN_NAMESPACE_BEGIN

/// Largest finite E4M3 value (code 0x7E): an FP8 cache saturates to ±e4m3_max.
inline constexpr float e4m3_max = 448.0f;

/// The exact fp32 value of E4M3 code `b`; codes 0x7F and 0xFF are a quiet NaN with their sign.
inline float e4m3_to_float(std::uint8_t b) noexcept {
  const std::uint32_t sign = std::uint32_t(b & 0x80u) << 24, e = (b >> 3) & 0xFu, m = b & 0x7u;
  std::uint32_t bits = sign | 0x7FC00000u;
  if (e == 0) {
    const float mag = float(m) * (1.0f / 512.0f);  // subnormal: m · 2^-9, exact
    return sign ? -mag : mag;
  }
  if (!(e == 0xF && m == 0x7)) bits = sign | ((e + 120) << 23) | (m << 20);  // rebias 7 -> 127
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

/// The E4M3 code nearest to `f` (ties to the even code), saturating: |f| >= 448, ±inf included,
/// gives ±448; NaN gives 0x7F with f's sign. Values below the smallest subnormal's half round to
/// a zero of f's sign.
inline std::uint8_t round_to_e4m3(float f) noexcept {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  const std::uint8_t sign = std::uint8_t((b >> 24) & 0x80u);
  if (std::isnan(f)) return std::uint8_t(sign | 0x7Fu);
  const float a = std::fabs(f);
  if (a >= e4m3_max) return std::uint8_t(sign | 0x7Eu);
  if (a < 1.0f / 64.0f) {
    // Subnormal range: count units of 2^-9 (a·512 is exact and below 8); 8 units is the smallest
    // normal, code 0x08, so rounding up into it needs no special case.
    const float q = a * 512.0f;
    std::uint32_t n = std::uint32_t(q);
    const float rest = q - float(n);
    if (rest > 0.5f || (rest == 0.5f && (n & 1u))) ++n;
    return std::uint8_t(sign | n);
  }
  // Normal: keep 3 of fp32's 23 mantissa bits, nearest even (a carry into the exponent is right),
  // then rebias the exponent 127 -> 7. a < 448 rounds to 448 (0x7E) at most, never to the NaN code.
  const std::uint32_t ab = b & 0x7FFFFFFFu;
  const std::uint32_t r = (ab + 0x7FFFFu + ((ab >> 20) & 1u)) >> 20;
  return std::uint8_t(sign | (r - (120u << 3)));
}

GATTN_NAMESPACE_END  // namespace gattn
