// The gated delta-rule layers (docs/spec.md §13, §14): Gated DeltaNet (Qwen3-Next's fused or Qwen3.5's
// split input projections) and Kimi's KDA. One projection GEMM over every row of a call, the short
// convolution, the l2 norms, β and the decay, the delta-rule kernel per (sequence, value head) over
// each sequence's recurrent state, the output gate RMSNorm(o)·w·act(z), and the output projection.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <vector>

#include "gattn/attention/batch.hpp"
#include "gattn/attention/delta_stages.hpp"
#include "gattn/attention/delta_state.hpp"
#include "gattn/cache/workspace.hpp"
#include "gattn/linalg/linear_map.hpp"
#include "gattn/core/config.hpp"
#include "gattn/core/delta_weights.hpp"
#include "gattn/core/execution.hpp"
#include "gattn/core/validate.hpp"
#include "gattn/core/weights.hpp"
#include "gattn/diagnostics/statistics.hpp"
#include "gattn/kernel/delta_rule.hpp"

GATTN_NAMESPACE_BEGIN

/// A Gated DeltaNet or KDA layer with fixed weights (views of `w`, used in place). Calls are const:
/// one layer serves many sequences, each with its own state, from several threads at once (each
/// call with its own workspace).
class delta_layer {
 public:
  delta_layer(const delta_config& cfg, const weight_map& w) : cfg_(validated(cfg)) { load(w); }

  const delta_config& config() const { return cfg_; }
  /// Forces the kernel's prefill form (default: automatic, chosen by the length of each call).
  void set_form(delta_form f) { form_ = f; }

  /// One whole sequence from a zero state: y [T, d] for x [T, d].
  void forward(matrix_view<const float> x, matrix_view<float> y, statistics_observer* stats = nullptr,
               const execution_context& exec = {}) const {
    delta_state state(cfg_);
    prefill(x, state, y, stats, exec);
  }

  /// Continues `state` with x's T tokens and writes their outputs (prefill, a chunk of one, or a
  /// decode step: every form gives the same rows to rounding).
  void prefill(matrix_view<const float> x, delta_state& state, matrix_view<float> y,
               statistics_observer* stats = nullptr, const execution_context& exec = {}) const {
    delta_sequence handle(state);
    const index cu[2] = {0, x.rows};
    step(x, cu, 1, &handle, y, state.workspace(), stats, exec);
  }
  void decode(matrix_view<const float> x, delta_state& state, matrix_view<float> y,
              statistics_observer* stats = nullptr, const execution_context& exec = {}) const {
    prefill(x, state, y, stats, exec);
  }

  /// A batch of B sequences (docs/spec.md §11): sequence s's new rows are x[cu_seqlens[s],
  /// cu_seqlens[s+1]) and continue states[s]. One projection GEMM serves every row; the kernel runs
  /// per (sequence, value head) on `exec`'s threads. Every check passes before any state changes.
  void step(matrix_view<const float> x, const index* cu_seqlens, index batch, const delta_sequence* states,
            matrix_view<float> y, layer_workspace& ws, statistics_observer* stats = nullptr,
            const execution_context& exec = {}) const {
    const index N = detail::check_batch_rows("delta_layer", x, cu_seqlens, batch, y, cfg_.hidden, values_per_token(cfg_));
    check_states(states, batch);
    fit_workspace(ws, N, batch, exec.concurrency(), stats != nullptr);  // may throw: before any state changes
    if (N == 0) return;
    project(x, N, ws, exec);
    for (index s = 0; s < batch; ++s)
      convolve(ws.projections.data() + cu_seqlens[s] * plan_.n_cols, cu_seqlens[s + 1] - cu_seqlens[s], states[s], ws);
    prepare_rows(N, ws);
    run_kernel(cu_seqlens, batch, states, ws, exec);
    gate_rows(N, ws, stats);
    out_.apply(ws.gated.data(), N, plan_.v_width, y.data, y.row_stride, cfg_.numerics, exec, ws.workers());
    for (index s = 0; s < batch; ++s) states[s].advance(cu_seqlens[s + 1] - cu_seqlens[s]);
    if (stats)
      for (index t = 0; t < N; ++t) stats->add_output(y.row(t), cfg_.hidden);
  }

