// Compile-time tile configuration of the fused SDPA kernel, per Arch (FlashAttention's
// kernel_traits idea). Register blocks are sized to the vector register file.
#pragma once

#include <cstddef>

#include "gattn/core/types.hpp"
#include "gattn/simd/simd.hpp"

GATTN_NAMESPACE_BEGIN

/// Tile sizes for Arch. Accumulator blocks: qk_mr x qk_nv and pv_mr x pv_nv batches live in
/// registers, plus one row of operands: 24 + 4 + 1 of 32 registers for 16-lane archs (AVX-512),
/// 12 + 3 + 1 of 16 for 8- and 4-lane archs (AVX2, SSE; NEON64 could take the larger set).
template <class Arch>
struct kernel_traits {
  static constexpr index width = index(simd::width<Arch>);
  static constexpr bool big_regfile = width >= 16;
  /// Keys per tile (Bc): one S^T tile is block_keys x rows_pad floats, kept in L1.
  static constexpr index block_keys = 64;
  /// Target query rows per work unit (G heads x Br queries, stacked).
  static constexpr index target_rows = width >= 16 ? 64 : (width == 1 ? 16 : 32);
  /// S^T = K·Qᵀ microkernel: qk_mr keys x qk_nv vectors of query rows.
  static constexpr int qk_mr = big_regfile ? 6 : 4;
  static constexpr int qk_nv = big_regfile ? 4 : (width == 1 ? 4 : 3);
  /// O += P·V microkernel: pv_mr query rows x pv_nv vectors of channels.
  static constexpr int pv_mr = big_regfile ? 6 : 4;
  static constexpr int pv_nv = big_regfile ? 4 : (width == 1 ? 4 : 3);
  /// Minimum keys per split in split-KV (flash-decoding) mode.
  static constexpr index min_split_keys = 256;
};

/// How far ahead (bytes of cache rows) the decode path prefetches its K and V streams: about one
/// key block of D1 (32 tokens x 4 KiB), well inside L2. 32-128 KiB measured alike on D1 here.
inline constexpr index decode_prefetch_bytes = index(128) << 10;

GATTN_NAMESPACE_END  // namespace gattn
