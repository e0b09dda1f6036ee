// The gated MLA layer (docs/spec.md §3): DeepSeek-style latent KV with a cache of d_c + d_rope values per
// token, the weight-absorbed path for decode, the expanded path for long prefill, and the G1 gate.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "gattn/attention/batch.hpp"
#include "gattn/attention/observe.hpp"
#include "gattn/attention/rope.hpp"
#include "gattn/attention/sdpa_function.hpp"
#include "gattn/cache/kv_cache.hpp"
#include "gattn/cache/paged_kv_view.hpp"
#include "gattn/cache/sequence_cache.hpp"
#include "gattn/cache/workspace.hpp"
#include "gattn/core/execution.hpp"
#include "gattn/core/validate.hpp"
#include "gattn/core/weights.hpp"
#include "gattn/diagnostics/statistics.hpp"
#include "gattn/gate/gate.hpp"
#include "gattn/gate/source.hpp"
#include "gattn/kernel/fused_sdpa.hpp"
#include "gattn/linalg/linear_map.hpp"
#include "gattn/simd/vector_ops.hpp"

GATTN_NAMESPACE_BEGIN

/// A gated MLA layer with fixed weights. Calls are const (one object, many sequences).
class mla_layer {
 public:
  /// Validates `cfg` (before anything is built from it) and takes the weights it needs from `w`.
  mla_layer(const mla_config& cfg, const weight_map& w) : cfg_(validated(cfg)), rope_(cfg_.rope) { load(w); }

  const mla_config& config() const { return cfg_; }
  /// The SDPA implementation calls use (default: the fused kernel; gattn/baseline/ has the others).
  void set_sdpa(sdpa_function f) { sdpa_ = f; }
  /// Forces the absorbed or the expanded form (default: chosen per call).
  void set_form(mla_form f) { form_ = f; }

  /// The form a call with t_q new tokens over t_k total keys uses under `automatic`. The expanded
  /// form re-expands every cached latent (2·T_k·d_c·H·(d_nope+d_v) FLOPs) but then attends at head
  /// width; the absorbed form maps the queries into the latent (and back) and attends at width
  /// 2·d_c + d_rope. Latent attention shares one K/V stream among all H heads, so it runs at about
  /// 3× the FLOP rate of per-head attention: `absorbed_attention_discount` = 0.3, measured with
  /// layer/MLAP* (DeepSeek-V3 shape, this Zen 5): absorbed wins at T = 64, ties at 512, loses at 2048.
  mla_form choose_form(index t_q, index t_k) const {
    if (form_ != mla_form::automatic) return form_;
    constexpr double absorbed_attention_discount = 0.3;
    const double H = double(cfg_.heads), dn = double(cfg_.qk_nope_head_dim), dr = double(cfg_.qk_rope_head_dim);
    const double dv = double(cfg_.v_head_dim), dc = double(cfg_.kv_lora_rank);
    const double pairs = double(t_q) * (double(t_k) - 0.5 * double(t_q - 1));  // causal (query, key) pairs
    const double expanded = 2.0 * double(t_k) * dc * H * (dn + dv) + 2.0 * pairs * H * (dn + dr + dv);
    const double absorbed = 2.0 * double(t_q) * H * (dn * dc + dc * dv) +
                            absorbed_attention_discount * 2.0 * pairs * H * (2 * dc + dr);
    return absorbed <= expanded ? mla_form::absorbed : mla_form::expanded;
  }

  /// One whole sequence without a cache (positions 0..T-1).
  void forward(matrix_view<const float> x, matrix_view<float> y, statistics_observer* stats = nullptr,
               const execution_context& exec = {}) const {
    detail::check_call_rows("mla_layer", x.rows, 0, values_per_token(cfg_));
    kv_cache cache(cfg_, x.rows);
    prefill(x, cache, y, stats, exec);
  }

