// Test support for block-FP8 weights (docs/spec.md §15): fp32 matrices quantized as the official
// FP8 releases are (per block s = amax / 448, rounded to the scale dtype; codes e4m3(w / s)) and
// stored in a safetensors buffer beside their `_scale_inv` scales, other tensors as F32.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gattn/core/weights.hpp"
#include "gattn/io/load_weights.hpp"
#include "gattn/io/safetensors.hpp"
#include "gattn/simd/convert.hpp"

namespace gattn::test {

/// The E4M3 codes and the scales of one quantized matrix.
struct fp8_tensor {
  std::vector<std::uint8_t> codes;
  std::vector<float> scales_f32;
  std::vector<std::uint16_t> scales_bf16;
  std::vector<std::int64_t> grid;
};

inline fp8_tensor quantize_fp8(const weight_view& v, index b0, index b1, bool bf16_scales) {
  const index R = v.rows(), C = v.cols(), g0 = (R + b0 - 1) / b0, g1 = (C + b1 - 1) / b1;
  fp8_tensor q;
  q.grid = {g0, g1};
  q.codes.resize(std::size_t(R * C));
  for (index i = 0; i < g0; ++i)
    for (index j = 0; j < g1; ++j) {
      const index r1 = std::min(R, (i + 1) * b0), c1 = std::min(C, (j + 1) * b1);
      float amax = 0.0f;
      for (index r = i * b0; r < r1; ++r)
        for (index c = j * b1; c < c1; ++c) amax = std::max(amax, std::fabs(v.at(r, c)));
      float s = std::max(amax / 448.0f, 1e-30f);
      if (bf16_scales) {
        q.scales_bf16.push_back(round_to_bf16(s));
        s = bf16_to_float(q.scales_bf16.back());
      } else {
        q.scales_f32.push_back(s);
      }
      for (index r = i * b0; r < r1; ++r)
        for (index c = j * b1; c < c1; ++c) q.codes[std::size_t(r * C + c)] = round_to_e4m3(v.at(r, c) / s);
    }
  return q;
}

/// A safetensors buffer of `fp32`'s tensors: the matrices in block FP8 (blocks of [b0, b1], F32
/// or BF16 scales), the others F32.
inline std::vector<std::uint8_t> fp8_checkpoint(const weight_map& fp32, index b0, index b1, bool bf16_scales) {
  std::vector<fp8_tensor> keep;
  std::vector<std::vector<float>> keep_f32;
  keep.reserve(fp32.all().size());
  keep_f32.reserve(fp32.all().size());
  std::vector<io::tensor_to_write> tensors;
  for (const auto& [name, v] : fp32.all()) {
    const std::vector<std::int64_t> shape(v.shape().begin(), v.shape().end());
    if (v.shape().size() != 2) {
      keep_f32.push_back(v.widened());
      tensors.push_back({name, io::dtype::f32, shape, keep_f32.back().data()});
      continue;
    }
    keep.push_back(quantize_fp8(v, b0, b1, bf16_scales));
    const fp8_tensor& q = keep.back();
    tensors.push_back({name, io::dtype::f8_e4m3, shape, q.codes.data()});
    tensors.push_back({name + "_scale_inv", bf16_scales ? io::dtype::bf16 : io::dtype::f32, q.grid,
                       bf16_scales ? static_cast<const void*>(q.scales_bf16.data()) : q.scales_f32.data()});
  }
  return io::serialize_safetensors(tensors);
}

/// `fp32` as the weight map a block-FP8 checkpoint of it gives: FP8 views (which keep their buffer).
inline weight_map fp8_weights(const weight_map& fp32, index b0, index b1, bool bf16_scales) {
  io::load_options options;
  options.fp8 = io::fp8_format{b0, b1};
  return io::load_weights(io::safetensors_file::parse(fp8_checkpoint(fp32, b0, b1, bf16_scales)), "", options);
}

/// The dequantized fp32 copy of a weight map (what FP8 views must compute like).
inline weight_map widened_weights(const weight_map& w) {
  weight_map out;
  for (const auto& [name, v] : w.all()) out.set(name, v.shape(), v.widened());
  return out;
}

}  // namespace gattn::test
