// Which SDPA implementation a layer runs: the fused kernel (default) or the double reference.
#pragma once

#include <cmath>
#include <vector>

#include "gattn/kernel/fused_sdpa.hpp"
#include "gattn/kernel/vector_ops.hpp"
#include "gattn/reference/sdpa.hpp"

namespace gattn {

enum class sdpa_backend { kernel, reference };

inline const char* to_string(sdpa_backend b) { return b == sdpa_backend::kernel ? "kernel" : "reference"; }

/// The kernel's epilogue (output norm, then gate) applied to an already computed output.
inline void apply_sdpa_epilogue(const sdpa_params& p, const sdpa_epilogue& e) {
  for (index t = 0; t < p.t_q; ++t)
    for (index h = 0; h < p.q_heads; ++h) {
      float* o = p.out + t * p.out_token_stride + h * p.out_head_stride;
      if (e.out_norm != norm_kind::none)
        rms_norm(o, e.out_norm_weight, p.d_v, e.out_norm_eps, e.out_norm == norm_kind::rms_zero_centered);
      if (!e.gate_scores) continue;
      const float* u = e.gate_scores + t * e.gate_token_stride + h * e.gate_head_stride;
      if (e.gate_headwise)
        apply_gate_scalar(o, p.d_v, u[0], e.gate_activation, e.gate_combine);
      else
        apply_gate(o, u, p.d_v, e.gate_activation, e.gate_combine);
    }
}

/// Runs `p` on the chosen backend. The reference path gathers the strided views into dense
/// double arrays, runs reference::sdpa, and applies the epilogue with the same vector ops.
inline void run_sdpa(const sdpa_params& p, sdpa_backend backend) {
  if (backend == sdpa_backend::kernel) {
    fused_sdpa(p);
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

}  // namespace gattn
