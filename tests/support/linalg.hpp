// Test support for linalg/: weights stored in any dtype (block-scaled E4M3 included) with padded
// rows, random vectors, and dot products in double with the scale of their fp32 rounding.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "gattn/core/weights.hpp"
#include "gattn/simd/convert.hpp"

namespace linalg_test {

using gattn::index;
using gattn::storage_type;

/// A [rows, cols] weight stored as `type`, possibly with `pad` unused elements after each row.
/// f8_e4m3 weights have a scale per block of `block` (default 3 × 13: blocks that end inside
/// every vector width and cut rows and columns of every test shape), F32 scales for an even seed
/// and BF16 ones for an odd seed; their values are about N(0, 1) like the other types'.
struct stored_weight {
  storage_type type;
  index rows, cols, pad;
  std::vector<float> f32;
  std::vector<std::uint16_t> bits;
  std::vector<std::uint8_t> codes;
  std::vector<float> scale_f32;
  std::vector<std::uint16_t> scale_bf16;
  gattn::block_scales scales;

  stored_weight(storage_type t, index r, index c, index p, unsigned seed, std::pair<index, index> block = {3, 13})
      : type(t), rows(r), cols(c), pad(p) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const std::size_t n = std::size_t(r * (c + p));
    if (t == storage_type::f32) {
      f32.resize(n);
      for (float& v : f32) v = nd(gen);
    } else if (t == storage_type::f8_e4m3) {
      codes.resize(n);
      for (auto& b : codes) b = gattn::round_to_e4m3(16.0f * nd(gen));
      make_scales(block, seed, gen);
    } else {
      bits.resize(n);
      for (auto& b : bits) b = t == storage_type::bf16 ? gattn::round_to_bf16(nd(gen)) : gattn::round_to_f16(nd(gen));
    }
  }
  gattn::weight_view view() const {
    if (type == storage_type::f8_e4m3) return gattn::weight_view(codes.data(), {rows, cols}, scales, cols + pad);
    const void* p = type == storage_type::f32 ? static_cast<const void*>(f32.data()) : bits.data();
    return gattn::weight_view(type, p, {rows, cols}, cols + pad);
  }

 private:
  void make_scales(std::pair<index, index> block, unsigned seed, std::mt19937& gen) {
    std::uniform_real_distribution<float> ud(0.5f / 16, 2.0f / 16);
    scales.block_rows = block.first;
    scales.block_cols = block.second;
    scales.grid_rows = (rows + block.first - 1) / block.first;
    scales.grid_cols = (cols + block.second - 1) / block.second;
    const std::size_t n = std::size_t(scales.grid_rows * scales.grid_cols);
    scales.type = seed % 2 ? storage_type::bf16 : storage_type::f32;
    if (seed % 2) {
      scale_bf16.resize(n);
      for (auto& b : scale_bf16) b = gattn::round_to_bf16(ud(gen));
      scales.data = scale_bf16.data();
    } else {
      scale_f32.resize(n);
      for (float& v : scale_f32) v = ud(gen);
      scales.data = scale_f32.data();
    }
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

inline constexpr storage_type all_types[] = {storage_type::f32, storage_type::bf16, storage_type::f16,
                                             storage_type::f8_e4m3};

}  // namespace linalg_test