  /// Grows `ws` for calls of up to `max_tokens` rows in `max_batch` sequences on `exec`'s threads,
  /// so that such calls (without statistics) allocate nothing.
  void reserve(layer_workspace& ws, index max_tokens, index max_batch, const execution_context& exec = {}) const {
    fit_workspace(ws, max_tokens, max_batch, exec.concurrency(), false);
  }
  /// The same, in the signature every layer's reserve shares (the state does not grow with the context).
  void reserve(layer_workspace& ws, index max_tokens, index max_batch, index max_context,
               const execution_context& exec = {}) const {
    (void)max_context;
    reserve(ws, max_tokens, max_batch, exec);
  }

  /// The state shape of this layer's sequences.
  delta_state_shape state_shape() const { return delta_state_shape::of(cfg_); }
  delta_state make_state() const { return delta_state(cfg_); }
  delta_state_pool make_state_pool(index slots) const { return delta_state_pool(cfg_, slots); }

 private:
  /// Columns of the projection buffer P [N, n_cols], decided once from the config:
  ///   [ q: H_k·D_k | k: H_k·D_k | v: H_v·D_v | gate scores: H_v·D_v (GDN z, KDA g_proj) or g_a |
  ///     GDN: b (H_v) then a (H_v), value heads in order, turned into β and g in place by prepare_rows;
  ///     KDA: β (H) | f_a ]
  /// Both Gated DeltaNet layouts (fused, split) are mapped onto these columns by row segments.
  /// KDA's per-channel decay lives apart ([N, H·D_k] in ws.decay).
  struct plan {
    index qk_width = 0, v_width = 0, col_k = 0, col_v = 0, col_gate = 0, gate_width = 0;
    index col_beta = 0, col_g = 0, col_fa = 0, fa_rank = 0, n_cols = 0;
    index decay_width = 0;  ///< KDA: H·D_k
  };

  bool kda() const { return cfg_.kind == delta_kind::kda; }

  // Every tensor is checked against the layer's weight contract (core/delta_weights.hpp, shared with
  // the reference) before any view is taken.
  void load(const weight_map& w) {
    const delta_weight_contract contract = detail::check_delta_weights(cfg_, w);
    plan_.fa_rank = contract.ranks.decay;
    plan_.gate_width = contract.ranks.gate;
    plan_.qk_width = cfg_.key_heads * cfg_.key_head_dim;
    plan_.v_width = cfg_.value_heads * cfg_.value_head_dim;
    plan_.col_k = plan_.qk_width;
    plan_.col_v = 2 * plan_.qk_width;
    plan_.col_gate = plan_.col_v + plan_.v_width;
    if (kda()) load_kda(w);
    else load_gdn(w, contract.layout);
    load_conv(w);
    norm_ = w.widened(kda() ? "o_norm.weight" : "norm.weight", {cfg_.value_head_dim});
    const char* out = kda() ? "o_proj" : "out_proj";
    out_ = make_linear(w.get(std::string(out) + ".weight", {cfg_.hidden, plan_.v_width}),
                       w.find(std::string(out) + ".bias", {cfg_.hidden}));
  }

  // One linear_map over row segments of the checkpoint's own tensors (views, used in place), whichever
  // layout stores them: the rest of the layer sees the same P.
  void load_gdn(const weight_map& w, gdn_layout layout) {
    const index Hv = cfg_.value_heads;
    proj_ = linear_map(layout == gdn_layout::split ? split_gdn_segments(w) : fused_gdn_segments(w));
    plan_.gate_width = plan_.v_width;
    plan_.col_beta = plan_.col_gate + plan_.gate_width;
    plan_.col_g = plan_.col_beta + Hv;
    plan_.n_cols = plan_.col_g + Hv;
    load_head_decay(w, Hv);
  }

