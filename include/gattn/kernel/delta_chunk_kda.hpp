// One chunk's operands for a per-channel decay (KDA, docs/spec.md §13). The decay sits inside the
// inner products, A_ji = Σ_c k_j[c] k_i[c] exp(G_j[c] − G_i[c]), so it is factored through anchors
// instead of taking C²·D_k exps: for i in an earlier sub-block m and j in sub-block n, anchored at
// p = the token before sub-block n,
//   exp(G_j − G_i) = exp(G_j − G_p) · exp(G_end(m) − G_i) · exp(G_p − G_end(m))     (every exponent ≤ 0),
// a plain dot product of k_j ⊙ λ_j with a packed, rescaled k_i. Inside sub-block n the same anchor
// gives k_i / λ_i (exponent ≥ 0), used only while the decay from the sub-block start stays above −80
// in every channel (so λ ≥ e⁻⁸⁰ and k/λ is finite); the rows after that take the direct
// per-element exps for their diagonal entries. Every exponent is a sum of exactly the g's it spans (local prefix and suffix
// sums, sub-block totals), never a difference of large prefix sums.
#pragma once

#include <algorithm>
#include <cfloat>

#include "gattn/core/types.hpp"
#include "gattn/kernel/delta_chunk_scratch.hpp"
#include "gattn/kernel/delta_microkernels.hpp"
#include "gattn/kernel/delta_params.hpp"
#include "gattn/simd/simd.hpp"
#include "gattn/simd/vector_ops.hpp"

