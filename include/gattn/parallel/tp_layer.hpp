// A layer split by heads across the ranks of a communicator (docs/spec.md §12): each rank runs its heads
// (rank-local KV cache: its KV heads, or the replicated MLA latent), then one all-reduce of the
// T·d fp32 output rows; o_proj's bias was on rank 0 only, and a G5 gate acts on the sum.
#pragma once

#include <variant>
#include <vector>

#include "gattn/attention/any_layer.hpp"
#include "gattn/gate/source.hpp"
#include "gattn/parallel/communicator.hpp"
#include "gattn/parallel/head_split.hpp"
#include "gattn/parallel/shard_weights.hpp"

GATTN_NAMESPACE_BEGIN

/// Rank comm.rank() of a tensor-parallel layer. Built from the full config and weights (of which
/// it reads only its own slices); every rank must make the same calls in the same order, since
/// every call ends in a collective. The result on every rank is the single-process layer's output.
class tp_layer {
 public:
  tp_layer(const layer_config& cfg, const weight_map& w, communicator& comm)
      : comm_(&comm), split_(split_of(cfg, comm)), local_(local_config(cfg, split_), local_weights(cfg, w, split_)) {
    if (const auto* g = std::get_if<gqa_config>(&cfg)) load_g5(*g, w);
  }

  const head_split& split() const { return split_; }
  int ranks() const { return split_.ranks; }
  /// The rank-local layer (its heads only); set_sdpa / set_mla_form go here.
  any_layer& local() { return local_; }
  const any_layer& local() const { return local_; }
  index hidden() const { return local_.hidden(); }
  bool causal() const { return local_.causal(); }

  /// This rank's cache: its KV heads (GQA) or the whole latent (MLA), for `capacity` tokens.
  kv_cache make_cache(index capacity) const { return local_.make_cache(capacity); }

  /// This rank's paged pool: its KV heads (GQA) or the whole latent (MLA).
  paged_kv_cache make_paged_cache(index num_blocks, index block_size) const {
    return local_.make_paged_cache(num_blocks, block_size);
  }

  /// A batch (docs/spec.md §11) of this rank's heads, then one all-reduce of the N·d output rows.
  /// The arguments are any_layer::step's; `stats` must be null (a rank sees only its own heads).
  void step(matrix_view<const float> x, const index* cu_seqlens, index batch, sequence_cache* caches,
            matrix_view<float> y, layer_workspace& ws, statistics_observer* stats = nullptr,
            const execution_context& exec = {}) const {
    refuse_stats(stats);
    local_.step(x, cu_seqlens, batch, caches, y, ws, nullptr, exec);
    combine(x, y);
  }

  /// Delta-rule layers: this rank's state (its value heads and conv channels), one or a pool.
  delta_state make_state() const { return local_.make_state(); }
  delta_state_pool make_state_pool(index slots) const { return local_.make_state_pool(slots); }

  /// A batch over delta-rule states of this rank's heads, then one all-reduce of the N·d rows.
  void step(matrix_view<const float> x, const index* cu_seqlens, index batch, const delta_sequence* states,
            matrix_view<float> y, layer_workspace& ws, statistics_observer* stats = nullptr,
            const execution_context& exec = {}) const {
    refuse_stats(stats);
    local_.step(x, cu_seqlens, batch, states, y, ws, nullptr, exec);
    combine(x, y);
  }
  void prefill(matrix_view<const float> x, delta_state& state, matrix_view<float> y,
               statistics_observer* stats = nullptr, const execution_context& exec = {}) const {
    refuse_stats(stats);
    local_.prefill(x, state, y, nullptr, exec);
    combine(x, y);
  }
  void decode(matrix_view<const float> x, delta_state& state, matrix_view<float> y,
              statistics_observer* stats = nullptr, const execution_context& exec = {}) const {
    refuse_stats(stats);
    local_.decode(x, state, y, nullptr, exec);
    combine(x, y);
  }