  /// Qwen3-Next: in_proj_qkvz holds, per key-head group, [q | k | v of its r heads | z of its r heads]
  /// and in_proj_ba [b of its r heads | a of its r heads]: P's columns gather each kind across
  /// groups, so that conv channels and heads are contiguous.
  std::vector<weight_segment> fused_gdn_segments(const weight_map& w) const {
    const index Hk = cfg_.key_heads, Hv = cfg_.value_heads, Dk = cfg_.key_head_dim, Dv = cfg_.value_head_dim;
    const index r = cfg_.group_size(), d = cfg_.hidden, per_group = 2 * Dk + 2 * r * Dv;
    const weight_view& wq = w.get("in_proj_qkvz.weight", {Hk * per_group, d});
    const weight_view* bq = w.find("in_proj_qkvz.bias", {Hk * per_group});
    const weight_view& wba = w.get("in_proj_ba.weight", {2 * Hv, d});
    const weight_view* bba = w.find("in_proj_ba.bias", {2 * Hv});
    std::vector<weight_segment> parts;
    const index offsets[4] = {0, Dk, 2 * Dk, 2 * Dk + r * Dv}, widths[4] = {Dk, Dk, r * Dv, r * Dv};
    for (int kind = 0; kind < 4; ++kind)
      for (index g = 0; g < Hk; ++g) parts.push_back({wq, g * per_group + offsets[kind], widths[kind], bq});
    for (const index half : {index(0), r})  // b of every group, then a of every group
      for (index g = 0; g < Hk; ++g) parts.push_back({wba, g * 2 * r + half, r, bba});
    return parts;
  }

  /// Qwen3.5: in_proj_qkv is already [q | k | v] in P's (and the convolution's) channel order; z, b
  /// and a are one tensor each.
  std::vector<weight_segment> split_gdn_segments(const weight_map& w) const {
    const index d = cfg_.hidden;
    const auto whole = [&](const std::string& name, index rows) {
      return weight_segment{w.get(name + ".weight", {rows, d}), 0, rows, w.find(name + ".bias", {rows})};
    };
    return {whole("in_proj_qkv", cfg_.conv_channels()), whole("in_proj_z", plan_.v_width),
            whole("in_proj_b", cfg_.value_heads), whole("in_proj_a", cfg_.value_heads)};
  }

  void load_kda(const weight_map& w) {
    const index H = cfg_.value_heads, Dk = cfg_.key_head_dim, d = cfg_.hidden;
    auto part = [&](const std::string& name, index rows) {
      return weight_segment{w.get(name + ".weight", {rows, d}), 0, rows, w.find(name + ".bias", {rows})};
    };
    std::vector<weight_segment> parts = {part("q_proj", plan_.qk_width), part("k_proj", plan_.qk_width),
                                         part("v_proj", plan_.v_width)};
    if (cfg_.gate == gate_source::low_rank) {
      const index rank = plan_.gate_width;
      parts.push_back(part("g_a_proj", rank));
      gate_b_ = make_linear(w.get("g_b_proj.weight", {plan_.v_width, rank}), w.find("g_b_proj.bias", {plan_.v_width}));
    } else {
      parts.push_back(part("g_proj", plan_.v_width));
      plan_.gate_width = plan_.v_width;
    }
    parts.push_back(part("b_proj", H));
    parts.push_back(part("f_a_proj", plan_.fa_rank));
    proj_ = linear_map(parts);
    decay_b_ = make_linear(w.get("f_b_proj.weight", {H * Dk, plan_.fa_rank}), w.find("f_b_proj.bias", {H * Dk}));
    plan_.col_beta = plan_.col_gate + plan_.gate_width;
    plan_.col_fa = plan_.col_beta + H;
    plan_.n_cols = plan_.col_fa + plan_.fa_rank;
    plan_.decay_width = H * Dk;
    load_head_decay(w, H);
  }

  /// exp(A_log) per head (A_log may be stored [1, 1, H, 1]; the contract checked it is finite) and dt_bias.
  void load_head_decay(const weight_map& w, index heads) {
    const std::vector<float> a_log = w.all().at("A_log").widened();
    dt_bias_ = w.all().at("dt_bias").widened();
    neg_a_.resize(std::size_t(heads));
    for (index h = 0; h < heads; ++h) {
      const float a = std::exp(a_log[std::size_t(h)]);
      detail::require<config_error>(std::isfinite(a), "weight 'A_log' holds ", a_log[std::size_t(h)], " at index ", h,
                                    ": exp(A_log) overflows fp32");
      neg_a_[std::size_t(h)] = kda() ? a : -a;  // KDA keeps exp(A_log): its two forms use it with different signs
    }
  }

