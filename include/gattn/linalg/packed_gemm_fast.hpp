// The "fast" numerics of the cache-blocked GEMM: x and W rounded to bf16, products accumulated in
// fp32 (vdpbf16ps where the CPU has AVX512-BF16, the same arithmetic by fp32 FMAs elsewhere).
// Templates on Arch so tests can run every ISA of the binary.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "gattn/core/config.hpp"
#include "gattn/core/cpu.hpp"
#include "gattn/core/types.hpp"
#include "gattn/linalg/packed_gemm.hpp"
#include "gattn/linalg/packed_gemm_bf16.hpp"
#include "gattn/linalg/packed_gemm_neon.hpp"
#include "gattn/linalg/tile_engine.hpp"
#include "gattn/simd/avx512_bf16.hpp"
#include "gattn/simd/convert.hpp"
#include "gattn/simd/simd.hpp"

GATTN_NAMESPACE_BEGIN namespace detail {

// The blocking of packed_gemm.hpp (KC, chunk, tile, NB × NV register block, transposed y tile),
// with bf16 operands taken a pair of k values at a time:
//   - x is rounded to bf16 (nearest even) once per chunk and packed as pairs: for each pair q of a
//     k-block, the MR rows of a panel × (x[m, 2q], x[m, 2q + 1]), one 32-bit lane per row;
//   - W rows are rounded to bf16 (bf16 weights are copied) into the slot, rows kept whole, so
//     (W[n, 2q], W[n, 2q + 1]) is one 32-bit value that a step broadcasts;
//   - one step per pair: acc += x_odd · w_odd, then acc += x_even · w_even, in fp32 (a product of
//     two bf16 is exact in fp32, so each step rounds once). With AVX512-BF16 that is one vdpbf16ps
//     per accumulator (twice the flops of an FMA per instruction); without it, two FMAs.
// vdpbf16ps's order, checked on Zen 5 by experiment (3.2 M random lanes, none with a denormal):
// its result equals fma(x_even, w_even, fma(x_odd, w_odd, acc)) bit for bit, which is also
// Intel's documented order; the instruction flushes denormal inputs and outputs to zero, the FMA
// engine does not, so the two engines may differ only where a denormal appears. A k-block of odd
// length (the last one, odd `in`) is padded with a zero pair half, which adds +0 exactly.
// Every output is one chain over the pairs in order, whatever the split (as in packed_gemm.hpp).

/// True when Arch has a bf16 dot-product engine in this build: vdpbf16ps (AVX-512 arch,
/// simd/avx512_bf16.hpp) or BFDOT (neon64 in an AArch64 build that carries packed_gemm_neon.hpp's
/// kernel); either runs only where pgemm_native_bf16_runs().
template <class Arch>
inline constexpr bool pgemm_native_bf16 =
#if GATTN_AVX512_BF16_COMPILED
    simd::detail::derives_v<Arch, xsimd::avx512f>;
#elif GATTN_NEON_BF16_COMPILED
    std::is_same<Arch, xsimd::neon64>::value;
#else
    false;
#endif
/// True when this CPU can run Arch's bf16 dot-product engine (both extensions are optional).
template <class Arch>
inline bool pgemm_native_bf16_runs() {
  if constexpr (!pgemm_native_bf16<Arch>) return false;
#if GATTN_NEON_BF16_COMPILED
  return neon_bf16_usable();
#else
  return avx512_bf16_usable();
#endif
}

/// The FMA engine: two fp32 FMAs per pair, odd half first (vdpbf16ps's order).
template <class Arch, int NB, int NV>
void pgemm_fast_kernel_fma(const pgemm_fast_args& a) noexcept {
  using B = simd::batch<float, Arch>;
  constexpr index L = index(simd::width<Arch>), MR = NV * L;
  B acc[NB][NV];
  pgemm_acc_start<L>(acc, a.c, a.first, B(0.0f), [](const float* p) { return simd::load<Arch>(p); });
  for (index q = 0; q < a.kp; ++q) {
    B xe[NV], xo[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      xe[v] = simd::load_bf16_even<Arch>(a.x + (q * MR + v * L) * 2);
      xo[v] = simd::load_bf16_odd<Arch>(a.x + (q * MR + v * L) * 2);
    }
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) {
      const std::uint16_t* wq = a.w + j * pgemm_w16_stride + 2 * q;
      const B we = simd::broadcast<Arch>(bf16_to_float(wq[0])), wo = simd::broadcast<Arch>(bf16_to_float(wq[1]));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[j][v] = simd::fma(xe[v], we, simd::fma(xo[v], wo, acc[j][v]));
    }
  }
  pgemm_acc_finish<L>(acc, a.c, [](float* p, const B& v) { simd::store(p, v); });
}

