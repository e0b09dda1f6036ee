// bf16 and f16 (IEEE binary16) storage <-> fp32 batches (docs/spec.md §10): widen on load, round to nearest
// even on store, NaN stays a quiet NaN with its sign, ±inf exact, subnormals kept (bf16 has fp32's
// exponent range; f16 subnormals are produced exactly). Storage is std::uint16_t bits. E4M3
// (§15) is one byte, widened exactly and rounded with saturation (core/e4m3.hpp has the scalar
// reference).
//
// The scalar functions in namespace gattn are the reference, written plainly; every ISA path below
// must agree with them bit for bit (tests/simd/test_convert.cpp checks every arch of the binary).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "gattn/core/config.hpp"
#include "gattn/core/e4m3.hpp"
#include "gattn/core/types.hpp"
#include "gattn/simd/arch.hpp"
#include "gattn/simd/simd.hpp"

#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#endif

GATTN_NAMESPACE_BEGIN

namespace detail {
inline std::uint32_t float_bits(float f) noexcept {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}
inline float bits_float(std::uint32_t b) noexcept {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
}  // namespace detail

/// Largest finite f16; a cache of f16 refuses anything of larger magnitude (docs/spec.md §10).
inline constexpr float f16_max = 65504.0f;

/// bf16 bits of `f`, rounded to nearest even. NaN: the top half with the quiet bit set.
inline std::uint16_t round_to_bf16(float f) noexcept {
  const std::uint32_t b = detail::float_bits(f);
  if (std::isnan(f)) return std::uint16_t((b >> 16) | 0x0040u);
  const std::uint32_t lsb = (b >> 16) & 1u;  // ties go to the even neighbour
  return std::uint16_t((b + 0x7FFFu + lsb) >> 16);  // a carry into the exponent is the right answer (up to inf)
}

/// Exact widening of bf16 bits (bit for bit the top half of a float; NaN payloads untouched).
inline float bf16_to_float(std::uint16_t h) noexcept { return detail::bits_float(std::uint32_t{h} << 16); }

/// f16 bits of `f`, rounded to nearest even: |f| >= 65520 gives ±inf, below 2^-14 a subnormal.
/// NaN: quiet (0x7E00) with the sign and the top 9 payload bits.
inline std::uint16_t round_to_f16(float f) noexcept {
  const std::uint32_t b = detail::float_bits(f);
  const std::uint16_t sign = std::uint16_t((b >> 16) & 0x8000u);
  const std::uint32_t a = b & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return std::uint16_t(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  if (a >= 0x477FF000u) return std::uint16_t(sign | 0x7C00u);  // 65520 = halfway to 2^16: rounds to inf
  if (a >= 0x38800000u) {  // normal f16: rebias the exponent, round away the low 13 mantissa bits
    const std::uint32_t r = a - (std::uint32_t(127 - 15) << 23);
    return std::uint16_t(sign | ((r + 0xFFFu + ((r >> 13) & 1u)) >> 13));
  }
  if (a <= 0x33000000u) return sign;  // |f| <= 2^-25: half the smallest subnormal or less (tie to 0)
  // Subnormal f16: the result counts units of 2^-24, i.e. the 24-bit significand shifted right.
  const std::uint32_t e = a >> 23;                          // 102..112
  const std::uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const std::uint32_t shift = 126 - e;                      // 14..24
  std::uint32_t q = m >> shift;
  const std::uint32_t rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (q & 1u))) ++q;       // may carry into the smallest normal: right
  return std::uint16_t(sign | q);
}

/// Widening of f16 bits: exact for numbers; NaN comes back quiet with sign and payload.
inline float f16_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0) {
    const float mag = std::ldexp(float(m), -24);  // exact: at most 10 significant bits
    return sign ? -mag : mag;
  }
  if (e == 0x1F) return detail::bits_float(sign | 0x7F800000u | (m ? 0x400000u | (m << 13) : 0u));
  return detail::bits_float(sign | ((e + 127 - 15) << 23) | (m << 13));
}