  /// Appends x's tokens to the latent cache and writes their outputs (chunked prefill when the
  /// cache is not empty, which needs a causal layer). A batch of one (step()) with the cache's
  /// own workspace.
  void prefill(matrix_view<const float> x, kv_cache& cache, matrix_view<float> y,
               statistics_observer* stats = nullptr, const execution_context& exec = {}) const {
    sequence_cache handle(cache);
    const index cu[2] = {0, x.rows};
    step(x, cu, 1, &handle, y, cache.workspace(), stats, exec);
  }

  void decode(matrix_view<const float> x, kv_cache& cache, matrix_view<float> y,
              statistics_observer* stats = nullptr, const execution_context& exec = {}) const {
    detail::require<cache_error>(cfg_.causal, "mla_layer: decode needs a causal layer (causal=false)");
    prefill(x, cache, y, stats, exec);
  }

  /// A batch of B sequences (docs/spec.md §11), as gqa_layer::step: rows x[cu_seqlens[s], cu_seqlens[s+1])
  /// continue caches[s] (a latent cache each); one projection GEMM over all rows; the form
  /// (absorbed or expanded) is chosen per sequence. Nothing is appended unless every check passes.
  void step(matrix_view<const float> x, const index* cu_seqlens, index batch, sequence_cache* caches,
            matrix_view<float> y, layer_workspace& ws, statistics_observer* stats = nullptr,
            const execution_context& exec = {}) const {
    const index per_token = values_per_token(cfg_);
    detail::check_batch_rows("mla_layer", x, cu_seqlens, batch, y, cfg_.hidden, per_token);
    detail::require<cache_error>(caches != nullptr, "mla_layer: step needs one cache per sequence (caches is null)");
    detail::check_batch_caches("mla_layer", caches, cu_seqlens, batch,
                               {latent_width(), 0, "(a latent cache: kv_lora_rank + qk_rope_head_dim, no value rows)",
                                cfg_.kv_cache_type, cfg_.causal},
                               per_token);
    step_impl(x, cu_seqlens, batch, caches, y, ws, stats, exec);
  }

  /// The same batch over caller-owned paged latent memory (cache/paged_kv_view.hpp: `keys` holds
  /// the latent rows [c | k_rope], `values` is unused), as gqa_layer::step over a view: the new
  /// rows are written at positions view.context_lens[s] ... (the lengths before the call) after
  /// the whole view is checked.
  void step(matrix_view<const float> x, const index* cu_seqlens, index batch, const paged_kv_view& view,
            matrix_view<float> y, layer_workspace& ws, statistics_observer* stats = nullptr,
            const execution_context& exec = {}) const {
    const index per_token = values_per_token(cfg_);
    detail::check_batch_rows("mla_layer", x, cu_seqlens, batch, y, cfg_.hidden, per_token);
    const detail::resolved_kv_view r =
        detail::resolve_kv_view("mla_layer", view, cfg_.kv_cache_type, 1, latent_width(), 0, cfg_.causal);
    detail::check_kv_view_batch("mla_layer", r, cu_seqlens, batch, per_token);
    step_impl(x, cu_seqlens, batch, detail::view_batch(r, cu_seqlens), y, ws, stats, exec);
  }

