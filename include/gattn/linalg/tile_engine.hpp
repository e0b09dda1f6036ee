// The tile engine of the fast GEMM: packed_gemm_fast.hpp's blocking run on 16 × 16 fp32 tiles with
// bf16-pair dot products, on AMX (linalg/tile_amx.hpp) or on a plain C++ emulation of it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gattn/core/config.hpp"
#include "gattn/core/types.hpp"
#include "gattn/linalg/packed_gemm.hpp"
#include "gattn/linalg/packed_gemm_bf16.hpp"
#include "gattn/linalg/tile_amx.hpp"
#include "gattn/simd/convert.hpp"

GATTN_NAMESPACE_BEGIN namespace detail {

// The same chunks, tiles and k-blocks as packed_gemm_fast.hpp, the same x packing (bf16 pairs,
// panels of tile_mr = 32 rows, which is AVX-512's pgemm_mr) and the same bf16 W rows in the slot,
// with the roles of C = A · B chosen so that nothing is repacked:
//   - A = W: 16 slot rows × 16 pairs (a row of W is a run of k, what A's rows hold);
//   - B = x: 16 pairs × 16 rows of x, which is a panel's [pair][row][2] layout (VNNI) read with
//     a row stride of tile_mr pairs; a panel is two B tiles side by side;
//   - C = the transposed y tile of the slot (W rows × x rows), 16 × 16 at a time.
// A call covers 32 W rows × one panel: C tiles 0-3 (2 × 2), A tiles 4-5, B tiles 6-7. A k-block's
// pairs go in steps of 16 with the same configuration; a remainder of r < 16 pairs (odd `in`, or
// `in` not a multiple of 32) runs after them with A and B configured to r pairs, so no padding
// ever enters a product. W rows past `count` up to a multiple of 16 are zero in the slot.
// Summation order, fixed whatever the split: per k-block, per step of 16 pairs (or the last r),
// one TDPBF16PS. Its arithmetic is tile_emulator::dp's comment.

/// Rows of x per panel (two B tiles) and W rows per call (two A tiles).
inline constexpr index tile_mr = 32;
inline constexpr index tile_nb = 32;

/// One tile-kernel call: `steps` steps of `pairs` pairs for tile_nb W rows and one x panel.
struct tile_args {
  const std::uint16_t* w;  // W row 0 of the block at the call's first pair
  const std::uint16_t* x;  // the panel at the call's first pair ([pair][tile_mr][2])
  index steps, pairs;
  float* c;                // C tile (a, b) at c + 16 a · pgemm_c_stride + 16 b
  bool first;              // start from 0 instead of c
};

/// Plain C++ with TDPBF16PS's documented semantics, tile registers as arrays: the engine's tests
/// run the AMX algorithm with it on every machine.
struct tile_emulator {
  static constexpr const char* name() { return "emulated tiles"; }
  std::uint32_t reg[8][16][16] = {};  // 8 tiles of 16 rows × 64 bytes
  int rows[8] = {}, colsb[8] = {};

  void configure(int pairs) noexcept {
    for (int t = 0; t < 8; ++t) {
      colsb[t] = t >= 4 && t < 6 ? 4 * pairs : 64;
      rows[t] = t >= 6 ? pairs : 16;
    }
    std::memset(reg, 0, sizeof reg);
  }
  void release() noexcept {}
  template <int T>
  void zero() noexcept { std::memset(reg[T], 0, sizeof reg[T]); }
  /// As TILELOADD: the configured rows and bytes, the rest of the tile zero.
  template <int T>
  void load(const void* p, index stride) noexcept {
    std::memset(reg[T], 0, sizeof reg[T]);
    for (int r = 0; r < rows[T]; ++r) std::memcpy(reg[T][r], static_cast<const unsigned char*>(p) + r * stride, std::size_t(colsb[T]));
  }
  template <int T>
  void store(void* p, index stride) const noexcept {
    for (int r = 0; r < rows[T]; ++r) std::memcpy(static_cast<unsigned char*>(p) + r * stride, reg[T][r], std::size_t(colsb[T]));
  }
  template <int C, int A, int B>
  void dp() noexcept { dpbf16(reg[C], reg[A], reg[B], colsb[A] / 4); }

  /// Denormals to (signed) zero: TDPBF16PS's DAZ on every input and FTZ on every output.
  static float flush(float v) noexcept { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; }
  static float half(std::uint32_t pair, int h) noexcept { return flush(bf16_to_float(std::uint16_t(pair >> (16 * h)))); }

  /// C += A · B over k pairs as the Intel SDM's pseudo-code for TDPBF16PS states it: for each C
  /// element two fp32 partial sums start at 0, the even halves' products accumulate into one and
  /// the odd halves' into the other, pair after pair, each step an FMA rounded to nearest even
  /// (exactly std::fma: a product of two bf16 is exact in fp32); after the last pair the two
  /// partial sums are added and that sum added to C, each a rounded fp32 add. DAZ on every input
  /// (the bf16 values, the partial sums, C), FTZ on every result.
  static void dpbf16(std::uint32_t (&c)[16][16], const std::uint32_t (&a)[16][16], const std::uint32_t (&b)[16][16],
                     int k) noexcept {
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) {
        float even = 0.0f, odd = 0.0f, cv;
        for (int q = 0; q < k; ++q) {
          even = flush(std::fma(half(a[m][q], 0), half(b[q][n], 0), even));
          odd = flush(std::fma(half(a[m][q], 1), half(b[q][n], 1), odd));
        }
        std::memcpy(&cv, &c[m][n], sizeof cv);
        cv = flush(flush(cv) + flush(even + odd));
        std::memcpy(&c[m][n], &cv, sizeof cv);
      }
  }
};