/// The element a tensor of storage type S holds: float, or the bits of a bf16/f16.
template <storage_type S>
struct storage_element {
  using type = std::uint16_t;
};
template <>
struct storage_element<storage_type::f32> {
  using type = float;
};
template <storage_type S>
using storage_element_t = typename storage_element<S>::type;

/// One stored element widened to fp32 (exact).
template <storage_type S>
inline float widen(storage_element_t<S> x) noexcept {
  if constexpr (S == storage_type::bf16) return bf16_to_float(x);
  else if constexpr (S == storage_type::f16) return f16_to_float(x);
  else return x;
}

/// False when an f16 cache must refuse `v` (|v| > 65504, ±inf). NaN is stored (it stays NaN).
inline bool f16_in_range(float v) noexcept { return !(std::fabs(v) > f16_max); }

GATTN_NAMESPACE_END  // namespace gattn

GATTN_NAMESPACE_BEGIN namespace simd {

namespace detail {

template <class Arch, class Base>
inline constexpr bool derives_v = std::is_base_of<Base, Arch>::value;

/// Lane by lane through the scalar reference: the scalar arch, and xsimd archs without a path below.
template <class Arch, class F>
inline batch<float, Arch> widen_lanes(const std::uint16_t* p, F to_float) noexcept {
  alignas(64) float tmp[width<Arch>];
  for (std::size_t i = 0; i < width<Arch>; ++i) tmp[i] = to_float(p[i]);
  return simd::load<Arch>(tmp);
}
template <class Arch, class F>
inline void narrow_lanes(std::uint16_t* p, const batch<float, Arch>& x, F round) noexcept {
  alignas(64) float tmp[width<Arch>];
  simd::store(tmp, x);
  for (std::size_t i = 0; i < width<Arch>; ++i) p[i] = round(tmp[i]);
}

// Integer round-to-nearest-even to bf16 on 32-bit lanes: (b + 0x7FFF + lsb) >> 16, NaN -> top | 0x40.
#if defined(__AVX512F__)
inline __m512i bf16_rne_bits(__m512 x) noexcept {
  const __m512i b = _mm512_castps_si512(x);
  const __m512i top = _mm512_srli_epi32(b, 16);
  const __m512i lsb = _mm512_and_si512(top, _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(top, _mm512_set1_epi32(0x40)));
}
inline void store_bf16_avx512(std::uint16_t* p, __m512 x) noexcept {
#if defined(__AVX512BF16__)
  // VCVTNEPS2BF16 treats fp32 subnormal inputs as zero; the rare batch holding one takes the
  // integer path so that bf16 keeps fp32's subnormals.
  const __m512i b = _mm512_castps_si512(x);
  const __mmask16 subnormal = _mm512_test_epi32_mask(b, _mm512_set1_epi32(0x007FFFFF)) &
                              ~_mm512_test_epi32_mask(b, _mm512_set1_epi32(0x7F800000));
  if (subnormal == 0) {
    const __m256bh r = _mm512_cvtneps_pbh(x);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), reinterpret_cast<const __m256i&>(r));
    return;
  }
#endif
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(bf16_rne_bits(x)));
}
#endif
#if defined(__AVX2__)
inline __m256i bf16_rne_bits(__m256 x) noexcept {
  const __m256i b = _mm256_castps_si256(x);
  const __m256i top = _mm256_srli_epi32(b, 16);
  const __m256i lsb = _mm256_and_si256(top, _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(r, _mm256_or_si256(top, _mm256_set1_epi32(0x40)), nan);
}
#endif
#if defined(__SSE4_1__)
inline __m128i bf16_rne_bits(__m128 x) noexcept {
  const __m128i b = _mm_castps_si128(x);
  const __m128i top = _mm_srli_epi32(b, 16);
  const __m128i lsb = _mm_and_si128(top, _mm_set1_epi32(1));
  const __m128i r = _mm_srli_epi32(_mm_add_epi32(b, _mm_add_epi32(lsb, _mm_set1_epi32(0x7FFF))), 16);
  const __m128i nan = _mm_castps_si128(_mm_cmpunord_ps(x, x));
  return _mm_blendv_epi8(r, _mm_or_si128(top, _mm_set1_epi32(0x40)), nan);
}
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
inline uint32x4_t bf16_rne_bits(float32x4_t x) noexcept {
  const uint32x4_t b = vreinterpretq_u32_f32(x);
  const uint32x4_t top = vshrq_n_u32(b, 16);
  const uint32x4_t lsb = vandq_u32(top, vdupq_n_u32(1));
  const uint32x4_t r = vshrq_n_u32(vaddq_u32(b, vaddq_u32(lsb, vdupq_n_u32(0x7FFF))), 16);
  const uint32x4_t nan = vmvnq_u32(vceqq_f32(x, x));
  return vbslq_u32(nan, vorrq_u32(top, vdupq_n_u32(0x40)), r);
}
#endif

}  // namespace detail

