// The SDPA implementations a layer can be given (layer.set_sdpa): the fused kernel, the float64
// oracle, the unfused Eigen baseline. Composed by the CLI, the tests and the benchmarks; the
// production layers include none of this.
#pragma once

#include <cmath>
#include <vector>

#include "gattn/kernel/epilogue.hpp"
#include "gattn/attention/sdpa_function.hpp"
#include "gattn/baseline/dense_kv.hpp"
#include "gattn/baseline/unfused_sdpa.hpp"
#include "gattn/reference/sdpa.hpp"

GATTN_NAMESPACE_BEGIN

/// kernel: the fused kernel; reference: the double-precision oracle; unfused: the Eigen baseline.
enum class sdpa_backend { kernel, reference, unfused };

inline const char* to_string(sdpa_backend b) {
  return b == sdpa_backend::kernel ? "kernel" : b == sdpa_backend::reference ? "reference" : "unfused";
}

/// The oracle as an sdpa_function: gathers the strided views into dense double arrays, runs
/// reference::sdpa, and applies the kernel's epilogue code (kernel/epilogue.hpp).
/// Paged or bf16/f16 K/V are widened into dense copies first (exact).
inline void reference_sdpa(const sdpa_params& p) {
  if (!detail::dense_f32_kv(p)) {
    detail::validate(p);
    std::vector<float> k, v;
    reference_sdpa(detail::dense_kv_view(p, k, v));
    return;
  }
  const reference::sdpa_shape s{p.t_q, p.t_k, p.q_heads, p.kv_heads, p.d_qk, p.d_v, double(p.scale), p.causal};
  std::vector<double> q(std::size_t(p.t_q * p.q_heads * p.d_qk)), k(std::size_t(p.t_k * p.kv_heads * p.d_qk)),
      v(std::size_t(p.t_k * p.kv_heads * p.d_v)), out(std::size_t(p.t_q * p.q_heads * p.d_v)),
      lse(std::size_t(p.q_heads * p.t_q));
  for (index t = 0; t < p.t_q; ++t)
    for (index h = 0; h < p.q_heads; ++h)
      for (index c = 0; c < p.d_qk; ++c)
        q[std::size_t((t * p.q_heads + h) * p.d_qk + c)] = p.q[t * p.q_token_stride + h * p.q_head_stride + c];
  for (index t = 0; t < p.t_k; ++t)
    for (index h = 0; h < p.kv_heads; ++h) {
      for (index c = 0; c < p.d_qk; ++c)
        k[std::size_t((t * p.kv_heads + h) * p.d_qk + c)] = p.k[t * p.k_token_stride + h * p.k_head_stride + c];
      for (index c = 0; c < p.d_v; ++c)
        v[std::size_t((t * p.kv_heads + h) * p.d_v + c)] = p.v[t * p.v_token_stride + h * p.v_head_stride + c];
    }
  reference::sdpa(s, q.data(), k.data(), v.data(), out.data(), nullptr, lse.data());
  for (index t = 0; t < p.t_q; ++t)
    for (index h = 0; h < p.q_heads; ++h)
      for (index c = 0; c < p.d_v; ++c)
        p.out[t * p.out_token_stride + h * p.out_head_stride + c] = float(out[std::size_t((t * p.q_heads + h) * p.d_v + c)]);
  if (p.lse)
    for (std::size_t i = 0; i < lse.size(); ++i) p.lse[i] = float(lse[i]);
  apply_sdpa_epilogue(p, p.epilogue);
}

/// The implementation behind a backend name.
inline sdpa_function sdpa_of(sdpa_backend b) {
  return b == sdpa_backend::kernel ? &kernel_sdpa : b == sdpa_backend::reference ? &reference_sdpa : &unfused_sdpa;
}

GATTN_NAMESPACE_END  // namespace gattn
