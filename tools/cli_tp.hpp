// `mpirun -np P gattn run ...`: the CLI's tensor-parallel part (docs/spec.md §12). A run started by Open
// MPI's launcher initialises MPI and shards the layer's heads over the P ranks; any other run is
// one rank with the plain layer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "gattn/attention/any_layer.hpp"
#include "gattn/parallel/communicator.hpp"
#include "gattn/parallel/tp_layer.hpp"

GATTN_NAMESPACE_BEGIN namespace cli {

/// What a rank brings to the agreement before computing (tp_group::gather): whether it failed,
/// and digests of what it is about to compute, which every rank must share.
struct rank_state {
  std::uint64_t failed = 0;   ///< 1: this rank failed before computing (its own error line says why)
  std::uint64_t tokens = 0;   ///< T, the rows of x
  std::uint64_t config = 0;   ///< digest of the config file's bytes
  std::uint64_t input = 0;    ///< digest of x's values
  std::uint64_t options = 0;  ///< digest of the options that change what is computed
};

/// This process's place in the run: MPI's world under mpirun (when built with gattn::mpi), else
/// a group of one. One object, made first thing in main() and alive until it returns.
class tp_group {
 public:
  tp_group(int* argc, char*** argv);
  ~tp_group();
  tp_group(const tp_group&) = delete;
  tp_group& operator=(const tp_group&) = delete;

  communicator& comm() { return *comm_; }
  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  bool root() const { return rank() == 0; }
  /// True when the run is under mpirun, even with -np 1 (the summary line then names the ranks).
  bool mpi() const { return mpi_; }

  /// Every rank's state, in rank order, from one collective every rank takes part in, failed or
  /// not, before any collective of the layer: so that a failure on some ranks (a file missing on
  /// one node) or inputs that differ end every rank at once instead of leaving the others waiting
  /// in the layer's first all-reduce. A group of one returns {mine}.
  std::vector<rank_state> gather(const rank_state& mine);

  /// Ends the run after a failure with `status`. A failure every rank meets before any
  /// collective (a config no split fits) ends each rank normally; after one, a rank that fails
  /// alone would leave the others waiting in the next collective, so it aborts the whole job.
  void fail(int status);

  /// The group made in main().
  static tp_group& current();

 private:
  struct mpi_state;
  std::unique_ptr<mpi_state> mpi_state_;
  std::unique_ptr<communicator> comm_;
  bool mpi_ = false;
};

/// The layer of a run: the plain layer on one rank, its rank's heads (tp_layer) on several.
class run_layer {
 public:
  run_layer(const layer_config& cfg, const weight_map& w, tp_group& group) {
    if (group.size() == 1) one_.emplace(cfg, w);
    else tp_.emplace(cfg, w, group.comm());
  }

  index hidden() const { return tp_ ? tp_->hidden() : one_->hidden(); }
  const any_layer& local() const { return tp_ ? tp_->local() : *one_; }
  /// A gated delta-rule layer (recurrent state), not a softmax layer (KV cache).
  bool is_delta() const { return local().is_delta(); }
  delta_state make_state() const { return tp_ ? tp_->make_state() : one_->make_state(); }
  delta_state_pool make_state_pool(index slots) const {
    return tp_ ? tp_->make_state_pool(slots) : one_->make_state_pool(slots);
  }
  bool causal() const { return tp_ ? tp_->causal() : one_->causal(); }
  kv_cache make_cache(index capacity) const { return tp_ ? tp_->make_cache(capacity) : one_->make_cache(capacity); }
  void set_sdpa(sdpa_function f) { (tp_ ? tp_->local() : *one_).set_sdpa(f); }
  void set_mla_form(mla_form f) { (tp_ ? tp_->local() : *one_).set_mla_form(f); }

  paged_kv_cache make_paged_cache(index num_blocks, index block_size) const {
    return tp_ ? tp_->make_paged_cache(num_blocks, block_size) : one_->make_paged_cache(num_blocks, block_size);
  }
  void step(matrix_view<const float> x, const index* cu_seqlens, index batch, sequence_cache* caches,
            matrix_view<float> y, layer_workspace& ws) const {
    if (tp_) tp_->step(x, cu_seqlens, batch, caches, y, ws);
    else one_->step(x, cu_seqlens, batch, caches, y, ws);
  }

  void step(matrix_view<const float> x, const index* cu_seqlens, index batch, const delta_sequence* states,
            matrix_view<float> y, layer_workspace& ws) const {
    if (tp_) tp_->step(x, cu_seqlens, batch, states, y, ws);
    else one_->step(x, cu_seqlens, batch, states, y, ws);
  }
  void prefill(matrix_view<const float> x, delta_state& st, matrix_view<float> y, statistics_observer* s) const {
    if (!tp_) return one_->prefill(x, st, y, s);
    refuse_stats(s);
    tp_->prefill(x, st, y);
  }
  void decode(matrix_view<const float> x, delta_state& st, matrix_view<float> y, statistics_observer* s) const {
    if (!tp_) return one_->decode(x, st, y, s);
    refuse_stats(s);
    tp_->decode(x, st, y);
  }

  void forward(matrix_view<const float> x, matrix_view<float> y, statistics_observer* s) const {
    if (!tp_) return one_->forward(x, y, s);
    refuse_stats(s);
    tp_->forward(x, y);
  }
  void prefill(matrix_view<const float> x, kv_cache& c, matrix_view<float> y, statistics_observer* s) const {
    if (!tp_) return one_->prefill(x, c, y, s);
    refuse_stats(s);
    tp_->prefill(x, c, y);
  }
  void decode(matrix_view<const float> x, kv_cache& c, matrix_view<float> y, statistics_observer* s) const {
    if (!tp_) return one_->decode(x, c, y, s);
    refuse_stats(s);
    tp_->decode(x, c, y);
  }

 private:
  // Every rank has the same options, so every rank refuses here, before any collective.
  void refuse_stats(const statistics_observer* s) const {
    detail::require<config_error>(s == nullptr, "--stats is not supported across ranks (ranks=", tp_->ranks(),
                                  "): each rank sees only its own heads");
  }
  std::optional<any_layer> one_;
  std::optional<tp_layer> tp_;
};

}  GATTN_NAMESPACE_END  // namespace gattn::cli
