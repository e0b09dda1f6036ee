// The gated GQA layer (docs/spec.md §2, §4, §5): one fused projection GEMM, gates, QK-norm, RoPE, KV cache,
// the fused SDPA-then-gate kernel, o_proj. MHA (H_kv = H_q) and MQA (H_kv = 1) are special cases.
#pragma once

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "gattn/attention/batch.hpp"
#include "gattn/kernel/epilogue.hpp"
#include "gattn/gate/source.hpp"
#include "gattn/cache/kv_cache.hpp"
#include "gattn/attention/observe.hpp"
#include "gattn/linalg/linear_map.hpp"
#include "gattn/attention/rope.hpp"
#include "gattn/cache/paged_kv_view.hpp"
#include "gattn/cache/sequence_cache.hpp"
#include "gattn/cache/workspace.hpp"
#include "gattn/attention/sdpa_function.hpp"
#include "gattn/core/execution.hpp"
#include "gattn/core/validate.hpp"
#include "gattn/core/weights.hpp"
#include "gattn/diagnostics/statistics.hpp"
#include "gattn/gate/gate.hpp"
#include "gattn/kernel/fused_sdpa.hpp"
#include "gattn/simd/vector_ops.hpp"

GATTN_NAMESPACE_BEGIN

/// A gated GQA attention layer with fixed weights. Calls are const: one layer object can serve
/// many sequences (one kv_cache each) from several threads at once.
class gqa_layer {
 public:
  /// Validates `cfg` (before anything is built from it) and takes the weights it needs from `w`
  /// (weight_error names any that is missing or mis-shaped).
  gqa_layer(const gqa_config& cfg, const weight_map& w) : cfg_(validated(cfg)), rope_(cfg_.rope) { load(w); }

  const gqa_config& config() const { return cfg_; }
  /// The SDPA implementation calls use (default: the fused kernel; gattn/baseline/ has the others).
  void set_sdpa(sdpa_function f) { sdpa_ = f; }

  /// One whole sequence without a cache: y [T, d] for x [T, d] (positions 0..T-1). Works for
  /// causal and non-causal layers.
  void forward(matrix_view<const float> x, matrix_view<float> y, statistics_observer* stats = nullptr,
               const execution_context& exec = {}) const {
    detail::check_call_rows("gqa_layer", x.rows, 0, values_per_token(cfg_));
    layer_workspace ws;
    const index cu[2] = {0, x.rows};
    step_impl(x, cu, 1, static_cast<sequence_cache*>(nullptr), y, ws, exec, stats);
  }

  /// Appends x's T tokens to `cache` (positions cache.size() ...) and writes their outputs.
  /// A non-empty cache makes this a chunked prefill or a decode step, which need a causal layer.
  /// A batch of one (step()) with the cache's own workspace.
  void prefill(matrix_view<const float> x, kv_cache& cache, matrix_view<float> y,
               statistics_observer* stats = nullptr, const execution_context& exec = {}) const {
    sequence_cache handle(cache);
    const index cu[2] = {0, x.rows};
    step(x, cu, 1, &handle, y, cache.workspace(), stats, exec);
  }

  /// Token-by-token decode: the same as prefill() of the new rows.
  void decode(matrix_view<const float> x, kv_cache& cache, matrix_view<float> y,
              statistics_observer* stats = nullptr, const execution_context& exec = {}) const {
    detail::require<cache_error>(cfg_.causal, "gqa_layer: decode needs a causal layer (causal=false)");
    prefill(x, cache, y, stats, exec);
  }