/// One call: C tiles from c (or 0), `steps` × (2 B loads, NA A loads, 2 · NA TDPBF16PS), back to c.
template <class Tiles, int NA>
GATTN_TILE_TARGET void tile_kernel(Tiles& t, const tile_args& a) noexcept {
  constexpr index cs = pgemm_c_stride * 4, ws = pgemm_w16_stride * 2, xs = tile_mr * 4;
  float* c1 = a.c + 16 * pgemm_c_stride;
  if (a.first) {
    t.template zero<0>(), t.template zero<1>();
    if constexpr (NA == 2) t.template zero<2>(), t.template zero<3>();
  } else {
    t.template load<0>(a.c, cs), t.template load<1>(a.c + 16, cs);
    if constexpr (NA == 2) t.template load<2>(c1, cs), t.template load<3>(c1 + 16, cs);
  }
  for (index s = 0; s < a.steps; ++s) {
    const std::uint16_t* xq = a.x + s * a.pairs * tile_mr * 2;
    const std::uint16_t* wq = a.w + s * a.pairs * 2;
    t.template load<6>(xq, xs), t.template load<7>(xq + 32, xs);
    t.template load<4>(wq, ws);
    t.template dp<0, 4, 6>(), t.template dp<1, 4, 7>();
    if constexpr (NA == 2) {
      t.template load<5>(wq + 16 * pgemm_w16_stride, ws);
      t.template dp<2, 5, 6>(), t.template dp<3, 5, 7>();
    }
  }
  t.template store<0>(a.c, cs), t.template store<1>(a.c + 16, cs);
  if constexpr (NA == 2) t.template store<2>(c1, cs), t.template store<3>(c1 + 16, cs);
}

/// The calls of one k-block part: pairs [q0, q0 + steps · pairs) of the k-block's kp, every
/// W block × panel. `configured` holds the pairs the tiles are configured for.
template <class Tiles>
void tile_block_part(Tiles& t, int& configured, const std::uint16_t* wp, const std::uint16_t* xb, index kp, index q0,
                     index steps, index pairs, index count_pad, index rows_pad, float* ct, bool first) noexcept {
  if (steps == 0) return;
  if (configured != int(pairs)) t.configure(int(pairs)), configured = int(pairs);
  for (index j0 = 0; j0 < count_pad; j0 += tile_nb) {
    for (index p = 0; p < rows_pad; p += tile_mr) {
      const tile_args args{wp + j0 * pgemm_w16_stride + 2 * q0, xb + p * 2 * kp + q0 * tile_mr * 2, steps, pairs,
                           ct + j0 * pgemm_c_stride + p, first};
      if (count_pad - j0 >= tile_nb) tile_kernel<Tiles, 2>(t, args);
      else tile_kernel<Tiles, 1>(t, args);
    }
  }
}

