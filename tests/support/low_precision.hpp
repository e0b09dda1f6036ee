// Test helper for bf16/f16 K/V: the stored bits of a float array, and the float copy made to hold
// exactly the stored values (what the oracle must be fed, docs/spec.md §10 exact numerics).
#pragma once

#include <cstdint>
#include <vector>

#include "gattn/core/config.hpp"
#include "gattn/simd/convert.hpp"

namespace gattn::test {

/// Rounds v to the storage type in place (so the float copy holds the stored values) and returns
/// the stored bits.
inline std::vector<std::uint16_t> store_as(storage_type s, std::vector<float>& v) {
  std::vector<std::uint16_t> bits(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    bits[i] = s == storage_type::bf16 ? round_to_bf16(v[i]) : round_to_f16(v[i]);
    v[i] = s == storage_type::bf16 ? bf16_to_float(bits[i]) : f16_to_float(bits[i]);
  }
  return bits;
}

}  // namespace gattn::test
