// The delta rule's recurrent form (docs/spec.md §13), for decode and short calls: one token at a
// time, the state updated in place, two passes over it per token, vectorised over D_v.
//
// Per token, with S' = Diag(α) S (α = exp(g)) and u = β (v − S'ᵀk):
//   pass 1 reads S:          p = S'ᵀk,  y = S'ᵀq
//   pass 2 reads and writes: S ← S' + k uᵀ
//   o = scale · (S' + k uᵀ)ᵀ q = scale · (y + (k·q) u)
// Columns of S are independent, so a strip of columns runs through a block of tokens; the per-token
// values shared by the strips (α, k·q) are computed once per token block.
#pragma once

#include <algorithm>
#include <cmath>

#include "gattn/core/types.hpp"
#include "gattn/kernel/delta_params.hpp"
#include "gattn/kernel/scratch.hpp"
#include "gattn/simd/arch.hpp"
#include "gattn/simd/simd.hpp"

GATTN_NAMESPACE_BEGIN
namespace detail {

/// Tokens whose decay and k·q the recurrent form prepares at once.
inline constexpr index delta_recurrent_block = 64;

/// Scratch floats of the recurrent form: α [block × d_k] and k·q [block].
inline index delta_recurrent_floats(index d_k) { return delta_recurrent_block * (d_k + 1); }

/// One token block of one head: pointers to its token-0 rows and the prepared per-token values.
struct delta_rec_block {
  const float *q, *k, *v, *beta;
  float* out;
  const float* alpha;  // [tokens × d_k] (per channel) or [tokens] (per head)
  const float* kq;     // [tokens]
  index tokens;
};

/// Pass 1 of one token over a strip of NV vectors: p = S'ᵀk and y = S'ᵀq (narrow strips keep two
/// accumulator sets over alternating rows, for the FMA latency). Per head decay: α is applied to the
/// sums instead.
template <class Arch, int NV, bool PerChannel>
inline void delta_rec_read(const float* s, index ld, index dk, const float* k, const float* q, const float* a,
                           simd::batch<float, Arch>* p, simd::batch<float, Arch>* y) {
  using B = simd::batch<float, Arch>;
  constexpr index W = index(B::size);
  constexpr int sets = NV <= 2 ? 2 : 1;
  B acc[sets][2][NV];
#pragma GCC unroll 8
  for (int x = 0; x < NV; ++x)
#pragma GCC unroll 2
    for (int i = 0; i < sets; ++i) acc[i][0][x] = acc[i][1][x] = B(0.0f);
  auto row = [&](index c, B (&py)[2][NV]) {
    const B kc = simd::broadcast<Arch>(k[c]), qc = simd::broadcast<Arch>(q[c]);
    const B ac = simd::broadcast<Arch>(PerChannel ? a[c] : 1.0f);
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) {
      B sv = simd::load<Arch>(s + c * ld + x * W);
      if constexpr (PerChannel) sv = sv * ac;
      py[0][x] = simd::fma(kc, sv, py[0][x]);
      py[1][x] = simd::fma(qc, sv, py[1][x]);
    }
  };
  index c = 0;
  for (; c + sets <= dk; c += sets)
#pragma GCC unroll 2
    for (int i = 0; i < sets; ++i) row(c + i, acc[i]);
  if (c < dk) row(c, acc[0]);
  const B scale = simd::broadcast<Arch>(PerChannel ? 1.0f : a[0]);
#pragma GCC unroll 8
  for (int x = 0; x < NV; ++x) {
    p[x] = (sets == 2 ? acc[0][0][x] + acc[sets - 1][0][x] : acc[0][0][x]) * scale;
    y[x] = (sets == 2 ? acc[0][1][x] + acc[sets - 1][1][x] : acc[0][1][x]) * scale;
  }
}

/// Pass 2 of one token: S ← Diag(α) S + k uᵀ over the strip.
template <class Arch, int NV, bool PerChannel>
inline void delta_rec_write(float* s, index ld, index dk, const float* k, const float* a, const simd::batch<float, Arch>* u) {
  using B = simd::batch<float, Arch>;
  constexpr index W = index(B::size);
  for (index c = 0; c < dk; ++c) {
    const B kc = simd::broadcast<Arch>(k[c]), ac = simd::broadcast<Arch>(PerChannel ? a[c] : a[0]);
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) simd::store(s + c * ld + x * W, simd::fma(simd::load<Arch>(s + c * ld + x * W), ac, kc * u[x]));
  }
}

