// The SDPA epilogue (output norm, then gate) applied outside the kernel: for the diagnostics path,
// the reference backend and the unfused baseline.
#pragma once

#include "gattn/gate/apply.hpp"
#include "gattn/kernel/fused_sdpa.hpp"
#include "gattn/simd/vector_ops.hpp"

namespace gattn {

/// The kernel's epilogue (output norm, then gate) applied to an already computed output.
inline void apply_sdpa_epilogue(const sdpa_params& p, const sdpa_epilogue& e) {
  for (index t = 0; t < p.t_q; ++t)
    for (index h = 0; h < p.q_heads; ++h) {
      float* o = p.out + t * p.out_token_stride + h * p.out_head_stride;
      if (e.out_norm != norm_kind::none)
        rms_norm(o, e.out_norm_weight, p.d_v, e.out_norm_eps, e.out_norm == norm_kind::rms_zero_centered);
      if (!e.gate_scores) continue;
      const float* u = e.gate_scores + t * e.gate_token_stride + h * e.gate_head_stride;
      apply_head_gate(o, u, p.d_v, e.gate_headwise, e.gate_activation, e.gate_combine, e.gate_rounding);
    }
}

}  // namespace gattn
