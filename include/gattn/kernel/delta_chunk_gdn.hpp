// One chunk's operands for a per-head decay (Gated DeltaNet, docs/spec.md §13): the decay is a
// scalar per token, so A = (K Kᵀ) ⊙ exp(G_j − G_i) and B = (Q Kᵀ) ⊙ exp(G_t − G_i) take C² exps.
//
// The cumulative decays are summed in double: a difference G_j − G_i of float prefix sums carries the
// rounding of |G| (after one strong decay, every later small g would be rounded to the ulp of a
// large G), not of the g's between i and j.
// A decay of −inf (exp(A_log) · softplus(a + dt_bias) overflowing) erases the state: the recurrence
// gives exp(Σ g) = 0 across it, but G_j − G_i would be −inf − (−inf) = NaN. So the sums restart after
// each −inf (`cut[t]`: the last −inf at or before t, −1 for none) and a factor spanning one is 0.
#pragma once

#include <algorithm>
#include <cmath>

#include "gattn/core/types.hpp"
#include "gattn/kernel/delta_chunk_scratch.hpp"
#include "gattn/kernel/delta_microkernels.hpp"
#include "gattn/kernel/delta_params.hpp"
#include "gattn/simd/simd.hpp"
#include "gattn/simd/vector_ops.hpp"

GATTN_NAMESPACE_BEGIN
namespace detail {

/// Scales A's row j by −β_j·exp(G_j − G_i) (i < j) and B's by scale·exp(G_j − G_i) (i ≤ j), in whole
/// vectors: the entries past the diagonal get a finite factor and are never read.
template <class Arch>
inline void delta_gdn_scale_rows(const double* G, const index* cut, index L, float scale, const delta_chunk_scratch& s) {
  using B = simd::batch<float, Arch>;
  constexpr index W = index(B::size), C = delta_chunk_tokens;
  alignas(64) float f[C];
  for (index j = 0; j < L; ++j) {
    const index n = (j + W) / W * W;  // whole vectors covering i ≤ j
    for (index i = 0; i < n; ++i) f[i] = cut[j] > i ? -INFINITY : float(G[j] - G[i]);
    const B nb = simd::broadcast<Arch>(-s.beta[j]), sc = simd::broadcast<Arch>(scale);
    float* a = s.a + j * C;
    float* b = s.b + j * C;
    for (index i = 0; i < n; i += W) {
      const B e = simd::exp_nonpositive(simd::min(B(0.0f), simd::load<Arch>(f + i)));
      simd::store(a + i, simd::load<Arch>(a + i) * (nb * e));
      simd::store(b + i, simd::load<Arch>(b + i) * (sc * e));
    }
  }
}

/// Fills s for tokens [t0, t0 + L) of value head h with a per-head decay.
template <class Arch>
inline void delta_chunk_gdn(const delta_params& p, index h, index t0, index L, delta_chunk_scratch& s) {
  constexpr index C = delta_chunk_tokens;
  const index dk = p.d_k, kh = delta_key_head(p, h);
  const float* k0 = p.k + t0 * p.k_stride + kh * dk;
  const float* q0 = p.q + t0 * p.q_stride + kh * dk;
  double G[C] = {};  // whole vectors of it are read past L (into entries that are never used)
  index cut[C] = {};
  double acc = 0;
  index last_cut = -1;
  for (index t = 0; t < L; ++t) {
    const float g = p.g[(t0 + t) * p.g_stride + h];
    if (g == -INFINITY) last_cut = t;
    acc = g == -INFINITY ? 0.0 : acc + double(g);
    G[t] = acc;
    cut[t] = last_cut;
    s.beta[t] = p.beta[(t0 + t) * p.beta_stride + h];
  }
  for (index t = 0; t < L; ++t) {
    delta_prefetch_ahead(p, h, t0, t, L, s.prefetch_end);
    const float gam = cut[t] >= 0 ? 0.0f : delta_exp(float(G[t]));
    const float e = cut[L - 1] > t ? 0.0f : delta_exp(float(G[L - 1] - G[t]));
    const float* kt = s.rows + t * dk;
    std::copy_n(k0 + t * p.k_stride, dk, s.rows + t * dk);
    scale_copy<Arch>(s.kqg + t * dk, kt, dk, gam);
    scale_copy<Arch>(s.kqg + (C + t) * dk, q0 + t * p.q_stride, dk, p.scale * gam);
    scale_copy<Arch>(s.ke + t * dk, kt, dk, e);
  }
  s.decay[0] = cut[L - 1] >= 0 ? 0.0f : delta_exp(float(G[L - 1]));
  delta_transpose<Arch>(s.rows, L, dk, s.rt, C);
  delta_lower_cols<Arch>(L, 0, dk, {s.rows, dk, 1}, s.rt, C, {s.a, C});
  delta_lower_cols<Arch>(L, 0, dk, {q0, p.q_stride, 1}, s.rt, C, {s.b, C});
  delta_gdn_scale_rows<Arch>(G, cut, L, p.scale, s);
}

}  // namespace detail
GATTN_NAMESPACE_END  // namespace gattn
