// Parameter, FLOP and memory counts of one gated attention layer (docs/spec.md §7), for `gattn cost`.
#pragma once

#include <cmath>
#include <cstdint>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gattn/core/config.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/types.hpp"
#include "gattn/core/validate.hpp"
#include "gattn/gate/shape.hpp"

GATTN_NAMESPACE_BEGIN

/// Bytes one stored value takes: 4 for f32, 2 for bf16 and f16 (docs/spec.md §10).
inline constexpr std::int64_t bytes_per_value(storage_type t) {
  return t == storage_type::f32 ? 4 : t == storage_type::f8_e4m3 ? 1 : 2;
}

namespace detail {

/// a · b, refusing int64 overflow (a hostile config must not wrap to a small count).
inline std::int64_t cost_mul(std::int64_t a, std::int64_t b, const char* what) {
  require<config_error>(a >= 0 && b >= 0 && (a == 0 || b <= std::numeric_limits<std::int64_t>::max() / a),
                        "cost: ", what, " = ", a, " x ", b, " overflows a 64-bit count");
  return a * b;
}

inline std::int64_t cost_add(std::int64_t a, std::int64_t b, const char* what) {
  require<config_error>(b <= std::numeric_limits<std::int64_t>::max() - a, "cost: ", what, " overflows a 64-bit count");
  return a + b;
}

}  // namespace detail

/// One weight matrix (no bias) or one norm weight of a layer.
struct projection_cost {
  std::string name;            ///< checkpoint name without `.weight` (`q_proj`, `g_proj`, `q_norm`...)
  index rows = 0;              ///< out_features (a norm: its size)
  index cols = 0;              ///< in_features (a norm: 1)
  std::int64_t params = 0;     ///< rows · cols
  std::int64_t gate_params = 0;  ///< the gate's share of `params`: all of g_proj, fused_q's extra q_proj rows
};

/// Counts for ONE layer of one config. Multiply by the layer count for a model.
struct layer_cost {
  std::string description;                   ///< one-line summary of the config
  std::vector<projection_cost> projections;  ///< weight matrices, in data-flow order
  std::vector<projection_cost> norms;        ///< norm weights (q_norm, k_norm, o_norm, latent norms)
  std::int64_t attention_params = 0;         ///< projection parameters that are not the gate's
  std::int64_t norm_params = 0;
  std::int64_t gate_params = 0;              ///< docs/spec.md §7 "extra gate parameters" for one layer
  std::int64_t total_params = 0;             ///< attention + norm + gate
  /// FLOPs one query spends per visible key: GQA 4·D·H_q (q·k and p·v, 2 FLOPs per multiply-add);
  /// MLA per `form`: expanded H·2·(d_nope + d_rope + d_v), absorbed H·2·(2·d_c + d_rope).
  double attention_flops_per_key = 0;
  /// Gate elementwise work per token: one FLOP per activated value (the activation counted as one
  /// op), one per target element (the combine), and for a head-shared gate one per pre-mean score.
  double gate_flops_per_token = 0;
  mla_form form = mla_form::expanded;        ///< meaningful for MLA only
  bool is_mla = false;
  /// Values cached per token: GQA K and V, 2·H_kv·D; MLA the absorbed latent cache d_c + d_rope.
  std::int64_t kv_cache_values_per_token = 0;
  /// Element type of the cache: the config's kv_cache_dtype (a caller may override it, as `gattn
  /// cost --kv-dtype` does).
  storage_type kv_cache_type = storage_type::f32;
  /// Activated gate values per token, as the layer materialises them (a head-shared gate is
  /// broadcast to every head, so it counts like an unshared one): G1 H_q·D_v or H_q, G2/G3 H_kv·D or
  /// H_kv, G4 H_q·D or H_q, G5 d or 1; 0 without a gate.
  std::int64_t gate_activation_values_per_token = 0;
  /// Gated delta-rule layers (docs/spec.md §13): no KV cache, a fixed state per sequence instead.
  bool is_delta = false;
  /// FLOPs of the delta rule per token, as the chunked form does them (docs/performance.md):
  /// H_v·(6·D_k·D_v + 3·C·D_k + 2·C·D_v + C²/3) with chunks of C = 64 tokens.
  double recurrence_flops_per_token = 0;
  /// fp32 values of one sequence's state: S (H_v·D_k·D_v) and the convolution tail ((K − 1)·channels).
  std::int64_t state_values_per_sequence = 0;