/// True when Arch's fast GEMM may run on AMX tiles: the build carries them (tile_amx.hpp) and
/// Arch packs x in the tiles' panels (AVX-512).
template <class Arch>
inline constexpr bool pgemm_amx =
#if GATTN_AMX_COMPILED
    simd::detail::derives_v<Arch, xsimd::avx512f> && pgemm_mr<Arch> == tile_mr;
#else
    false;
#endif

#if GATTN_AVX512_BF16_COMPILED
/// The vdpbf16ps engine (AVX-512 with BF16): one instruction per accumulator and pair.
template <int NB, int NV>
GATTN_AVX512_BF16_TARGET void pgemm_fast_kernel_dp(const pgemm_fast_args& a) noexcept {
  constexpr index MR = NV * 16;
  __m512 acc[NB][NV];
  pgemm_acc_start<16>(acc, a.c, a.first, _mm512_setzero_ps(), [](const float* p) { return _mm512_loadu_ps(p); });
  for (index q = 0; q < a.kp; ++q) {
    __m512i xv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) xv[v] = _mm512_loadu_si512(a.x + (q * MR + v * 16) * 2);
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) {
      std::uint32_t pair;
      std::memcpy(&pair, a.w + j * pgemm_w16_stride + 2 * q, sizeof pair);
      const __m512bh wb = (__m512bh)_mm512_set1_epi32(int(pair));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[j][v] = _mm512_dpbf16_ps(acc[j][v], (__m512bh)xv[v], wb);
    }
  }
  pgemm_acc_finish<16>(acc, a.c, [](float* p, __m512 v) { _mm512_storeu_ps(p, v); });
}
#endif

/// The fast kernel for a runtime nb <= NB: the dot-product engine when Native, else the FMA engine.
template <class Arch, bool Native, int NB = pgemm_nb<Arch>>
void pgemm_fast_dispatch(int nb, const pgemm_fast_args& a) noexcept {
  if (nb == NB) {
#if GATTN_AVX512_BF16_COMPILED
    if constexpr (Native) return pgemm_fast_kernel_dp<NB, pgemm_nv<Arch>>(a);
#elif GATTN_NEON_BF16_COMPILED
    if constexpr (Native) return pgemm_fast_kernel_bfdot<NB, pgemm_nv<Arch>>(a);
#endif
    return pgemm_fast_kernel_fma<Arch, NB, pgemm_nv<Arch>>(a);
  }
  if constexpr (NB > 1) pgemm_fast_dispatch<Arch, Native, NB - 1>(nb, a);
}

/// pgemm_tile with bf16 operands: x packed by pgemm_fast_pack_x<Arch> at xp; Native (only where
/// pgemm_native_bf16<Arch> and, at run time, pgemm_native_bf16_runs()) picks the dot-product engine
/// over the FMA engine.
template <class Arch, storage_type S, bool Native = pgemm_native_bf16<Arch>>
void pgemm_fast_tile(const unsigned char* w, index stride, index count, const std::uint16_t* xp, index rows, index in,
                     float* y, index y_stride, float* slot, const block_scales* sc = nullptr) noexcept {
  static_assert(!Native || pgemm_native_bf16<Arch>, "the dot-product engine needs AVX512-BF16 or NEON BF16");
  constexpr index MR = pgemm_mr<Arch>, NB = pgemm_nb<Arch>;
  const index rows_pad = pgemm_rows_padded<Arch>(rows);
  auto* wp = reinterpret_cast<std::uint16_t*>(slot);
  float* ct = slot + pgemm_tile_cols * pgemm_w_stride;
  if (in == 0)
    for (index n = 0; n < count; ++n) std::fill(ct + n * pgemm_c_stride, ct + n * pgemm_c_stride + rows, 0.0f);
  for (index k0 = 0; k0 < in; k0 += pgemm_kc) {
    const index kb = std::min(pgemm_kc, in - k0), kp = (kb + 1) / 2;
    pgemm_fast_widen<S>(w, stride, count, k0, kb, wp, sc);
    const std::uint16_t* xb = xp + k0 * rows_pad;
    for (index j0 = 0; j0 < count; j0 += NB) {
      const int nb = int(std::min(NB, count - j0));
      for (index p = 0; p < rows_pad; p += MR)
        pgemm_fast_dispatch<Arch, Native>(
            nb, {wp + j0 * pgemm_w16_stride, xb + p * 2 * kp, kp, ct + j0 * pgemm_c_stride + p, k0 == 0});
    }
  }
  pgemm_store_y(ct, count, rows, y, y_stride);
}