  /// A batch of B sequences (docs/spec.md §11): sequence s's new rows are x[cu_seqlens[s], cu_seqlens[s+1])
  /// (prefill chunks and single decode tokens mixed), appended to caches[s] at its own positions;
  /// its outputs go to the same rows of y. One projection GEMM serves all N = cu_seqlens[B] rows;
  /// each sequence attends only to its own cache. Every check (shapes, cu_seqlens, each cache's
  /// widths and room, the f16 range of the new rows) passes before anything is appended to any
  /// cache. `ws` is the caller's (one per concurrent call); `stats` sees the rows in batch order.
  void step(matrix_view<const float> x, const index* cu_seqlens, index batch, sequence_cache* caches,
            matrix_view<float> y, layer_workspace& ws, statistics_observer* stats = nullptr,
            const execution_context& exec = {}) const {
    detail::require<cache_error>(caches != nullptr, "gqa_layer: step needs one cache per sequence (caches is null)");
    step_impl(x, cu_seqlens, batch, caches, y, ws, exec, stats);
  }

  /// The same batch over caller-owned paged K/V memory (cache/paged_kv_view.hpp): sequence s's new
  /// K/V rows are written into its blocks at positions view.context_lens[s] ... (the lengths before
  /// the call; the engine adds the rows itself afterwards), and it attends over all of them. The
  /// view is checked whole (element type, pointers, every table entry the call reads or writes),
  /// naming the field, before anything is written.
  void step(matrix_view<const float> x, const index* cu_seqlens, index batch, const paged_kv_view& view,
            matrix_view<float> y, layer_workspace& ws, statistics_observer* stats = nullptr,
            const execution_context& exec = {}) const {
    const index per_token = values_per_token(cfg_);
    detail::check_batch_rows("gqa_layer", x, cu_seqlens, batch, y, cfg_.hidden, per_token);
    const detail::resolved_kv_view r = detail::resolve_kv_view("gqa_layer", view, cfg_.kv_cache_type, cfg_.kv_heads,
                                                               cfg_.head_dim, cfg_.kv_heads, cfg_.causal);
    detail::check_kv_view_batch("gqa_layer", r, cu_seqlens, batch, per_token);
    step_impl(x, cu_seqlens, batch, detail::view_batch(r, cu_seqlens), y, ws, exec, stats);
  }

  /// Grows `ws` for calls of up to `max_tokens` rows in `max_batch` sequences on contexts of up to
  /// exec.concurrency() threads, so that such calls (without statistics) allocate nothing. A GQA
  /// workspace does not depend on the context length: `max_context` is taken so that every
  /// layer's reserve has one signature.
  void reserve(layer_workspace& ws, index max_tokens, index max_batch, index max_context = 0,
               const execution_context& exec = {}) const {
    (void)max_context;
    fit_workspace(ws, max_tokens, max_batch, false);
    const int threads = exec.concurrency();
    index need = detail::sdpa_reserve_floats(scratch_shape(), max_tokens, max_batch, threads);
    for (const linear_map* m : {&qkvg_, &o_, &gate_b_}) need = std::max(need, m->reserve_floats(max_tokens, threads));
    layer_workspace::fit(ws.worker_scratch, need);
  }

 private:
  /// What every call does, decided once from the config: the projection's column layout and
  /// where the gate acts. Columns of the fused projection output P [T, n_cols]:
  ///   [ q: H_q·D | k: H_kv·D | v: H_kv·D | gate scores (separate, fused_q) or g_a (low_rank) ]
  struct plan {
    index q_width = 0, kv_width = 0, n_cols = 0;
    index col_k = 0, col_v = 0, col_extra = 0;
    gate_shape gate;
    bool gated = false;
    gate_position site = gate_position::g1;

    static plan of(const gqa_config& c) {
      plan p;
      p.q_width = c.q_heads * c.head_dim;
      p.kv_width = c.kv_heads * c.head_dim;
      p.col_k = p.q_width;
      p.col_v = p.col_k + p.kv_width;
      p.col_extra = p.col_v + p.kv_width;
      p.gate = shape_of_gate(c);
      p.gated = c.gate.enabled;
      p.site = c.gate.position;
      index extra = 0;
      if (p.gated && c.gate.source == gate_source::low_rank) extra = c.gate.rank;
      else if (p.gated) extra = p.gate.scores();  // fused_q's block or g_proj's rows
      p.n_cols = p.col_extra + extra;
      return p;
    }
    bool gate_at(gate_position where) const { return gated && site == where; }
  };