/// Widens width<Arch> bf16 values at p (no alignment needed).
template <class Arch>
inline batch<float, Arch> load_bf16(const std::uint16_t* p) noexcept {
#if defined(__AVX512F__)
  if constexpr (detail::derives_v<Arch, xsimd::avx512f>)
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
  else
#endif
#if defined(__AVX2__)
  if constexpr (detail::derives_v<Arch, xsimd::avx2>)
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  else
#endif
#if defined(__SSE4_1__)
  if constexpr (detail::derives_v<Arch, xsimd::sse4_1>)
    return _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))), 16));
  else
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
  if constexpr (detail::derives_v<Arch, xsimd::neon64>)
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
  else
#endif
    return detail::widen_lanes<Arch>(p, bf16_to_float);
}

/// Widens half of the 2·width<Arch> bf16 values at p without a shuffle: each 32-bit lane holds
/// two bf16 (little-endian: p[2i] low, p[2i + 1] high), so `lane << 16` is p[2i] and
/// `lane & 0xFFFF0000` is p[2i + 1], both exact. load_bf16_even gives lane i = p[2i],
/// load_bf16_odd lane i = p[2i + 1] (the small GEMM pairs them with x packed in the same order).
template <class Arch>
inline batch<float, Arch> load_bf16_even(const std::uint16_t* p) noexcept {
#if defined(__AVX512F__)
  if constexpr (detail::derives_v<Arch, xsimd::avx512f>)
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512(p), 16));
  else
#endif
#if defined(__AVX2__)
  if constexpr (detail::derives_v<Arch, xsimd::avx2>)
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), 16));
  else
#endif
#if defined(__SSE2__)
  if constexpr (detail::derives_v<Arch, xsimd::sse2>)
    return _mm_castsi128_ps(_mm_slli_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), 16));
  else
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
  if constexpr (detail::derives_v<Arch, xsimd::neon64>)
    return vreinterpretq_f32_u32(vshlq_n_u32(vreinterpretq_u32_u16(vld1q_u16(p)), 16));
  else
#endif
  {
    alignas(64) float tmp[width<Arch>];
    for (std::size_t i = 0; i < width<Arch>; ++i) tmp[i] = bf16_to_float(p[2 * i]);
    return simd::load<Arch>(tmp);
  }
}
template <class Arch>
inline batch<float, Arch> load_bf16_odd(const std::uint16_t* p) noexcept {
#if defined(__AVX512F__)
  if constexpr (detail::derives_v<Arch, xsimd::avx512f>)
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_srli_epi32(_mm512_loadu_si512(p), 16), 16));  // no mask register
  else
#endif
#if defined(__AVX2__)
  if constexpr (detail::derives_v<Arch, xsimd::avx2>)
    return _mm256_castsi256_ps(
        _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), _mm256_set1_epi32(int(0xFFFF0000u))));
  else
