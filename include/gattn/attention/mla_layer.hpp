// The gated MLA layer (SPEC §3): DeepSeek-style latent KV with a cache of d_c + d_rope values per
// token, the weight-absorbed path for decode, the expanded path for long prefill, and the G1 gate.
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

/// A gated MLA layer with fixed weights. Calls are const (one object, many sequences).
class mla_layer {
 public:
  /// Validates `cfg` (before anything is built from it) and takes the weights it needs from `w`.
  mla_layer(const mla_config& cfg, const weight_map& w) : cfg_(validated(cfg)), rope_(cfg_.rope) { load(w); }

  const mla_config& config() const { return cfg_; }
  /// The SDPA implementation calls use (default: the fused kernel; gattn/backend/ has the others).
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
  void forward(matrix_view<const float> x, matrix_view<float> y, statistics_observer* stats = nullptr) const {
    detail::check_call_rows("mla_layer", x.rows, 0, values_per_token(cfg_));
    kv_cache cache(cfg_, x.rows);
    run(x, y, cache, stats);
  }

  /// Appends x's tokens to the latent cache and writes their outputs (chunked prefill when the
  /// cache is not empty, which needs a causal layer).
  void prefill(matrix_view<const float> x, kv_cache& cache, matrix_view<float> y,
               statistics_observer* stats = nullptr) const {
    detail::require<cache_error>(cfg_.causal || cache.size() == 0,
                                 "mla_layer: a non-causal layer cannot continue a sequence from a cache (cache holds ",
                                 cache.size(), " tokens)");
    detail::require<shape_error>(cache.key_width() == latent_width() && cache.value_width() == 0,
                                 "mla_layer: cache rows are ", cache.key_width(), "/", cache.value_width(),
                                 " wide, the layer needs a latent cache of ", latent_width(),
                                 " (kv_lora_rank + qk_rope_head_dim) with no value rows");
    // the expanded form re-expands every cached key: its workspace grows with the cache too
    detail::check_call_rows("mla_layer", x.rows, cache.size(), values_per_token(cfg_));
    run(x, y, cache, stats);
  }

  void decode(matrix_view<const float> x, kv_cache& cache, matrix_view<float> y,
              statistics_observer* stats = nullptr) const {
    detail::require<cache_error>(cfg_.causal, "mla_layer: decode needs a causal layer (causal=false)");
    prefill(x, cache, y, stats);
  }

 private:
  index latent_width() const { return cfg_.kv_lora_rank + cfg_.qk_rope_head_dim; }
  index qk() const { return cfg_.qk_head_dim(); }

  // Columns of the first projection P [T, n_cols] over x:
  //   [ q_a (r_q) or q (H·(d_nope+d_rope)) | kv_a: c (d_c), k_rope (d_rope) | gate scores or g_a ]
  index q_cols() const { return cfg_.q_lora_rank > 0 ? cfg_.q_lora_rank : cfg_.heads * qk(); }
  index col_kva() const { return q_cols(); }
  index col_extra() const { return q_cols() + latent_width(); }

  // The projections hold views of `w`'s weights (no copy), so the memory behind them must outlive
  // the layer unless the views keep it alive (weight_maps of fp32 tensors and io::load_weights'
  // views do). Norm weights and biases are widened (small). W_uk/W_uv of the absorbed form are the
  // one copy: fp32, H·(d_nope + d_v)·d_c·4 bytes (the size of kv_b_proj in fp32), because the
  // absorbed path multiplies by them as Eigen matrices.
  void load(const weight_map& w) {
    const index d = cfg_.hidden, H = cfg_.heads, dn = cfg_.qk_nope_head_dim, dv = cfg_.v_head_dim;
    const index dc = cfg_.kv_lora_rank;
    gate_ = shape_of_gate(cfg_);
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
    if (g.enabled && g.source == gate_source::low_rank) {
      parts.push_back({w.get("g_a_proj.weight", {g.rank, d}), 0, -1, w.find("g_a_proj.bias", {g.rank})});
      gate_b_ = make_linear(w.get("g_b_proj.weight", {gate_.scores(), g.rank}), w.find("g_b_proj.bias", {gate_.scores()}));
    } else if (g.enabled) {
      parts.push_back({w.get("g_proj.weight", {gate_.scores(), d}), 0, -1, w.find("g_proj.bias", {gate_.scores()})});
    }
    first_ = linear_map(parts);
    n_cols_ = first_.out();
    const weight_view& kvb = w.get("kv_b_proj.weight", {H * (dn + dv), dc});
    const weight_view* kvb_bias = w.find("kv_b_proj.bias", {H * (dn + dv)});
    kv_b_ = make_linear(kvb, kvb_bias);
    // Absorbed form: per head W_uk [d_nope, d_c] and W_uv [d_v, d_c], the two row blocks of kv_b_proj.
    // A kv_b_proj bias cannot be absorbed into a latent-width query; such checkpoints run expanded.
    absorbable_ = kvb_bias == nullptr;
    w_uk_.resize(std::size_t(H));
    w_uv_.resize(std::size_t(H));
    auto widened_rows = [&](index first, index count) {
      const std::vector<float> v = kvb.row_range(first, count).widened();
      return row_matrix(Eigen::Map<const row_matrix>(v.data(), count, dc));
    };
    for (index h = 0; h < H && absorbable_; ++h) {
      w_uk_[std::size_t(h)] = widened_rows(h * (dn + dv), dn);
      w_uv_[std::size_t(h)] = widened_rows(h * (dn + dv) + dn, dv);
    }
    o_ = make_linear(w.get("o_proj.weight", {d, H * dv}), w.find("o_proj.bias", {d}));
  }

