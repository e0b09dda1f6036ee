// The chunked delta-rule form's buffers (docs/spec.md §13): one chunk of C tokens of one head, laid
// out in the caller's scratch, and the chunk and sub-block sizes.
#pragma once

#include <algorithm>

#include "gattn/core/types.hpp"
#include "gattn/kernel/delta_params.hpp"
#include "gattn/simd/prefetch.hpp"

GATTN_NAMESPACE_BEGIN
namespace detail {

/// Tokens per chunk (C) and per sub-block of the per-channel decay's anchoring. The dense products
/// cost the same per token at any C, the work inside a chunk (A, B, the substitution, B·U) grows with
/// it: C = 32 measured 6–10% faster than 64 and within 2% of 16 (one head, D = 128, AVX-512; and
/// delta/P1 of bench/bench_delta.cpp: 196 against 214 ms for GDN, 228 against 244 ms for KDA).
inline constexpr index delta_chunk_tokens = 32;
inline constexpr index delta_sub_tokens = 16;
inline constexpr index delta_subs = delta_chunk_tokens / delta_sub_tokens;

/// Buffers of one chunk (C = delta_chunk_tokens). Row-major unless "ᵀ" (packed transposed, C wide).
struct delta_chunk_scratch {
  float* kqg;     ///< [2C × d_k]: k_t ⊙ Γ_t, then scale · q_t ⊙ Γ_t (Γ_t = exp(G_t))
  float* ke;      ///< [C × d_k]: k_t ⊙ exp(G_last − G_t)
  float* rt;      ///< [d_k × C]ᵀ: the right operand of the A and B products
  float* lkq;     ///< [2C × d_k] (per channel): −β_j k_j ⊙ λ_j, then scale · q_j ⊙ λ_j (λ anchored per sub-block)
  float* krt;     ///< [d_k × C]ᵀ (per channel): k_i ⊙ exp(G_end(i) − G_i), end(i) the last token of i's sub-block
  float* kit;     ///< [d_k × C]ᵀ (per channel): k_i / λ_i
  float* rows;    ///< [C × d_k]: rows before they are transposed
  float* a;       ///< [C × C]: −β_j A_ji for i < j
  float* b;       ///< [C × C]: B_ti for i ≤ t
  float* u;       ///< [C × d_v]: R, then U
  float* beta;    ///< [C]
  float* decay;   ///< [d_k]: exp(G_last) per channel (per head: [1])
  float* dsum;    ///< [subs × d_k]: each sub-block's Σ g
  float* tmp;     ///< [2 × d_k]
  index prefetch_end;  ///< the chunk's first pass prefetches tokens up to here (the call's chunked tokens)
  bool anchored[delta_chunk_tokens];  ///< (per channel) row j's decay from its sub-block start is in range
};

/// Floats of delta_chunk_scratch for d_k, d_v (every buffer starts on a 64-byte boundary when the
/// scratch does).
inline index delta_chunk_floats(index d_k, index d_v) {
  constexpr index C = delta_chunk_tokens;
  auto up = [](index n) { return (n + 15) / 16 * 16; };
  return 9 * up(C * d_k) + 2 * C * C + up(C * d_v) + C + 3 * up(d_k) + up(delta_subs * d_k);
}

/// Lays delta_chunk_scratch out in `scratch` (delta_chunk_floats(d_k, d_v) floats).
inline delta_chunk_scratch delta_chunk_layout(float* scratch, index d_k, index d_v) {
  constexpr index C = delta_chunk_tokens;
  float* at = scratch;
  auto take = [&](index n) {
    float* r = at;
    at += (n + 15) / 16 * 16;
    return r;
  };
  delta_chunk_scratch s{};
  s.kqg = take(2 * C * d_k);
  s.ke = take(C * d_k);
  s.rt = take(C * d_k);
  s.lkq = take(2 * C * d_k);
  s.krt = take(C * d_k);
  s.kit = take(C * d_k);
  s.rows = take(C * d_k);
  s.a = take(C * C);
  s.b = take(C * C);
  s.u = take(C * d_v);
  s.beta = take(C);
  s.decay = take(d_k);
  s.dsum = take(delta_subs * d_k);
  s.tmp = take(2 * d_k);
  return s;
}

/// How many tokens ahead a chunk's first pass over its inputs prefetches them.
inline constexpr index delta_prefetch_tokens = 8;

/// Brings value head h's rows of token t (q, k, v, g, β, and o, which the chunk writes) into L1
/// shortly before the chunk's first pass reads them. One head's row is a few hundred bytes every stride floats, which the hardware
/// prefetchers do not follow; and rows a power of two apart share a few cache sets, so lines fetched
/// a whole chunk ahead are evicted before their use.
inline void delta_prefetch_token(const delta_params& p, index h, index t) {
  const index kh = delta_key_head(p, h), dk = p.d_k, dv = p.d_v;
  auto lines = [](const float* x, index n) {
    for (index i = 0; i < n; i += 16) prefetch_l1(x + i);
    prefetch_l1(x + n - 1);
  };
  lines(p.q + t * p.q_stride + kh * dk, dk);
  lines(p.k + t * p.k_stride + kh * dk, dk);
  lines(p.v + t * p.v_stride + h * dv, dv);
  lines(p.out + t * p.out_stride + h * dv, dv);
  lines(p.g + t * p.g_stride + (p.per_channel_decay ? h * dk : h), p.per_channel_decay ? dk : 1);
  prefetch_l1(p.beta + t * p.beta_stride + h);
}

/// The prefetches of a chunk's first pass at its token t (of L, from t0): its first few tokens when
/// t = 0, then the token delta_prefetch_tokens ahead if it is before `end` (into the next chunk).
inline void delta_prefetch_ahead(const delta_params& p, index h, index t0, index t, index L, index end) {
  if (t == 0)
    for (index i = 0; i < std::min(delta_prefetch_tokens, L); ++i) delta_prefetch_token(p, h, t0 + i);
  if (t0 + t + delta_prefetch_tokens < end) delta_prefetch_token(p, h, t0 + t + delta_prefetch_tokens);
}

}  // namespace detail
GATTN_NAMESPACE_END  // namespace gattn