#endif
#if defined(__SSE2__)
  if constexpr (detail::derives_v<Arch, xsimd::sse2>)
    return _mm_castsi128_ps(_mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), _mm_set1_epi32(int(0xFFFF0000u))));
  else
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
  if constexpr (detail::derives_v<Arch, xsimd::neon64>)
    return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_u16(vld1q_u16(p)), vdupq_n_u32(0xFFFF0000u)));
  else
#endif
  {
    alignas(64) float tmp[width<Arch>];
    for (std::size_t i = 0; i < width<Arch>; ++i) tmp[i] = bf16_to_float(p[2 * i + 1]);
    return simd::load<Arch>(tmp);
  }
}

/// Rounds x to bf16 (nearest even) and stores its width<Arch> values at p.
template <class Arch>
inline void store_bf16(std::uint16_t* p, const batch<float, Arch>& x) noexcept {
#if defined(__AVX512F__)
  if constexpr (detail::derives_v<Arch, xsimd::avx512f>)
    detail::store_bf16_avx512(p, x);
  else
#endif
#if defined(__AVX2__)
  if constexpr (detail::derives_v<Arch, xsimd::avx2>) {
    // packus works per 128-bit lane: gather the two lanes' low halves (qwords 0 and 2)
    const __m256i r = detail::bf16_rne_bits(__m256(x));
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  } else
#endif
#if defined(__SSE4_1__)
  if constexpr (detail::derives_v<Arch, xsimd::sse4_1>) {
    const __m128i r = detail::bf16_rne_bits(__m128(x));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packus_epi32(r, r));
  } else
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
  if constexpr (detail::derives_v<Arch, xsimd::neon64>)
    vst1_u16(p, vmovn_u32(detail::bf16_rne_bits(float32x4_t(x))));
  else
#endif
    detail::narrow_lanes<Arch>(p, x, round_to_bf16);
}

/// Widens width<Arch> f16 values at p.
template <class Arch>
inline batch<float, Arch> load_f16(const std::uint16_t* p) noexcept {
#if defined(__AVX512F__)
  if constexpr (detail::derives_v<Arch, xsimd::avx512f>)
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  else
#endif
#if defined(__F16C__) && defined(__AVX__)
  if constexpr (detail::derives_v<Arch, xsimd::avx>)
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  else if constexpr (detail::derives_v<Arch, xsimd::sse4_1>)
    return _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  else
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
  if constexpr (detail::derives_v<Arch, xsimd::neon64>)
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
  else
#endif
    return detail::widen_lanes<Arch>(p, f16_to_float);
}

// ---- E4M3 (docs/spec.md §15) -----------------------------------------------------------------------
// An E4M3 magnitude shifted left by 7 is the binary16 of the same value times 2^-8: the 4 exponent
// bits land in the low bits of f16's 5 (bias 15 = 7 + 8) and the 3 mantissa bits on top of f16's
// 10, and E4M3 subnormals become f16 subnormals of the same significand, which every f16 widening
// (F16C, FCVTL) converts exactly. The NaN code S.1111.111 would become ±1.875: it is moved to f16's
// NaN first. So the widening is a shift, a sign move, a NaN fix-up and one f16 conversion; the
// factor 2^8 is left to the caller, which usually has a scale to fold it into (e4m3_raw_factor).

/// load_e4m3_raw gives the E4M3 values times 1 / e4m3_raw_factor (exact, a power of two).
inline constexpr float e4m3_raw_factor = 256.0f;

