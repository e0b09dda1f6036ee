// The arch namespace: gattn's code lives in gattn::<arch>:: (an inline namespace), so that
// translation units compiled for different instruction sets link into one program without sharing
// (and the linker merging) inline functions whose bodies differ (docs/api.md, "Several ISAs in one
// binary").
//
// The name spells every compile-time choice that changes a body in gattn: the SIMD level xsimd
// picks (the kernels' default arch), the extensions the conversions and dot products test
// (AVX512-BF16, F16C), GATTN_FORCE_SCALAR and OpenMP. Examples: avx512bw_bf16_omp (-march=znver5
// -fopenmp), avx2_fma_f16c (-march=x86-64-v3), sse2 (no flags on x86-64), neon64, scalar_sse2.
// Outside it stay only the types meant to cross such translation units: the exceptions of
// core/error.hpp, core/types.hpp, and the configuration structs and enums of core/config.hpp.
#pragma once

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define GATTN_ARCH_NS_BASE avx512bw
#define GATTN_ARCH_XSIMD_TAG xsimd::avx512bw
#elif defined(__AVX512F__) && defined(__AVX512DQ__)
#define GATTN_ARCH_NS_BASE avx512dq
#define GATTN_ARCH_XSIMD_TAG xsimd::avx512dq
#elif defined(__AVX512F__) && defined(__AVX512CD__)
#define GATTN_ARCH_NS_BASE avx512cd
#define GATTN_ARCH_XSIMD_TAG xsimd::avx512cd
#elif defined(__AVX512F__)
#define GATTN_ARCH_NS_BASE avx512f
#define GATTN_ARCH_XSIMD_TAG xsimd::avx512f
#elif defined(__AVX2__) && defined(__FMA__)
#define GATTN_ARCH_NS_BASE avx2_fma
#define GATTN_ARCH_XSIMD_TAG xsimd::fma3<xsimd::avx2>
#elif defined(__AVX2__)
#define GATTN_ARCH_NS_BASE avx2
#define GATTN_ARCH_XSIMD_TAG xsimd::avx2
#elif defined(__AVX__) && defined(__FMA__)
#define GATTN_ARCH_NS_BASE avx_fma
#define GATTN_ARCH_XSIMD_TAG xsimd::fma3<xsimd::avx>
#elif defined(__AVX__)
#define GATTN_ARCH_NS_BASE avx
#define GATTN_ARCH_XSIMD_TAG xsimd::avx
#elif defined(__FMA4__)
#define GATTN_ARCH_NS_BASE fma4
#define GATTN_ARCH_XSIMD_TAG xsimd::fma4
#elif defined(__SSE4_2__) && defined(__FMA__)
#define GATTN_ARCH_NS_BASE sse4_2_fma
#define GATTN_ARCH_XSIMD_TAG xsimd::fma3<xsimd::sse4_2>
#elif defined(__SSE4_2__)
#define GATTN_ARCH_NS_BASE sse4_2
#define GATTN_ARCH_XSIMD_TAG xsimd::sse4_2
#elif defined(__SSE4_1__)
#define GATTN_ARCH_NS_BASE sse4_1
#define GATTN_ARCH_XSIMD_TAG xsimd::sse4_1
#elif defined(__SSSE3__)
#define GATTN_ARCH_NS_BASE ssse3
#define GATTN_ARCH_XSIMD_TAG xsimd::ssse3
#elif defined(__SSE3__)
#define GATTN_ARCH_NS_BASE sse3
#define GATTN_ARCH_XSIMD_TAG xsimd::sse3
#elif defined(__SSE2__)
#define GATTN_ARCH_NS_BASE sse2
#define GATTN_ARCH_XSIMD_TAG xsimd::sse2
#elif defined(__aarch64__) && defined(__ARM_NEON)
#define GATTN_ARCH_NS_BASE neon64
#define GATTN_ARCH_XSIMD_TAG xsimd::neon64
#elif defined(__ARM_NEON) && defined(__ARM_ARCH) && __ARM_ARCH >= 7
#define GATTN_ARCH_NS_BASE neon
#define GATTN_ARCH_XSIMD_TAG xsimd::neon
#else
#define GATTN_ARCH_NS_BASE generic
#define GATTN_ARCH_XSIMD_TAG ::gattn::scalar_arch
#endif

// GATTN_SIMD=scalar keeps the compiler's ISA (the conversions still use it) but not xsimd's kernels.
#if defined(GATTN_FORCE_SCALAR)
#define GATTN_ARCH_NS_PREFIX scalar_
#undef GATTN_ARCH_XSIMD_TAG
#define GATTN_ARCH_XSIMD_TAG ::gattn::scalar_arch
#else
#define GATTN_ARCH_NS_PREFIX
#endif

#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define GATTN_ARCH_NS_BF16 _bf16
#else
#define GATTN_ARCH_NS_BF16
#endif

// Below AVX-512 the f16 conversions use F16C when the compiler may.
#if defined(__F16C__) && defined(__AVX__) && !defined(__AVX512F__)
#define GATTN_ARCH_NS_F16C _f16c
#else
#define GATTN_ARCH_NS_F16C
#endif

// execution_context runs an OpenMP team only when compiled with OpenMP.
#if defined(_OPENMP)
#define GATTN_ARCH_NS_OMP _omp
#else
#define GATTN_ARCH_NS_OMP
#endif

#define GATTN_ARCH_CAT_(a, b) a##b
#define GATTN_ARCH_CAT(a, b) GATTN_ARCH_CAT_(a, b)
#define GATTN_ARCH_STR_(a) #a
#define GATTN_ARCH_STR(a) GATTN_ARCH_STR_(a)

/// The arch namespace of this translation unit (an identifier).
#define GATTN_ARCH_NS                                                                                   \
  GATTN_ARCH_CAT(GATTN_ARCH_CAT(GATTN_ARCH_CAT(GATTN_ARCH_CAT(GATTN_ARCH_NS_PREFIX, GATTN_ARCH_NS_BASE), \
                                               GATTN_ARCH_NS_BF16),                                     \
                                GATTN_ARCH_NS_F16C),                                                    \
                 GATTN_ARCH_NS_OMP)

/// Opens gattn::<arch> (one line: `GATTN_NAMESPACE_BEGIN namespace detail {` opens gattn::<arch>::detail).
#define GATTN_NAMESPACE_BEGIN \
  namespace gattn {           \
  inline namespace GATTN_ARCH_NS {
/// Closes what GATTN_NAMESPACE_BEGIN opened.
#define GATTN_NAMESPACE_END \
  }                         \
  }

GATTN_NAMESPACE_BEGIN

/// The name of this translation unit's arch namespace ("avx2_fma_f16c", "avx512bw_bf16_omp", ...):
/// what a program built for several arches can report to say which code runs.
constexpr const char* arch_namespace_name() noexcept { return GATTN_ARCH_STR(GATTN_ARCH_NS); }

GATTN_NAMESPACE_END
