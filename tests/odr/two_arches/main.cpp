// odr.two_arches: one program, two translation units of gattn code compiled for AVX2 and for
// AVX-512 (probe.cpp twice), plus this one at the x86-64 baseline. Each must report its own arch
// namespace and kernel arch, and compute the scalar answer. Without gattn's per-arch namespaces
// (core/arch_namespace.hpp) the linker would keep one body of each inline function for both.
// The AVX-512 half runs only where the CPU has it (xsimd's runtime detection).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gattn/reference/sdpa.hpp>
#include <xsimd/xsimd.hpp>

#include "probe.hpp"

namespace {

std::vector<float> values(int n, unsigned seed) {
  std::vector<float> v(std::size_t(n), 0.0f);
  unsigned s = seed;
  for (float& e : v) {
    s = s * 1664525u + 1013904223u;
    e = float(int(s >> 9) % 2001 - 1000) / 1000.0f;
  }
  return v;
}

float bf16_value(std::uint16_t bits) {
  const std::uint32_t u = std::uint32_t(bits) << 16;
  float f = 0;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

struct expected {
  std::vector<double> sdpa, linear;
};

expected scalar_answer(const odr_two::inputs& in) {
  using namespace odr_two;
  expected e{std::vector<double>(t * heads * d), std::vector<double>(rows * out)};
  gattn::reference::sdpa_shape s;
  s.t_q = s.t_k = t;
  s.q_heads = heads;
  s.kv_heads = kv_heads;
  s.d_qk = s.d_v = d;
  s.scale = 1.0 / std::sqrt(double(float(d)));
  s.causal = true;
  gattn::reference::sdpa(s, in.q, in.k, in.v, e.sdpa.data());
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < out; ++o) {
      double acc = 0;
      for (int c = 0; c < odr_two::in; ++c) acc += double(in.x[r * odr_two::in + c]) * bf16_value(in.w[o * odr_two::in + c]);
      e.linear[std::size_t(r * out + o)] = acc;
    }
  return e;
}

double relative_error(const float* got, const std::vector<double>& want) {
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return err / scale;
}

/// Checks one half's report: its own namespace and arch, and the scalar answer.
bool check(const char* half, const odr_two::report& r, const char* ns_prefix, const char* arch, const expected& e) {
  const double sdpa = relative_error(r.sdpa, e.sdpa), linear = relative_error(r.linear, e.linear);
  const bool ns_ok = std::string(r.arch_namespace).rfind(ns_prefix, 0) == 0;
  const bool arch_ok = std::string(r.kernel_arch) == arch;
  const bool ok = ns_ok && arch_ok && sdpa <= 1e-5 && linear <= 1e-5;
  std::printf("%s: namespace gattn::%s (want %s*), kernel arch %s (want %s), sdpa rel %.2g, linear rel %.2g: %s\n",
              half, r.arch_namespace, ns_prefix, r.kernel_arch, arch, sdpa, linear, ok ? "ok" : "FAILED");
  return ok;
}

}  // namespace

int main() {
  const auto cpu = xsimd::available_architectures();
  if (!(cpu.avx2 && cpu.fma3_avx2)) {
    std::printf("odr.two_arches: skipped: this CPU has no AVX2+FMA (xsimd's detection)\n");
    return 0;
  }
  using namespace odr_two;
  const std::vector<float> q = values(t * heads * d, 1), k = values(t * kv_heads * d, 2), v = values(t * kv_heads * d, 3);
  const std::vector<float> x = values(rows * in, 4), wf = values(out * in, 5);
  std::vector<std::uint16_t> w(wf.size());
  for (std::size_t i = 0; i < wf.size(); ++i) {
    std::uint32_t u = 0;
    std::memcpy(&u, &wf[i], sizeof u);
    w[i] = std::uint16_t(u >> 16);
  }
  const inputs in{q.data(), k.data(), v.data(), x.data(), w.data()};
  const expected e = scalar_answer(in);

  bool ok = check("avx2 TU", run_avx2(in), "avx2_fma", "fma3+avx2", e);
  // xsimd 8.1 does not report AVX512VL; the AVX-512 half is compiled with it.
  if (cpu.avx512bw && cpu.avx512dq && __builtin_cpu_supports("avx512vl")) {
    ok = check("avx512 TU", run_avx512(in), "avx512bw", "avx512bw", e) && ok;
  } else {
    std::printf("avx512 TU: not run: this CPU has no AVX-512 F/BW/DQ/VL (xsimd's detection)\n");
  }
  return ok ? 0 : 1;
}