namespace detail {
#if defined(__F16C__) || defined(__AVX512F__)
/// f16 bits of E4M3 codes zero-extended to 16-bit lanes (values times 2^-8).
inline __m128i e4m3_f16_bits(__m128i w) noexcept {
  const __m128i shifted = _mm_slli_epi16(w, 7);                                      // sign at bit 14
  const __m128i h = _mm_add_epi16(shifted, _mm_and_si128(shifted, _mm_set1_epi16(0x4000)));  // to bit 15
  const __m128i nan = _mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7FFF)), _mm_set1_epi16(0x3F80));
  return _mm_or_si128(h, _mm_and_si128(nan, _mm_set1_epi16(0x7E00)));
}
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__)
inline __m256i e4m3_f16_bits(__m256i w) noexcept {
  const __m256i shifted = _mm256_slli_epi16(w, 7);
  const __m256i h = _mm256_add_epi16(shifted, _mm256_and_si256(shifted, _mm256_set1_epi16(0x4000)));
  const __mmask16 nan = _mm256_cmpeq_epi16_mask(_mm256_and_si256(h, _mm256_set1_epi16(0x7FFF)), _mm256_set1_epi16(0x3F80));
  return _mm256_mask_mov_epi16(h, nan, _mm256_or_si256(h, _mm256_set1_epi16(0x7E00)));
}
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
inline uint16x4_t e4m3_f16_bits(uint16x4_t w) noexcept {
  const uint16x4_t shifted = vshl_n_u16(w, 7);
  const uint16x4_t h = vadd_u16(shifted, vand_u16(shifted, vdup_n_u16(0x4000)));
  const uint16x4_t nan = vceq_u16(vand_u16(h, vdup_n_u16(0x7FFF)), vdup_n_u16(0x3F80));
  return vorr_u16(h, vand_u16(nan, vdup_n_u16(0x7E00)));
}
#endif
}  // namespace detail

/// The width<Arch> E4M3 codes at p (one byte each, no alignment needed) widened, times
/// 1 / e4m3_raw_factor: exact. NaN codes give NaN.
template <class Arch>
inline batch<float, Arch> load_e4m3_raw(const std::uint8_t* p) noexcept {
#if defined(__AVX512F__) && defined(__AVX512BW__)
  if constexpr (detail::derives_v<Arch, xsimd::avx512f>)
    return _mm512_cvtph_ps(detail::e4m3_f16_bits(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))));
  else
#endif
#if defined(__F16C__) && defined(__AVX2__)
  if constexpr (detail::derives_v<Arch, xsimd::avx2>)
    return _mm256_cvtph_ps(detail::e4m3_f16_bits(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))));
  else
#endif
#if defined(__F16C__)
  if constexpr (detail::derives_v<Arch, xsimd::sse4_1>) {
    std::int32_t four;
    std::memcpy(&four, p, sizeof four);
    return _mm_cvtph_ps(detail::e4m3_f16_bits(_mm_cvtepu8_epi16(_mm_cvtsi32_si128(four))));
  } else
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
  if constexpr (detail::derives_v<Arch, xsimd::neon64>) {
    std::uint32_t four;
    std::memcpy(&four, p, sizeof four);
    const uint16x4_t w = vget_low_u16(vmovl_u8(vreinterpret_u8_u32(vdup_n_u32(four))));
    return vcvt_f32_f16(vreinterpret_f16_u16(detail::e4m3_f16_bits(w)));
  } else
#endif
  {
    alignas(64) float tmp[width<Arch>];
    for (std::size_t i = 0; i < width<Arch>; ++i) tmp[i] = e4m3_to_float(p[i]) * (1.0f / e4m3_raw_factor);
    return simd::load<Arch>(tmp);
  }
}