 private:
  // One implementation for every kind of cache: Caches is an array of sequence_cache handles or a
  // view_batch over caller-owned memory, checked by the caller.
  template <class Caches>
  void step_impl(matrix_view<const float> x, const index* cu_seqlens, index batch, const Caches& caches,
                 matrix_view<float> y, layer_workspace& ws, statistics_observer* stats,
                 const execution_context& exec) const {
    const index N = cu_seqlens[batch];
    if (N == 0) return;
    prepare_call(cu_seqlens, batch, caches, ws, stats != nullptr);  // may throw: before any cache changes
    fit_worker_scratch(ws, cu_seqlens, batch, caches, exec.concurrency());
    float* P = ws.projections.data();
    first_.apply(x.data, N, x.row_stride, P, plan_.n_cols, cfg_.numerics, exec, ws.workers());
    float* q = ws.scratch.data();  // [N, H, d_nope + d_rope]
    queries(P, N, q, ws, exec);
    latent_and_rope(P, q, cu_seqlens, batch, caches, ws);
    store_latent(ws.latent.data(), cu_seqlens, batch, caches);
    gate_scores u;
    if (cfg_.gate.enabled) {
      u = resolve_gate_scores(cfg_.gate, plan_.gate, P + plan_.col_extra, plan_.n_cols, N, gate_b_, ws.gate_scores,
                              exec, ws.workers(), cfg_.numerics);
      if (stats) observe_gate_values(cfg_.gate, plan_.gate, u, N, ws, *stats);
    }
    attend(q, cu_seqlens, batch, caches, u, ws, exec, stats);
    post_sdpa_gate(cu_seqlens, batch, u, ws, stats);
    o_.apply(ws.gated.data(), N, cfg_.heads * cfg_.v_head_dim, y.data, y.row_stride, cfg_.numerics, exec, ws.workers());
    if (stats)
      for (index t = 0; t < N; ++t) stats->add_output(y.row(t), cfg_.hidden);
  }


 public:
  /// Grows `ws` for calls of up to `max_tokens` rows in `max_batch` sequences over at most
  /// `max_context` cached tokens each, on contexts of up to exec.concurrency() threads, so that
  /// such calls (without statistics) allocate nothing.
  void reserve(layer_workspace& ws, index max_tokens, index max_batch, index max_context,
               const execution_context& exec = {}) const {
    fit_rows(ws, max_tokens, max_batch, false);
    const index H = cfg_.heads;
    layer_workspace::fit(ws.attention, max_tokens * H * (latent_width() + cfg_.kv_lora_rank));
    const bool expanded = !absorbable_ || form_ != mla_form::absorbed;
    if (expanded) fit_expanded(ws, max_context);
    const int threads = exec.concurrency();
    index need = detail::sdpa_reserve_floats(absorbed_shape(), max_tokens, max_batch, threads);
    if (expanded) need = std::max(need, detail::sdpa_reserve_floats(expanded_shape(), max_tokens, 1, threads));
    for (const linear_map* m : {&first_, &q_b_, &o_, &gate_b_}) need = std::max(need, m->reserve_floats(max_tokens, threads));
    if (expanded) need = std::max(need, kv_b_.reserve_floats(max_context, threads));
    if (!w_uv_.empty()) need = std::max(need, w_uv_.front().reserve_floats(max_tokens, 1));
    layer_workspace::fit(ws.worker_scratch, need);
  }

 private:
  index latent_width() const { return cfg_.kv_lora_rank + cfg_.qk_rope_head_dim; }
  index qk() const { return cfg_.qk_head_dim(); }

  /// The first projection's column layout, decided once from the config, and the gate's shape.
  /// Columns of the first projection P [T, n_cols] over x:
  ///   [ q_a (r_q) or q (H·(d_nope+d_rope)) | kv_a: c (d_c), k_rope (d_rope) | gate scores or g_a ]
  struct plan {
    index col_kva = 0, col_extra = 0, n_cols = 0;
    gate_shape gate;

    static plan of(const mla_config& c) {
      plan p;
      p.col_kva = c.q_lora_rank > 0 ? c.q_lora_rank : c.heads * c.qk_head_dim();
      p.col_extra = p.col_kva + c.kv_lora_rank + c.qk_rope_head_dim;
      p.gate = shape_of_gate(c);
      index extra = 0;
      if (c.gate.enabled && c.gate.source == gate_source::low_rank) extra = c.gate.rank;
      else if (c.gate.enabled) extra = p.gate.scores();  // g_proj's rows
      p.n_cols = p.col_extra + extra;
      return p;
    }
  };