/// pgemm_fast_tile for a runtime storage type and engine.
template <class Arch, bool Native>
void pgemm_fast_tile_typed(storage_type t, const unsigned char* w, index stride, index count, const std::uint16_t* xp,
                           index rows, index in, float* y, index y_stride, float* slot,
                           const block_scales* sc = nullptr) noexcept {
  switch (t) {
    case storage_type::f32: pgemm_fast_tile<Arch, storage_type::f32, Native>(w, stride, count, xp, rows, in, y, y_stride, slot); break;
    case storage_type::bf16: pgemm_fast_tile<Arch, storage_type::bf16, Native>(w, stride, count, xp, rows, in, y, y_stride, slot); break;
    case storage_type::f16: pgemm_fast_tile<Arch, storage_type::f16, Native>(w, stride, count, xp, rows, in, y, y_stride, slot); break;
    case storage_type::f8_e4m3:
      pgemm_fast_tile<Arch, storage_type::f8_e4m3, Native>(w, stride, count, xp, rows, in, y, y_stride, slot, sc);
      break;
  }
}

/// pgemm_fast_tile for a runtime storage type, on the first engine of: AMX tiles (where pgemm_amx
/// and core/cpu.hpp's amx_tiles_wanted(); x packed as for the other engines), vdpbf16ps when Arch
/// has it and `dot_products` (bf16_dot_products_wanted(): Intel issues it at half the FMA rate),
/// the FMA engine. The last two give the same bits but where a denormal appears; the tiles sum
/// in their own order (tile_engine.hpp). On AArch64, BFDOT replaces vdpbf16ps and
/// neon_bf16_dots_wanted() the caller's `dot_products` (whose vendor rule is x86's).
template <class Arch>
void packed_gemm_fast_tile(storage_type t, const void* w, index stride, index count, const std::uint16_t* xp, index rows,
                           index in, float* y, index y_stride, float* slot, bool dot_products,
                           const block_scales* sc = nullptr) noexcept {
  const auto* p = static_cast<const unsigned char*>(w);
#if GATTN_AMX_COMPILED
  if constexpr (pgemm_amx<Arch>)
    if (amx_tiles_wanted()) {
      amx_tiles tiles;
      return tile_gemm_tile_typed(tiles, t, p, stride, count, xp, rows, in, y, y_stride, slot, sc);
    }
#endif
#if GATTN_NEON_BF16_COMPILED
  dot_products = neon_bf16_dots_wanted();
#endif
  if constexpr (pgemm_native_bf16<Arch>)
    if (dot_products) return pgemm_fast_tile_typed<Arch, true>(t, p, stride, count, xp, rows, in, y, y_stride, slot, sc);
  pgemm_fast_tile_typed<Arch, false>(t, p, stride, count, xp, rows, in, y, y_stride, slot, sc);
}

/// packed_gemm (same arguments) with bf16 operands and fp32 accumulation, on the calling thread
/// with buffers of the call's own. Native: as pgemm_fast_tile (tests compare the two engines).
template <class Arch, bool Native = pgemm_native_bf16<Arch>>
void packed_gemm_fast(storage_type t, const void* w, index stride, index count, const float* x, index x_stride,
                      index rows, index in, float* y, index y_stride, const block_scales* sc = nullptr) {
  std::vector<float> xbuf, sbuf;
  auto* xp = reinterpret_cast<std::uint16_t*>(pgemm_buffer(xbuf, pgemm_x_floats<Arch>(rows, in)));
  float* slot = pgemm_buffer(sbuf, pgemm_slot_floats);
  const auto* wb = static_cast<const unsigned char*>(w);
  for (index m0 = 0; m0 < rows; m0 += pgemm_chunk) {
    const index m = std::min(pgemm_chunk, rows - m0);
    pgemm_fast_pack_x<Arch>(x + m0 * x_stride, x_stride, m, in, xp);
    for (index n0 = 0; n0 < count; n0 += pgemm_tile_cols) {
      const block_scales tile_scales = sc ? sc->from_row(n0) : block_scales{};
      pgemm_fast_tile_typed<Arch, Native>(t, wb + n0 * stride, stride, std::min(pgemm_tile_cols, count - n0), xp, m, in,
                                          y + m0 * y_stride + n0, y_stride, slot, sc ? &tile_scales : nullptr);
    }
  }
}

}  GATTN_NAMESPACE_END  // namespace gattn::detail

GATTN_NAMESPACE_BEGIN

/// The engine of `numerics = fast`'s cache-blocked GEMM for Arch in this process, as
/// packed_gemm_fast_tile picks it: "amx (tdpbf16ps)", "avx512_bf16 (vdpbf16ps)", "neon_bfdot
/// (bfdot)" or "fma (portable)".
template <class Arch>
const char* fast_gemm_engine_name() {
  if constexpr (detail::pgemm_amx<Arch>)
    if (amx_tiles_wanted()) return "amx (tdpbf16ps)";
#if GATTN_NEON_BF16_COMPILED
  if constexpr (detail::pgemm_native_bf16<Arch>)
    if (neon_bf16_dots_wanted()) return "neon_bfdot (bfdot)";
#else
  if constexpr (detail::pgemm_native_bf16<Arch>)
    if (bf16_dot_products_wanted()) return "avx512_bf16 (vdpbf16ps)";
#endif
  return "fma (portable)";
}

GATTN_NAMESPACE_END