namespace gattn {
namespace detail {

/// Sub-block decays below this (in any channel) take the direct diagonal.
inline constexpr float delta_anchor_range = -80.0f;

/// Whether x[c] ≥ bound for every c < n (false when one is NaN).
template <class Arch>
inline bool delta_all_at_least(const float* x, index n, float bound) {
  using B = simd::batch<float, Arch>;
  constexpr index W = index(B::size);
  B bad(0.0f);
  index c = 0;
  for (; c + W <= n; c += W) bad = simd::max(bad, simd::select(simd::load<Arch>(x + c) >= B(bound), B(0.0f), B(1.0f)));
  bool ok = simd::hmax(bad) == 0.0f;
  for (; c < n; ++c) ok = ok && x[c] >= bound;
  return ok;
}

/// Token-0 rows of one chunk of one head.
struct delta_chunk_rows {
  const float *q, *k, *g;
  index qs, ks, gs;
};

/// Forward pass, token by token (one head's rows are far apart: each is read once, whole):
/// λ_j = exp(Σ of g from the sub-block start to j), Γ_j = exp(G_j); writes lkq (its k rows times −β_j,
/// which A carries), kqg, rows = k / λ,
/// the sub-block totals and exp(G_last).
template <class Arch>
inline void delta_kda_forward(const delta_params& p, index h, index t0, const delta_chunk_rows& r, index L, delta_chunk_scratch& s) {
  constexpr index C = delta_chunk_tokens, SB = delta_sub_tokens;
  const index dk = p.d_k;
  const float scale = p.scale;
  float* P = s.tmp;       // Σ g from the sub-block start
  float* H = s.tmp + dk;  // Σ g before the sub-block
  std::fill(H, H + dk, 0.0f);
  for (index j = 0; j < L; ++j) {
    delta_prefetch_ahead(p, h, t0, j, L, s.prefetch_end);
    if (j % SB == 0) std::fill(P, P + dk, 0.0f);
    const float *gj = r.g + j * r.gs, *kj = r.k + j * r.ks, *qj = r.q + j * r.qs, nb = -s.beta[j];
    for_each_lane_block<Arch>(dk, [&](index c, auto tag) {
      using B = decltype(tag);
      const B pc = load_as<B>(P + c) + load_as<B>(gj + c);
      simd::store(P + c, pc);
      const B lam = simd::exp_nonpositive(pc), gam = simd::exp_nonpositive(load_as<B>(H + c) + pc);
      const B kc = load_as<B>(kj + c), qc = load_as<B>(qj + c) * B(scale);
      simd::store(s.lkq + j * dk + c, kc * (lam * B(nb)));
      simd::store(s.lkq + (C + j) * dk + c, qc * lam);
      simd::store(s.rows + j * dk + c, kc / simd::max(B(FLT_MIN), lam));  // used only when λ ≥ e⁻⁸⁰
      simd::store(s.kqg + j * dk + c, kc * gam);
      simd::store(s.kqg + (C + j) * dk + c, qc * gam);
    });
    // Row j's diagonal entries may take the anchored factors while its decay from the sub-block
    // start stays in range; this depends on rows up to j only, so no later token changes row j's path.
    s.anchored[j] = delta_all_at_least<Arch>(P, dk, delta_anchor_range);
    if (j % SB == SB - 1 || j == L - 1) {
      std::copy_n(P, dk, s.dsum + (j / SB) * dk);
      for (index c = 0; c < dk; ++c) H[c] += P[c];
    }
  }
  for_each_lane_block<Arch>(dk, [&](index c, auto tag) {
    using B = decltype(tag);
    simd::store(s.decay + c, simd::exp_nonpositive(load_as<B>(H + c)));
  });
}

/// Backward pass, token by token: rows = k_i ⊙ exp(G_end(i) − G_i), ke = k_i ⊙ exp(G_last − G_i).
template <class Arch>
inline void delta_kda_backward(const delta_chunk_rows& r, index L, index dk, const delta_chunk_scratch& s) {
  constexpr index SB = delta_sub_tokens;
  float* Q = s.tmp;       // Σ g over (i, end of the sub-block]
  float* T = s.tmp + dk;  // Σ g over the sub-blocks after the current one
  std::fill(T, T + dk, 0.0f);
  for (index n = (L + SB - 1) / SB - 1; n >= 0; --n) {
    std::fill(Q, Q + dk, 0.0f);
    for (index i = std::min(n * SB + SB, L) - 1; i >= n * SB; --i) {
      const float *gi = r.g + i * r.gs, *ki = r.k + i * r.ks;
      for_each_lane_block<Arch>(dk, [&](index c, auto tag) {
        using B = decltype(tag);
        const B kc = load_as<B>(ki + c), qc = load_as<B>(Q + c);
        simd::store(s.rows + i * dk + c, kc * simd::exp_nonpositive(qc));
        simd::store(s.ke + i * dk + c, kc * simd::exp_nonpositive(qc + load_as<B>(T + c)));
        simd::store(Q + c, qc + load_as<B>(gi + c));
      });
    }
    for (index c = 0; c < dk; ++c) T[c] += s.dsum[n * dk + c];
  }
}

/// The right operand of sub-block n's products: columns of each earlier sub-block m are krt ⊙
/// exp(Σ_{m<b<n} D_b), those of n are kit before j0 (the anchored rows) and 0 from j0 on (their
/// rows take the direct diagonal).
template <class Arch>
inline void delta_kda_right(index n, index L, index j0, index dk, const delta_chunk_scratch& s) {
  using B = simd::batch<float, Arch>;
  constexpr index C = delta_chunk_tokens, SB = delta_sub_tokens, W = index(B::size);
  float* x = s.tmp;       // Σ_{m<b<n} D_b
  float* d = s.tmp + dk;  // its exp
  std::fill(x, x + dk, 0.0f);
  for (index m = n - 1; m >= 0; --m) {
    const float* dm = s.dsum + (m + 1) * dk;
    for_each_lane_block<Arch>(dk, [&](index c, auto tag) {
      using V = decltype(tag);
      const V xc = m < n - 1 ? load_as<V>(x + c) + load_as<V>(dm + c) : V(0.0f);
      simd::store(x + c, xc);
      simd::store(d + c, simd::exp_nonpositive(xc));
    });
    for (index c = 0; c < dk; ++c) {
      const B dc = simd::broadcast<Arch>(d[c]);
      for (index i = m * SB; i < m * SB + SB; i += W) simd::store(s.rt + c * C + i, simd::load<Arch>(s.krt + c * C + i) * dc);
    }
  }
  const index f = n * SB, e = std::min(f + SB, L), ep = (e + W - 1) / W * W;
  for (index c = 0; c < dk; ++c) {
    float* out = s.rt + c * C;
    if (j0 == f + SB) std::copy_n(s.kit + c * C + f, SB, out + f);
    else for (index i = f; i < ep; ++i) out[i] = i < j0 ? s.kit[c * C + i] : 0.0f;
  }
}

/// Rows [j0, e) of sub-block [f, e)'s diagonal by direct per-element exps: −β_j A_ji (i < j) and B_ji
/// (i ≤ j), the exponent summed from g over (i, j].
template <class Arch>
inline void delta_kda_diag(const delta_chunk_rows& r, index f, index j0, index e, index dk, float scale,
                           const delta_chunk_scratch& s) {
  using B = simd::batch<float, Arch>;
  constexpr index C = delta_chunk_tokens, W = index(B::size);
  float* x = s.tmp;
  for (index i = f; i < e; ++i) {
    std::fill(x, x + dk, 0.0f);
    const float* ki = r.k + i * r.ks;
    for (index j = i; j < e; ++j) {
      const float *kj = r.k + j * r.ks, *qj = r.q + j * r.qs, *gj = r.g + j * r.gs;
      if (j > i)
        for (index c = 0; c < dk; ++c) x[c] += gj[c];
      if (j < j0) continue;
      B fa(0.0f), fb(0.0f);
      index c = 0;
      for (; c + W <= dk; c += W) {
        const B w = simd::load<Arch>(ki + c) * simd::exp_nonpositive(simd::load<Arch>(x + c));
        fa = simd::fma(simd::load<Arch>(kj + c), w, fa);
        fb = simd::fma(simd::load<Arch>(qj + c), w, fb);
      }
      float sa = simd::hadd(fa), sb = simd::hadd(fb);
      for (; c < dk; ++c) {
        const float w = ki[c] * delta_exp(x[c]);
        sa += kj[c] * w;
        sb += qj[c] * w;
      }
      if (j > i) s.a[j * C + i] = -s.beta[j] * sa;
      s.b[j * C + i] = scale * sb;
    }
  }
}

/// Fills s for tokens [t0, t0 + L) of value head h with a per-channel decay.
template <class Arch>
inline void delta_chunk_kda(const delta_params& p, index h, index t0, index L, delta_chunk_scratch& s) {
  constexpr index C = delta_chunk_tokens, SB = delta_sub_tokens;
  const index dk = p.d_k, kh = delta_key_head(p, h);
  const delta_chunk_rows r{p.q + t0 * p.q_stride + kh * dk, p.k + t0 * p.k_stride + kh * dk,
                           p.g + t0 * p.g_stride + h * dk, p.q_stride, p.k_stride, p.g_stride};
  for (index t = 0; t < L; ++t) s.beta[t] = p.beta[(t0 + t) * p.beta_stride + h];
  delta_kda_forward<Arch>(p, h, t0, r, L, s);
  delta_transpose<Arch>(s.rows, L, dk, s.kit, C);
  delta_kda_backward<Arch>(r, L, dk, s);
  delta_transpose<Arch>(s.rows, L, dk, s.krt, C);
  for (index n = 0; n * SB < L; ++n) {
    const index f = n * SB, e = std::min(f + SB, L);
    index j0 = f;
    while (j0 < e && s.anchored[j0]) ++j0;
    delta_kda_right<Arch>(n, L, j0, dk, s);
    delta_lower_cols<Arch>(e - f, f, dk, {s.lkq + f * dk, dk, 1}, s.rt, C, {s.a + f * C, C});
    delta_lower_cols<Arch>(e - f, f, dk, {s.lkq + (C + f) * dk, dk, 1}, s.rt, C, {s.b + f * C, C});
    if (j0 < e) delta_kda_diag<Arch>(r, f, j0, e, dk, p.scale, s);
  }
}

}  // namespace detail
}  // namespace gattn