  // The layer holds views of `w`'s weights (no copy; biases and norm weights, a few KB, are
  // widened): the memory behind them must outlive the layer unless the views keep it alive, as
  // weight_maps built from fp32 tensors and io::load_weights' views do.
  void load(const weight_map& w) {
    const index d = cfg_.hidden, Hq = cfg_.q_heads, Hkv = cfg_.kv_heads, D = cfg_.head_dim, G = cfg_.group_size();
    const gate_config& g = cfg_.gate;
    const gate_shape& gs = plan_.gate;
    const bool fused = g.enabled && g.source == gate_source::fused_q;
    const index per = gs.per_head;
    const index q_rows = fused ? Hq * (D + per) : Hq * D;
    const weight_view& wq = w.get("q_proj.weight", {q_rows, d});
    const weight_view* bq = w.find("q_proj.bias", {q_rows});
    const weight_view& wk = w.get("k_proj.weight", {Hkv * D, d});
    const weight_view* bk = w.find("k_proj.bias", {Hkv * D});
    const weight_view& wv = w.get("v_proj.weight", {Hkv * D, d});
    const weight_view* bv = w.find("v_proj.bias", {Hkv * D});

    // P's columns as row segments of the checkpoint's tensors: a fused q_proj interleaves each
    // head's (or KV group's) query and gate rows, so it becomes one segment per head for q and one
    // per head for the scores, and the kernel still reads q and u with plain strides.
    std::vector<weight_segment> parts;
    auto q_first = [&](index h) -> index {  // first row of q_proj holding head h's query
      if (!fused) return h * D;
      if (g.layout == fused_layout::per_head) return h * (D + per);
      return (h / G) * G * (D + per) + (h % G) * D;
    };
    auto u_first = [&](index h) -> index {  // first row of q_proj holding head h's gate scores
      if (g.layout == fused_layout::per_head) return h * (D + per) + D;
      return (h / G) * G * (D + per) + G * D + (h % G) * per;
    };
    if (fused) {
      for (index h = 0; h < Hq; ++h) parts.push_back({wq, q_first(h), D, bq});
    } else {
      parts.push_back({wq, 0, Hq * D, bq});
    }
    parts.push_back({wk, 0, Hkv * D, bk});
    parts.push_back({wv, 0, Hkv * D, bv});
    if (fused) {
      for (index h = 0; h < Hq; ++h) parts.push_back({wq, u_first(h), per, bq});
    } else if (g.enabled && g.source == gate_source::separate) {
      parts.push_back({w.get("g_proj.weight", {gs.scores(), d}), 0, gs.scores(), w.find("g_proj.bias", {gs.scores()})});
    } else if (g.enabled && g.source == gate_source::low_rank) {
      parts.push_back({w.get("g_a_proj.weight", {g.rank, d}), 0, g.rank, w.find("g_a_proj.bias", {g.rank})});
      gate_b_ = make_linear(w.get("g_b_proj.weight", {gs.scores(), g.rank}), w.find("g_b_proj.bias", {gs.scores()}));
    }
    qkvg_ = linear_map(parts);
    o_ = make_linear(w.get("o_proj.weight", {d, Hq * D}), w.find("o_proj.bias", {d}));
    if (cfg_.qk_norm != norm_kind::none) {
      q_norm_ = w.widened("q_norm.weight", {D});
      k_norm_ = w.widened("k_norm.weight", {D});
    }
    if (cfg_.output_norm != norm_kind::none) o_norm_ = w.widened("o_norm.weight", {D});
  }

