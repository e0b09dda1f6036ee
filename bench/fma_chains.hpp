// The FMA peak's loop, shared by limits/fma (bench_kernel.cpp) and the standalone probes that
// compare against a peak measured in their own run.
#pragma once

#include "gattn/simd/simd.hpp"

namespace gattn_bench {

/// Counted FMAs in one call of fma_chains(steps): 16 chains of one vector FMA per step.
inline double fma_chain_flops(long steps) {
  return 2.0 * double(gattn::simd::batch<float, gattn::default_arch>::size) * 16.0 * double(steps);
}

/// 16 independent accumulator chains on registers, each with its own multiplier so the compiler
/// cannot merge them, `steps` FMAs each, no memory traffic. Returns their sum (keep it alive).
inline float fma_chains(long steps) {
  using B = gattn::simd::batch<float, gattn::default_arch>;
  constexpr int chains = 16;
  B acc[chains], mul[chains];
  const B add(1e-7f);
#pragma GCC unroll 16
  for (int c = 0; c < chains; ++c) {
    acc[c] = B(0.001f * float(c));
    mul[c] = B(0.9999f - 1e-5f * float(c));
  }
  for (long i = 0; i < steps; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < chains; ++c) acc[c] = gattn::simd::fma(acc[c], mul[c], add);
  }
  B sum(0.0f);
#pragma GCC unroll 16
  for (int c = 0; c < chains; ++c) sum += acc[c];
  return gattn::simd::hadd(sum);
}

}  // namespace gattn_bench
