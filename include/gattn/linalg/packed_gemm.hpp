// The cache-blocked GEMM for many rows of x (prefill): y[m, n] = Σ_k x[m, k] · W[n, k], W rows in
// their stored dtype (f32, bf16, f16, block-scaled E4M3) widened once per block, x packed once per
// chunk of rows, fp32 accumulation in a fixed order.
// Templates on Arch so tests can run every ISA of the binary.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gattn/core/block_scales.hpp"
#include "gattn/core/config.hpp"
#include "gattn/core/types.hpp"
#include "gattn/linalg/weight_rows.hpp"
#include "gattn/simd/simd.hpp"

GATTN_NAMESPACE_BEGIN namespace detail {

// Structure (Goto/BLIS, with the operands' roles chosen so that no weight is ever transposed):
//   - the vector operand is x: panels of pgemm_mr rows (NV vectors of L rows) packed k-major,
//     [k][MR], once per chunk of pgemm_chunk rows, shared by every tile and thread;
//   - the broadcast operand is W: a tile's rows (output columns, at most pgemm_tile_cols) widened
//     to fp32 one k-block of pgemm_kc values at a time into the worker's slot, row by row (a row
//     of W is a run of k, so widening is a plain vector copy); NB of them feed one microkernel;
//   - the microkernel holds NB × NV accumulators, a transposed block of y (an output column per
//     row of accumulators, rows of x in the lanes), and adds one k per step: NV loads of x, NB
//     broadcasts of W, NB · NV FMAs (AVX-512: 14 × 2 = 28 of the 32 registers);
//   - between k-blocks the accumulators live in the slot's transposed tile of y, which is written
//     to y, transposed back, after the last k-block.
// Block sizes, for Zen 5 (L1d 48 KiB, L2 1 MiB per core, L3 32 MiB): KC = 256 keeps the NB rows
// of W of one microkernel call (14 KiB) in L1 while the x panels of the chunk stream past them;
// one k-block of the packed chunk (512 rows × 256 × 4 B = 512 KiB) stays in L2 across the tile's
// W panels; the transposed y tile is touched once per call (NB · MR floats), so L3 serves it.
// Row strides of the slot are odd numbers of cache lines, so the NB rows of a call never share
// an L1 set.
// Summation order: every y[m, n] is one chain of fp32 FMAs over k = 0, 1, ..., in - 1 in order,
// starting from 0, whatever the register block, chunk, tile, k-block or thread: results do not
// depend on how the work is split. (The small GEMM and the GEMV sum in other orders.)

/// Register block: NV vectors of rows of x (MR = NV · L rows) × NB columns of y.
template <class Arch>
inline constexpr int pgemm_nv = simd::width<Arch> == 1 ? 4 : 2;
template <class Arch>
inline constexpr int pgemm_nb = simd::width<Arch> >= 16 ? 14 : (simd::width<Arch> == 1 ? 4 : 6);
template <class Arch>
inline constexpr index pgemm_mr = index(pgemm_nv<Arch>) * index(simd::width<Arch>);
/// Values of k per block.
inline constexpr index pgemm_kc = 256;
/// Rows of x packed at a time (a multiple of every arch's MR).
inline constexpr index pgemm_chunk = 512;
/// Output columns of one tile at most.
inline constexpr index pgemm_tile_cols = 256;
/// Floats between the widened W rows and between the transposed y rows of a slot.
inline constexpr index pgemm_w_stride = pgemm_kc + 16;
inline constexpr index pgemm_c_stride = pgemm_chunk + 16;
/// Floats of one worker's slot: the widened W k-block and the transposed y tile.
inline constexpr index pgemm_slot_floats = pgemm_tile_cols * (pgemm_w_stride + pgemm_c_stride);

/// Rows of a packed chunk of `rows` rows: rounded up to whole panels (zero rows after the last).
template <class Arch>
inline index pgemm_rows_padded(index rows) noexcept {
  return (rows + pgemm_mr<Arch> - 1) / pgemm_mr<Arch> * pgemm_mr<Arch>;
}
/// Floats of x packed for up to pgemm_chunk rows.
template <class Arch>
inline index pgemm_x_floats(index rows, index in) noexcept {
  return pgemm_rows_padded<Arch>(std::min(rows, pgemm_chunk)) * in;
}

/// Packs rows (<= pgemm_chunk) of x ([rows, in], row stride x_stride) into xp: k-block b (from k0 =
/// b · KC, kb values) at xp + k0 · rows_padded, its panel p at + p · MR · kb, value (k, r) at
/// + k · MR + r; the padding rows are 0.
template <class Arch>
void pgemm_pack_x(const float* x, index x_stride, index rows, index in, float* xp) noexcept {
  constexpr index MR = pgemm_mr<Arch>;
  const index rows_pad = pgemm_rows_padded<Arch>(rows);
  for (index k0 = 0; k0 < in; k0 += pgemm_kc) {
    const index kb = std::min(pgemm_kc, in - k0);
    for (index p = 0; p < rows_pad; p += MR) {
      float* panel = xp + k0 * rows_pad + p * kb;
      for (index r = 0; r < MR; ++r) {
        const float* src = p + r < rows ? x + (p + r) * x_stride + k0 : nullptr;
        for (index k = 0; k < kb; ++k) panel[k * MR + r] = src ? src[k] : 0.0f;
      }
    }
  }
}

/// The values [k0, k0 + kb) of the `count` W rows at w (`stride` bytes apart, dtype S; f8_e4m3:
/// the block scales in sc, row 0 at w) widened to fp32 into out, rows pgemm_w_stride floats apart.
template <class Arch, storage_type S>
void pgemm_widen(const unsigned char* w, index stride, index count, index k0, index kb, float* out,
                 const block_scales* sc) noexcept {
  constexpr index L = index(simd::width<Arch>), E = element_bytes<S>;
  if constexpr (S == storage_type::f8_e4m3) {
    for (index n = 0; n < count; ++n) widen_e4m3_row<Arch>(w + n * stride, *sc, n, k0, kb, out + n * pgemm_w_stride);
    return;
  }
  for (index n = 0; n < count; ++n) {
    const unsigned char* row = w + n * stride + k0 * E;
    float* o = out + n * pgemm_w_stride;
    index k = 0;
    for (; k + L <= kb; k += L) simd::store(o + k, load_weights_as_f32<Arch, S>(row + k * E));
    for (; k < kb; ++k) o[k] = weight_as_f32<S>(row + k * E);
  }
}

/// One microkernel call: kb values of k for NB widened W rows and one packed x panel.
struct pgemm_args {
  const float* w;  // W row 0 of the block at the block's k0 (rows pgemm_w_stride apart)
  const float* x;  // the packed x panel ([kb][MR])
  index kb;
  float* c;        // accumulator (j, v) at c + j · pgemm_c_stride + v · L
  bool first;      // start from 0 instead of c
};

/// The microkernels' accumulators (any register type V of L floats): acc[j][v] = `zero` when
/// `first`, else load(the transposed y tile at c + j · pgemm_c_stride + v · L); and back by
/// store(p, acc[j][v]). Always inlined, so the accumulators stay in registers.
template <index L, class V, int NB, int NV, class Load>
__attribute__((always_inline)) inline void pgemm_acc_start(V (&acc)[NB][NV], const float* c, bool first, V zero,
                                                           Load load) noexcept {
#pragma GCC unroll 16
  for (int j = 0; j < NB; ++j)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[j][v] = first ? zero : load(c + j * pgemm_c_stride + v * L);
}
template <index L, class V, int NB, int NV, class Store>
__attribute__((always_inline)) inline void pgemm_acc_finish(V (&acc)[NB][NV], float* c, Store store) noexcept {
#pragma GCC unroll 16
  for (int j = 0; j < NB; ++j)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) store(c + j * pgemm_c_stride + v * L, acc[j][v]);
}