  // One implementation for every kind of cache: Caches is an array of sequence_cache handles
  // (null: no cache, forward()) or a view_batch over caller-owned memory (checked by the caller).
  template <class Caches>
  void step_impl(matrix_view<const float> x, const index* cu, index batch, const Caches& caches,
                 matrix_view<float> y, layer_workspace& ws, const execution_context& exec,
                 statistics_observer* stats) const {
    const index N = detail::check_batch_rows("gqa_layer", x, cu, batch, y, cfg_.hidden, values_per_token(cfg_));
    if constexpr (std::is_pointer_v<Caches>)
      if (caches)
        detail::check_batch_caches("gqa_layer", caches, cu, batch,
                                   {plan_.kv_width, plan_.kv_width, "(kv_heads * head_dim)", cfg_.kv_cache_type,
                                    cfg_.causal},
                                   values_per_token(cfg_));
    if (N == 0) return;
    fit_workspace(ws, N, batch, stats != nullptr);  // before any cache changes: growing may throw
    fit_worker_scratch(ws, cu, batch, exec.concurrency());
    float* P = ws.projections.data();
    qkvg_.apply(x.data, N, x.row_stride, P, plan_.n_cols, cfg_.numerics, exec, ws.workers());
    gate_scores u;
    if (plan_.gated) {
      u = resolve_gate_scores(cfg_.gate, plan_.gate, P + plan_.col_extra, plan_.n_cols, N, gate_b_, ws.gate_scores,
                              exec, ws.workers(), cfg_.numerics);
      if (stats) observe_gate_values(cfg_.gate, plan_.gate, u, N, ws, *stats);
    }
    pre_sdpa_gates(P, N, u);
    norm_and_rope(P, cu, batch, caches, ws);
    store_keys_and_values(P, cu, batch, caches);
    attend(P, cu, batch, caches, u, ws, exec, stats);
    o_.apply(ws.gated.data(), N, plan_.q_width, y.data, y.row_stride, cfg_.numerics, exec, ws.workers());
    if (plan_.gate_at(gate_position::g5))
      apply_gate_rows(y.data, N, y.row_stride, 0, plan_.gate, u, cfg_.gate.activation, cfg_.gate.combine);
    if (stats)
      for (index t = 0; t < N; ++t) stats->add_output(y.row(t), cfg_.hidden);
  }

  // Every buffer a call of N rows in `batch` sequences writes (the low-rank and statistics ones
  // are grown where they are used: they are not on the decode path).
  void fit_workspace(layer_workspace& ws, index N, index batch, bool stats) const {
    layer_workspace::fit(ws.projections, N * plan_.n_cols);
    layer_workspace::fit(ws.gated, N * plan_.q_width);
    layer_workspace::fit(ws.rope, 2 * rope_.half());
    layer_workspace::fit(ws.problems, batch);
    if (cfg_.gate.enabled && cfg_.gate.source == gate_source::low_rank)
      layer_workspace::fit(ws.gate_scores, N * plan_.gate.scores());
    if (stats) {
      layer_workspace::fit(ws.lse, N * cfg_.q_heads);
      layer_workspace::fit(ws.attention, N * plan_.q_width);
      layer_workspace::fit(ws.activated, N * plan_.gate.scores());
    }
  }

  // The projections' and the kernel's scratch of a call (they run one after another).
  void fit_worker_scratch(layer_workspace& ws, const index* cu, index batch, int threads) const {
    const index N = cu[batch];
    index need = detail::sdpa_batch_scratch_floats(scratch_shape(), batch, [cu](index s) { return cu[s + 1] - cu[s]; },
                                                   threads);
    for (const linear_map* m : {&qkvg_, &o_, &gate_b_}) need = std::max(need, m->scratch_floats(N, threads));
    layer_workspace::fit(ws.worker_scratch, need);
  }

  // G2 / G3 / G4 gate the projection outputs (v, k or q) of every row.
  void pre_sdpa_gates(float* P, index N, const gate_scores& u) const {
    const gate_config& g = cfg_.gate;
    const index D = cfg_.head_dim;
    if (plan_.gate_at(gate_position::g2)) apply_gate_rows(P + plan_.col_v, N, plan_.n_cols, D, plan_.gate, u, g.activation, g.combine);
    if (plan_.gate_at(gate_position::g3)) apply_gate_rows(P + plan_.col_k, N, plan_.n_cols, D, plan_.gate, u, g.activation, g.combine);
    if (plan_.gate_at(gate_position::g4)) apply_gate_rows(P, N, plan_.n_cols, D, plan_.gate, u, g.activation, g.combine);
  }