/// The 2·width<Arch> E4M3 codes at p widened as load_e4m3_raw does, into lo (the first width<Arch>)
/// and hi. AVX-512 converts all of them in 16-bit lanes of one register: half the integer work.
template <class Arch>
inline void load_e4m3_raw2(const std::uint8_t* p, batch<float, Arch>& lo, batch<float, Arch>& hi) noexcept {
#if defined(__AVX512F__) && defined(__AVX512BW__)
  if constexpr (detail::derives_v<Arch, xsimd::avx512bw>) {
    const __m512i shifted = _mm512_slli_epi16(_mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 7);
    __m512i h = _mm512_add_epi16(shifted, _mm512_and_si512(shifted, _mm512_set1_epi16(0x4000)));
    const __mmask32 nan = _mm512_cmpeq_epi16_mask(_mm512_and_si512(h, _mm512_set1_epi16(0x7FFF)), _mm512_set1_epi16(0x3F80));
    h = _mm512_mask_add_epi16(h, nan, h, _mm512_set1_epi16(0x4000));  // 0x3F80 -> 0x7F80: an f16 NaN
    lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
    hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
    return;
  }
#endif
  lo = load_e4m3_raw<Arch>(p);
  hi = load_e4m3_raw<Arch>(p + width<Arch>);
}

// ---- E4M3 by table, in quad order (AVX-512 VBMI) --------------------------------------------------
// Every E4M3 value is a bf16 value exactly. Two 128-byte tables give the high and the low byte of
// the bf16 of each magnitude (NaN included), one VPERMI2B each for 64 codes; the sign is or-ed
// into the high byte; two shift-and-merge steps pair the bytes into bf16 words, and each 32-bit lane
// then yields two floats by a shift or a mask (as load_bf16_even/odd do). The conversion touches the
// shuffle unit twice per 64 codes (the f16 route: eight times), but the floats come out in "quad
// order": vector j holds codes 4i + e4m3_quad_offset[j]. Callers arrange the other operand alike.

/// Whether load_e4m3_quads exists for Arch (AVX-512 with VBMI in the build's flags).
template <class Arch>
inline constexpr bool e4m3_quads =
#if defined(__AVX512VBMI__) && defined(__AVX512BW__)
    detail::derives_v<Arch, xsimd::avx512bw>;
#else
    false;
#endif
/// The code offset (mod 4) of the floats in each of load_e4m3_quads' four vectors.
inline constexpr int e4m3_quad_offset[4] = {0, 2, 1, 3};

#if defined(__AVX512VBMI__) && defined(__AVX512BW__)
namespace detail {
/// Byte `byte` (0: low, 1: high) of the bf16 bits of E4M3 magnitude c, for c < 128.
constexpr std::uint8_t e4m3_bf16_byte(int c, int byte) {
  const int e = c >> 3, m = c & 7;
  int bits = c == 0x7F ? 0x7FC0 : 0;                      // NaN, or zero
  if (c != 0x7F && e > 0) bits = ((e + 120) << 7) | (m << 4);
  if (e == 0 && m > 0) {                                  // m · 2^-9: normalise the 3-bit mantissa
    int exp = 118, man = m;                               // 2^-9 is 2^(118 - 127)
    while (man < 8) man <<= 1, --exp;
    exp += 3;
    bits = (exp << 7) | ((man & 7) << 4);
  }
  return std::uint8_t(byte ? bits >> 8 : bits & 0xFF);
}
struct e4m3_bf16_tables {
  alignas(64) std::uint8_t high[128];
  alignas(64) std::uint8_t low[128];
};
constexpr e4m3_bf16_tables make_e4m3_bf16_tables() {
  e4m3_bf16_tables t{};
  for (int c = 0; c < 128; ++c) {
    t.high[c] = e4m3_bf16_byte(c, 1);
    t.low[c] = e4m3_bf16_byte(c, 0);
  }
  return t;
}
inline constexpr e4m3_bf16_tables e4m3_tables = make_e4m3_bf16_tables();
}  // namespace detail
#endif

