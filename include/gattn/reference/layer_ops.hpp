// Double-precision building blocks of the reference layers: linear maps, RMS norm, RoPE, gates.
// Plain loops that read like docs/spec.md; they share only config and weight types with the fast path.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "gattn/core/config.hpp"
#include "gattn/core/weights.hpp"

GATTN_NAMESPACE_BEGIN namespace reference {

using dmatrix = std::vector<double>;  // row-major, shape carried by the caller

/// y[T, out] = x[T, in] · Wᵀ (+ b), with W = weights[name + ".weight"] of shape [out, in].
inline dmatrix linear(const dmatrix& x, index rows, index in, const weight_map& w, const std::string& name,
                      index out) {
  const std::vector<float> W = w.widened(name + ".weight", {out, in});
  const std::vector<float> b = w.contains(name + ".bias") ? w.widened(name + ".bias", {out}) : std::vector<float>{};
  dmatrix y(std::size_t(rows * out), 0.0);
  for (index t = 0; t < rows; ++t)
    for (index o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : double(b[std::size_t(o)]);
      for (index i = 0; i < in; ++i) acc += x[std::size_t(t * in + i)] * double(W[std::size_t(o * in + i)]);
      y[std::size_t(t * out + o)] = acc;
    }
  return y;
}

/// z ← z / sqrt(mean(z²) + ε) · w   (or · (1 + w) when zero-centred), over n values (the
/// arguments in the order of the fast path's rms_norm).
inline void rms_norm(double* z, const float* w, index n, double eps, bool zero_centered) {
  double ss = 0;
  for (index c = 0; c < n; ++c) ss += z[c] * z[c];
  const double inv = 1.0 / std::sqrt(ss / double(n) + eps);
  for (index c = 0; c < n; ++c) z[c] = z[c] * inv * (zero_centered ? 1.0 + double(w[c]) : double(w[c]));
}

inline double activate(double u, activation a) {
  const double s = 1.0 / (1.0 + std::exp(-u));
  switch (a) {
    case activation::sigmoid: return s;
    case activation::silu: return u * s;
    case activation::ns_sigmoid: return 0.5 + 0.5 * s;
    case activation::identity: return u;
  }
  return u;
}

inline double combine_gate(double z, double g, combine c) { return c == combine::mul ? z * g : z + g; }

/// m(s, a) of docs/spec.md §2.4: 1 for s <= 1, else 0.1·a·ln s + 1.
inline double yarn_m(double s, double a) { return s <= 1.0 ? 1.0 : 0.1 * a * std::log(s) + 1.0; }

/// Frequency of rotary pair i (docs/spec.md §2.4), written out from the spec's formulas on their own (this
/// oracle shares no RoPE code with the fast path): θ^(−2i/R), blended by the YaRN ramp when asked.
inline double rope_inv_freq(const rope_config& c, index i) {
  const double R = double(c.rotary_dim), base = std::pow(c.theta, 2.0 * double(i) / R);
  if (!c.scaling.yarn) return 1.0 / base;
  const rope_scaling_config& y = c.scaling;
  const double pi = std::acos(-1.0);
  auto corr = [&](double r) { return R * std::log(y.original_max_position_embeddings / (2.0 * pi * r)) / (2.0 * std::log(c.theta)); };
  double lo = corr(y.beta_fast), hi = corr(y.beta_slow);
  if (y.truncate) {
    lo = std::floor(lo);
    hi = std::ceil(hi);
  }
  lo = std::max(lo, 0.0);
  hi = std::min(hi, R - 1.0);
  if (lo == hi) hi += 0.001;
  const double ramp = std::clamp((double(i) - lo) / (hi - lo), 0.0, 1.0), e = 1.0 - ramp;
  return (1.0 / (y.factor * base)) * (1.0 - e) + (1.0 / base) * e;
}

/// The factor cos and sin are multiplied by (docs/spec.md §2.4): 1 without YaRN.
inline double rope_attention_factor(const rope_config& c) {
  const rope_scaling_config& y = c.scaling;
  if (!y.yarn) return 1.0;
  if (y.attention_factor > 0) return y.attention_factor;
  if (y.mscale > 0 && y.mscale_all_dim > 0) return yarn_m(y.factor, y.mscale) / yarn_m(y.factor, y.mscale_all_dim);
  return yarn_m(y.factor, 1.0);
}

/// Rotates the first R channels of head vector x at position pos (docs/spec.md §2.4), in double.
inline void rope(double* x, index pos, const rope_config& c) {
  if (c.style == rope_style::none || c.rotary_dim == 0) return;
  const double factor = rope_attention_factor(c);
  const index h = c.rotary_dim / 2;
  for (index i = 0; i < h; ++i) {
    const double angle = double(pos) * rope_inv_freq(c, i);
    const double cs = std::cos(angle) * factor, sn = std::sin(angle) * factor;
    const index ia = c.style == rope_style::neox ? i : 2 * i;
    const index ib = c.style == rope_style::neox ? i + h : 2 * i + 1;
    const double a = x[ia], b = x[ib];
    x[ia] = a * cs - b * sn;
    x[ib] = b * cs + a * sn;
  }
}

/// Activated gate values [T, heads, per] from scores u [T, heads·per] (docs/spec.md §4): head-shared
/// scores are averaged over the heads before the activation.
inline dmatrix activate_gate(dmatrix u, index T, index heads, index per, const gate_config& g) {
  if (g.shared) {
    for (index t = 0; t < T; ++t)
      for (index c = 0; c < per; ++c) {
        double mean = 0;
        for (index h = 0; h < heads; ++h) mean += u[std::size_t((t * heads + h) * per + c)];
        mean /= double(heads);
        for (index h = 0; h < heads; ++h) u[std::size_t((t * heads + h) * per + c)] = mean;
      }
  }
  for (double& v : u) v = activate(v, g.activation);
  return u;
}

/// target[T, heads, width] ← combine(target, gate) with gate [T, heads, per], per = width or 1.
inline void apply_gate(double* target, const dmatrix& gate, index T, index heads, index width, index per,
                       combine c) {
  for (index t = 0; t < T; ++t)
    for (index h = 0; h < heads; ++h)
      for (index k = 0; k < width; ++k) {
        double& z = target[(t * heads + h) * width + k];
        z = combine_gate(z, gate[std::size_t((t * heads + h) * per + (per == 1 ? 0 : k))], c);
      }
}

}  GATTN_NAMESPACE_END  // namespace gattn::reference
