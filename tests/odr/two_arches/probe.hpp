// odr.two_arches: what each arch's translation unit computes and reports (main.cpp checks them).
// Plain types only: they cross translation units compiled for different ISAs.
#pragma once

#include <cstdint>

namespace odr_two {

// SDPA: q [t, heads, d], k and v [t, kv_heads, d], causal. Linear map: x [rows, in] · Wᵀ, W [out, in] bf16.
constexpr int t = 5, heads = 2, kv_heads = 1, d = 8;
constexpr int rows = 3, in = 24, out = 6;

struct inputs {
  const float* q;
  const float* k;
  const float* v;
  const float* x;
  const std::uint16_t* w;
};

struct report {
  const char* arch_namespace;  ///< gattn::arch_namespace_name() in that translation unit
  const char* kernel_arch;     ///< gattn::default_arch::name(): the arch its kernels ran
  float sdpa[t * heads * d];
  float linear[rows * out];
};

report run_avx2(const inputs& in);    ///< probe.cpp compiled with -mavx2 -mfma
report run_avx512(const inputs& in);  ///< probe.cpp compiled with AVX-512 F/BW/DQ/VL and FMA

}  // namespace odr_two