/// pgemm_fast_tile on tiles: x packed by pgemm_fast_pack_x_mr<tile_mr> at xp, the rest as there.
template <class Tiles, storage_type S>
void tile_gemm_tile(Tiles& t, const unsigned char* w, index stride, index count, const std::uint16_t* xp, index rows,
                    index in, float* y, index y_stride, float* slot, const block_scales* sc = nullptr) noexcept {
  const index rows_pad = (rows + tile_mr - 1) / tile_mr * tile_mr, count_pad = (count + 15) / 16 * 16;
  auto* wp = reinterpret_cast<std::uint16_t*>(slot);
  float* ct = slot + pgemm_tile_cols * pgemm_w_stride;
  if (in == 0)
    for (index n = 0; n < count; ++n) std::fill(ct + n * pgemm_c_stride, ct + n * pgemm_c_stride + rows, 0.0f);
  int configured = -1;
  for (index k0 = 0; k0 < in; k0 += pgemm_kc) {
    const index kb = std::min(pgemm_kc, in - k0), kp = (kb + 1) / 2, full = kp / 16;
    pgemm_fast_widen<S>(w, stride, count, k0, kb, wp, sc);
    for (index n = count; n < count_pad; ++n) std::fill(wp + n * pgemm_w16_stride, wp + n * pgemm_w16_stride + 2 * kp, 0);
    const std::uint16_t* xb = xp + k0 * rows_pad;
    tile_block_part(t, configured, wp, xb, kp, 0, full, 16, count_pad, rows_pad, ct, k0 == 0);
    tile_block_part(t, configured, wp, xb, kp, 16 * full, kp > 16 * full ? 1 : 0, kp - 16 * full, count_pad, rows_pad,
                    ct, k0 == 0 && full == 0);
  }
  if (configured >= 0) t.release();
  pgemm_store_y(ct, count, rows, y, y_stride);
}

/// tile_gemm_tile for a runtime storage type.
template <class Tiles>
void tile_gemm_tile_typed(Tiles& t, storage_type type, const void* w, index stride, index count,
                          const std::uint16_t* xp, index rows, index in, float* y, index y_stride, float* slot,
                          const block_scales* sc = nullptr) noexcept {
  const auto* p = static_cast<const unsigned char*>(w);
  switch (type) {
    case storage_type::f32: tile_gemm_tile<Tiles, storage_type::f32>(t, p, stride, count, xp, rows, in, y, y_stride, slot); break;
    case storage_type::bf16: tile_gemm_tile<Tiles, storage_type::bf16>(t, p, stride, count, xp, rows, in, y, y_stride, slot); break;
    case storage_type::f16: tile_gemm_tile<Tiles, storage_type::f16>(t, p, stride, count, xp, rows, in, y, y_stride, slot); break;
    case storage_type::f8_e4m3:
      tile_gemm_tile<Tiles, storage_type::f8_e4m3>(t, p, stride, count, xp, rows, in, y, y_stride, slot, sc);
      break;
  }
}

/// packed_gemm_fast (same arguments) on the tile engine Tiles, on the calling thread with buffers
/// of the call's own (the tests run it with tile_emulator everywhere, amx_tiles where it runs).
template <class Tiles>
void tile_gemm(storage_type type, const void* w, index stride, index count, const float* x, index x_stride, index rows,
               index in, float* y, index y_stride, const block_scales* sc = nullptr) {
  std::vector<float> xbuf, sbuf;
  const index rows_pad = (std::min(rows, pgemm_chunk) + tile_mr - 1) / tile_mr * tile_mr;
  auto* xp = reinterpret_cast<std::uint16_t*>(pgemm_buffer(xbuf, rows_pad * in));
  float* slot = pgemm_buffer(sbuf, pgemm_slot_floats);
  const auto* wb = static_cast<const unsigned char*>(w);
  Tiles t;
  for (index m0 = 0; m0 < rows; m0 += pgemm_chunk) {
    const index m = std::min(pgemm_chunk, rows - m0);
    pgemm_fast_pack_x_mr<tile_mr>(x + m0 * x_stride, x_stride, m, in, xp);
    for (index n0 = 0; n0 < count; n0 += pgemm_tile_cols) {
      const block_scales tile_scales = sc ? sc->from_row(n0) : block_scales{};
      tile_gemm_tile_typed(t, type, wb + n0 * stride, stride, std::min(pgemm_tile_cols, count - n0), xp, m, in,
                           y + m0 * y_stride + n0, y_stride, slot, sc ? &tile_scales : nullptr);
    }
  }
}

}  GATTN_NAMESPACE_END  // namespace gattn::detail
