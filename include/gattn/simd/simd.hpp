// The pinned SIMD surface: the only place that talks to xsimd (8.1 API: hadd, no reduce_*).
// `simd::batch<float, Arch>` is xsimd::batch for xsimd archs and a one-lane struct for
// gattn::scalar_arch, so every kernel is written once as a template on Arch.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "gattn/simd/arch.hpp"

GATTN_NAMESPACE_BEGIN namespace simd {

/// One-lane "batch" for gattn::scalar_arch (xsimd 8.1 has none).
template <class T>
struct scalar_batch {
  T v{};
  static constexpr std::size_t size = 1;
  scalar_batch() = default;
  scalar_batch(T x) : v(x) {}  // NOLINT: implicit, like xsimd's broadcast constructor
  friend scalar_batch operator+(scalar_batch a, scalar_batch b) { return a.v + b.v; }
  friend scalar_batch operator-(scalar_batch a, scalar_batch b) { return a.v - b.v; }
  friend scalar_batch operator*(scalar_batch a, scalar_batch b) { return a.v * b.v; }
  friend scalar_batch operator/(scalar_batch a, scalar_batch b) { return a.v / b.v; }
  friend scalar_batch operator-(scalar_batch a) { return -a.v; }
  scalar_batch& operator+=(scalar_batch b) { v += b.v; return *this; }
  scalar_batch& operator-=(scalar_batch b) { v -= b.v; return *this; }
  scalar_batch& operator*=(scalar_batch b) { v *= b.v; return *this; }
  scalar_batch& operator/=(scalar_batch b) { v /= b.v; return *this; }
};
/// Comparison result of scalar_batch (xsimd's batch_bool counterpart).
struct scalar_bool {
  bool v = false;
  friend scalar_bool operator&&(scalar_bool a, scalar_bool b) { return {a.v && b.v}; }
  friend scalar_bool operator||(scalar_bool a, scalar_bool b) { return {a.v || b.v}; }
  friend scalar_bool operator&(scalar_bool a, scalar_bool b) { return {a.v && b.v}; }
  friend scalar_bool operator|(scalar_bool a, scalar_bool b) { return {a.v || b.v}; }
};
template <class T> inline scalar_bool operator<(scalar_batch<T> a, scalar_batch<T> b) { return {a.v < b.v}; }
template <class T> inline scalar_bool operator<=(scalar_batch<T> a, scalar_batch<T> b) { return {a.v <= b.v}; }
template <class T> inline scalar_bool operator>(scalar_batch<T> a, scalar_batch<T> b) { return {a.v > b.v}; }
template <class T> inline scalar_bool operator>=(scalar_batch<T> a, scalar_batch<T> b) { return {a.v >= b.v}; }
template <class T> inline scalar_bool operator==(scalar_batch<T> a, scalar_batch<T> b) { return {a.v == b.v}; }
template <class T> inline scalar_bool operator!=(scalar_batch<T> a, scalar_batch<T> b) { return {a.v != b.v}; }

namespace detail {
template <class T, class Arch>
struct batch_of {
  using type = xsimd::batch<T, Arch>;
};
template <class T>
struct batch_of<T, scalar_arch> {
  using type = scalar_batch<T>;
};
}  // namespace detail

/// The vector type of `Arch` (lane count `width<Arch>`).
template <class T, class Arch>
using batch = typename detail::batch_of<T, Arch>::type;

/// Lanes of a float batch.
template <class Arch>
inline constexpr std::size_t width = batch<float, Arch>::size;

// ---- memory -----------------------------------------------------------------------------------
template <class Arch>
inline batch<float, Arch> load(const float* p) noexcept {
  if constexpr (is_xsimd_arch_v<Arch>) return xsimd::batch<float, Arch>::load_unaligned(p);
  else return scalar_batch<float>(*p);
}
template <class B>
inline void store(float* p, const B& x) noexcept {
  if constexpr (std::is_same<B, scalar_batch<float>>::value) *p = x.v;
  else x.store_unaligned(p);
}
/// Loads into a register that the compiler must keep: GCC otherwise folds a vector used by several
/// FMAs back into each FMA as a memory operand (one load per FMA instead of one per vector), which
/// makes the microkernels load-bound.
template <class Arch>
inline batch<float, Arch> load_reg(const float* p) noexcept {
  if constexpr (is_xsimd_arch_v<Arch>) {
    typename xsimd::batch<float, Arch>::register_type r = xsimd::batch<float, Arch>::load_unaligned(p);
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    asm("" : "+v"(r));
#elif defined(__GNUC__) && defined(__aarch64__)
    asm("" : "+w"(r));
#endif
    return r;
  } else {
    return scalar_batch<float>(*p);
  }
}
template <class Arch>
inline batch<float, Arch> broadcast(float x) noexcept {
  return batch<float, Arch>(x);
}

// ---- arithmetic ---------------------------------------------------------------------------------
template <class T>
inline scalar_batch<T> fma(scalar_batch<T> a, scalar_batch<T> b, scalar_batch<T> c) noexcept {
  return std::fma(a.v, b.v, c.v);
}
/// One rounding on every arch with an FMA instruction. xsimd 8.1 has no AVX-512 fma (its generic
/// a·b + c rounds twice unless the optimiser contracts it, which GCC does at -O2 and not at -O1
/// or -Og), so AVX-512 takes vfmadd directly.
template <class T, class A>
inline xsimd::batch<T, A> fma(const xsimd::batch<T, A>& a, const xsimd::batch<T, A>& b,
                              const xsimd::batch<T, A>& c) noexcept {
#if defined(__AVX512F__)
  if constexpr (std::is_base_of<xsimd::avx512f, A>::value && std::is_same<T, float>::value)
    return _mm512_fmadd_ps(a, b, c);
  else if constexpr (std::is_base_of<xsimd::avx512f, A>::value && std::is_same<T, double>::value)
    return _mm512_fmadd_pd(a, b, c);
  else
#endif
    return xsimd::fma(a, b, c);
}
/// max(a, b): when b is NaN the result is NaN on every arch we use (x86 max returns its
/// second operand when either is NaN), so callers put the possibly-NaN value second.
template <class T>
inline scalar_batch<T> max(scalar_batch<T> a, scalar_batch<T> b) noexcept {
  return (a.v > b.v) ? a.v : b.v;
}
template <class T, class A>
inline xsimd::batch<T, A> max(const xsimd::batch<T, A>& a, const xsimd::batch<T, A>& b) noexcept {
  return xsimd::max(a, b);
}
template <class T>
inline scalar_batch<T> min(scalar_batch<T> a, scalar_batch<T> b) noexcept {
  return (a.v < b.v) ? a.v : b.v;
}
template <class T, class A>
inline xsimd::batch<T, A> min(const xsimd::batch<T, A>& a, const xsimd::batch<T, A>& b) noexcept {
  return xsimd::min(a, b);
}
template <class T>
inline scalar_batch<T> select(scalar_bool c, scalar_batch<T> a, scalar_batch<T> b) noexcept {
  return c.v ? a : b;
}
template <class T, class A>
inline xsimd::batch<T, A> select(const xsimd::batch_bool<T, A>& c, const xsimd::batch<T, A>& a,
                                 const xsimd::batch<T, A>& b) noexcept {
  return xsimd::select(c, a, b);
}
/// Horizontal sum.
template <class T>
inline T hadd(scalar_batch<T> a) noexcept { return a.v; }
template <class T, class A>
inline T hadd(const xsimd::batch<T, A>& a) noexcept { return xsimd::hadd(a); }
/// Horizontal sums of W = size batches at once: lane i of the result = hadd(rows[i]).
template <class T>
inline scalar_batch<T> haddp(const scalar_batch<T>* rows) noexcept { return rows[0]; }
#if defined(__AVX512F__)
namespace detail {
/// 16-row transpose-and-add for AVX-512 (xsimd 8.1's avx512f haddp returns its lanes permuted:
/// 0 1 4 5 2 3 6 7 8 9 12 13 10 11 14 15). Lane i of the result = Σ rows[i].
__attribute__((always_inline)) inline __m512 haddp16(const __m512* r) noexcept {
  __m512 g[4];
  for (int k = 0; k < 4; ++k) {
    // level 1: pairs (row k, row 4+k) and (row 8+k, row 12+k) -> quarter sums
    const __m512 c = _mm512_add_ps(_mm512_shuffle_f32x4(r[k], r[4 + k], 0x44), _mm512_shuffle_f32x4(r[k], r[4 + k], 0xEE));
    const __m512 d = _mm512_add_ps(_mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x44),
                                   _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xEE));
    // level 2: quarter q of g[k] holds 4 partial sums of row 4q + k
    g[k] = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x88), _mm512_shuffle_f32x4(c, d, 0xDD));
  }
  // level 3, inside each 128-bit quarter: lane 4q + k = Σ row 4q + k
  const __m512 h01 = _mm512_add_ps(_mm512_unpacklo_ps(g[0], g[1]), _mm512_unpackhi_ps(g[0], g[1]));
  const __m512 h23 = _mm512_add_ps(_mm512_unpacklo_ps(g[2], g[3]), _mm512_unpackhi_ps(g[2], g[3]));
  const __m512d a = _mm512_castps_pd(h01), b = _mm512_castps_pd(h23);
  return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
}
}  // namespace detail
#endif
// Always inlined: its 16 rows are a microkernel's accumulators, which a call would spill.
template <class T, class A>
__attribute__((always_inline)) inline xsimd::batch<T, A> haddp(const xsimd::batch<T, A>* rows) noexcept {
#if defined(__AVX512F__)
  if constexpr (std::is_same<T, float>::value && std::is_base_of<xsimd::avx512f, A>::value) {
    __m512 r[16];
    for (int i = 0; i < 16; ++i) r[i] = rows[i];
    return detail::haddp16(r);
  } else
#endif
    return xsimd::haddp(rows);
}
/// Horizontal max (xsimd 8.1 has no reduce_max): via a store.
template <class B>
inline float hmax(const B& a) noexcept {
  alignas(64) float tmp[B::size];
  simd::store(tmp, a);
  float m = tmp[0];
  for (std::size_t i = 1; i < B::size; ++i) m = std::max(m, tmp[i]);
  return m;
}