  // The projections hold views of `w`'s weights (no copy), so the memory behind them must outlive
  // the layer unless the views keep it alive (weight_maps of fp32 tensors and io::load_weights'
  // views do). Norm weights and biases are widened (small). W_uk/W_uv of the absorbed form are
  // views of kv_b_proj's row blocks too, used in their stored dtype.
  void load(const weight_map& w) {
    const index d = cfg_.hidden, H = cfg_.heads, dn = cfg_.qk_nope_head_dim, dv = cfg_.v_head_dim;
    const index dc = cfg_.kv_lora_rank;
    std::vector<weight_segment> parts;  // stacked into `first_`
    if (cfg_.q_lora_rank > 0) {
      parts.push_back({w.get("q_a_proj.weight", {cfg_.q_lora_rank, d}), 0, -1, w.find("q_a_proj.bias", {cfg_.q_lora_rank})});
      q_a_norm_ = w.widened("q_a_layernorm.weight", {cfg_.q_lora_rank});
      q_b_ = make_linear(w.get("q_b_proj.weight", {H * qk(), cfg_.q_lora_rank}), w.find("q_b_proj.bias", {H * qk()}));
    } else {
      parts.push_back({w.get("q_proj.weight", {H * qk(), d}), 0, -1, w.find("q_proj.bias", {H * qk()})});
    }
    parts.push_back({w.get("kv_a_proj_with_mqa.weight", {latent_width(), d}), 0, -1,
                     w.find("kv_a_proj_with_mqa.bias", {latent_width()})});
    kv_a_norm_ = w.widened("kv_a_layernorm.weight", {dc});
    const gate_config& g = cfg_.gate;
    const index scores = plan_.gate.scores();
    if (g.enabled && g.source == gate_source::low_rank) {
      parts.push_back({w.get("g_a_proj.weight", {g.rank, d}), 0, -1, w.find("g_a_proj.bias", {g.rank})});
      gate_b_ = make_linear(w.get("g_b_proj.weight", {scores, g.rank}), w.find("g_b_proj.bias", {scores}));
    } else if (g.enabled) {
      parts.push_back({w.get("g_proj.weight", {scores, d}), 0, -1, w.find("g_proj.bias", {scores})});
    }
    first_ = linear_map(parts);
    const weight_view& kvb = w.get("kv_b_proj.weight", {H * (dn + dv), dc});
    const weight_view* kvb_bias = w.find("kv_b_proj.bias", {H * (dn + dv)});
    kv_b_ = make_linear(kvb, kvb_bias);
    // Absorbed form: per head W_uk [d_nope, d_c] and W_uv [d_v, d_c], the two row blocks of kv_b_proj.
    // A kv_b_proj bias cannot be absorbed into a latent-width query; such checkpoints run expanded.
    absorbable_ = kvb_bias == nullptr;
    w_uk_.clear();
    w_uv_.clear();
    for (index h = 0; h < H && absorbable_; ++h) {
      w_uk_.emplace_back(kvb.row_range(h * (dn + dv), dn));                          // q̃ = q_nope · W_uk
      w_uv_.push_back(linear_map(std::vector<weight_segment>{{kvb, h * (dn + dv) + dn, dv}}));  // o = ō · W_uvᵀ
    }
    o_ = make_linear(w.get("o_proj.weight", {d, H * dv}), w.find("o_proj.bias", {d}));
  }