  /// Matmul FLOPs of every projection, gate included: 2 per weight (one multiply-add). For MLA this
  /// holds in both forms: absorbed decode applies W_uk and W_uv per token and head, which is
  /// exactly kv_b_proj's weight count.
  double projection_flops_per_token() const { return 2.0 * double(attention_params + gate_params); }

  /// Bytes the cache holds per token in this layer, at kv_cache_type.
  std::int64_t kv_cache_bytes_per_token() const {
    return detail::cost_mul(kv_cache_values_per_token, bytes_per_value(kv_cache_type), "kv cache bytes");
  }

  /// Bytes of every weight of the layer (projections, gate and norms) stored as `t`: a checkpoint
  /// of that type, which the layer reads as stored (docs/spec.md §10), so also the bytes one decode step reads.
  std::int64_t weight_bytes(storage_type t) const {
    return detail::cost_mul(total_params, bytes_per_value(t), "weight bytes");
  }

  /// FLOPs for one token that attends to `context` keys (itself included): projections,
  /// attention and the gate's elementwise work. Norms, RoPE and softmax are not counted (O(width),
  /// the usual matmul-FLOP convention); the gate's are, so its overhead stays visible.
  double flops_per_token(index context) const {
    detail::require<config_error>(context >= 0, "cost: context=", context, " must be >= 0");
    return projection_flops_per_token() + double(context) * attention_flops_per_key + gate_flops_per_token +
           recurrence_flops_per_token;
  }

  /// Bytes of memory one sequence holds in this layer at `context` tokens: its KV cache
  /// (kv_cache_type) or its fp32 recurrent state, which does not grow with the context.
  std::int64_t sequence_bytes(index context) const {
    detail::require<config_error>(context >= 0, "cost: context=", context, " must be >= 0");
    if (is_delta) return detail::cost_mul(state_values_per_sequence, 4, "state bytes");
    return detail::cost_mul(kv_cache_bytes_per_token(), context, "kv cache bytes x context");
  }
};