  // QK-norm and RoPE in place; sequence s's rows continue its cache's positions.
  template <class Caches>
  void norm_and_rope(float* P, const index* cu, index batch, const Caches& caches, layer_workspace& ws) const {
    const index Hq = cfg_.q_heads, Hkv = cfg_.kv_heads, D = cfg_.head_dim;
    const float eps = float(cfg_.rms_norm_eps);
    const bool zc = cfg_.qk_norm == norm_kind::rms_zero_centered;
    float* cos = ws.rope.data();
    float* sin = cos + rope_.half();
    for (index s = 0; s < batch; ++s) {
      const index pos0 = caches ? caches[s].size() : 0;
      for (index t = cu[s]; t < cu[s + 1]; ++t) {
        float* row = P + t * plan_.n_cols;
        if (rope_.active()) rope_.angles(pos0 + t - cu[s], cos, sin);
        for (index h = 0; h < Hq + Hkv; ++h) {
          float* head = row + h * D;  // q heads then k heads are contiguous in P
          if (cfg_.qk_norm != norm_kind::none) rms_norm(head, (h < Hq ? q_norm_ : k_norm_).data(), D, eps, zc);
          rope_.rotate(head, cos, sin);
        }
      }
    }
  }

  // The new K/V rows into each sequence's cache, rounded to its element type (docs/spec.md §10); every
  // sequence's rows are range-checked before any is appended. Without a cache the rows are rounded
  // in place to what a cache would hold, so that forward() and prefill() agree.
  template <class Caches>
  void store_keys_and_values(float* P, const index* cu, index batch, const Caches& caches) const {
    const index w = plan_.kv_width, stride = plan_.n_cols;
    if (!caches) {
      detail::round_rows_in_place(cfg_.kv_cache_type, P + plan_.col_k, stride, cu[batch], 2 * w);
      return;
    }
    for (index s = 0; s < batch; ++s) {
      const float* rows = P + cu[s] * stride;
      detail::check_f16_rows(caches[s], s, rows + plan_.col_k, stride, cu[s + 1] - cu[s], w, "key");
      detail::check_f16_rows(caches[s], s, rows + plan_.col_v, stride, cu[s + 1] - cu[s], w, "value");
    }
    detail::append_batch("gqa_layer", caches, cu, batch, P + plan_.col_k, stride, P + plan_.col_v, stride);
  }

  // SDPA of every sequence over its own keys, with the output norm and the G1 gate in the kernel's
  // epilogue; into ws.gated [N, H_q·D].
  template <class Caches>
  void attend(const float* P, const index* cu, index batch, const Caches& caches, const gate_scores& u,
              layer_workspace& ws, const execution_context& exec, statistics_observer* stats) const {
    const sdpa_params base = problem_template(u);
    index count = 0;
    for (index s = 0; s < batch; ++s) {
      const index n = cu[s + 1] - cu[s];
      if (n == 0) continue;
      sdpa_params& p = ws.problems[std::size_t(count++)];
      p = base;
      p.t_q = n;
      p.q = P + cu[s] * plan_.n_cols;
      if (caches) {
        caches[s].bind(p);
      } else {
        p.k = p.q + plan_.col_k;
        p.v = p.q + plan_.col_v;
        p.k_token_stride = p.v_token_stride = plan_.n_cols;
        p.t_k = n;
      }
      p.out = ws.gated.data() + cu[s] * plan_.q_width;
      if (p.epilogue.gate_scores) p.epilogue.gate_scores += cu[s] * u.token_stride;
      if (stats) p.lse = ws.lse.data() + cu[s] * cfg_.q_heads;
    }
    if (!stats) {
      run_sdpa_problems(sdpa_, ws.problems.data(), count, exec, ws.workers());
      return;
    }
    for (index i = 0; i < count; ++i) ws.problems[std::size_t(i)].epilogue = sdpa_epilogue{};
    run_sdpa_problems(sdpa_, ws.problems.data(), count, exec, ws.workers());
    observe_attention(ws, count, base.epilogue, u, *stats);
  }