  // Buffers whose size follows the rows of the call.
  void fit_rows(layer_workspace& ws, index N, index batch, bool stats) const {
    const index H = cfg_.heads, dv = cfg_.v_head_dim;
    layer_workspace::fit(ws.projections, N * plan_.n_cols);
    layer_workspace::fit(ws.scratch, N * H * qk() + (stats ? N * H * dv : 0));
    layer_workspace::fit(ws.latent, N * latent_width());
    layer_workspace::fit(ws.gated, N * H * dv);
    layer_workspace::fit(ws.rope, 2 * rope_.half());
    layer_workspace::fit(ws.problems, batch);
    layer_workspace::fit(ws.flags, batch);
    if (cfg_.gate.enabled && cfg_.gate.source == gate_source::low_rank)
      layer_workspace::fit(ws.gate_scores, N * plan_.gate.scores());
    if (stats) {
      layer_workspace::fit(ws.lse, N * H);
      layer_workspace::fit(ws.activated, N * plan_.gate.scores());
    }
  }
  // The expanded form's keys and values of `t_k` tokens, and the widened latent they come from.
  void fit_expanded(layer_workspace& ws, index t_k) const {
    const index H = cfg_.heads;
    layer_workspace::fit(ws.attention, t_k * H * (cfg_.qk_nope_head_dim + cfg_.v_head_dim) + t_k * H * qk());
    layer_workspace::fit(ws.expanded_latent, t_k * latent_width());
  }

  // Chooses each sequence's form (ws.flags: 1 = absorbed) and grows every buffer the call writes.
  template <class Caches>
  void prepare_call(const index* cu, index batch, const Caches& caches, layer_workspace& ws, bool stats) const {
    const index N = cu[batch];
    fit_rows(ws, N, batch, stats);
    index absorbed_rows = 0, longest_expanded = 0;
    for (index s = 0; s < batch; ++s) {
      const index n = cu[s + 1] - cu[s], t_k = caches[s].size() + n;
      const bool absorbed = absorbable_ && choose_form(n, t_k) == mla_form::absorbed;
      ws.flags[std::size_t(s)] = absorbed ? 1 : 0;
      if (absorbed) absorbed_rows += n;
      else longest_expanded = std::max(longest_expanded, t_k);
    }
    const index H = cfg_.heads;
    layer_workspace::fit(ws.attention, absorbed_rows * H * (latent_width() + cfg_.kv_lora_rank));
    if (longest_expanded > 0) fit_expanded(ws, longest_expanded);
  }

  // The scratch of every phase of a call (they run one after another): the projections, the
  // absorbed problems as a batch, each expanded problem alone, and the expanded K/V of the longest
  // expanded cache. Forms as prepare_call chose them (ws.flags).
  template <class Caches>
  void fit_worker_scratch(layer_workspace& ws, const index* cu, index batch, const Caches& caches, int threads) const {
    const index N = cu[batch];
    const auto absorbed_rows = [&](index s) { return ws.flags[std::size_t(s)] ? cu[s + 1] - cu[s] : index(0); };
    index need = detail::sdpa_batch_scratch_floats(absorbed_shape(), batch, absorbed_rows, threads);
    for (const linear_map* m : {&first_, &q_b_, &o_, &gate_b_}) need = std::max(need, m->scratch_floats(N, threads));
    sdpa_params expanded = expanded_shape();
    for (index s = 0; s < batch; ++s) {
      const index n = cu[s + 1] - cu[s];
      if (ws.flags[std::size_t(s)] && !w_uv_.empty()) need = std::max(need, w_uv_.front().scratch_floats(n, 1));
      if (ws.flags[std::size_t(s)] || n == 0) continue;
      expanded.t_q = n;
      need = std::max({need, sdpa_scratch_floats(expanded, threads), kv_b_.scratch_floats(caches[s].size() + n, threads)});
    }
    layer_workspace::fit(ws.worker_scratch, need);
  }

  // The absorbed and expanded problems' shapes as far as the kernel's scratch depends on them (t_q aside).
  sdpa_params absorbed_shape() const {
    sdpa_params p = problem_template();
    p.kv_heads = 1;
    p.d_qk = latent_width();
    p.d_v = cfg_.kv_lora_rank;
    p.kv_type = cfg_.kv_cache_type;
    return p;
  }
  sdpa_params expanded_shape() const {
    sdpa_params p = problem_template();
    p.kv_heads = cfg_.heads;
    p.d_qk = qk();
    p.d_v = cfg_.v_head_dim;
    return p;
  }