namespace detail {

inline projection_cost make_projection(std::string name, index rows, index cols, std::int64_t gate_rows = 0) {
  projection_cost p;
  p.name = std::move(name);
  p.rows = rows;
  p.cols = cols;
  p.params = cost_mul(rows, cols, "projection size");
  p.gate_params = cost_mul(gate_rows, cols, "gate projection size");
  return p;
}

inline projection_cost make_norm(std::string name, index size) { return make_projection(std::move(name), size, 1); }

/// Scores per token: heads·per_head. A head-shared gate keeps them all in g_proj (docs/spec.md §4), so this
/// is also the row count of g_proj / g_b_proj. Checked: the config may be absurd (`gattn cost`).
inline std::int64_t gate_score_count(const gate_shape& s) { return cost_mul(s.heads, s.per_head, "gate width"); }

/// Appends g_proj or g_a_proj + g_b_proj (fused_q is handled by the caller, inside q_proj) and sets
/// the gate's per-token counts.
inline void add_gate(layer_cost& c, const gate_config& g, const gate_shape& s, index hidden) {
  if (!g.enabled) return;
  const std::int64_t scores = gate_score_count(s);
  if (g.source == gate_source::separate) {
    c.projections.push_back(make_projection("g_proj", scores, hidden, scores));
  } else if (g.source == gate_source::low_rank) {
    c.projections.push_back(make_projection("g_a_proj", g.rank, hidden, g.rank));
    c.projections.push_back(make_projection("g_b_proj", scores, g.rank, scores));
  }
  const std::int64_t target = cost_mul(s.heads, s.width, "gate target width");
  c.gate_activation_values_per_token = scores;
  c.gate_flops_per_token = double(scores) + double(target) + (g.shared ? double(scores) : 0.0);
}

/// Sums the parameter totals from the projection and norm lists.
inline void finish(layer_cost& c) {
  for (const projection_cost& p : c.projections) {
    c.gate_params = cost_add(c.gate_params, p.gate_params, "gate parameters");
    c.attention_params = cost_add(c.attention_params, p.params - p.gate_params, "attention parameters");
  }
  for (const projection_cost& n : c.norms) c.norm_params = cost_add(c.norm_params, n.params, "norm parameters");
  c.total_params = cost_add(cost_add(c.attention_params, c.norm_params, "parameters"), c.gate_params, "parameters");
}

inline std::string describe_gate(const gate_config& g) {
  if (!g.enabled) return "no gate";
  std::string s = std::string("gate ") + to_string(g.position) + " " + to_string(g.granularity) +
                  (g.shared ? " shared " : " ") + to_string(g.activation) + " " + to_string(g.combine) + " (" +
                  to_string(g.source);
  if (g.source == gate_source::low_rank) s += " rank " + std::to_string(g.rank);
  if (g.source == gate_source::fused_q)
    s += g.layout == fused_layout::per_head ? ", per_head" : ", per_kv_group";
  return s + ")";
}

/// 1234567 -> "1,234,567".
inline std::string with_commas(std::int64_t v) {
  const bool negative = v < 0;
  // Go through unsigned so INT64_MIN does not overflow when negated.
  std::uint64_t u = negative ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
  std::string digits = std::to_string(u), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return negative ? "-" + out : out;
}

/// A FLOP count (carried as double; a model's count may have a fraction, e.g. the chunked delta
/// rule's C²/3 per token): rounded, with commas, while it fits in int64.
inline std::string with_commas(double v) {
  if (std::isfinite(v) && std::fabs(v) < 9.0e18) return with_commas(static_cast<std::int64_t>(std::llround(v)));
  std::ostringstream out;
  out << std::setprecision(6) << v;
  return out.str();
}

/// "33,554,432 B (32.00 MiB)": the exact count, then the largest binary unit of which the value is
/// at least a quarter (so the paper's 0.25 MiB reads as such, and 4 KiB is not "0.00 MiB").
inline std::string bytes_text(double bytes) {
  std::ostringstream out;
  out << with_commas(bytes) << " B";
  const char* units[] = {"GiB", "MiB", "KiB"};
  double size = 1024.0 * 1024.0 * 1024.0;
  for (const char* unit : units) {
    if (bytes >= size / 4) {
      out << " (" << std::fixed << std::setprecision(2) << bytes / size << " " << unit << ")";
      break;
    }
    size /= 1024.0;
  }
  return out.str();
}

}  // namespace detail

/// Parameter, FLOP and memory counts of one GQA layer (docs/spec.md §2, §4, §7), without biases.
/// Throws config_error naming the field when the shape is invalid (H_q % H_kv != 0, a size <= 0,
/// a gate rule of docs/spec.md §4 broken) or a count overflows int64. RoPE fields are not looked at.
inline layer_cost cost(const gqa_config& c) {
  using detail::require;
  require<config_error>(c.hidden > 0, "hidden_size=", c.hidden, " must be > 0");
  require<config_error>(c.q_heads > 0, "num_attention_heads=", c.q_heads, " must be > 0");
  require<config_error>(c.kv_heads > 0, "num_key_value_heads=", c.kv_heads, " must be > 0");
  require<config_error>(c.q_heads % c.kv_heads == 0, "num_attention_heads=", c.q_heads,
                        " must be a multiple of num_key_value_heads=", c.kv_heads);
  require<config_error>(c.head_dim > 0, "head_dim=", c.head_dim, " must be > 0");
  validate_gate(c.gate, /*mla=*/false);

  const index d = c.hidden, D = c.head_dim;
  const index q_width = detail::cost_mul(c.q_heads, D, "num_attention_heads * head_dim");
  const index kv_width = detail::cost_mul(c.kv_heads, D, "num_key_value_heads * head_dim");
  const gate_config& g = c.gate;

  layer_cost out;
  out.description = "GQA d=" + detail::with_commas(std::int64_t(d)) + " H_q=" + std::to_string(c.q_heads) +
                    " H_kv=" + std::to_string(c.kv_heads) + " D=" + std::to_string(D) + ", " + detail::describe_gate(g);

  const gate_shape shape = shape_of_gate(c);
  // fused_q: q_proj carries the gate scores as extra rows (per head or per KV group: the same count).
  const std::int64_t fused_rows = g.enabled && g.source == gate_source::fused_q ? detail::gate_score_count(shape) : 0;

  out.projections.push_back(
      detail::make_projection("q_proj", detail::cost_add(q_width, fused_rows, "q_proj rows"), d, fused_rows));
  out.projections.push_back(detail::make_projection("k_proj", kv_width, d));
  out.projections.push_back(detail::make_projection("v_proj", kv_width, d));
  detail::add_gate(out, g, shape, d);
  out.projections.push_back(detail::make_projection("o_proj", d, q_width));
  if (c.qk_norm != norm_kind::none) {
    out.norms.push_back(detail::make_norm("q_norm", D));
    out.norms.push_back(detail::make_norm("k_norm", D));
  }
  if (c.output_norm != norm_kind::none) out.norms.push_back(detail::make_norm("o_norm", D));
  detail::finish(out);

  out.attention_flops_per_key = 4.0 * double(D) * double(c.q_heads);
  out.kv_cache_values_per_token = detail::cost_mul(2, kv_width, "kv cache width");
  out.kv_cache_type = c.kv_cache_type;
  return out;
}

