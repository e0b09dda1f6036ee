// The gated GQA layer (SPEC §2, §4, §5): one fused projection GEMM, gates, QK-norm, RoPE, KV cache,
// the fused SDPA-then-gate kernel, o_proj. MHA (H_kv = H_q) and MQA (H_kv = 1) are special cases.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "gattn/attention/epilogue.hpp"
#include "gattn/attention/gate_source.hpp"
#include "gattn/attention/kv_cache.hpp"
#include "gattn/attention/observe.hpp"
#include "gattn/attention/projection.hpp"
#include "gattn/attention/rope.hpp"
#include "gattn/attention/sdpa_function.hpp"
#include "gattn/core/validate.hpp"
#include "gattn/core/weights.hpp"
#include "gattn/diagnostics/statistics.hpp"
#include "gattn/gate/gate.hpp"
#include "gattn/kernel/fused_sdpa.hpp"
#include "gattn/simd/vector_ops.hpp"

namespace gattn {

/// A gated GQA attention layer with fixed weights. Calls are const: one layer object can serve
/// many sequences (one kv_cache each) from several threads at once.
class gqa_layer {
 public:
  /// Validates `cfg` (before anything is built from it) and takes the weights it needs from `w`
  /// (weight_error names any that is missing or mis-shaped).
  gqa_layer(const gqa_config& cfg, const weight_map& w) : cfg_(validated(cfg)), rope_(cfg_.rope) { load(w); }

  const gqa_config& config() const { return cfg_; }
  /// The SDPA implementation calls use (default: the fused kernel; gattn/backend/ has the others).
  void set_sdpa(sdpa_function f) { sdpa_ = f; }

  /// One whole sequence without a cache: y [T, d] for x [T, d] (positions 0..T-1). Works for
  /// causal and non-causal layers.
  void forward(matrix_view<const float> x, matrix_view<float> y, statistics_observer* stats = nullptr) const {
    detail::check_call_rows("gqa_layer", x.rows, 0, values_per_token(cfg_));
    layer_workspace ws;
    run(x, y, nullptr, ws, stats);
  }

  /// Appends x's T tokens to `cache` (positions cache.size() ...) and writes their outputs.
  /// A non-empty cache makes this a chunked prefill or a decode step, which need a causal layer.
  void prefill(matrix_view<const float> x, kv_cache& cache, matrix_view<float> y,
               statistics_observer* stats = nullptr) const {
    detail::require<cache_error>(cfg_.causal || cache.size() == 0,
                                 "gqa_layer: a non-causal layer cannot continue a sequence from a cache (cache holds ",
                                 cache.size(), " tokens); run it on the whole sequence at once");
    detail::require<shape_error>(cache.key_width() == kv_width() && cache.value_width() == kv_width(),
                                 "gqa_layer: cache rows are ", cache.key_width(), "/", cache.value_width(),
                                 " wide, the layer needs ", kv_width(), " (kv_heads * head_dim)");
    detail::check_call_rows("gqa_layer", x.rows, 0, values_per_token(cfg_));  // the cache is already allocated
    run(x, y, &cache, cache.workspace(), stats);
  }

  /// Token-by-token decode: the same as prefill() of the new rows.
  void decode(matrix_view<const float> x, kv_cache& cache, matrix_view<float> y,
              statistics_observer* stats = nullptr) const {
    detail::require<cache_error>(cfg_.causal, "gqa_layer: decode needs a causal layer (causal=false)");
    prefill(x, cache, y, stats);
  }

 private:
  index kv_width() const { return cfg_.kv_heads * cfg_.head_dim; }

  // Column layout of the fused projection output P [T, n_cols]:
  //   [ q: H_q·D | k: H_kv·D | v: H_kv·D | gate scores (separate, fused_q) or g_a (low_rank) ]
  index col_k() const { return cfg_.q_heads * cfg_.head_dim; }
  index col_v() const { return col_k() + kv_width(); }
  index col_extra() const { return col_v() + kv_width(); }