  /// Conv taps, widened and laid out tap-major [K][channels] so a row's channels are contiguous.
  void load_conv(const weight_map& w) {
    const index K = cfg_.conv_kernel;
    conv_taps_.assign(std::size_t(K * cfg_.conv_channels()), 0.0f);
    auto take = [&](const std::string& name, index first, index channels) {
      const std::vector<float> t = w.widened(name, {channels, 1, K});
      for (index c = 0; c < channels; ++c)
        for (index i = 0; i < K; ++i)
          conv_taps_[std::size_t(i * cfg_.conv_channels() + first + c)] = t[std::size_t(c * K + i)];
    };
    if (!kda()) {
      take("conv1d.weight", 0, cfg_.conv_channels());
      return;
    }
    take("q_conv1d.weight", 0, plan_.qk_width);
    take("k_conv1d.weight", plan_.qk_width, plan_.qk_width);
    take("v_conv1d.weight", 2 * plan_.qk_width, plan_.v_width);
  }

  void check_states(const delta_sequence* states, index batch) const {
    detail::require<cache_error>(states != nullptr, "delta_layer: step needs one state per sequence (states is null)");
    const delta_state_shape shape = delta_state_shape::of(cfg_);
    for (index s = 0; s < batch; ++s) {
      states[s].check(shape, "delta_layer", s);
      for (index o = 0; o < s; ++o)
        detail::require<cache_error>(!states[s].same_as(states[o]), "delta_layer: states[", o, "] and states[", s,
                                     "] are the same sequence");
    }
  }

  void fit_workspace(layer_workspace& ws, index N, index batch, int concurrency, bool stats) const {
    (void)batch;
    layer_workspace::fit(ws.projections, N * plan_.n_cols);
    layer_workspace::fit(ws.gated, N * plan_.v_width);
    if (kda()) layer_workspace::fit(ws.decay, N * plan_.decay_width);
    if (kda() && cfg_.gate == gate_source::low_rank) layer_workspace::fit(ws.gate_scores, N * plan_.v_width);
    layer_workspace::fit(ws.conv_tails, (cfg_.conv_kernel - 1) * cfg_.conv_channels());
    const index slots = std::max(1, concurrency);
    layer_workspace::fit(ws.kernel_scratch, slots * delta_scratch_floats(cfg_.key_head_dim, cfg_.value_head_dim));
    if (stats) layer_workspace::fit(ws.activated, N * plan_.v_width);
    index projections = 0;  // reserve_floats: N may be a reserve's bound of the rows, not a call's rows
    for (const linear_map* m : {&proj_, &decay_b_, &gate_b_, &out_})
      projections = std::max(projections, m->reserve_floats(N, concurrency));
    layer_workspace::fit(ws.worker_scratch, projections);
  }

  // Every projection of the call's rows: P, then KDA's f_b (the decay's input) and g_b (low rank).
  void project(matrix_view<const float> x, index N, layer_workspace& ws, const execution_context& exec) const {
    float* P = ws.projections.data();
    // Exact under either numerics (delta_config::numerics): P feeds the delta rule.
    proj_.apply(x.data, N, x.row_stride, P, plan_.n_cols, exec, ws.workers());
    if (!kda()) return;
    decay_b_.apply(P + plan_.col_fa, N, plan_.n_cols, ws.decay.data(), plan_.decay_width, exec, ws.workers());
    if (cfg_.gate == gate_source::low_rank)
      gate_b_.apply(P + plan_.col_gate, N, plan_.n_cols, ws.gate_scores.data(), plan_.v_width, cfg_.numerics, exec,
                    ws.workers());
  }

  void convolve(float* rows, index n, const delta_sequence& state, layer_workspace& ws) const {
    if (n == 0) return;
    short_conv_silu(rows, plan_.n_cols, n, cfg_.conv_channels(), conv_taps_.data(), cfg_.conv_kernel,
                    state.conv_tail(), ws.conv_tails.data());
  }

  // Per row: l2 norms of q and k, β = σ(b), and the decay g (GDN per value head into P, KDA per key
  // channel in ws.decay).
  void prepare_rows(index N, layer_workspace& ws) const {
    const index Hk = cfg_.key_heads, Hv = cfg_.value_heads;
    for (index t = 0; t < N; ++t) {
      float* row = ws.projections.data() + t * plan_.n_cols;
      l2_normalize_heads(row, 2 * Hk, cfg_.key_head_dim);  // q heads then k heads
      if (kda()) {
        sigmoid_in_place(row + plan_.col_beta, Hv);
        channel_decay(ws.decay.data() + t * plan_.decay_width, Hv, cfg_.key_head_dim, neg_a_.data(), dt_bias_.data(),
                      cfg_.decay, float(cfg_.decay_lower_bound));
        continue;
      }
      sigmoid_in_place(row + plan_.col_beta, Hv);
      softplus_decay(row + plan_.col_g, Hv, neg_a_.data(), dt_bias_.data());
    }
  }