  /// The one-sequence calls, with any_layer's arguments; `stats` must be null.
  void forward(matrix_view<const float> x, matrix_view<float> y, statistics_observer* stats = nullptr,
               const execution_context& exec = {}) const {
    refuse_stats(stats);
    local_.forward(x, y, nullptr, exec);
    combine(x, y);
  }
  void prefill(matrix_view<const float> x, kv_cache& cache, matrix_view<float> y,
               statistics_observer* stats = nullptr, const execution_context& exec = {}) const {
    refuse_stats(stats);
    local_.prefill(x, cache, y, nullptr, exec);
    combine(x, y);
  }
  void decode(matrix_view<const float> x, kv_cache& cache, matrix_view<float> y,
              statistics_observer* stats = nullptr, const execution_context& exec = {}) const {
    refuse_stats(stats);
    local_.decode(x, cache, y, nullptr, exec);
    combine(x, y);
  }

 private:
  // Every rank is given the same arguments, so every rank refuses here, before any collective.
  void refuse_stats(const statistics_observer* stats) const {
    detail::require<config_error>(stats == nullptr, "tp_layer: statistics are not supported across ranks (ranks=",
                                  split_.ranks, "): each rank sees only its own heads");
  }
  static head_split split_of(const layer_config& cfg, const communicator& comm) {
    return std::visit([&](const auto& c) { return split_heads(c, comm.rank(), comm.size()); }, cfg);
  }
  static layer_config local_config(const layer_config& cfg, const head_split& s) {
    return std::visit([&](const auto& c) { return layer_config(shard_config(c, s)); }, cfg);
  }
  static weight_map local_weights(const layer_config& cfg, const weight_map& w, const head_split& s) {
    return std::visit([&](const auto& c) { return shard_weights(c, w, s); }, cfg);
  }

  /// G5 gates the summed output, so its scores are computed here, in full, on every rank.
  void load_g5(const gqa_config& c, const weight_map& w) {
    const gate_config& g = c.gate;
    if (!g.enabled || g.position != gate_position::g5) return;
    g5_ = g;
    g5_shape_ = shape_of_gate(c);
    g5_numerics_ = c.numerics;
    const index d = c.hidden;
    if (g.source == gate_source::low_rank) {
      g5_in_ = make_linear(w.get("g_a_proj.weight", {g.rank, d}), w.find("g_a_proj.bias", {g.rank}));
      g5_b_ = make_linear(w.get("g_b_proj.weight", {g5_shape_.scores(), g.rank}),
                          w.find("g_b_proj.bias", {g5_shape_.scores()}));
    } else {
      g5_in_ = make_linear(w.get("g_proj.weight", {g5_shape_.scores(), d}), w.find("g_proj.bias", {g5_shape_.scores()}));
    }
  }

  /// y ← Σ_p y_p on every rank, then G5. The one communication of a call: T·d fp32 values.
  void combine(matrix_view<const float> x, matrix_view<float> y) const {
    if (y.rows == 0) return;
    if (y.row_stride == y.cols) {
      comm_->all_reduce_sum(y.data, y.rows * y.cols);
    } else {
      for (index t = 0; t < y.rows; ++t) comm_->all_reduce_sum(y.row(t), y.cols);
    }
    if (!g5_.enabled) return;
    layer_workspace ws;
    layer_workspace::fit(ws.projections, x.rows * g5_in_.out());
    g5_in_.apply(x.data, x.rows, x.row_stride, ws.projections.data(), g5_in_.out(), g5_numerics_);
    const gate_scores u =
        resolve_gate_scores(g5_, g5_shape_, ws.projections.data(), g5_in_.out(), x.rows, g5_b_, ws.gate_scores, {}, {},
                            g5_numerics_);
    apply_gate_rows(y.data, y.rows, y.row_stride, 0, g5_shape_, u, g5_.activation, g5_.combine);
  }

  communicator* comm_;
  head_split split_;
  any_layer local_;
  gate_config g5_;  ///< enabled only for a G5 gate
  gate_shape g5_shape_;
  linear_map g5_in_, g5_b_;
  gemm_numerics g5_numerics_ = gemm_numerics::exact;  ///< the layer's numerics, for the G5 projections
};

GATTN_NAMESPACE_END  // namespace gattn
