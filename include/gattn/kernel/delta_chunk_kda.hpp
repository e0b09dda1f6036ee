// One chunk's operands for a per-channel decay (KDA, docs/spec.md §13). The decay sits inside the
// inner products, A_ji = Σ_c k_j[c] k_i[c] exp(G_j[c] − G_i[c]), so it is factored through anchors
// instead of taking C²·D_k exps: for i in an earlier sub-block m and j in sub-block n, anchored at
// p = the token before sub-block n,
//   exp(G_j − G_i) = exp(G_j − G_p) · exp(G_end(m) − G_i) · exp(G_p − G_end(m))     (every exponent ≤ 0),
// a plain dot product of k_j ⊙ λ_j with a packed, rescaled k_i. Inside sub-block n the same anchor
// gives k_i / λ_i (exponent ≥ 0), used only while the decay from the sub-block start stays above −80
// in every channel (so λ ≥ e⁻⁸⁰ and k/λ is finite); the rows after that take the direct
// per-element exps for their diagonal entries. Every exponent is a sum of exactly the g's it spans
// (local prefix and suffix sums, sub-block totals), never a difference of large prefix sums.
#pragma once

#include <algorithm>
#include <cfloat>
#include <type_traits>

#include "gattn/core/types.hpp"
#include "gattn/kernel/delta_chunk_scratch.hpp"
#include "gattn/kernel/delta_microkernels.hpp"
#include "gattn/kernel/delta_params.hpp"
#include "gattn/simd/simd.hpp"
#include "gattn/simd/vector_ops.hpp"

GATTN_NAMESPACE_BEGIN
namespace detail {

/// A row whose decay from its sub-block start is below this in some channel takes the direct diagonal
/// (its anchored factors could leave the float range; near it they lose about 1e-5 relative).
inline constexpr float delta_anchor_range = -80.0f;

/// Token-0 rows of one chunk of one head.
struct delta_chunk_rows {
  const float *q, *k, *g;
  index qs, ks, gs;
};

/// Whether some lane of x is below `bound` or NaN.
template <class B>
inline bool delta_any_below(const B& x, float bound) {
  if constexpr (std::is_same<B, simd::scalar_batch<float>>::value) return !(x.v >= bound);
  else return xsimd::any(!(x >= B(bound)));
}

/// Calls f(c, B{}, std::integral_constant<int, NV>{}) over the channels [0, n) in groups of up to G
/// vectors of Arch, then the channels past the last whole vector one lane at a time (up to 4 at once).
template <class Arch, int G, class F>
inline void delta_channel_groups(index n, F&& f) {
  using B = simd::batch<float, Arch>;
  constexpr index W = index(B::size);
  index c = 0;
  for (; c + G * W <= n; c += G * W) f(c, B{}, std::integral_constant<int, G>{});
  if (const int rest = int((n - c) / W); rest > 0) {
    static_switch<G>(rest, [&](auto N) { f(c, B{}, N); });
    c += rest * W;
  }
  for (; c < n; c += 4) static_switch<4>(int(std::min<index>(4, n - c)), [&](auto N) { f(c, simd::scalar_batch<float>{}, N); });
}

/// Forward pass over the channels [c0, c0 + NV lanes of B), token by token with the running sums in
/// registers: λ_j = exp(Σ of g from the sub-block start to j), Γ_j = exp(G_j); writes lkq (its k rows
/// times −β_j, which A carries), kqg, rows = k / λ, the sub-block totals, exp(G_last), and clears
/// anchored[j] when row j's decay from its sub-block start leaves the anchoring's range.
template <class B, int NV>
inline void delta_kda_forward_lanes(const delta_params& p, index h, index t0, const delta_chunk_rows& r, index L, index c0,
                                    delta_chunk_scratch& s) {
  constexpr index C = delta_chunk_tokens, SB = delta_sub_tokens, W = index(B::size);
  const index dk = p.d_k;
  B H[NV], P[NV];
  for (int v = 0; v < NV; ++v) H[v] = P[v] = B(0.0f);
  for (index j = 0; j < L; ++j) {
    if (c0 == 0) delta_prefetch_ahead(p, h, t0, j, L, s.prefetch_end);
    const float *gj = r.g + j * r.gs + c0, *kj = r.k + j * r.ks + c0, *qj = r.q + j * r.qs + c0;
    const B nb(-s.beta[j]), sc(p.scale);
    bool out = false;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const index o = v * W;
      P[v] = (j % SB == 0 ? B(0.0f) : P[v]) + load_as<B>(gj + o);
      const B lam = simd::exp_nonpositive(P[v]), gam = simd::exp_nonpositive(H[v] + P[v]);
      const B kc = load_as<B>(kj + o), qc = load_as<B>(qj + o) * sc;
      simd::store(s.lkq + j * dk + c0 + o, kc * (lam * nb));
      simd::store(s.lkq + (C + j) * dk + c0 + o, qc * lam);
      simd::store(s.rows + j * dk + c0 + o, kc / simd::max(B(FLT_MIN), lam));  // used only when λ ≥ e⁻⁸⁰
      simd::store(s.kqg + j * dk + c0 + o, kc * gam);
      simd::store(s.kqg + (C + j) * dk + c0 + o, qc * gam);
      out = out || delta_any_below(P[v], delta_anchor_range);
    }
    // Depends on rows up to j only: no later token changes row j's path.
    if (out) s.anchored[j] = false;
    if (j % SB == SB - 1 || j == L - 1)
      for (int v = 0; v < NV; ++v) {
        simd::store(s.dsum + (j / SB) * dk + c0 + v * W, P[v]);
        H[v] += P[v];
      }
  }
  for (int v = 0; v < NV; ++v) simd::store(s.decay + c0 + v * W, simd::exp_nonpositive(H[v]));
}