template <class Arch, int NB, int NV>
void pgemm_kernel(const pgemm_args& a) noexcept {
  using B = simd::batch<float, Arch>;
  constexpr index L = index(simd::width<Arch>), MR = NV * L;
  B acc[NB][NV];
  pgemm_acc_start<L>(acc, a.c, a.first, B(0.0f), [](const float* p) { return simd::load<Arch>(p); });
  for (index k = 0; k < a.kb; ++k) {
    B xv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) xv[v] = simd::load_reg<Arch>(a.x + k * MR + v * L);
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) {
      const B wb = simd::broadcast<Arch>(a.w[j * pgemm_w_stride + k]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[j][v] = simd::fma(xv[v], wb, acc[j][v]);
    }
  }
  pgemm_acc_finish<L>(acc, a.c, [](float* p, const B& v) { simd::store(p, v); });
}

/// pgemm_kernel<NB> for a runtime nb <= NB (the tile's last columns).
template <class Arch, int NB = pgemm_nb<Arch>>
void pgemm_kernel_dispatch(int nb, const pgemm_args& a) noexcept {
  if (nb == NB) return pgemm_kernel<Arch, NB, pgemm_nv<Arch>>(a);
  if constexpr (NB > 1) pgemm_kernel_dispatch<Arch, NB - 1>(nb, a);
}

/// y[m, n] = ct[n · pgemm_c_stride + m] for m < rows, n < count: the transposed tile written back,
/// 16 columns at a time so that both sides are read and written in runs.
inline void pgemm_store_y(const float* ct, index count, index rows, float* y, index y_stride) noexcept {
  for (index n0 = 0; n0 < count; n0 += 16) {
    const index n1 = std::min(count, n0 + 16);
    for (index m = 0; m < rows; ++m)
      for (index n = n0; n < n1; ++n) y[m * y_stride + n] = ct[n * pgemm_c_stride + m];
  }
}