  // q [N, H, d_nope + d_rope]: from q_b over the normalised q_a, or the first projection's columns.
  void queries(float* P, index N, float* q, layer_workspace& ws, const execution_context& exec) const {
    const index HQ = cfg_.heads * qk(), stride = plan_.n_cols;
    if (cfg_.q_lora_rank > 0) {
      for (index t = 0; t < N; ++t) rms_norm(P + t * stride, q_a_norm_.data(), cfg_.q_lora_rank, float(cfg_.rms_norm_eps), false);
      q_b_.apply(P, N, stride, q, HQ, cfg_.numerics, exec, ws.workers());
    } else {
      for (index t = 0; t < N; ++t) std::copy_n(P + t * stride, HQ, q + t * HQ);
    }
  }

  // The new latent rows [N, d_c + d_rope] (normalised c, roped k_rope) into ws.latent, and RoPE on
  // q_rope; sequence s's rows continue its cache's positions.
  template <class Caches>
  void latent_and_rope(const float* P, float* q, const index* cu, index batch, const Caches& caches,
                       layer_workspace& ws) const {
    const index L = latent_width(), dc = cfg_.kv_lora_rank, H = cfg_.heads, Q = qk(), dn = cfg_.qk_nope_head_dim;
    float* cos = ws.rope.data();
    float* sin = cos + rope_.half();
    for (index s = 0; s < batch; ++s) {
      const index pos0 = caches[s].size();
      for (index t = cu[s]; t < cu[s + 1]; ++t) {
        float* row = ws.latent.data() + t * L;
        std::copy_n(P + t * plan_.n_cols + plan_.col_kva, L, row);
        rms_norm(row, kv_a_norm_.data(), dc, float(cfg_.rms_norm_eps), false);
        if (rope_.active()) rope_.angles(pos0 + t - cu[s], cos, sin);
        rope_.rotate(row + dc, cos, sin);
        for (index h = 0; h < H; ++h) rope_.rotate(q + (t * H + h) * Q + dn, cos, sin);
      }
    }
  }

  // Every sequence's rows are range-checked (f16 caches) before any is appended; each cache rounds
  // its rows to its element type (docs/spec.md §10).
  template <class Caches>
  void store_latent(const float* latent, const index* cu, index batch, const Caches& caches) const {
    const index L = latent_width();
    for (index s = 0; s < batch; ++s)
      detail::check_f16_rows(caches[s], s, latent + cu[s] * L, L, cu[s + 1] - cu[s], L, "latent");
    detail::append_batch("mla_layer", caches, cu, batch, latent, L, nullptr, 0);
  }

  // The fields every problem of the call shares.
  sdpa_params problem_template() const {
    sdpa_params p;
    p.q_heads = cfg_.heads;
    p.scale = float(cfg_.scale());
    p.causal = cfg_.causal;
    p.numerics = cfg_.kv_numerics;
    p.products = cfg_.numerics;  // fast: the prefill's Q·Kᵀ and P·V on bf16 operands (docs/spec.md §10)
    return p;
  }

  // o [N, H, d_v] before any gate the kernel did not apply: absorbed sequences as one batch of
  // problems, then each expanded one (it re-expands its whole cache into the shared workspace).
  template <class Caches>
  void attend(const float* q, const index* cu, index batch, const Caches& caches, const gate_scores& u,
              layer_workspace& ws, const execution_context& exec, statistics_observer* stats) const {
    index count = 0, row = 0;
    for (index s = 0; s < batch; ++s) {
      const index n = cu[s + 1] - cu[s];
      if (n == 0 || !ws.flags[std::size_t(s)]) continue;
      sdpa_params& p = ws.problems[std::size_t(count++)];
      p = absorbed_problem(q, cu[s], n, row, caches[s], ws, stats);
      row += n;
    }
    run_sdpa_problems(sdpa_, ws.problems.data(), count, exec, ws.workers());
    for (index s = 0, i = 0; s < batch; ++s)
      if (cu[s + 1] > cu[s] && ws.flags[std::size_t(s)]) absorbed_output(ws.problems[std::size_t(i++)], cu[s], ws, stats);
    for (index s = 0; s < batch; ++s) {
      const index n = cu[s + 1] - cu[s];
      if (n == 0 || ws.flags[std::size_t(s)]) continue;
      sdpa_params p = expanded_problem(q, cu[s], n, caches[s], u, ws, exec, stats);
      p.threads = exec.concurrency();
      p.exec = &exec;
      p.scratch = ws.workers();
      sdpa_(p);
      if (stats) observe_first_token_attention(p, *stats);
    }
  }

