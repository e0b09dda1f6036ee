// Compile-time SIMD dispatch, in one place: which arch the kernels use by default, and its name.
// Everything else in gattn is a template on `Arch` and never tests ISA macros.
#pragma once

#include <string>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "gattn/core/arch_namespace.hpp"

GATTN_NAMESPACE_BEGIN

/// gattn's own one-lane arch: xsimd 8.1 has no scalar batch, so simd.hpp maps this tag to a tiny
/// struct. Used when GATTN_FORCE_SCALAR is defined (GATTN_SIMD=scalar) or xsimd finds no arch.
struct scalar_arch {
  static constexpr const char* name() noexcept { return "scalar"; }
  static constexpr bool supported() noexcept { return true; }
  static constexpr bool available() noexcept { return true; }
  static constexpr std::size_t alignment() noexcept { return alignof(float); }
  static constexpr bool requires_alignment() noexcept { return false; }
};

namespace detail {
#if defined(GATTN_FORCE_SCALAR)
using default_arch_impl = scalar_arch;
#else
using default_arch_impl = std::conditional_t<std::is_same<xsimd::default_arch, xsimd::unavailable>::value,
                                             scalar_arch, xsimd::default_arch>;
#endif
}  // namespace detail

// A consumer that compiles gattn without any SIMD flags gets SSE2 code on x86-64 (4 lanes, no FMA):
// several times slower than what the machine can do, and easy to miss. Say so once at build time;
// -march=native (or -mavx2 -mfma, ...) fixes it, GATTN_NO_SIMD_NOTICE silences it.
#if defined(__x86_64__) && !defined(__AVX2__) && !defined(GATTN_FORCE_SCALAR) && !defined(GATTN_NO_SIMD_NOTICE)
#pragma message("gattn: compiled without AVX2/AVX-512 flags, so kernels use SSE2; build with -march=native " \
                "(or define GATTN_NO_SIMD_NOTICE to silence this)")
#endif

/// The arch every kernel uses unless told otherwise.
using default_arch = detail::default_arch_impl;

// The arch namespace's name must change whenever the default arch does (core/arch_namespace.hpp).
static_assert(std::is_same<default_arch, GATTN_ARCH_XSIMD_TAG>::value,
              "core/arch_namespace.hpp names another arch than xsimd's default: update its table");

/// Human-readable name of an arch ("avx512bw", "fma3+avx2", "neon64", "scalar", ...).
template <class Arch>
inline std::string arch_name() {
  return Arch::name();
}
inline std::string default_arch_name() { return arch_name<default_arch>(); }

/// True when the arch is a real xsimd arch (not gattn's scalar fallback).
template <class Arch>
inline constexpr bool is_xsimd_arch_v = !std::is_same<Arch, scalar_arch>::value;

GATTN_NAMESPACE_END  // namespace gattn