  void run(matrix_view<const float> x, matrix_view<float> y, kv_cache& cache, statistics_observer* stats) const {
    const index T = x.rows, d = cfg_.hidden, H = cfg_.heads, dn = cfg_.qk_nope_head_dim, dr = cfg_.qk_rope_head_dim;
    const index dv = cfg_.v_head_dim, dc = cfg_.kv_lora_rank, Q = qk();
    detail::require<shape_error>(x.cols == d && y.cols == d && y.rows == T && x.row_stride >= d && y.row_stride >= d,
                                 "mla_layer: x is [", x.rows, ", ", x.cols, "] and y is [", y.rows, ", ", y.cols,
                                 "]; both must be [T, hidden_size=", d, "]");
    if (T == 0) return;
    cache.check_room(T);
    const index pos0 = cache.size();
    layer_workspace& ws = cache.workspace();
    const float eps = float(cfg_.rms_norm_eps);

    // 1.-2. one GEMM for q (or q_a), kv_a and the gate scores; then q_b when q is low-rank
    layer_workspace::fit(ws.projections, T * n_cols_);
    float* P = ws.projections.data();
    first_.apply(x.data, T, x.row_stride, P, n_cols_);
    layer_workspace::fit(ws.scratch, T * H * Q);
    float* q = ws.scratch.data();  // [T, H, d_nope + d_rope]
    if (cfg_.q_lora_rank > 0) {
      for (index t = 0; t < T; ++t) rms_norm(P + t * n_cols_, q_a_norm_.data(), cfg_.q_lora_rank, eps, false);
      q_b_.apply(P, T, n_cols_, q, H * Q);
    } else {
      for (index t = 0; t < T; ++t) std::copy_n(P + t * n_cols_, H * Q, q + t * H * Q);
    }
    // the new latent rows: normalised c, roped k_rope -> cache
    rope_rotator rope = rope_;
    rope.prepare(pos0, T);
    // An f32 cache takes the rows in place; a bf16/f16 one gets them rounded by append(), which
    // checks every row of the call before writing any (SPEC §10).
    const index L = latent_width();
    const bool f32_cache = cache.storage() == storage_type::f32;
    if (!f32_cache) layer_workspace::fit(ws.latent, T * L);
    float* new_rows = f32_cache ? cache.key(pos0) : ws.latent.data();
    for (index t = 0; t < T; ++t) {
      float* row = new_rows + t * L;
      std::copy_n(P + t * n_cols_ + col_kva(), L, row);
      rms_norm(row, kv_a_norm_.data(), dc, eps, false);
      rope.rotate(row + dc, pos0 + t);
      for (index h = 0; h < H; ++h) rope.rotate(q + (t * H + h) * Q + dn, pos0 + t);
    }
    if (f32_cache) cache.commit(T);
    else cache.append(new_rows, L, nullptr, 0, T);
    const index t_k = cache.size();

    // gate scores
    const gate_config& g = cfg_.gate;
    gate_scores u;
    if (g.enabled) u = resolve_gate_scores(g, gate_, P + col_extra(), n_cols_, T, gate_b_, ws, stats);

    // 3.-6. attention: o [T, H, d_v] before the gate
    layer_workspace::fit(ws.gated, T * H * dv);
    float* o = ws.gated.data();
    const mla_form form = absorbable_ ? choose_form(T, t_k) : mla_form::expanded;
    sdpa_params p;
    p.t_q = T;
    p.t_k = t_k;
    p.q_heads = H;
    p.scale = float(cfg_.scale());
    p.causal = cfg_.causal;
    if (stats) {
      layer_workspace::fit(ws.lse, H * T);
      p.lse = ws.lse.data();
    }
    if (form == mla_form::absorbed) {
      // q̃_h = q_nope_h W_uk_h (latent width), next to q_rope: the kernel attends over the
      // cache rows [c | k_rope] as one shared KV head and returns the latent output ō.
      layer_workspace::fit(ws.attention, T * H * L + T * H * dc);
      float* qa = ws.attention.data();       // [T, H, d_c + d_rope]
      float* latent_out = qa + T * H * L;    // [T, H, d_c]
      using stride = Eigen::OuterStride<>;
      for (index h = 0; h < H; ++h) {
        Eigen::Map<const row_matrix, 0, stride> qn(q + h * Q, T, dn, stride(H * Q));
        Eigen::Map<row_matrix, 0, stride> qt(qa + h * L, T, dc, stride(H * L));
        qt.noalias() = qn * w_uk_[std::size_t(h)];
        for (index t = 0; t < T; ++t) std::copy_n(q + (t * H + h) * Q + dn, dr, qa + (t * H + h) * L + dc);
      }
      p.kv_heads = 1;
      p.d_qk = L;
      p.d_v = dc;
      p.q = qa;
      p.q_token_stride = H * L;
      p.q_head_stride = L;
      if (f32_cache) {
        p.k = p.v = cache.key(0);
      } else {  // the kernel widens each tile of the stored latent as it reads it
        p.kv_type = cache.storage();
        p.k_bits = p.v_bits = cache.key_bits(0);
      }
      p.k_token_stride = p.v_token_stride = L;
      p.k_head_stride = p.v_head_stride = 0;
      p.out = latent_out;
      p.out_token_stride = H * dc;
      p.out_head_stride = dc;
      sdpa_(p);
      for (index h = 0; h < H; ++h) {  // o_h = ō_h W_uvᵀ
        Eigen::Map<const row_matrix, 0, stride> lo(latent_out + h * dc, T, dc, stride(H * dc));
        Eigen::Map<row_matrix, 0, stride> oh(o + h * dv, T, dv, stride(H * dv));
        oh.noalias() = lo * w_uv_[std::size_t(h)].transpose();
      }
      if (stats) observe_first_token_attention(p, *stats);
    } else {
      // Expanded: [k_nope | v] for every cached token from its latent, k_rope shared by the heads.
      const index kv_cols = H * (dn + dv);
      layer_workspace::fit(ws.attention, t_k * kv_cols + t_k * H * Q);
      float* kv = ws.attention.data();       // [T_k, H, d_nope + d_v]
      float* keys = kv + t_k * kv_cols;      // [T_k, H, d_nope + d_rope]
      // This form re-expands every cached latent anyway: a bf16/f16 cache is widened first.
      const float* latent = f32_cache ? cache.key(0) : nullptr;
      if (!f32_cache) {
        layer_workspace::fit(ws.latent, t_k * L);
        for (index j = 0; j < t_k; ++j) cache.widen_key(j, ws.latent.data() + j * L);
        latent = ws.latent.data();
      }
      kv_b_.apply(latent, t_k, L, kv, kv_cols);
      for (index j = 0; j < t_k; ++j)
        for (index h = 0; h < H; ++h) {
          float* kh = keys + (j * H + h) * Q;
          std::copy_n(kv + j * kv_cols + h * (dn + dv), dn, kh);
          std::copy_n(latent + j * L + dc, dr, kh + dn);
        }
      p.kv_heads = H;
      p.d_qk = Q;
      p.d_v = dv;
      p.q = q;
      p.q_token_stride = H * Q;
      p.q_head_stride = Q;
      p.k = keys;
      p.k_token_stride = H * Q;
      p.k_head_stride = Q;
      p.v = kv + dn;
      p.v_token_stride = kv_cols;
      p.v_head_stride = dn + dv;
      p.out = o;
      p.out_token_stride = H * dv;
      p.out_head_stride = dv;
      const bool gate_in_kernel = g.enabled && !stats;
      if (gate_in_kernel) {
        p.epilogue.gate_scores = u.data;
        p.epilogue.gate_token_stride = u.token_stride;
        p.epilogue.gate_head_stride = u.head_stride;
        p.epilogue.gate_headwise = gate_.per_head == 1;
        p.epilogue.gate_activation = g.activation;
        p.epilogue.gate_combine = g.combine;
        p.epilogue.gate_rounding = g.rounding;
      }
      sdpa_(p);
      if (stats) observe_first_token_attention(p, *stats);
    }
    const bool gate_pending = g.enabled && (form == mla_form::absorbed || stats);
    if (gate_pending) {
      if (stats && g.position == gate_position::g1 && g.combine == combine::mul) {
        layer_workspace::fit(ws.scratch, T * H * Q + T * H * dv);
        float* before = ws.scratch.data() + T * H * Q;
        std::copy_n(o, T * H * dv, before);
        apply_gate_rows(o, T, H * dv, dv, gate_, u, g.activation, g.combine, g.rounding);
        stats->add_sdpa_and_gated(before, o, T * H * dv);
      } else {
        apply_gate_rows(o, T, H * dv, dv, gate_, u, g.activation, g.combine, g.rounding);
      }
    }

    // o_proj
    o_.apply(o, T, H * dv, y.data, y.row_stride);
    if (stats)
      for (index t = 0; t < T; ++t) stats->add_output(y.row(t), d);
  }

  mla_config cfg_;
  rope_rotator rope_;
  gate_shape gate_;
  index n_cols_ = 0;
  linear_map first_, q_b_, kv_b_, gate_b_, o_;
  std::vector<float> q_a_norm_, kv_a_norm_;
  std::vector<row_matrix> w_uk_, w_uv_;
  bool absorbable_ = true;
  sdpa_function sdpa_ = &kernel_sdpa;
  mla_form form_ = mla_form::automatic;
};

}  // namespace gattn