/// Parameter, FLOP and memory counts of one MLA layer (docs/spec.md §3), without biases. The KV cache is
/// the absorbed latent one (d_c + d_rope per token) in either form; `form` only selects which
/// attention FLOPs per key are counted (absorbed is what decode runs). Throws config_error naming
/// the field when the shape is invalid or the gate is not a G1 g_proj / low_rank gate.
inline layer_cost cost(const mla_config& c, mla_form form = mla_form::absorbed) {
  using detail::require;
  require<config_error>(c.hidden > 0, "hidden_size=", c.hidden, " must be > 0");
  require<config_error>(c.heads > 0, "num_attention_heads=", c.heads, " must be > 0");
  require<config_error>(c.qk_nope_head_dim >= 0 && c.qk_rope_head_dim >= 0 && c.qk_head_dim() > 0,
                        "qk_nope_head_dim=", c.qk_nope_head_dim, " and qk_rope_head_dim=", c.qk_rope_head_dim,
                        " must be >= 0 with a positive sum");
  require<config_error>(c.v_head_dim > 0, "v_head_dim=", c.v_head_dim, " must be > 0");
  require<config_error>(c.kv_lora_rank > 0, "kv_lora_rank=", c.kv_lora_rank, " must be > 0");
  require<config_error>(c.q_lora_rank >= 0, "q_lora_rank=", c.q_lora_rank, " must be >= 0");
  validate_gate(c.gate, /*mla=*/true);

  const index d = c.hidden, H = c.heads, dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim, dv = c.v_head_dim;
  const index dc = c.kv_lora_rank, rq = c.q_lora_rank;
  const index latent = detail::cost_add(dc, dr, "kv_lora_rank + qk_rope_head_dim");
  const index q_width = detail::cost_mul(H, dn + dr, "num_attention_heads * qk_head_dim");

  layer_cost out;
  out.is_mla = true;
  out.form = form;
  out.description = "MLA d=" + detail::with_commas(std::int64_t(d)) + " H=" + std::to_string(H) +
                    " d_nope=" + std::to_string(dn) + " d_rope=" + std::to_string(dr) + " d_v=" + std::to_string(dv) +
                    " d_c=" + std::to_string(dc) + " r_q=" + std::to_string(rq) + ", " + detail::describe_gate(c.gate) +
                    ", " + to_string(form) + " attention";

  if (rq > 0) {
    out.projections.push_back(detail::make_projection("q_a_proj", rq, d));
    out.projections.push_back(detail::make_projection("q_b_proj", q_width, rq));
    out.norms.push_back(detail::make_norm("q_a_layernorm", rq));
  } else {
    out.projections.push_back(detail::make_projection("q_proj", q_width, d));
  }
  out.projections.push_back(detail::make_projection("kv_a_proj_with_mqa", latent, d));
  out.projections.push_back(
      detail::make_projection("kv_b_proj", detail::cost_mul(H, dn + dv, "num_attention_heads * (d_nope + d_v)"), dc));
  out.norms.push_back(detail::make_norm("kv_a_layernorm", dc));
  detail::add_gate(out, c.gate, shape_of_gate(c), d);
  out.projections.push_back(detail::make_projection("o_proj", d, detail::cost_mul(H, dv, "num_attention_heads * v_head_dim")));
  detail::finish(out);

  // Per key and head: scores (2 FLOPs per multiply-add over the score width) plus the weighted sum
  // of values. Expanded: widths d_nope + d_rope and d_v. Absorbed: the latent c (d_c) plus the
  // shared k_rope for the scores, and d_c for the latent output.
  const double per_head = form == mla_form::expanded ? 2.0 * double(dn + dr) + 2.0 * double(dv)
                                                     : 2.0 * double(dc + dr) + 2.0 * double(dc);
  out.attention_flops_per_key = double(H) * per_head;
  out.kv_cache_values_per_token = latent;
  out.kv_cache_type = c.kv_cache_type;
  return out;
}

