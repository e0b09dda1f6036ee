// vdpbf16ps (AVX512-BF16) in every AVX-512 build. With the extension in the build's flags
// (-march=znver4 and later, -mavx512bf16) its kernels compile as any other; without it (an
// x86-64-v4 build, the AVX-512 arch of a runtime-dispatched program) they compile by function
// attribute and run only where core/cpu.hpp's bf16_dot_products_wanted() says the CPU has it, as
// the AMX and NEON BFDOT engines do. Outside such kernels only the flags' own instructions run.
#pragma once

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    (defined(__AVX512BF16__) || (defined(__clang__) && __clang_major__ >= 9) ||  \
     (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10))
#define GATTN_AVX512_BF16_COMPILED 1
#include <immintrin.h>
#if defined(__AVX512BF16__)
#define GATTN_AVX512_BF16_TARGET
#else
#define GATTN_AVX512_BF16_TARGET __attribute__((target("avx512bf16")))
#endif
#else
#define GATTN_AVX512_BF16_COMPILED 0
#define GATTN_AVX512_BF16_TARGET
#endif
