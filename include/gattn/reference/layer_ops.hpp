// Double-precision building blocks of the reference layers: linear maps, RMS norm, RoPE, gates.
// Plain loops that read like SPEC.md; they share only config and weight types with the fast path.
#pragma once

#include <cmath>
#include <vector>

#include "gattn/attention/rope.hpp"
#include "gattn/core/config.hpp"
#include "gattn/core/weights.hpp"

namespace gattn::reference {

using dmatrix = std::vector<double>;  // row-major, shape carried by the caller

/// y[T, out] = x[T, in] · Wᵀ (+ b), with W = weights[name + ".weight"] of shape [out, in].
inline dmatrix linear(const dmatrix& x, index rows, index in, const weight_map& w, const std::string& name,
                      index out) {
  const tensor& W = w.get(name + ".weight", {out, in});
  const tensor* b = w.find(name + ".bias", {out});
  dmatrix y(std::size_t(rows * out), 0.0);
  for (index t = 0; t < rows; ++t)
    for (index o = 0; o < out; ++o) {
      double acc = b ? double(b->data[std::size_t(o)]) : 0.0;
      for (index i = 0; i < in; ++i) acc += x[std::size_t(t * in + i)] * double(W.data[std::size_t(o * in + i)]);
      y[std::size_t(t * out + o)] = acc;
    }
  return y;
}

/// z ← z / sqrt(mean(z²) + ε) · w   (or · (1 + w) when zero-centred), over n values.
inline void rms_norm(double* z, index n, const float* w, double eps, bool zero_centered) {
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

/// Rotates the first R channels of head vector x at position pos (SPEC §2.4), in double.
inline void rope(double* x, index pos, const rope_config& c) {
  if (c.style == rope_style::none || c.rotary_dim == 0) return;
  const rope_frequencies f = make_rope_frequencies(c);
  const index h = c.rotary_dim / 2;
  for (index i = 0; i < h; ++i) {
    const double angle = double(pos) * f.inv_freq[std::size_t(i)];
    const double cs = std::cos(angle) * f.attention_factor, sn = std::sin(angle) * f.attention_factor;
    const index ia = c.style == rope_style::neox ? i : 2 * i;
    const index ib = c.style == rope_style::neox ? i + h : 2 * i + 1;
    const double a = x[ia], b = x[ib];
    x[ia] = a * cs - b * sn;
    x[ib] = b * cs + a * sn;
  }
}

/// Activated gate values [T, heads, per] from scores u [T, heads·per] (SPEC §4): head-shared
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

}  // namespace gattn::reference