  delta_params problem(const index* cu, index s, const delta_sequence& state, layer_workspace& ws) const {
    const float* P = ws.projections.data() + cu[s] * plan_.n_cols;
    delta_params p;
    p.tokens = cu[s + 1] - cu[s];
    p.key_heads = cfg_.key_heads;
    p.value_heads = cfg_.value_heads;
    p.d_k = cfg_.key_head_dim;
    p.d_v = cfg_.value_head_dim;
    p.q = P;
    p.k = P + plan_.col_k;
    p.v = P + plan_.col_v;
    p.beta = P + plan_.col_beta;
    p.q_stride = p.k_stride = p.v_stride = p.beta_stride = plan_.n_cols;
    p.per_channel_decay = kda();
    p.g = kda() ? ws.decay.data() + cu[s] * plan_.decay_width : P + plan_.col_g;
    p.g_stride = kda() ? plan_.decay_width : plan_.n_cols;
    p.scale = float(cfg_.scale());
    p.state = state.recurrent();
    p.out = ws.gated.data() + cu[s] * plan_.v_width;
    p.out_stride = plan_.v_width;
    return p;
  }

  // One task per (sequence with new rows, value head), spread over the context's threads; each
  // worker takes tasks from a shared counter and uses its own scratch slot, so results do not
  // depend on which thread ran a task.
  void run_kernel(const index* cu, index batch, const delta_sequence* states, layer_workspace& ws,
                  const execution_context& exec) const {
    const index Hv = cfg_.value_heads, per = delta_scratch_floats(cfg_.key_head_dim, cfg_.value_head_dim);
    const index tasks = batch * Hv;
    // A few microseconds of team start-up dwarf a call this small (a decode step of a small layer):
    // it runs on the calling thread, through the same tasks.
    const bool small = (cu[batch] * Hv) * (cfg_.key_head_dim * cfg_.value_head_dim) < (index(1) << 18);
    const index workers = small ? 1 : std::min<index>(std::max(1, exec.concurrency()), tasks);
    std::atomic<index> next{0};
    exec.parallel_for(workers, [&](index w) {
      float* scratch = ws.kernel_scratch.data() + w * per;
      for (index i = next.fetch_add(1); i < tasks; i = next.fetch_add(1)) {
        const index s = i / Hv;
        if (cu[s + 1] == cu[s]) continue;
        delta_rule_head(problem(cu, s, states[s], ws), i % Hv, form_, scratch);
      }
    });
  }

  // The output gate per row, in place over the kernel's output: RMSNorm(o_h)·w ⊙ act(u_h).
  void gate_rows(index N, layer_workspace& ws, statistics_observer* stats) const {
    const bool low_rank = kda() && cfg_.gate == gate_source::low_rank;
    const float* u = low_rank ? ws.gate_scores.data() : ws.projections.data() + plan_.col_gate;
    const index u_stride = low_rank ? plan_.v_width : plan_.n_cols;
    const activation a = kda() ? activation::sigmoid : activation::silu;
    for (index t = 0; t < N; ++t) {
      float* o = ws.gated.data() + t * plan_.v_width;
      gated_rms_norm(o, u + t * u_stride, cfg_.value_heads, cfg_.value_head_dim, norm_.data(),
                     float(cfg_.rms_norm_eps), a);
      if (!stats) continue;
      float* g = ws.activated.data() + t * plan_.v_width;
      for (index c = 0; c < plan_.v_width; ++c) g[c] = act::apply(a, u[t * u_stride + c]);
      stats->add_gate(g, plan_.v_width);
    }
  }

  delta_config cfg_;
  plan plan_;
  linear_map proj_, decay_b_, gate_b_, out_;
  std::vector<float> conv_taps_, norm_, neg_a_, dt_bias_;
  delta_form form_ = delta_form::automatic;
};

GATTN_NAMESPACE_END  // namespace gattn