/// The 4·width<Arch> (64) E4M3 codes at p widened exactly into q[0..3] in quad order (only where
/// e4m3_quads<Arch>).
template <class Arch>
inline void load_e4m3_quads(const std::uint8_t* p, batch<float, Arch> (&q)[4]) noexcept {
  static_assert(e4m3_quads<Arch>, "load_e4m3_quads needs AVX-512 VBMI");
#if defined(__AVX512VBMI__) && defined(__AVX512BW__)
  const auto& t = detail::e4m3_tables;
  const __m512i codes = _mm512_loadu_si512(p);
  const __m512i high0 = _mm512_load_si512(t.high), high1 = _mm512_load_si512(t.high + 64);
  const __m512i low0 = _mm512_load_si512(t.low), low1 = _mm512_load_si512(t.low + 64);
  // high | (codes & 0x80): the sign bit, which the 7-bit table index ignores
  const __m512i high = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(high0, codes, high1), codes,
                                                 _mm512_set1_epi8(char(0x80)), 0xF8);
  const __m512i low = _mm512_permutex2var_epi8(low0, codes, low1);
  // bf16 words: even codes (low byte 2i, high byte 2i moved up), odd codes (low byte 2i+1 moved down)
  const __m512i even = _mm512_ternarylogic_epi32(low, _mm512_slli_epi16(high, 8), _mm512_set1_epi16(0x00FF), 0xEC);
  const __m512i odd = _mm512_ternarylogic_epi32(_mm512_srli_epi16(low, 8), high, _mm512_set1_epi16(int16_t(0xFF00)), 0xF8);
  const __m512i top = _mm512_set1_epi32(int(0xFFFF0000u));
  q[0] = _mm512_castsi512_ps(_mm512_slli_epi32(even, 16));
  q[1] = _mm512_castsi512_ps(_mm512_and_si512(even, top));
  q[2] = _mm512_castsi512_ps(_mm512_slli_epi32(odd, 16));
  q[3] = _mm512_castsi512_ps(_mm512_and_si512(odd, top));
#else
  (void)p;
  (void)q;
#endif
}

/// The width<Arch> E4M3 codes at p widened exactly.
template <class Arch>
inline batch<float, Arch> load_e4m3(const std::uint8_t* p) noexcept {
  return load_e4m3_raw<Arch>(p) * batch<float, Arch>(e4m3_raw_factor);
}

/// Rounds x to E4M3 codes (nearest even, saturating at ±448, NaN kept) and stores width<Arch> of
/// them at p.
template <class Arch>
inline void store_e4m3(std::uint8_t* p, const batch<float, Arch>& x) noexcept {
  alignas(64) float tmp[width<Arch>];
  simd::store(tmp, x);
  for (std::size_t i = 0; i < width<Arch>; ++i) p[i] = round_to_e4m3(tmp[i]);
}

