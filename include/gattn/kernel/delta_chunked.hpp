// The delta rule's chunked form (docs/spec.md §13): per chunk of C tokens with start state S0 and
// cumulative decays G (Γ = exp(G)), the WY/UT form
//   R = diag(β) (V − (K ⊙ Γ) S0),   (I + diag(β) A) U = R  (forward substitution),
//   O = scale · ((Q ⊙ Γ) S0 + B U),  S ← Diag(Γ_last) S0 + (K ⊙ exp(G_last − G))ᵀ U,
// A_ji = Σ_c k_j k_i exp(G_j − G_i) (i < j), B_ti = Σ_c q_t k_i exp(G_t − G_i) (i ≤ t). Every
// product is register-blocked over the simd layer and reads the state in place; the triangular
// ones skip their upper part, so a non-finite value of token t reaches no row before t.
#pragma once

#include <algorithm>

#include "gattn/core/types.hpp"
#include "gattn/kernel/delta_chunk_gdn.hpp"
#include "gattn/kernel/delta_chunk_kda.hpp"
#include "gattn/kernel/delta_chunk_scratch.hpp"
#include "gattn/kernel/delta_microkernels.hpp"
#include "gattn/kernel/delta_params.hpp"
#include "gattn/simd/simd.hpp"
#include "gattn/simd/vector_ops.hpp"

GATTN_NAMESPACE_BEGIN
namespace detail {

/// u_t = β_t (v_t − u_t) over L rows of d_v.
template <class Arch>
inline void delta_residual(const float* v, index vs, const float* beta, index L, index dv, float* u) {
  for (index t = 0; t < L; ++t) {
    const float* vt = v + t * vs;
    float* ut = u + t * dv;
    const float b = beta[t];
    for_each_lane_block<Arch>(dv, [&](index c, auto tag) {
      using B = decltype(tag);
      simd::store(ut + c, B(b) * (load_as<B>(vt + c) - load_as<B>(ut + c)));
    });
  }
}

/// Tokens [t0, t0 + L) (1 ≤ L ≤ C) of value head h as one chunk, prefetching inputs up to token
/// prefetch_end (≥ t0 + L); scratch holds delta_chunk_floats.
template <class Arch>
inline void delta_chunk(const delta_params& p, index h, index t0, index L, float* scratch, index prefetch_end) {
  constexpr index C = delta_chunk_tokens;
  static const float one = 1.0f;
  const index dk = p.d_k, dv = p.d_v;
  delta_chunk_scratch s = delta_chunk_layout(scratch, dk, dv);
  s.prefetch_end = prefetch_end;
  if (p.per_channel_decay) delta_chunk_kda<Arch>(p, h, t0, L, s);
  else delta_chunk_gdn<Arch>(p, h, t0, L, s);
  float* S = p.state + h * dk * dv;
  float* o = p.out + t0 * p.out_stride + h * dv;
  delta_product<Arch>(L, dv, dk, {s.kqg, dk, 1}, S, dv, {s.u, dv});               // (K ⊙ Γ) S0
  delta_product<Arch>(L, dv, dk, {s.kqg + C * dk, dk, 1}, S, dv, {o, p.out_stride});  // scale (Q ⊙ Γ) S0
  delta_residual<Arch>(p.v + t0 * p.v_stride + h * dv, p.v_stride, s.beta, L, dv, s.u);
  delta_solve<Arch>(L, dv, s.a, C, s.u, dv);
  delta_product<Arch, true>(L, dv, 0, {s.b, C, 1}, s.u, dv, {o, p.out_stride, &one, 0});
  delta_product<Arch>(dk, dv, L, {s.ke, 1, dk}, s.u, dv, {S, dv, s.decay, p.per_channel_decay ? 1 : 0});
}

/// Tokens [t0, t1) of value head h in chunks of C.
template <class Arch>
inline void delta_chunked(const delta_params& p, index h, index t0, index t1, float* scratch) {
  for (index t = t0; t < t1; t += delta_chunk_tokens)
    delta_chunk<Arch>(p, h, t, std::min(delta_chunk_tokens, t1 - t), scratch, t1);
}

}  // namespace detail
GATTN_NAMESPACE_END  // namespace gattn