  // Diagnostics need the SDPA output before the epilogue and the softmax normaliser of every row:
  // the kernel ran bare; here the kernel's epilogue code is applied to its output.
  void observe_attention(layer_workspace& ws, index count, const sdpa_epilogue& epi, const gate_scores& u,
                         statistics_observer& stats) const {
    index N = 0;
    for (index i = 0; i < count; ++i) {
      observe_first_token_attention(ws.problems[std::size_t(i)], stats);
      N += ws.problems[std::size_t(i)].t_q;
    }
    std::copy_n(ws.gated.data(), N * plan_.q_width, ws.attention.data());
    for (index i = 0; i < count; ++i) {
      const sdpa_params& p = ws.problems[std::size_t(i)];
      sdpa_epilogue e = epi;
      const index row0 = (p.out - ws.gated.data()) / plan_.q_width;
      if (e.gate_scores) e.gate_scores = u.data + row0 * u.token_stride;
      apply_sdpa_epilogue(p, e);
    }
    const bool sparsity = plan_.gate_at(gate_position::g1) && cfg_.gate.combine == combine::mul &&
                          cfg_.output_norm == norm_kind::none;
    if (sparsity) stats.add_sdpa_and_gated(ws.attention.data(), ws.gated.data(), N * plan_.q_width);
  }

  // The problems' shape as far as the kernel's scratch depends on it (t_q aside): a cache's element
  // type needs at least the scratch of f32 rows (forward()'s).
  sdpa_params scratch_shape() const {
    sdpa_params p = problem_template({});
    p.kv_type = cfg_.kv_cache_type;
    return p;
  }

  // The fields every sequence's problem shares: shapes, strides, scale, the epilogue.
  sdpa_params problem_template(const gate_scores& u) const {
    const index D = cfg_.head_dim;
    sdpa_params p;
    p.q_heads = cfg_.q_heads;
    p.kv_heads = cfg_.kv_heads;
    p.d_qk = p.d_v = D;
    p.q_token_stride = plan_.n_cols;
    p.q_head_stride = D;
    p.k_head_stride = p.v_head_stride = D;
    p.out_token_stride = plan_.q_width;
    p.out_head_stride = D;
    p.scale = float(cfg_.scale());
    p.causal = cfg_.causal;
    p.numerics = cfg_.kv_numerics;
    p.products = cfg_.numerics;  // fast: the prefill's Q·Kᵀ and P·V on bf16 operands (docs/spec.md §10)
    sdpa_epilogue& epi = p.epilogue;
    epi.out_norm = cfg_.output_norm;
    epi.out_norm_weight = o_norm_.empty() ? nullptr : o_norm_.data();
    epi.out_norm_eps = float(cfg_.rms_norm_eps);
    if (plan_.gate_at(gate_position::g1)) {
      const gate_config& g = cfg_.gate;
      epi.gate_scores = u.data;
      epi.gate_token_stride = u.token_stride;
      epi.gate_head_stride = u.head_stride;
      epi.gate_headwise = plan_.gate.per_head == 1;
      epi.gate_activation = g.activation;
      epi.gate_combine = g.combine;
      epi.gate_rounding = g.rounding;
    }
    return p;
  }

  gqa_config cfg_;
  rope_rotator rope_;
  linear_map qkvg_, gate_b_, o_;
  std::vector<float> q_norm_, k_norm_, o_norm_;
  sdpa_function sdpa_ = &kernel_sdpa;
  plan plan_ = plan::of(cfg_);
};

GATTN_NAMESPACE_END  // namespace gattn