/// Parameter, FLOP and memory counts of one gated delta-rule layer (docs/spec.md §13), without
/// biases. The output gate's scores (GDN: the z rows of in_proj_qkvz, or in_proj_z; KDA: g_proj or
/// g_a → g_b) are the gate's parameters. A Gated DeltaNet layer's projections are listed as `layout`
/// stores them (docs/spec.md §14: the same counts either way). KDA's low-rank widths come from the
/// weights; without them (a config alone) they are taken as key_head_dim, as Kimi Linear has them
/// (gate.rank when the config gives it).
inline layer_cost cost(const delta_config& c, gdn_layout layout = gdn_layout::fused) {
  validate(c);
  const index d = c.hidden, Hk = c.key_heads, Hv = c.value_heads, Dk = c.key_head_dim, Dv = c.value_head_dim;
  const index qk = Hk * Dk, v = Hv * Dv, K = c.conv_kernel;
  const bool kda = c.kind == delta_kind::kda;
  layer_cost out;
  out.is_delta = true;
  out.description = std::string(kda ? "KDA" : "Gated DeltaNet") + " d=" + detail::with_commas(std::int64_t(d)) +
                    " H_k=" + std::to_string(Hk) + " H_v=" + std::to_string(Hv) + " D_k=" + std::to_string(Dk) +
                    " D_v=" + std::to_string(Dv) + " conv=" + std::to_string(K) +
                    (kda ? std::string(", decay ") + to_string(c.decay) : std::string(", ") + to_string(layout) +
                                                                             " input projections") +
                    ", output gate " + (kda ? "sigmoid" : "silu");
  using detail::make_projection;
  if (kda) {
    const index fa = Dk, ga = c.gate_rank > 0 ? c.gate_rank : Dk;
    for (const char* n : {"q_proj", "k_proj"}) out.projections.push_back(make_projection(n, qk, d));
    out.projections.push_back(make_projection("v_proj", v, d));
    out.projections.push_back(make_projection("f_a_proj", fa, d));
    out.projections.push_back(make_projection("f_b_proj", Hv * Dk, fa));
    out.projections.push_back(make_projection("b_proj", Hv, d));
    if (c.gate == gate_source::low_rank) {
      out.projections.push_back(make_projection("g_a_proj", ga, d, ga));
      out.projections.push_back(make_projection("g_b_proj", v, ga, v));
    } else {
      out.projections.push_back(make_projection("g_proj", v, d, v));
    }
    out.projections.push_back(make_projection("o_proj", d, v));
    for (const char* n : {"q_conv1d", "k_conv1d"}) out.norms.push_back(make_projection(n, qk, K));
    out.norms.push_back(make_projection("v_conv1d", v, K));
    out.norms.push_back(detail::make_norm("A_log", Hv));
    out.norms.push_back(detail::make_norm("dt_bias", Hv * Dk));
    out.norms.push_back(detail::make_norm("o_norm", Dv));
  } else {
    if (layout == gdn_layout::fused) {
      out.projections.push_back(make_projection("in_proj_qkvz", 2 * qk + 2 * v, d, v));
      out.projections.push_back(make_projection("in_proj_ba", 2 * Hv, d));
    } else {
      out.projections.push_back(make_projection("in_proj_qkv", 2 * qk + v, d));
      out.projections.push_back(make_projection("in_proj_z", v, d, v));
      out.projections.push_back(make_projection("in_proj_b", Hv, d));
      out.projections.push_back(make_projection("in_proj_a", Hv, d));
    }
    out.projections.push_back(make_projection("out_proj", d, v));
    out.norms.push_back(make_projection("conv1d", c.conv_channels(), K));
    out.norms.push_back(detail::make_norm("A_log", Hv));
    out.norms.push_back(detail::make_norm("dt_bias", Hv));
    out.norms.push_back(detail::make_norm("norm", Dv));
  }
  detail::finish(out);
  const double C = 64;
  out.recurrence_flops_per_token =
      double(Hv) * (6.0 * double(Dk) * double(Dv) + 3.0 * C * double(Dk) + 2.0 * C * double(Dv) + C * C / 3.0);
  out.gate_activation_values_per_token = v;
  out.gate_flops_per_token = 2.0 * double(v);
  out.state_values_per_sequence = detail::cost_add(c.state_values(), (K - 1) * c.conv_channels(), "state values");
  return out;
}

