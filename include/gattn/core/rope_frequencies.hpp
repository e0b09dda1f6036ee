// RoPE/YaRN frequencies (docs/spec.md §2.4): the inverse frequency of every rotary pair and the factor cos
// and sin are scaled by. In core/ because the config loaders (YaRN softmax scale), validation
// (derived values must be finite) and the layers' rotation tables all need them.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "gattn/core/config.hpp"

GATTN_NAMESPACE_BEGIN

/// YaRN magnitude correction m(s, a): 1 for s <= 1, else 0.1·a·ln s + 1.
inline double yarn_mscale(double scale, double a = 1.0) {
  return scale <= 1.0 ? 1.0 : 0.1 * a * std::log(scale) + 1.0;
}

/// Inverse frequencies (R/2 of them) and the factor cos and sin are multiplied by.
struct rope_frequencies {
  std::vector<double> inv_freq;
  double attention_factor = 1.0;
};

/// The factor YaRN multiplies cos and sin by (docs/spec.md §2.4): attention_factor when given, else
/// m(s, mscale) / m(s, mscale_all_dim) when both are given, else m(s, 1).
inline double yarn_attention_factor(const rope_scaling_config& s) {
  if (s.attention_factor > 0) return s.attention_factor;
  if (s.mscale > 0 && s.mscale_all_dim > 0) return yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim);
  return yarn_mscale(s.factor);
}

/// inv_freq_i = θ^(−2i/R) (the denominator is R, not D), blended with the YaRN ramp when asked.
/// Refuses (config_error) a rotary width past limits::max_size before sizing the table, and any
/// derived value that is not finite: validate() runs this, so a config that would rotate by NaN
/// is refused on every path.
inline rope_frequencies make_rope_frequencies(const rope_config& c) {
  const index r = c.rotary_dim;
  detail::require<config_error>(r >= 0 && r % 2 == 0 && r <= limits::max_size, "rope: rotary width ", r,
                                " must be even and in [0, ", limits::max_size, "]");
  rope_frequencies f;
  f.inv_freq.resize(std::size_t(r / 2));
  const auto& s = c.scaling;
  double lo = 0, hi = 0;
  if (s.yarn) {
    // corr(rot): the rotary index whose wavelength spans `rot` turns over the original context.
    auto corr = [&](double rot) {
      return double(r) * std::log(s.original_max_position_embeddings / (rot * 2.0 * M_PI)) / (2.0 * std::log(c.theta));
    };
    lo = corr(s.beta_fast);
    hi = corr(s.beta_slow);
    if (s.truncate) {
      lo = std::floor(lo);
      hi = std::ceil(hi);
    }
    lo = std::max(lo, 0.0);
    hi = std::min(hi, double(r - 1));
    if (lo == hi) hi += 0.001;  // avoids 0/0 in the ramp (as Hugging Face does)
    f.attention_factor = yarn_attention_factor(s);
    // cos and sin are rounded to fp32 after the multiplication
    detail::require<config_error>(detail::is_positive_float(f.attention_factor), "rope_scaling: the YaRN attention factor ",
                                  f.attention_factor, " (attention_factor=", s.attention_factor, " mscale=", s.mscale,
                                  " mscale_all_dim=", s.mscale_all_dim, " factor=", s.factor,
                                  ") must be a finite fp32 value > 0");
  }
  for (index i = 0; i < r / 2; ++i) {
    const double base = std::pow(c.theta, double(2 * i) / double(r));
    double inv = 1.0 / base;
    if (s.yarn) {
      const double ramp = std::clamp((double(i) - lo) / (hi - lo), 0.0, 1.0);
      const double extrapolation = 1.0 - ramp;
      inv = (1.0 / (s.factor * base)) * (1.0 - extrapolation) + (1.0 / base) * extrapolation;
    }
    // Positions stay below limits::max_values (no call or cache holds more tokens), so this
    // keeps every angle position * inv_freq finite, and cos/sin free of NaN.
    detail::require<config_error>(std::isfinite(inv * double(limits::max_values)), "rope: inv_freq[", i, "]=", inv,
                                  " from rope_theta=", c.theta, " with rotary width ", r,
                                  s.yarn ? " and YaRN (factor, original_max_position_embeddings, beta_fast, beta_slow)" : "",
                                  " must be finite at every position up to 2^40");
    f.inv_freq[std::size_t(i)] = inv;
  }
  return f;
}

GATTN_NAMESPACE_END  // namespace gattn