/// Accurate exp (xsimd::exp / std::exp): overflow to +inf, -inf -> 0, NaN -> NaN; results below
/// FLT_MIN may flush to 0. Used by the activations, where accuracy at the edges matters.
template <class T>
inline scalar_batch<T> exp(scalar_batch<T> a) noexcept { return std::exp(a.v); }
template <class T, class A>
inline xsimd::batch<T, A> exp(const xsimd::batch<T, A>& a) noexcept { return xsimd::exp(a); }

namespace detail {
// 2^(g + 1/2) for g in [-1/2, 1/2): Taylor series of sqrt(2)·e^(g·ln2), degree 7
// (truncation error <= sqrt2·(ln2/2)^8/8! ~ 7e-9 relative: below half an ulp).
inline constexpr float k_p0 = 1.4142135623730951f;
inline constexpr float k_p1 = 0.9802581434685472f;
inline constexpr float k_p2 = 0.3397315841830749f;
inline constexpr float k_p3 = 0.07849466324122069f;
inline constexpr float k_p4 = 0.013602088628663626f;
inline constexpr float k_p5 = 0.0018856498765369369f;
inline constexpr float k_p6 = 0.00021783881590746446f;
inline constexpr float k_p7 = 2.157062300896799e-05f;
}  // namespace detail

