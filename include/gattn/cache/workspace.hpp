// The scratch a layer call works in, owned by the caller (or by a kv_cache for its own sequence).
#pragma once

#include <vector>

#include "gattn/core/memory.hpp"
#include "gattn/core/scratch_span.hpp"
#include "gattn/core/types.hpp"
#include "gattn/kernel/sdpa_params.hpp"

GATTN_NAMESPACE_BEGIN

/// Scratch a layer reuses across calls, owned by the caller (one per concurrent caller: a call
/// writes into it), so that decode neither allocates nor touches fresh pages every token (4 KiB
/// page faults are expensive). A layer's reserve() sizes it ahead; a call grows what is still too
/// small before it appends to any cache. Contents are meaningless between calls.
/// The activation buffers are huge-page backed once they reach 2 MiB (core/memory.hpp): a
/// prefill's gate scores and outputs are read and written a head row at a time, and on 4 KiB pages
/// nearly every such row costs a TLB walk (an elementwise gate cost 4% of P1 that way, 1.5% on
/// huge pages).
struct layer_workspace {
  streamed_vector<float> projections, gate_scores, low_rank, attention, gated, activated, scratch;
  streamed_vector<float> latent;           ///< MLA: the new latent rows of a call
  streamed_vector<float> expanded_latent;  ///< MLA: a sequence's widened cache (expanded form)
  streamed_vector<float> lse;
  streamed_vector<float> decay;           ///< delta-rule layers: KDA's per-channel decay of a call's rows
  streamed_vector<float> kernel_scratch;  ///< delta-rule layers: one slot per concurrent kernel task
  /// The projections' and the attention kernel's scratch (one phase of a call at a time): shared
  /// arrays, then one slot per worker of the call's context (core/scratch_span.hpp).
  streamed_vector<float> worker_scratch;
  std::vector<float> conv_tails;          ///< delta-rule layers: one sequence's next convolution tail
  std::vector<float> rope;    ///< cos and sin of one position
  std::vector<sdpa_params> problems;  ///< one SDPA problem per sequence of a batch
  std::vector<unsigned char> flags;   ///< one per sequence (MLA: the sequence runs the absorbed form)

  template <class T, class A>
  static void fit(std::vector<T, A>& v, index n) {
    if (index(v.size()) < n) v.resize(std::size_t(n));
  }
  /// worker_scratch lent to one call phase.
  scratch_span workers() { return {worker_scratch.data(), index(worker_scratch.size())}; }
};

GATTN_NAMESPACE_END  // namespace gattn
