// The reference gated delta-rule layers (docs/spec.md §13, §14): Gated DeltaNet (either layout of its
// input projections) and KDA in double precision, one sequence from a zero state, the recurrence run
// token by token exactly as the spec writes it.
#pragma once

#include <cmath>
#include <utility>
#include <vector>

#include "gattn/core/delta_weights.hpp"
#include "gattn/core/validate.hpp"
#include "gattn/reference/layer_ops.hpp"

GATTN_NAMESPACE_BEGIN namespace reference {

/// Everything the vectors carry, in double: y [T, d]; o (the delta-rule output, before the output
/// norm) and gated (what enters the output projection), both [T, H_v·D_v]; state, S after the last
/// token, [H_v, D_k, D_v].
struct delta_result {
  index tokens = 0;
  dmatrix y, o, gated, state;
};

/// The projections of x before any convolution or activation (docs/spec.md §13 step 1).
struct delta_projections {
  dmatrix q, k;      ///< [T, H_k·D_k]
  dmatrix v;         ///< [T, H_v·D_v]
  dmatrix gate;      ///< output-gate scores [T, H_v·D_v]: z (GDN) or u (KDA)
  dmatrix b;         ///< [T, H_v], β = σ(b)
  dmatrix decay_in;  ///< GDN: a [T, H_v]; KDA: f [T, H_v·D_k]
};

/// What the recurrence and the output gate read, per token.
struct delta_streams {
  dmatrix q, k;            ///< [T, H_k, D_k], after conv, SiLU and l2norm
  dmatrix v;               ///< [T, H_v, D_v], after conv and SiLU
  dmatrix g;               ///< log-decays [T, H_v, decay_width]
  index decay_width = 1;   ///< 1 (GDN: one per value head) or D_k (KDA: one per key channel)
  dmatrix beta;            ///< [T, H_v]
  dmatrix gate;            ///< activated output gate [T, H_v·D_v]
};

inline double sigmoid(double u) { return 1.0 / (1.0 + std::exp(-u)); }
inline double silu(double u) { return u * sigmoid(u); }
/// PyTorch's softplus (β = 1, threshold 20): log(1 + eˣ), and x itself above 20.
inline double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

/// Causal depthwise convolution over time, then SiLU, of u [T, C] in place:
/// out[t, c] = Σ_i w[c, i] · u[t − (K − 1) + i, c] (tap K − 1 on the current token; zeros before token 0).
inline void short_conv_silu(dmatrix& u, index T, index C, const weight_view& w, index K) {
  dmatrix out(u.size(), 0.0);
  for (index t = 0; t < T; ++t)
    for (index c = 0; c < C; ++c) {
      double acc = 0;
      for (index i = 0; i < K; ++i) {
        const index src = t - (K - 1) + i;
        if (src >= 0) acc += double(w.at(c, i)) * u[std::size_t(src * C + c)];
      }
      out[std::size_t(t * C + c)] = silu(acc);
    }
  u = std::move(out);
}

/// x ← x / sqrt(Σx² + 1e-6) for each of the `vectors` consecutive vectors of n values in x.
inline void l2norm(dmatrix& x, index vectors, index n) {
  for (index r = 0; r < vectors; ++r) {
    double* p = &x[std::size_t(r * n)];
    double ss = 0;
    for (index i = 0; i < n; ++i) ss += p[i] * p[i];
    const double inv = 1.0 / std::sqrt(ss + 1e-6);
    for (index i = 0; i < n; ++i) p[i] *= inv;
  }
}

/// Gated DeltaNet's fused projections (Qwen3-Next), split per key-head group g (r = H_v / H_k value heads each):
/// in_proj_qkvz [q_g | k_g | v of its r heads | z of its r heads], in_proj_ba [b of its r heads | a of them].
inline delta_projections gdn_projections(const delta_config& c, const weight_map& w, const dmatrix& x, index T) {
  const index Hk = c.key_heads, Hv = c.value_heads, Dk = c.key_head_dim, Dv = c.value_head_dim, r = c.group_size();
  const index group = 2 * Dk + 2 * r * Dv;
  const dmatrix qkvz = linear(x, T, c.hidden, w, "in_proj_qkvz", Hk * group);
  const dmatrix ba = linear(x, T, c.hidden, w, "in_proj_ba", 2 * Hv);
  delta_projections p;
  p.q.resize(std::size_t(T * Hk * Dk));
  p.k.resize(p.q.size());
  p.v.resize(std::size_t(T * Hv * Dv));
  p.gate.resize(p.v.size());
  p.b.resize(std::size_t(T * Hv));
  p.decay_in.resize(p.b.size());
  for (index t = 0; t < T; ++t)
    for (index g = 0; g < Hk; ++g) {
      const double* row = &qkvz[std::size_t(t * Hk * group + g * group)];
      for (index i = 0; i < Dk; ++i) {
        p.q[std::size_t((t * Hk + g) * Dk + i)] = row[i];
        p.k[std::size_t((t * Hk + g) * Dk + i)] = row[Dk + i];
      }
      // value head h = g·r + j: its v and z are columns j·D_v.. of the group's v and z blocks
      for (index j = 0; j < r * Dv; ++j) {
        p.v[std::size_t(t * Hv * Dv + g * r * Dv + j)] = row[2 * Dk + j];
        p.gate[std::size_t(t * Hv * Dv + g * r * Dv + j)] = row[2 * Dk + r * Dv + j];
      }
      for (index j = 0; j < r; ++j) {
        p.b[std::size_t(t * Hv + g * r + j)] = ba[std::size_t(t * 2 * Hv + g * 2 * r + j)];
        p.decay_in[std::size_t(t * Hv + g * r + j)] = ba[std::size_t(t * 2 * Hv + g * 2 * r + r + j)];
      }
    }
  return p;
}

/// Qwen3.5's split projections (docs/spec.md §14): in_proj_qkv's rows are [q of every key head | k of
/// every key head | v of every value head]; z, b and a are one tensor each, value heads in order.
inline delta_projections gdn_split_projections(const delta_config& c, const weight_map& w, const dmatrix& x, index T) {
  const index qk = c.key_heads * c.key_head_dim, v = c.value_heads * c.value_head_dim, C = c.conv_channels();
  const dmatrix qkv = linear(x, T, c.hidden, w, "in_proj_qkv", C);
  delta_projections p;
  p.q.resize(std::size_t(T * qk));
  p.k.resize(p.q.size());
  p.v.resize(std::size_t(T * v));
  for (index t = 0; t < T; ++t) {
    const double* row = &qkv[std::size_t(t * C)];
    for (index i = 0; i < qk; ++i) {
      p.q[std::size_t(t * qk + i)] = row[i];
      p.k[std::size_t(t * qk + i)] = row[qk + i];
    }
    for (index j = 0; j < v; ++j) p.v[std::size_t(t * v + j)] = row[2 * qk + j];
  }
  p.gate = linear(x, T, c.hidden, w, "in_proj_z", v);
  p.b = linear(x, T, c.hidden, w, "in_proj_b", c.value_heads);
  p.decay_in = linear(x, T, c.hidden, w, "in_proj_a", c.value_heads);
  return p;
}

/// KDA's separate projections: q, k, v, the decay input f = f_b_proj(f_a_proj(x)), b, and the gate
/// scores u from g_proj (full rank) or g_b_proj(g_a_proj(x)) (low rank).
inline delta_projections kda_projections(const delta_config& c, const delta_weight_ranks& ranks, const weight_map& w,
                                         const dmatrix& x, index T) {
  const index d = c.hidden, H = c.value_heads, Dk = c.key_head_dim, Dv = c.value_head_dim;
  delta_projections p;
  p.q = linear(x, T, d, w, "q_proj", H * Dk);
  p.k = linear(x, T, d, w, "k_proj", H * Dk);
  p.v = linear(x, T, d, w, "v_proj", H * Dv);
  p.decay_in = linear(linear(x, T, d, w, "f_a_proj", ranks.decay), T, ranks.decay, w, "f_b_proj", H * Dk);
  p.b = linear(x, T, d, w, "b_proj", H);
  p.gate = c.gate == gate_source::low_rank
               ? linear(linear(x, T, d, w, "g_a_proj", ranks.gate), T, ranks.gate, w, "g_b_proj", H * Dv)
               : linear(x, T, d, w, "g_proj", H * Dv);
  return p;
}

/// Log-decays g [T, H_v, width] from their inputs [T, H_v·width] (docs/spec.md §13): per value head h
/// and decay channel i, with A = exp(A_log_h) and s = input + dt_bias_{h·width + i},
/// g = −A · softplus(s) (GDN, KDA `softplus`) or g = L · σ(A · s) (KDA `lower_bound`).
inline dmatrix log_decays(const delta_config& c, const std::vector<float>& A_log, const std::vector<float>& dt_bias,
                          const dmatrix& in, index T, index width) {
  const index H = c.value_heads, n = H * width;
  const bool bounded = c.kind == delta_kind::kda && c.decay == decay_form::lower_bound;
  dmatrix g(std::size_t(T * n));
  for (index t = 0; t < T; ++t)
    for (index h = 0; h < H; ++h)
      for (index i = 0; i < width; ++i) {
        const index j = h * width + i;
        const double A = std::exp(double(A_log[std::size_t(h)]));
        const double s = in[std::size_t(t * n + j)] + double(dt_bias[std::size_t(j)]);
        g[std::size_t(t * n + j)] = bounded ? c.decay_lower_bound * sigmoid(A * s) : -A * softplus(s);
      }
  return g;
}

/// From projections to what the recurrence reads (docs/spec.md §13): the short convolutions with SiLU,
/// l2norm of q and k, β, the decays and the activated output gate (SiLU of z for GDN, σ of u for KDA).
inline delta_streams delta_streams_from(const delta_config& c, const delta_weight_contract& k, const weight_map& w,
                                        delta_projections p, index T) {
  const index Hk = c.key_heads, Hv = c.value_heads, Dk = c.key_head_dim, Dv = c.value_head_dim, K = c.conv_kernel;
  const bool kda = c.kind == delta_kind::kda;
  // GDN's one convolution over [q | k | v] is depthwise: each channel block runs on its own rows.
  const weight_view conv = kda ? weight_view{} : gattn::detail::delta_weight(w, k["conv1d.weight"]);
  const auto conv_rows = [&](const char* name, index first, index count) {
    return kda ? gattn::detail::delta_weight(w, k[name]) : conv.row_range(first, count);
  };
  short_conv_silu(p.q, T, Hk * Dk, conv_rows("q_conv1d.weight", 0, Hk * Dk), K);
  short_conv_silu(p.k, T, Hk * Dk, conv_rows("k_conv1d.weight", Hk * Dk, Hk * Dk), K);
  short_conv_silu(p.v, T, Hv * Dv, conv_rows("v_conv1d.weight", 2 * Hk * Dk, Hv * Dv), K);
  l2norm(p.q, T * Hk, Dk);
  l2norm(p.k, T * Hk, Dk);
  delta_streams s;
  s.decay_width = kda ? Dk : 1;
  s.g = log_decays(c, gattn::detail::delta_weight(w, k["A_log"]).widened(),
                   gattn::detail::delta_weight(w, k["dt_bias"]).widened(), p.decay_in, T, s.decay_width);
  for (double& b : p.b) b = sigmoid(b);
  for (double& u : p.gate) u = kda ? sigmoid(u) : silu(u);
  s.q = std::move(p.q);
  s.k = std::move(p.k);
  s.v = std::move(p.v);
  s.beta = std::move(p.b);
  s.gate = std::move(p.gate);
  return s;
}

/// The recurrence of value head h (key head h / (H_v / H_k)) from S = 0, one token at a time:
///   S ← Diag(exp g_t) S;   S ← S + β_t k_t (v_t − Sᵀ k_t)ᵀ;   o_t = Sᵀ q_t / sqrt(D_k)  (read after the update).
/// Writes o_t into o [T, H_v·D_v] and leaves S [D_k, D_v] after the last token.
inline void delta_recurrence(const delta_config& c, const delta_streams& s, index T, index h, double* o, double* S) {
  const index Hk = c.key_heads, Hv = c.value_heads, Dk = c.key_head_dim, Dv = c.value_head_dim;
  const index kh = h / c.group_size(), W = s.decay_width;
  const double scale = c.scale();
  std::vector<double> pred(static_cast<std::size_t>(Dv));
  for (index t = 0; t < T; ++t) {
    const double* q = &s.q[std::size_t((t * Hk + kh) * Dk)];
    const double* k = &s.k[std::size_t((t * Hk + kh) * Dk)];
    const double* v = &s.v[std::size_t((t * Hv + h) * Dv)];
    const double* g = &s.g[std::size_t((t * Hv + h) * W)];
    const double beta = s.beta[std::size_t(t * Hv + h)];
    for (index i = 0; i < Dk; ++i) {
      const double alpha = std::exp(g[W == 1 ? 0 : i]);
      for (index j = 0; j < Dv; ++j) S[i * Dv + j] *= alpha;
    }
    for (index j = 0; j < Dv; ++j) {
      pred[std::size_t(j)] = 0;
      for (index i = 0; i < Dk; ++i) pred[std::size_t(j)] += S[i * Dv + j] * k[i];
    }
    for (index i = 0; i < Dk; ++i)
      for (index j = 0; j < Dv; ++j) S[i * Dv + j] += beta * k[i] * (v[j] - pred[std::size_t(j)]);
    for (index j = 0; j < Dv; ++j) {
      double acc = 0;
      for (index i = 0; i < Dk; ++i) acc += S[i * Dv + j] * (q[i] * scale);
      o[(t * Hv + h) * Dv + j] = acc;
    }
  }
}

/// The output gate per value head over D_v: RMSNorm(o_h) · w · gate_h (w plain, eps rms_norm_eps).
inline dmatrix delta_output_gate(const delta_config& c, const std::vector<float>& norm, const dmatrix& o,
                                 const dmatrix& gate, index T) {
  const index Hv = c.value_heads, Dv = c.value_head_dim;
  dmatrix gated = o;
  for (index r = 0; r < T * Hv; ++r) rms_norm(&gated[std::size_t(r * Dv)], norm.data(), Dv, c.rms_norm_eps, false);
  for (std::size_t i = 0; i < gated.size(); ++i) gated[i] *= gate[i];
  return gated;
}

/// Runs the layer on x [T, d] (row t at x + t·x_stride) from a zero recurrent and conv state.
/// Throws config_error for a refused config (or a non-finite A_log / dt_bias), weight_error for a
/// missing or misshapen weight, shape_error for a bad x.
inline delta_result delta_layer_forward(const delta_config& c, const weight_map& w, const float* x, index tokens,
                                        index x_stride) {
  validate(c);
  gattn::detail::check_call_rows("reference::delta_layer_forward", tokens, 0, values_per_token(c));
  gattn::detail::require<shape_error>(tokens == 0 || (x != nullptr && x_stride >= c.hidden),
                                      "reference::delta_layer_forward: x is null or x_stride=", x_stride,
                                      " is below hidden_size=", c.hidden);
  const delta_weight_contract k = gattn::detail::check_delta_weights(c, w);
  const index T = tokens, d = c.hidden, Hv = c.value_heads, Dk = c.key_head_dim, Dv = c.value_head_dim;
  const bool kda = c.kind == delta_kind::kda;
  dmatrix xd(std::size_t(T * d));
  for (index t = 0; t < T; ++t)
    for (index i = 0; i < d; ++i) xd[std::size_t(t * d + i)] = double(x[t * x_stride + i]);

  delta_projections p = kda                                ? kda_projections(c, k.ranks, w, xd, T)
                        : k.layout == gdn_layout::split ? gdn_split_projections(c, w, xd, T)
                                                        : gdn_projections(c, w, xd, T);
  const delta_streams s = delta_streams_from(c, k, w, std::move(p), T);
  delta_result r;
  r.tokens = T;
  r.o.assign(std::size_t(T * Hv * Dv), 0.0);
  r.state.assign(std::size_t(Hv * Dk * Dv), 0.0);
  for (index h = 0; h < Hv; ++h) delta_recurrence(c, s, T, h, r.o.data(), &r.state[std::size_t(h * Dk * Dv)]);
  const std::vector<float> norm = gattn::detail::delta_weight(w, k[kda ? "o_norm.weight" : "norm.weight"]).widened();
  r.gated = delta_output_gate(c, norm, r.o, s.gate, T);
  r.y = linear(r.gated, T, Hv * Dv, w, kda ? "o_proj" : "out_proj", d);
  return r;
}

}  GATTN_NAMESPACE_END  // namespace gattn::reference