/// Fast exp for the softmax, x <= 0 (x - running max): range-reduced polynomial.
///   y = x·log2(e), clamped at -127 (so -inf and anything that would underflow give n = -127);
///   n = floor(y), g = y - n - 1/2 in [-1/2, 1/2), p = 2^(g+1/2) in [1, 2) by polynomial,
///   result = p · 2^n with 2^n built in the exponent field; n = -127 builds +0.0 exactly.
/// Every result is either exactly 0 or >= FLT_MIN: no denormal is ever produced (they would
/// slow the P·V products), and masked scores (-inf) give exactly 0. NaN in gives NaN out.
/// Relative error ~1e-7 near x = 0 growing like 6e-8·|y| (rounding of x·log2e), so the absolute
/// error is below 3e-8 everywhere: what the softmax needs.
template <class B>
inline B exp_nonpositive(const B& x) noexcept {
  const B y = simd::max(B(-127.0f), x * B(1.44269504088896341f));  // NaN x stays NaN (second operand)
  if constexpr (std::is_same<B, scalar_batch<float>>::value) {
    if (std::isnan(y.v)) return y;
    const float n = std::floor(y.v);
    const float g = y.v - n - 0.5f;
    float p = detail::k_p7;
    p = std::fma(p, g, detail::k_p6); p = std::fma(p, g, detail::k_p5); p = std::fma(p, g, detail::k_p4);
    p = std::fma(p, g, detail::k_p3); p = std::fma(p, g, detail::k_p2); p = std::fma(p, g, detail::k_p1);
    p = std::fma(p, g, detail::k_p0);
    const std::uint32_t bits = static_cast<std::uint32_t>(static_cast<std::int32_t>(n) + 127) << 23;
    float s;
    std::memcpy(&s, &bits, sizeof s);
    return p * s;
  } else {
    const B n = xsimd::floor(y);
    const B g = (y - n) - B(0.5f);
    B p = B(detail::k_p7);
    p = xsimd::fma(p, g, B(detail::k_p6)); p = xsimd::fma(p, g, B(detail::k_p5));
    p = xsimd::fma(p, g, B(detail::k_p4)); p = xsimd::fma(p, g, B(detail::k_p3));
    p = xsimd::fma(p, g, B(detail::k_p2)); p = xsimd::fma(p, g, B(detail::k_p1));
    p = xsimd::fma(p, g, B(detail::k_p0));
    using IB = xsimd::batch<std::int32_t, typename B::arch_type>;
    const IB e = (xsimd::to_int(n) + IB(127)) << 23;
    return p * xsimd::bitwise_cast<B>(e);
  }
}

}  GATTN_NAMESPACE_END  // namespace gattn::simd