/// Rounds x to f16 (nearest even, whatever MXCSR/FPCR say on x86) and stores width<Arch> values
/// at p. Out-of-range values become ±inf: callers that must refuse them check f16_in_range first.
template <class Arch>
inline void store_f16(std::uint16_t* p, const batch<float, Arch>& x) noexcept {
#if defined(__AVX512F__)
  if constexpr (detail::derives_v<Arch, xsimd::avx512f>)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(__m512(x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  else
#endif
#if defined(__F16C__) && defined(__AVX__)
  if constexpr (detail::derives_v<Arch, xsimd::avx>)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(__m256(x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  else if constexpr (detail::derives_v<Arch, xsimd::sse4_1>)
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_cvtps_ph(__m128(x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  else
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
  // FCVT rounds as FPCR says: nearest even, the Linux default, which gattn never changes.
  if constexpr (detail::derives_v<Arch, xsimd::neon64>)
    vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(float32x4_t(x))));
  else
#endif
    detail::narrow_lanes<Arch>(p, x, round_to_f16);
}

/// x rounded to bf16 and widened back (the value a bf16 tensor would hold).
template <class Arch>
inline batch<float, Arch> round_bf16(const batch<float, Arch>& x) noexcept {
  alignas(64) std::uint16_t tmp[width<Arch>];
  store_bf16<Arch>(tmp, x);
  return load_bf16<Arch>(tmp);
}

/// width<Arch> elements of storage type S at p, widened (f32: a plain load).
template <class Arch, storage_type S>
inline batch<float, Arch> load_widened(const storage_element_t<S>* p) noexcept {
  if constexpr (S == storage_type::bf16) return load_bf16<Arch>(p);
  else if constexpr (S == storage_type::f16) return load_f16<Arch>(p);
  else return simd::load<Arch>(p);
}

// ---- arrays (vector body, then the one-lane tail through the reference) ----------------------------
/// dst[i] = widen(src[i]), i < n, for bf16 storage.
template <class Arch = default_arch>
inline void widen_bf16(const std::uint16_t* src, float* dst, index n) noexcept {
  constexpr index w = index(width<Arch>);
  index i = 0;
  for (; i + w <= n; i += w) simd::store(dst + i, load_bf16<Arch>(src + i));
  for (; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}
/// dst[i] = round_to_bf16(src[i]), i < n.
template <class Arch = default_arch>
inline void narrow_bf16(const float* src, std::uint16_t* dst, index n) noexcept {
  constexpr index w = index(width<Arch>);
  index i = 0;
  for (; i + w <= n; i += w) store_bf16<Arch>(dst + i, simd::load<Arch>(src + i));
  for (; i < n; ++i) dst[i] = round_to_bf16(src[i]);
}
/// dst[i] = widen(src[i]), i < n, for f16 storage.
template <class Arch = default_arch>
inline void widen_f16(const std::uint16_t* src, float* dst, index n) noexcept {
  constexpr index w = index(width<Arch>);
  index i = 0;
  for (; i + w <= n; i += w) simd::store(dst + i, load_f16<Arch>(src + i));
  for (; i < n; ++i) dst[i] = f16_to_float(src[i]);
}
/// dst[i] = round_to_f16(src[i]), i < n.
template <class Arch = default_arch>
inline void narrow_f16(const float* src, std::uint16_t* dst, index n) noexcept {
  constexpr index w = index(width<Arch>);
  index i = 0;
  for (; i + w <= n; i += w) store_f16<Arch>(dst + i, simd::load<Arch>(src + i));
  for (; i < n; ++i) dst[i] = round_to_f16(src[i]);
}

/// dst[i] = the E4M3 code src[i] widened, i < n.
template <class Arch = default_arch>
inline void widen_e4m3(const std::uint8_t* src, float* dst, index n) noexcept {
  constexpr index w = index(width<Arch>);
  index i = 0;
  for (; i + w <= n; i += w) simd::store(dst + i, load_e4m3<Arch>(src + i));
  for (; i < n; ++i) dst[i] = e4m3_to_float(src[i]);
}
/// dst[i] = round_to_e4m3(src[i]), i < n.
template <class Arch = default_arch>
inline void narrow_e4m3(const float* src, std::uint8_t* dst, index n) noexcept {
  constexpr index w = index(width<Arch>);
  index i = 0;
  for (; i + w <= n; i += w) store_e4m3<Arch>(dst + i, simd::load<Arch>(src + i));
  for (; i < n; ++i) dst[i] = round_to_e4m3(src[i]);
}

/// Index of the first x[i] outside the f16 range (see f16_in_range), or n when all fit: an f16
/// cache calls this before appending, so that a refused call appends nothing.
template <class Arch = default_arch>
inline index find_f16_out_of_range(const float* x, index n) noexcept {
  constexpr index w = index(width<Arch>);
  index i = 0;
  if constexpr (is_xsimd_arch_v<Arch>) {
    using B = batch<float, Arch>;
    for (; i + w <= n; i += w)
      if (xsimd::any(xsimd::abs(simd::load<Arch>(x + i)) > B(f16_max))) break;  // NaN compares false
  }
  for (; i < n; ++i)
    if (!f16_in_range(x[i])) return i;
  return n;
}

}  GATTN_NAMESPACE_END  // namespace gattn::simd
