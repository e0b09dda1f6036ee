// The bf16 operands of the fast GEMM, packed once for every engine (packed_gemm_fast.hpp,
// tile_engine.hpp): x as pairs of k per row lane, W rows rounded to bf16 into the slot.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "gattn/core/config.hpp"
#include "gattn/core/types.hpp"
#include "gattn/linalg/packed_gemm.hpp"
#include "gattn/linalg/weight_rows.hpp"
#include "gattn/simd/convert.hpp"

GATTN_NAMESPACE_BEGIN namespace detail {

/// bf16 values between the rows of W in the slot: an odd number of cache lines.
inline constexpr index pgemm_w16_stride = pgemm_kc + 32;
static_assert(pgemm_kc % 2 == 0, "k-blocks hold whole pairs");
static_assert(pgemm_tile_cols * pgemm_w16_stride <= 2 * pgemm_tile_cols * pgemm_w_stride, "the bf16 W block fits the slot");

/// Packs rows (<= pgemm_chunk) of x into xp as bf16 pairs: k-block from k0 at xp + k0 · rows_padded,
/// its panel p at + p · MR · 2·kp (kp = its pairs), value (pair q, row r, half h) at + (q · MR + r)
/// · 2 + h; padding rows and the odd block's last half are 0. Fits in pgemm_x_floats floats.
/// (pgemm_fast_pack_x_mr: the same for panels of MR rows, as the tile engines use.)
template <index MR>
void pgemm_fast_pack_x_mr(const float* x, index x_stride, index rows, index in, std::uint16_t* xp) noexcept {
  const index rows_pad = (rows + MR - 1) / MR * MR;
  for (index k0 = 0; k0 < in; k0 += pgemm_kc) {
    const index kb = std::min(pgemm_kc, in - k0), kp = (kb + 1) / 2;
    for (index p = 0; p < rows_pad; p += MR) {
      std::uint16_t* panel = xp + k0 * rows_pad + p * 2 * kp;
      for (index r = 0; r < MR; ++r) {
        const float* src = p + r < rows ? x + (p + r) * x_stride + k0 : nullptr;
        for (index q = 0; q < kp; ++q) {
          std::uint32_t pair = 0;  // the padding rows and half: +0
          if (src) pair = round_to_bf16(src[2 * q]) | (2 * q + 1 < kb ? std::uint32_t(round_to_bf16(src[2 * q + 1])) << 16 : 0u);
          std::memcpy(panel + (q * MR + r) * 2, &pair, sizeof pair);
        }
      }
    }
  }
}
template <class Arch>
void pgemm_fast_pack_x(const float* x, index x_stride, index rows, index in, std::uint16_t* xp) noexcept {
  pgemm_fast_pack_x_mr<pgemm_mr<Arch>>(x, x_stride, rows, in, xp);
}

/// The values [k0, k0 + kb) of the `count` W rows at w (dtype S; f8_e4m3: scales in sc, row 0 at
/// w) as bf16 into out (rows pgemm_w16_stride apart), a zero after an odd kb.
template <storage_type S>
void pgemm_fast_widen(const unsigned char* w, index stride, index count, index k0, index kb, std::uint16_t* out,
                      const block_scales* sc) noexcept {
  constexpr index E = element_bytes<S>;
  for (index n = 0; n < count; ++n) {
    const unsigned char* row = w + n * stride + k0 * E;
    std::uint16_t* o = out + n * pgemm_w16_stride;
    if constexpr (S == storage_type::bf16) std::memcpy(o, row, std::size_t(kb) * 2);
    else if constexpr (S == storage_type::f8_e4m3)
      for (index k = 0; k < kb; ++k) o[k] = round_to_bf16(e4m3_to_float(row[k]) * sc->of(n, k0 + k));
    else
      for (index k = 0; k < kb; ++k) o[k] = round_to_bf16(weight_as_f32<S>(row + k * E));
    if (kb % 2) o[kb] = 0;
  }
}

/// One microkernel call of the fast engine: kp pairs of k for NB bf16 W rows and one packed panel.
struct pgemm_fast_args {
  const std::uint16_t* w;  // W row 0 of the block (rows pgemm_w16_stride apart)
  const std::uint16_t* x;  // the packed panel ([kp][MR][2])
  index kp;
  float* c;                // accumulator (j, v) at c + j · pgemm_c_stride + v · L
  bool first;
};

}  GATTN_NAMESPACE_END  // namespace gattn::detail