/// y[m, n] (row stride y_stride) = Σ_k x[m, k] · W[n, k] for the `count` (<= pgemm_tile_cols) W
/// rows at w (`stride` bytes apart, dtype S) and `rows` (<= pgemm_chunk) rows of x packed by
/// pgemm_pack_x<Arch> at xp. slot: pgemm_slot_floats floats, 64-byte aligned.
template <class Arch, storage_type S>
void pgemm_tile(const unsigned char* w, index stride, index count, const float* xp, index rows, index in, float* y,
                index y_stride, float* slot, const block_scales* sc = nullptr) noexcept {
  constexpr index MR = pgemm_mr<Arch>, NB = pgemm_nb<Arch>;
  const index rows_pad = pgemm_rows_padded<Arch>(rows);
  float* wp = slot;
  float* ct = slot + pgemm_tile_cols * pgemm_w_stride;
  if (in == 0)
    for (index n = 0; n < count; ++n) std::fill(ct + n * pgemm_c_stride, ct + n * pgemm_c_stride + rows, 0.0f);
  for (index k0 = 0; k0 < in; k0 += pgemm_kc) {
    const index kb = std::min(pgemm_kc, in - k0);
    pgemm_widen<Arch, S>(w, stride, count, k0, kb, wp, sc);
    const float* xb = xp + k0 * rows_pad;
    for (index j0 = 0; j0 < count; j0 += NB) {
      const int nb = int(std::min(NB, count - j0));
      for (index p = 0; p < rows_pad; p += MR)
        pgemm_kernel_dispatch<Arch>(nb, {wp + j0 * pgemm_w_stride, xb + p * kb, kb, ct + j0 * pgemm_c_stride + p, k0 == 0});
    }
  }
  pgemm_store_y(ct, count, rows, y, y_stride);
}

/// pgemm_tile for a runtime storage type; `sc`: the block scales of f8_e4m3 rows (row 0 at w).
template <class Arch>
void packed_gemm_tile(storage_type t, const void* w, index stride, index count, const float* xp, index rows, index in,
                      float* y, index y_stride, float* slot, const block_scales* sc = nullptr) noexcept {
  const auto* p = static_cast<const unsigned char*>(w);
  switch (t) {
    case storage_type::f32: pgemm_tile<Arch, storage_type::f32>(p, stride, count, xp, rows, in, y, y_stride, slot); break;
    case storage_type::bf16: pgemm_tile<Arch, storage_type::bf16>(p, stride, count, xp, rows, in, y, y_stride, slot); break;
    case storage_type::f16: pgemm_tile<Arch, storage_type::f16>(p, stride, count, xp, rows, in, y, y_stride, slot); break;
    case storage_type::f8_e4m3:
      pgemm_tile<Arch, storage_type::f8_e4m3>(p, stride, count, xp, rows, in, y, y_stride, slot, sc);
      break;
  }
}

/// The 64-byte aligned start of at least n floats in v (grown for the call).
inline float* pgemm_buffer(std::vector<float>& v, index n) {
  v.resize(std::size_t(n) + 16);
  const auto addr = reinterpret_cast<std::uintptr_t>(v.data());
  return v.data() + ((64 - addr % 64) % 64) / sizeof(float);
}

/// y[m, n] (row stride y_stride) = Σ_k x[m, k] · W[n, k] for `rows` rows of x ([rows, in], row
/// stride x_stride) and the `count` W rows at w (`stride` bytes apart, dtype t), on the calling
/// thread with buffers of the call's own. (linear_map runs the same tiles on its team, in its
/// caller's scratch; both give the same bits.)
template <class Arch>
void packed_gemm(storage_type t, const void* w, index stride, index count, const float* x, index x_stride, index rows,
                 index in, float* y, index y_stride, const block_scales* sc = nullptr) {
  std::vector<float> xbuf, sbuf;
  float* xp = pgemm_buffer(xbuf, pgemm_x_floats<Arch>(rows, in));
  float* slot = pgemm_buffer(sbuf, pgemm_slot_floats);
  const auto* wb = static_cast<const unsigned char*>(w);
  for (index m0 = 0; m0 < rows; m0 += pgemm_chunk) {
    const index m = std::min(pgemm_chunk, rows - m0);
    pgemm_pack_x<Arch>(x + m0 * x_stride, x_stride, m, in, xp);
    for (index n0 = 0; n0 < count; n0 += pgemm_tile_cols) {
      const block_scales tile_scales = sc ? sc->from_row(n0) : block_scales{};
      packed_gemm_tile<Arch>(t, wb + n0 * stride, stride, std::min(pgemm_tile_cols, count - n0), xp, m, in,
                             y + m0 * y_stride + n0, y_stride, slot, sc ? &tile_scales : nullptr);
    }
  }
}

}  GATTN_NAMESPACE_END  // namespace gattn::detail