/// The forward pass (delta_kda_forward_lanes) over every channel, groups of 4 vectors at a time:
/// one head's rows are far apart, each is read in a few whole lines.
template <class Arch>
inline void delta_kda_forward(const delta_params& p, index h, index t0, const delta_chunk_rows& r, index L, delta_chunk_scratch& s) {
  std::fill(s.anchored, s.anchored + L, true);
  delta_channel_groups<Arch, 4>(p.d_k, [&](index c, auto tag, auto N) {
    delta_kda_forward_lanes<decltype(tag), decltype(N)::value>(p, h, t0, r, L, c, s);
  });
}

/// Backward pass over the channels [c0, c0 + NV lanes of B), the sums in registers:
/// rows = k_i ⊙ exp(G_end(i) − G_i), ke = k_i ⊙ exp(G_last − G_i).
template <class B, int NV>
inline void delta_kda_backward_lanes(const delta_chunk_rows& r, index L, index dk, index c0, const delta_chunk_scratch& s) {
  constexpr index SB = delta_sub_tokens, W = index(B::size);
  B T[NV], Q[NV];  // Σ g over the sub-blocks after the current one; over (i, end of the sub-block]
  for (int v = 0; v < NV; ++v) T[v] = B(0.0f);
  for (index n = (L + SB - 1) / SB - 1; n >= 0; --n) {
    for (int v = 0; v < NV; ++v) Q[v] = B(0.0f);
    for (index i = std::min(n * SB + SB, L) - 1; i >= n * SB; --i) {
      const float *gi = r.g + i * r.gs + c0, *ki = r.k + i * r.ks + c0;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        const B kc = load_as<B>(ki + v * W);
        simd::store(s.rows + i * dk + c0 + v * W, kc * simd::exp_nonpositive(Q[v]));
        simd::store(s.ke + i * dk + c0 + v * W, kc * simd::exp_nonpositive(Q[v] + T[v]));
        Q[v] += load_as<B>(gi + v * W);
      }
    }
    for (int v = 0; v < NV; ++v) T[v] += load_as<B>(s.dsum + n * dk + c0 + v * W);
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
  delta_channel_groups<Arch, 4>(dk, [&](index c, auto tag, auto N) {
    delta_kda_backward_lanes<decltype(tag), decltype(N)::value>(r, L, dk, c, s);
  });
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
GATTN_NAMESPACE_END  // namespace gattn
