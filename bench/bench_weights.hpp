// Benchmark weights held as a checkpoint would give them: bf16/f16 views, not fp32 copies.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "gattn/core/weights.hpp"
#include "gattn/simd/convert.hpp"

namespace gattn_bench {

/// `w` with every tensor rounded to `type` and held as views of buffers the returned map keeps alive
/// (what io::load_weights gives for a bf16/f16 checkpoint).
inline gattn::weight_map stored_as(const gattn::weight_map& w, gattn::storage_type type) {
  if (type == gattn::storage_type::f32) return w;
  gattn::weight_map out;
  for (const auto& [name, v] : w.all()) {
    auto bits = std::make_shared<std::vector<std::uint16_t>>();
    for (float x : v.widened()) bits->push_back(type == gattn::storage_type::bf16 ? gattn::round_to_bf16(x) : gattn::round_to_f16(x));
    out.set(name, gattn::weight_view(type, bits->data(), v.shape(), -1, bits));
  }
  return out;
}

}  // namespace gattn_bench
