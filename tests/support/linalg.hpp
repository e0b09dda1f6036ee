// Test support for linalg/: weights stored in any dtype with padded rows, random vectors, and
// dot products in double with the scale of their fp32 rounding.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gattn/core/weights.hpp"
#include "gattn/simd/convert.hpp"

namespace linalg_test {

using gattn::index;
using gattn::storage_type;

/// A [rows, cols] weight stored as `type`, possibly with `pad` unused elements after each row.
struct stored_weight {
  storage_type type;
  index rows, cols, pad;
  std::vector<float> f32;
  std::vector<std::uint16_t> bits;

  stored_weight(storage_type t, index r, index c, index p, unsigned seed) : type(t), rows(r), cols(c), pad(p) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const std::size_t n = std::size_t(r * (c + p));
    if (t == storage_type::f32) {
      f32.resize(n);
      for (float& v : f32) v = nd(gen);
    } else {
      bits.resize(n);
      for (auto& b : bits) b = t == storage_type::bf16 ? gattn::round_to_bf16(nd(gen)) : gattn::round_to_f16(nd(gen));
    }
  }
  gattn::weight_view view() const {
    const void* p = type == storage_type::f32 ? static_cast<const void*>(f32.data()) : bits.data();
    return gattn::weight_view(type, p, {rows, cols}, cols + pad);
  }
};

inline std::vector<float> random_vector(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(gen);
  return v;
}

/// Σ_k w(k)·x[k] over k < n in double, and Σ|w(k)·x[k]| (the scale of fp32 rounding).
struct dot_result {
  double sum = 0, magnitude = 0;
};
template <class W>
dot_result reference_dot(index n, W&& w, const float* x) {
  dot_result d;
  for (index k = 0; k < n; ++k) {
    const double p = double(w(k)) * x[k];
    d.sum += p;
    d.magnitude += std::abs(p);
  }
  return d;
}

inline constexpr storage_type all_types[] = {storage_type::f32, storage_type::bf16, storage_type::f16};

}  // namespace linalg_test
