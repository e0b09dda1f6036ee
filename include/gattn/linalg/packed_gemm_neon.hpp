// The BFDOT engine of the fast GEMM (AArch64 with the BF16 extension): packed_gemm_fast.hpp's
// microkernel with one BFDOT per accumulator and pair, compiled by function attribute.
#pragma once

#include <cstdint>
#include <cstring>

#include "gattn/core/config.hpp"
#include "gattn/core/types.hpp"
#include "gattn/linalg/packed_gemm.hpp"
#include "gattn/linalg/packed_gemm_bf16.hpp"

// GCC's arm_neon.h declares the BF16 intrinsics under armv8.2-a+bf16, so the kernel names that
// arch (a plain "+bf16" does not let them inline); it runs only where core/cpu.hpp's
// neon_bf16_usable() says the CPU has BFDOT.
#if defined(__aarch64__) && !defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10
#define GATTN_NEON_BF16_COMPILED 1
#define GATTN_NEON_BF16_TARGET __attribute__((target("arch=armv8.2-a+bf16")))
#include <arm_neon.h>
#else
#define GATTN_NEON_BF16_COMPILED 0
#endif

GATTN_NAMESPACE_BEGIN namespace detail {

#if GATTN_NEON_BF16_COMPILED
/// BFDOT per accumulator and pair: lane i += x_even · w_even + x_odd · w_odd, in the instruction's
/// own rounding (Arm does not promise vdpbf16ps's two roundings: within the `fast` tolerance, not
/// the FMA engine's bits).
template <int NB, int NV>
GATTN_NEON_BF16_TARGET void pgemm_fast_kernel_bfdot(const pgemm_fast_args& a) noexcept {
  constexpr index MR = NV * 4;
  float32x4_t acc[NB][NV];
  pgemm_acc_start<4>(acc, a.c, a.first, vdupq_n_f32(0.0f), [](const float* p) { return vld1q_f32(p); });
  for (index q = 0; q < a.kp; ++q) {
    bfloat16x8_t xv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) xv[v] = vreinterpretq_bf16_u16(vld1q_u16(a.x + (q * MR + v * 4) * 2));
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) {
      std::uint32_t pair;
      std::memcpy(&pair, a.w + j * pgemm_w16_stride + 2 * q, sizeof pair);
      const bfloat16x8_t wb = vreinterpretq_bf16_u32(vdupq_n_u32(pair));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[j][v] = vbfdotq_f32(acc[j][v], xv[v], wb);
    }
  }
  pgemm_acc_finish<4>(acc, a.c, [](float* p, float32x4_t v) { vst1q_f32(p, v); });
}
#endif

}  GATTN_NAMESPACE_END  // namespace gattn::detail