  // The layer holds views of `w`'s weights (no copy; biases and norm weights, a few KB, are
  // widened): the memory behind them must outlive the layer unless the views keep it alive, as
  // weight_maps built from fp32 tensors and io::load_weights' views do.
  void load(const weight_map& w) {
    const index d = cfg_.hidden, Hq = cfg_.q_heads, Hkv = cfg_.kv_heads, D = cfg_.head_dim, G = cfg_.group_size();
    const gate_config& g = cfg_.gate;
    gate_ = shape_of_gate(cfg_);
    const bool fused = g.enabled && g.source == gate_source::fused_q;
    const index per = gate_.per_head;
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
      parts.push_back({w.get("g_proj.weight", {gate_.scores(), d}), 0, gate_.scores(),
                       w.find("g_proj.bias", {gate_.scores()})});
    } else if (g.enabled && g.source == gate_source::low_rank) {
      parts.push_back({w.get("g_a_proj.weight", {g.rank, d}), 0, g.rank, w.find("g_a_proj.bias", {g.rank})});
      gate_b_ = make_linear(w.get("g_b_proj.weight", {gate_.scores(), g.rank}), w.find("g_b_proj.bias", {gate_.scores()}));
    }
    qkvg_ = linear_map(parts);
    n_cols_ = qkvg_.out();
    o_ = make_linear(w.get("o_proj.weight", {d, Hq * D}), w.find("o_proj.bias", {d}));
    if (cfg_.qk_norm != norm_kind::none) {
      q_norm_ = w.widened("q_norm.weight", {D});
      k_norm_ = w.widened("k_norm.weight", {D});
    }
    if (cfg_.output_norm != norm_kind::none) o_norm_ = w.widened("o_norm.weight", {D});
  }