  // Absorbed: q̃_h = q_nope_h W_uk_h (latent width) next to q_rope, for rows [first, first + n);
  // the kernel attends over the cache rows [c | k_rope] as one shared KV head and returns the
  // latent output ō. `slot` places the sequence in the absorbed part of ws.attention.
  template <class Cache>
  sdpa_params absorbed_problem(const float* q, index first, index n, index slot, const Cache& cache,
                               layer_workspace& ws, statistics_observer* stats) const {
    const index H = cfg_.heads, Q = qk(), L = latent_width(), dc = cfg_.kv_lora_rank, dn = cfg_.qk_nope_head_dim;
    float* qa = ws.attention.data() + slot * H * (L + dc);  // [n, H, L], then ō [n, H, d_c]
    for (index h = 0; h < H; ++h) {
      w_uk_[std::size_t(h)].apply(q + first * H * Q + h * Q, n, H * Q, qa + h * L, H * L);
      for (index t = 0; t < n; ++t)
        std::copy_n(q + ((first + t) * H + h) * Q + dn, cfg_.qk_rope_head_dim, qa + (t * H + h) * L + dc);
    }
    sdpa_params p = problem_template();
    cache.bind(p);
    p.t_q = n;
    p.kv_heads = 1;
    p.d_qk = L;
    p.d_v = dc;
    p.q = qa;
    p.q_token_stride = H * L;
    p.q_head_stride = L;
    p.k_head_stride = p.v_head_stride = 0;
    p.out = qa + n * H * L;
    p.out_token_stride = H * dc;
    p.out_head_stride = dc;
    if (stats) p.lse = ws.lse.data() + first * H;
    return p;
  }

  // o_h = ō_h W_uvᵀ for the rows of one absorbed problem, the batch's rows from `first` on.
  void absorbed_output(const sdpa_params& p, index first, layer_workspace& ws, statistics_observer* stats) const {
    const index H = cfg_.heads, dv = cfg_.v_head_dim, dc = cfg_.kv_lora_rank;
    float* o = ws.gated.data() + first * H * dv;
    // Per head on the calling thread: the heads' maps are small.
    static const execution_context serial = execution_context::serial();
    for (index h = 0; h < H; ++h)
      w_uv_[std::size_t(h)].apply(p.out + h * dc, p.t_q, H * dc, o + h * dv, H * dv, cfg_.numerics, serial, ws.workers());
    if (stats) observe_first_token_attention(p, *stats);
  }

