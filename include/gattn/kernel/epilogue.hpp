// The SDPA epilogue (sdpa_params::epilogue): per output row, the output norm, then the G1 gate.
// The fused kernel applies it to each row before the single store (finish_row); the unfused
// baseline, the oracle adapter and the layers' diagnostics path apply the same code to an output
// already computed (apply_sdpa_epilogue).
#pragma once

#include <cstring>

#include "gattn/core/config.hpp"
#include "gattn/core/types.hpp"
#include "gattn/gate/apply.hpp"
#include "gattn/kernel/sdpa_params.hpp"
#include "gattn/simd/arch.hpp"
#include "gattn/simd/prefetch.hpp"
#include "gattn/simd/vector_ops.hpp"

GATTN_NAMESPACE_BEGIN
namespace detail {

/// The epilogue on output row o (d_v values) of query i, head h, in place: RMSNorm, then gate.
template <class Arch>
inline void epilogue_row(const sdpa_epilogue& e, float* o, index d_v, index i, index h) {
  if (e.out_norm != norm_kind::none) rms_norm<Arch>(o, e.out_norm_weight, d_v, e.out_norm_eps, e.out_norm);
  if (e.gate_scores) {
    const float* u = e.gate_scores + i * e.gate_token_stride + h * e.gate_head_stride;
    apply_head_gate<Arch>(o, u, d_v, e.gate_headwise, e.gate_activation, e.gate_combine, e.gate_rounding);
  }
}

/// The kernel's last step for one output row: z = o·inv_l, the epilogue, then the single store to
/// p.out. Works in place on the scratch row `o` (L1-resident).
template <class Arch>
inline void finish_row(const sdpa_params& p, float* o, float inv_l, index i, index h) {
  scale_copy<Arch>(o, o, p.d_v, inv_l);
  epilogue_row<Arch>(p.epilogue, o, p.d_v, i, h);
  std::memcpy(p.out + i * p.out_token_stride + h * p.out_head_stride, o, sizeof(float) * std::size_t(p.d_v));
}

/// Output rows ahead of the epilogue whose gate scores it prefetches. An elementwise gate's scores
/// are as large as the output and cold in memory (P1: 16 MiB, read once); asked for this many rows
/// (64 lines) early, they arrive while the rows before them finish. Prefetched into L2 during a
/// unit's last key tiles instead, the gate cost 0.2-1.5 points more of P1 in each of 5 in-process
/// A/Bs.
inline constexpr index gate_prefetch_rows = 8;

/// Prefetches the gate scores of output row i, head h into L1 (nothing without a gate).
inline void prefetch_gate_row(const sdpa_params& p, index i, index h) {
  const sdpa_epilogue& e = p.epilogue;
  if (e.gate_scores == nullptr) return;
  const char* u = reinterpret_cast<const char*>(e.gate_scores + i * e.gate_token_stride + h * e.gate_head_stride);
  const index bytes = (e.gate_headwise ? 1 : p.d_v) * index(sizeof(float));
  for (index b = 0; b < bytes; b += 64) prefetch_l1(u + b);
}

}  // namespace detail

/// The epilogue `e` applied to the output p.out that p's SDPA already wrote (every row of p).
inline void apply_sdpa_epilogue(const sdpa_params& p, const sdpa_epilogue& e) {
  for (index t = 0; t < p.t_q; ++t)
    for (index h = 0; h < p.q_heads; ++h)
      detail::epilogue_row<default_arch>(e, p.out + t * p.out_token_stride + h * p.out_head_stride, p.d_v, t, h);
}

GATTN_NAMESPACE_END  // namespace gattn
