// The bf16 engines of `fast` numerics in a build whose flags stop at x86-64-v4 (AVX-512 without
// AVX512-BF16), as the AVX-512 arch of a runtime-dispatched program is built: vdpbf16ps comes in
// by function attribute (simd/avx512_bf16.hpp) and runs where the CPU has it. The other files of
// this binary are the suite's own engine tests, compiled with the same flags.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "gattn/core/cpu.hpp"
#include "gattn/kernel/prefill_bf16.hpp"
#include "gattn/linalg/packed_gemm_fast.hpp"
#include "gattn/simd/bf16_dot.hpp"

#if defined(__AVX512BF16__) || !defined(__AVX512BW__)
#error "bf16_runtime is built with -march=x86-64-v4: AVX-512 without AVX512-BF16 in the flags"
#endif

namespace {

using A = gattn::default_arch;

TEST(Bf16EngineAtRunTime, IsCompiledWithoutTheFlag) {
  static_assert(GATTN_AVX512_BF16_COMPILED, "the attribute path is compiled");
  static_assert(gattn::simd::has_bf16_dot<A> && gattn::detail::pgemm_native_bf16<A> &&
                    gattn::detail::prefill_native_bf16<A>,
                "every vdpbf16ps kernel is in the build");
  EXPECT_EQ(std::string(gattn::arch_namespace_name()).find("_bf16"), std::string::npos)
      << gattn::arch_namespace_name();
}

TEST(Bf16EngineAtRunTime, IsChosenExactlyWhereTheCpuHasIt) {
  gattn::set_bf16_dot_products(gattn::kernel_choice::always);
  gattn::set_amx_tiles(gattn::kernel_choice::never);
  const std::string gemm = gattn::fast_gemm_engine_name<A>();
  gattn::sdpa_params p;
  p.products = gattn::numerics::fast;
  const auto prefill = gattn::detail::prefill_engine<A>(p);
  const bool dots = gattn::bf16_dot_products_wanted();
  gattn::set_bf16_dot_products(gattn::kernel_choice::automatic);
  gattn::set_amx_tiles(gattn::kernel_choice::automatic);
  EXPECT_EQ(dots, gattn::avx512_bf16_usable());
  if (!gattn::avx512_bf16_usable()) {
    EXPECT_EQ(gemm, "fma (portable)");
    EXPECT_EQ(prefill, gattn::detail::prefill_products::bf16_fma);
    GTEST_SKIP() << "this CPU has no AVX512-BF16: the portable engine ran, the vdpbf16ps kernels did not";
  }
  EXPECT_EQ(gemm, "avx512_bf16 (vdpbf16ps)");
  EXPECT_EQ(prefill, gattn::detail::prefill_products::bf16_dp);
}

}  // namespace
