// The gated delta rule (docs/spec.md §13) over one sequence's new tokens: the kernel's entry points.
//
// Per value head h (key head h / (H_v / H_k)), with the fp32 state S [D_k, D_v]:
//   S ← Diag(exp(g_t)) S;   S ← S + β_t k_t (v_t − Sᵀ k_t)ᵀ;   o_t = Sᵀ (scale · q_t)
// q and k arrive l2-normalised (the layer does it after the convolution), unscaled. Two forms: the
// recurrent one (delta_recurrent.hpp, decode and short calls) and the chunked one (delta_chunked.hpp,
// prefill); a call continues the state of the previous one exactly, whatever the forms and splits.
#pragma once

#include <algorithm>
#include <atomic>

#include "gattn/core/error.hpp"
#include "gattn/core/execution.hpp"
#include "gattn/core/types.hpp"
#include "gattn/kernel/delta_chunked.hpp"
#include "gattn/kernel/delta_params.hpp"
#include "gattn/kernel/delta_recurrent.hpp"
#include "gattn/simd/arch.hpp"

GATTN_NAMESPACE_BEGIN

/// delta_form::automatic runs calls (and a call's last partial chunk) shorter than this in the
/// recurrent form and the rest in chunks. Measured with `gattn_bench --benchmark_filter=delta/short`
/// (32 heads of D = 128, the state in cache, AVX-512, µs of CPU, recurrent/chunked): the recurrent form
/// is ahead up to 4 tokens (GDN 179/214, KDA 220/259), even at 6 (GDN 312/292, KDA 325/328) and 8
/// (389/366, 472/482), the chunked one ahead from 16 (893/670, 968/841).
inline constexpr index delta_chunked_min_tokens = 6;

/// Scratch floats one head task of the kernel needs (see delta_rule_head).
inline index delta_scratch_floats(index d_k, index d_v) {
  return std::max(detail::delta_chunk_floats(d_k, d_v), detail::delta_recurrent_floats(d_k));
}

/// Value head h of `p`, on the calling thread; `scratch` holds delta_scratch_floats(d_k, d_v) floats.
template <class Arch = default_arch>
inline void delta_rule_head(const delta_params& p, index h, delta_form form, float* scratch) {
  const index T = p.tokens;
  if (form == delta_form::recurrent || (form == delta_form::automatic && T < delta_chunked_min_tokens)) {
    detail::delta_recurrent<Arch>(p, h, 0, T, scratch);
    return;
  }
  // automatic: whole chunks, then a short remainder one token at a time.
  const index C = detail::delta_chunk_tokens, rest = T % C;
  const index split = form == delta_form::automatic && rest < delta_chunked_min_tokens ? T - rest : T;
  detail::delta_chunked<Arch>(p, h, 0, split, scratch);
  detail::delta_recurrent<Arch>(p, h, split, T, scratch);
}

/// Every value head of `p` over the context's threads. `scratch` holds scratch_slots slots of
/// delta_scratch_floats(d_k, d_v) floats; at most scratch_slots head tasks run at once, each on its
/// own slot.
template <class Arch = default_arch>
inline void delta_rule(const delta_params& p, delta_form form, const execution_context& ctx, float* scratch,
                       index scratch_slots) {
  detail::validate(p);
  detail::require<shape_error>(scratch != nullptr && scratch_slots >= 1, "delta_rule: scratch_slots=", scratch_slots,
                               " must be >= 1 with a non-null scratch");
  const index per = delta_scratch_floats(p.d_k, p.d_v);
  const index workers = std::min<index>({scratch_slots, index(ctx.concurrency()), p.value_heads});
  std::atomic<index> next{0};
  ctx.parallel_for(workers, [&](index w) {
    float* mine = scratch + w * per;
    for (index h = next++; h < p.value_heads; h = next++) delta_rule_head<Arch>(p, h, form, mine);
  });
}

GATTN_NAMESPACE_END  // namespace gattn