namespace detail {

/// The report being written: one line per quantity, per layer and × `layers`.
struct cost_table {
  std::ostringstream out;
  std::int64_t layers = 1;

  std::int64_t times_layers(std::int64_t v) const { return cost_mul(v, layers, "count x layers"); }
  void line(const std::string& label, const std::string& one, const std::string& all) {
    out << std::left << std::setw(24) << label << std::right << std::setw(32) << one << std::setw(36) << all << "\n";
  }
  void count(const std::string& label, std::int64_t v) { line(label, with_commas(v), with_commas(times_layers(v))); }
  void flops(const std::string& label, double v) { line(label, with_commas(v), with_commas(v * double(layers))); }
  void bytes(const std::string& label, double v) { line(label, bytes_text(v), bytes_text(v * double(layers))); }
};

inline void cost_weights(cost_table& t, const layer_cost& c, storage_type weights) {
  std::ostringstream& out = t.out;
  out << c.description << "\n\n";
  out << std::left << std::setw(20) << "weight" << std::right << std::setw(12) << "rows" << std::setw(12) << "cols"
      << std::setw(18) << "params" << std::setw(18) << "gate params" << "\n";
  for (const auto* list : {&c.projections, &c.norms})
    for (const projection_cost& p : *list)
      out << std::left << std::setw(20) << p.name << std::right << std::setw(12) << with_commas(std::int64_t(p.rows))
          << std::setw(12) << with_commas(std::int64_t(p.cols)) << std::setw(18) << with_commas(p.params)
          << std::setw(18) << with_commas(p.gate_params) << "\n";
  out << "\n";
  t.line("", "per layer", "x " + with_commas(t.layers) + (t.layers == 1 ? " layer" : " layers"));
  t.count("attention params", c.attention_params);
  t.count("norm params", c.norm_params);
  t.count("gate params (extra)", c.gate_params);
  t.count("total params", c.total_params);
  t.bytes(std::string("weight bytes (") + to_string(weights) + ")", double(c.weight_bytes(weights)));
}

inline void cost_flops(cost_table& t, const layer_cost& c, index context) {
  t.out << "\nFLOPs per token at context " << with_commas(std::int64_t(context))
        << (c.is_mla ? std::string(" (") + to_string(c.form) + " MLA)" : "") << "\n";
  t.flops("  projections", c.projection_flops_per_token());
  if (c.is_delta) t.flops("  delta rule", c.recurrence_flops_per_token);
  else t.flops("  attention", double(context) * c.attention_flops_per_key);
  t.flops("  gate elementwise", c.gate_flops_per_token);
  t.flops("  total", c.flops_per_token(context));
}

/// A softmax layer's KV cache per token (its dtype, then fp32 and bf16), or a delta-rule layer's state.
inline void cost_memory(cost_table& t, const layer_cost& c, index context) {
  if (c.is_delta) {
    t.out << "\nState per sequence (" << with_commas(c.state_values_per_sequence)
          << " fp32 values per layer, whatever the context)\n";
    t.bytes("  fp32", double(c.sequence_bytes(context)));
    return;
  }
  const double kv = double(c.kv_cache_values_per_token);
  t.out << "\nKV cache per token (" << with_commas(c.kv_cache_values_per_token) << " values per layer, kv_cache_dtype "
        << to_string(c.kv_cache_type) << ")\n";
  t.bytes(std::string("  ") + to_string(c.kv_cache_type) + " (cache)", double(c.kv_cache_bytes_per_token()));
  // For comparison, the types the cache is not (an f16 cache compares with f32 and bf16).
  if (c.kv_cache_type != storage_type::f32) t.bytes("  f32", kv * 4);
  if (c.kv_cache_type != storage_type::bf16) t.bytes("  bf16", kv * 2);
}

inline void cost_activations(cost_table& t, const layer_cost& c, index tokens) {
  const std::int64_t act = cost_mul(c.gate_activation_values_per_token, tokens, "gate activations x tokens");
  t.out << "\nGate activations for " << with_commas(std::int64_t(tokens)) << " tokens (" << with_commas(act)
        << " values per layer, " << with_commas(t.times_layers(act)) << " in all)\n";
  t.bytes("  fp32", double(act) * 4);
  t.bytes("  bf16", double(act) * 2);
}

}  // namespace detail