/// A strip of NV vectors (columns [x0, x0 + NV·W)) of one head through a prepared token block.
template <class Arch, int NV, bool PerChannel>
inline void delta_rec_strip(const delta_params& p, const delta_rec_block& bl, float* s, index x0) {
  using B = simd::batch<float, Arch>;
  constexpr index W = index(B::size);
  const index dk = p.d_k, ld = p.d_v;
  for (index t = 0; t < bl.tokens; ++t) {
    const float* k = bl.k + t * p.k_stride;
    const float* a = bl.alpha + t * (PerChannel ? dk : 1);
    B pr[NV], y[NV], u[NV];
    delta_rec_read<Arch, NV, PerChannel>(s + x0, ld, dk, k, bl.q + t * p.q_stride, a, pr, y);
    const B beta = simd::broadcast<Arch>(bl.beta[t * p.beta_stride]), kq = simd::broadcast<Arch>(bl.kq[t]);
    const B scale = simd::broadcast<Arch>(p.scale);
    const float* v = bl.v + t * p.v_stride + x0;
    float* o = bl.out + t * p.out_stride + x0;
#pragma GCC unroll 8
    for (int x = 0; x < NV; ++x) {
      u[x] = beta * (simd::load<Arch>(v + x * W) - pr[x]);
      simd::store(o + x * W, scale * simd::fma(kq, u[x], y[x]));
    }
    delta_rec_write<Arch, NV, PerChannel>(s + x0, ld, dk, k, a, u);
  }
}

/// Every column of the head's state through the token block: strips of the widest register block
/// (an L1-sized narrower strip measured slower: two broadcasts per row serve fewer FMAs), then the
/// columns past the last whole vector one lane at a time.
template <class Arch, bool PerChannel>
inline void delta_rec_columns(const delta_params& p, const delta_rec_block& bl, float* s) {
  constexpr index W = index(simd::width<Arch>);
  constexpr int most = W >= 16 ? 8 : 4;
  const index whole = p.d_v / W;
  for (index x = 0; x < whole; x += most) {
    static_switch<most>(int(std::min<index>(most, whole - x)), [&](auto N) {
      delta_rec_strip<Arch, decltype(N)::value, PerChannel>(p, bl, s, x * W);
    });
  }
  if constexpr (W > 1) {
    for (index c = whole * W; c < p.d_v; c += 4) {
      static_switch<4>(int(std::min<index>(4, p.d_v - c)), [&](auto N) {
        delta_rec_strip<scalar_arch, decltype(N)::value, PerChannel>(p, bl, s, c);
      });
    }
  }
}

/// α = exp(g) and k·q of `n` tokens from t0 of head h (one α per channel or per token). α below the
/// normal range is 0 (exp_nonpositive): a denormal α would make every product with it slow.
template <class Arch>
inline void delta_rec_prepare(const delta_params& p, index h, index t0, index n, float* alpha, float* kq) {
  using B = simd::batch<float, Arch>;
  constexpr index W = index(B::size);
  const index dk = p.d_k, kh = delta_key_head(p, h);
  for (index t = 0; t < n; ++t) {
    const float* g = p.g + (t0 + t) * p.g_stride + (p.per_channel_decay ? h * dk : h);
    const float* k = p.k + (t0 + t) * p.k_stride + kh * dk;
    const float* q = p.q + (t0 + t) * p.q_stride + kh * dk;
    B acc(0.0f);
    index c = 0;
    for (; c + W <= dk; c += W) {
      acc = simd::fma(simd::load<Arch>(k + c), simd::load<Arch>(q + c), acc);
      if (p.per_channel_decay) simd::store(alpha + t * dk + c, simd::exp_nonpositive(simd::load<Arch>(g + c)));
    }
    float d = simd::hadd(acc);
    for (; c < dk; ++c) {
      d += k[c] * q[c];
      if (p.per_channel_decay) alpha[t * dk + c] = simd::exp_nonpositive(simd::scalar_batch<float>(g[c])).v;
    }
    kq[t] = d;
    if (!p.per_channel_decay) alpha[t] = simd::exp_nonpositive(simd::scalar_batch<float>(g[0])).v;
  }
}

/// Tokens [t0, t1) of value head h in the recurrent form; scratch holds delta_recurrent_floats(d_k).
template <class Arch>
inline void delta_recurrent(const delta_params& p, index h, index t0, index t1, float* scratch) {
  const index dk = p.d_k, kh = delta_key_head(p, h);
  float* s = p.state + h * dk * p.d_v;
  float* alpha = scratch;
  float* kq = scratch + delta_recurrent_block * dk;
  for (index t = t0; t < t1; t += delta_recurrent_block) {
    const index n = std::min(delta_recurrent_block, t1 - t);
    delta_rec_prepare<Arch>(p, h, t, n, alpha, kq);
    const delta_rec_block bl{p.q + t * p.q_stride + kh * dk, p.k + t * p.k_stride + kh * dk,
                             p.v + t * p.v_stride + h * p.d_v, p.beta + t * p.beta_stride + h,
                             p.out + t * p.out_stride + h * p.d_v, alpha, kq, n};
    if (p.per_channel_decay) delta_rec_columns<Arch, true>(p, bl, s);
    else delta_rec_columns<Arch, false>(p, bl, s);
  }
}

}  // namespace detail
GATTN_NAMESPACE_END  // namespace gattn