  void run(matrix_view<const float> x, matrix_view<float> y, kv_cache* cache, layer_workspace& ws,
           statistics_observer* stats) const {
    const index T = x.rows, d = cfg_.hidden, Hq = cfg_.q_heads, Hkv = cfg_.kv_heads, D = cfg_.head_dim;
    detail::require<shape_error>(x.cols == d && y.cols == d && y.rows == T && x.row_stride >= d && y.row_stride >= d,
                                 "gqa_layer: x is [", x.rows, ", ", x.cols, "] and y is [", y.rows, ", ", y.cols,
                                 "]; both must be [T, hidden_size=", d, "]");
    if (T == 0) return;
    const index pos0 = cache ? cache->size() : 0;
    if (cache) cache->check_room(T);
    const gate_config& g = cfg_.gate;

    // 1. one GEMM for q, k, v and the gate scores
    layer_workspace::fit(ws.projections, T * n_cols_);
    float* P = ws.projections.data();
    qkvg_.apply(x.data, T, x.row_stride, P, n_cols_);
    gate_scores u;
    if (g.enabled) u = resolve_gate_scores(g, gate_, P + col_extra(), n_cols_, T, gate_b_, ws, stats);

    // 2. G2 / G3 / G4 gate the projection outputs
    if (g.enabled && g.position == gate_position::g2) apply_gate_rows(P + col_v(), T, n_cols_, D, gate_, u, g.activation, g.combine);
    if (g.enabled && g.position == gate_position::g3) apply_gate_rows(P + col_k(), T, n_cols_, D, gate_, u, g.activation, g.combine);
    if (g.enabled && g.position == gate_position::g4) apply_gate_rows(P, T, n_cols_, D, gate_, u, g.activation, g.combine);

    // 3. QK-norm and 4. RoPE, in place
    const float eps = float(cfg_.rms_norm_eps);
    const bool zc = cfg_.qk_norm == norm_kind::rms_zero_centered;
    rope_rotator rope = rope_;  // a copy: its cos/sin tables are per call
    rope.prepare(pos0, T);
    for (index t = 0; t < T; ++t) {
      float* row = P + t * n_cols_;
      for (index h = 0; h < Hq + Hkv; ++h) {
        float* head = row + h * D;  // q heads then k heads are contiguous in P
        if (cfg_.qk_norm != norm_kind::none) rms_norm(head, (h < Hq ? q_norm_ : k_norm_).data(), D, eps, zc);
        rope.rotate(head, pos0 + t);
      }
    }

    // 5. the cache
    const float* K = P + col_k();
    const float* V = P + col_v();
    index kv_stride = n_cols_, t_k = T;
    storage_type kv_type = storage_type::f32;
    const std::uint16_t *k_bits = nullptr, *v_bits = nullptr;
    if (cache) {
      // Rounded to the cache's element type (SPEC §10); an f16 cache refuses out-of-range rows
      // before writing any.
      cache->append(P + col_k(), n_cols_, P + col_v(), n_cols_, T);
      kv_type = cache->storage();
      if (kv_type == storage_type::f32) {
        K = cache->key(0);
        V = cache->value(0);
      } else {
        k_bits = cache->key_bits(0);
        v_bits = cache->value_bits(0);
      }
      kv_stride = kv_width();
      t_k = cache->size();
    } else if (cfg_.kv_cache_type != storage_type::f32) {
      // Without a cache the layer still attends over the values a cache would hold, so that
      // forward() and prefill() agree.
      detail::round_rows_in_place(cfg_.kv_cache_type, P + col_k(), n_cols_, T, 2 * kv_width());
    }

    // 6.-8. SDPA, output norm and the G1 gate in the kernel's epilogue
    sdpa_params p;
    p.t_q = T;
    p.t_k = t_k;
    p.q_heads = Hq;
    p.kv_heads = Hkv;
    p.d_qk = p.d_v = D;
    p.q = P;
    p.q_token_stride = n_cols_;
    p.q_head_stride = D;
    p.k = K;
    p.v = V;
    p.kv_type = kv_type;
    p.k_bits = k_bits;
    p.v_bits = v_bits;
    p.k_token_stride = p.v_token_stride = kv_stride;
    p.k_head_stride = p.v_head_stride = D;
    layer_workspace::fit(ws.gated, T * Hq * D);
    p.out = ws.gated.data();
    p.out_token_stride = Hq * D;
    p.out_head_stride = D;
    p.scale = float(cfg_.scale());
    p.causal = cfg_.causal;
    sdpa_epilogue epi;
    epi.out_norm = cfg_.output_norm;
    epi.out_norm_weight = o_norm_.empty() ? nullptr : o_norm_.data();
    epi.out_norm_eps = eps;
    if (g.enabled && g.position == gate_position::g1) {
      epi.gate_scores = u.data;
      epi.gate_token_stride = u.token_stride;
      epi.gate_head_stride = u.head_stride;
      epi.gate_headwise = gate_.per_head == 1;
      epi.gate_activation = g.activation;
      epi.gate_combine = g.combine;
      epi.gate_rounding = g.rounding;
    }
    if (!stats) {
      p.epilogue = epi;
      sdpa_(p);
    } else {
      // Diagnostics need the SDPA output before the epilogue and the softmax normaliser of
      // every row: run the kernel bare, then apply the same epilogue with the vector ops.
      layer_workspace::fit(ws.lse, Hq * T);
      p.lse = ws.lse.data();
      sdpa_(p);
      observe_first_token_attention(p, *stats);
      layer_workspace::fit(ws.attention, T * Hq * D);
      std::copy_n(ws.gated.data(), T * Hq * D, ws.attention.data());
      apply_sdpa_epilogue(p, epi);
      const bool sparsity = g.enabled && g.position == gate_position::g1 && g.combine == combine::mul &&
                            cfg_.output_norm == norm_kind::none;
      if (sparsity) stats->add_sdpa_and_gated(ws.attention.data(), ws.gated.data(), T * Hq * D);
    }

    // 9. o_proj, then G5
    o_.apply(ws.gated.data(), T, Hq * D, y.data, y.row_stride);
    if (g.enabled && g.position == gate_position::g5) apply_gate_rows(y.data, T, y.row_stride, 0, gate_, u, g.activation, g.combine);
    if (stats)
      for (index t = 0; t < T; ++t) stats->add_output(y.row(t), d);
  }

  gqa_config cfg_;
  rope_rotator rope_;
  gate_shape gate_;
  index n_cols_ = 0;
  linear_map qkvg_, gate_b_, o_;
  std::vector<float> q_norm_, k_norm_, o_norm_;
  sdpa_function sdpa_ = &kernel_sdpa;
};

}  // namespace gattn