/// The human-readable table printed by `gattn cost`: per-projection parameters; per-layer and
/// ×`layers` totals (the gate line is docs/spec.md §7's "extra gate parameters"); FLOPs per token at
/// `context` keys; weight bytes with weights stored as `weights`; KV-cache bytes per token at
/// c.kv_cache_type (then f32 and bf16, those it is not, for comparison), or a delta-rule layer's state per sequence;
/// gate-activation values and bytes for one sequence of `tokens` tokens (fp32 and bf16), per layer
/// and × layers. Numbers carry thousands separators. Throws config_error when layers < 1,
/// context < 0 or tokens < 0.
inline std::string format_cost_report(const layer_cost& c, index layers, index context, index tokens,
                                      storage_type weights = storage_type::f32) {
  detail::require<config_error>(layers >= 1, "cost: layers=", layers, " must be >= 1");
  detail::require<config_error>(context >= 0, "cost: context=", context, " must be >= 0");
  detail::require<config_error>(tokens >= 0, "cost: tokens=", tokens, " must be >= 0");
  detail::cost_table t;
  t.layers = layers;
  detail::cost_weights(t, c, weights);
  detail::cost_flops(t, c, context);
  detail::cost_memory(t, c, context);
  detail::cost_activations(t, c, tokens);
  return t.out.str();
}

/// The totals of a model made of several kinds of layer (`layer_cost`, count): parameters, weight
/// bytes, FLOPs per token at `context`, and the memory one sequence holds at that context (the
/// softmax layers' KV caches beside the delta-rule layers' fixed states).
inline std::string format_model_summary(const std::vector<std::pair<layer_cost, index>>& kinds, index context,
                                        storage_type weights = storage_type::f32) {
  std::int64_t params = 0, bytes = 0, memory = 0;
  double flops = 0;
  for (const auto& [c, n] : kinds) {
    detail::require<config_error>(n >= 0, "cost: a layer count of ", n);
    params = detail::cost_add(params, detail::cost_mul(c.total_params, n, "params x layers"), "model params");
    bytes = detail::cost_add(bytes, detail::cost_mul(c.weight_bytes(weights), n, "bytes x layers"), "model bytes");
    memory = detail::cost_add(memory, detail::cost_mul(c.sequence_bytes(context), n, "memory x layers"), "memory");
    flops += c.flops_per_token(context) * double(n);
  }
  std::ostringstream out;
  out << "model attention, every gattn layer\n";
  out << "  params                    " << detail::with_commas(params) << "\n";
  out << "  weight bytes (" << to_string(weights) << ")       " << detail::bytes_text(double(bytes)) << "\n";
  out << "  FLOPs per token           " << detail::with_commas(flops) << " at context "
      << detail::with_commas(std::int64_t(context)) << "\n";
  out << "  memory per sequence       " << detail::bytes_text(double(memory)) << " at context "
      << detail::with_commas(std::int64_t(context)) << " (KV caches + recurrent states)\n";
  return out.str();
}

GATTN_NAMESPACE_END  // namespace gattn