  // Expanded: [k_nope | v] for every cached token from its latent, k_rope shared by the heads; the
  // gate in the kernel's epilogue unless statistics need the output before it.
  template <class Cache>
  sdpa_params expanded_problem(const float* q, index first, index n, const Cache& cache, const gate_scores& u,
                               layer_workspace& ws, const execution_context& exec, statistics_observer* stats) const {
    const index H = cfg_.heads, Q = qk(), dn = cfg_.qk_nope_head_dim, dv = cfg_.v_head_dim, dc = cfg_.kv_lora_rank;
    const index L = latent_width(), t_k = cache.size(), kv_cols = H * (dn + dv);
    float* latent = ws.expanded_latent.data();
    for (index j = 0; j < t_k; ++j) cache.widen_key(j, latent + j * L);
    float* kv = ws.attention.data();   // [T_k, H, d_nope + d_v]
    float* keys = kv + t_k * kv_cols;  // [T_k, H, d_nope + d_rope]
    kv_b_.apply(latent, t_k, L, kv, kv_cols, cfg_.numerics, exec, ws.workers());
    for (index j = 0; j < t_k; ++j)
      for (index h = 0; h < H; ++h) {
        float* kh = keys + (j * H + h) * Q;
        std::copy_n(kv + j * kv_cols + h * (dn + dv), dn, kh);
        std::copy_n(latent + j * L + dc, cfg_.qk_rope_head_dim, kh + dn);
      }
    sdpa_params p = problem_template();
    p.t_q = n;
    p.t_k = t_k;
    p.kv_heads = H;
    p.d_qk = Q;
    p.d_v = dv;
    p.q = q + first * H * Q;
    p.q_token_stride = H * Q;
    p.q_head_stride = Q;
    p.k = keys;
    p.k_token_stride = H * Q;
    p.k_head_stride = Q;
    p.v = kv + dn;
    p.v_token_stride = kv_cols;
    p.v_head_stride = dn + dv;
    p.out = ws.gated.data() + first * H * dv;
    p.out_token_stride = H * dv;
    p.out_head_stride = dv;
    if (stats) p.lse = ws.lse.data() + first * H;
    if (cfg_.gate.enabled && !stats) set_gate_epilogue(p.epilogue, u, first);
    return p;
  }

  void set_gate_epilogue(sdpa_epilogue& e, const gate_scores& u, index first) const {
    const gate_config& g = cfg_.gate;
    e.gate_scores = u.data + first * u.token_stride;
    e.gate_token_stride = u.token_stride;
    e.gate_head_stride = u.head_stride;
    e.gate_headwise = plan_.gate.per_head == 1;
    e.gate_activation = g.activation;
    e.gate_combine = g.combine;
    e.gate_rounding = g.rounding;
  }

  // The G1 gate on rows whose kernel did not apply it (absorbed sequences; every row with
  // statistics, which then see the output before and after it).
  void post_sdpa_gate(const index* cu, index batch, const gate_scores& u, layer_workspace& ws,
                      statistics_observer* stats) const {
    const gate_config& g = cfg_.gate;
    if (!g.enabled) return;
    const index width = cfg_.heads * cfg_.v_head_dim;
    float* o = ws.gated.data();
    const bool sparsity = stats && g.position == gate_position::g1 && g.combine == combine::mul;
    float* before = sparsity ? ws.scratch.data() + cu[batch] * cfg_.heads * qk() : nullptr;
    if (sparsity) std::copy_n(o, cu[batch] * width, before);
    for (index s = 0; s < batch; ++s) {
      if (!stats && !ws.flags[std::size_t(s)]) continue;  // expanded: gated in the kernel
      const gate_scores us{u.data + cu[s] * u.token_stride, u.token_stride, u.head_stride};
      apply_gate_rows(o + cu[s] * width, cu[s + 1] - cu[s], width, cfg_.v_head_dim, plan_.gate, us, g.activation, g.combine,
                      g.rounding);
    }
    if (sparsity) stats->add_sdpa_and_gated(before, o, cu[batch] * width);
  }

  mla_config cfg_;
  rope_rotator rope_;
  linear_map first_, q_b_, kv_b_, gate_b_, o_;
  std::vector<float> q_a_norm_, kv_a_norm_;
  std::vector<transposed_map> w_uk_;  // per head, views of kv_b_proj
  std::vector<linear_map> w_uv_;
  bool absorbable_ = true;
  sdpa_function sdpa_ = &kernel_sdpa;
  mla_form form_ = mla_form::automatic;
  plan plan_ = plan::of(cfg_);
};

GATTN_NAMESPACE_END  // namespace gattn
