// The small GEMM (gemm.hpp) with docs/spec.md §10 `fast` numerics: bf16 x and bf16 weights, fp32 accumulation.
// Templates on Arch so tests can run every ISA of the binary.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gattn/core/config.hpp"
#include "gattn/core/types.hpp"
#include "gattn/linalg/gemm.hpp"
#include "gattn/linalg/packed_gemm_fast.hpp"
#include "gattn/simd/convert.hpp"
#include "gattn/simd/prefetch.hpp"
#include "gattn/simd/simd.hpp"

GATTN_NAMESPACE_BEGIN namespace detail {

// The blocking of gemm.hpp's small GEMM (gemm_w_rows × gemm_x_rows register blocks, passes of
// gemm_pass values, unreduced accumulators between passes, gemm_reduce, the staging panel), over
// bf16 operands taken a pair of k values at a time:
//   - x is rounded to bf16 (nearest even) once per call and packed in k order, each row padded with
//     zeros to whole steps of 2·L values and rows an odd number of cache lines apart;
//   - bf16 weight rows are read in place: a 32-bit lane holds the pair (W[2q], W[2q + 1]), and the
//     packed x holds (x[2q], x[2q + 1]) in the same lane, so no shuffle is needed;
//   - per step and pair (lane l of a step: pair l): acc += x_odd·w_odd, then acc += x_even·w_even,
//     in fp32 (a product of two bf16 is exact, so each addition rounds once). With AVX512-BF16 that
//     is one vdpbf16ps per accumulator (its order, packed_gemm_fast.hpp); without it two FMAs on the
//     widened halves. The engines agree bit for bit except where a denormal appears (vdpbf16ps
//     flushes them);
//   - the tail after the last whole step is one more step over a zero-padded copy of the weights'
//     last values (0·0 adds +0), so every output is the same chain whatever `in` is;
//   - lanes summed by gemm_reduce (one tree for every pair).
// Only bf16 weights take this path; f32/f16 weights of a few rows stay on the exact small GEMM.

/// bf16 values between packed rows of x: `in` rounded up to whole 64-byte lines, an odd number.
inline index gemm_fast_stride(index in) noexcept {
  index lines = (in + 31) / 32;
  if (lines % 2 == 0) ++lines;
  return lines * 32;
}

/// Floats that gemm_fast_pack_x fills for `rows` rows (never more than gemm_pack_x's).
inline index gemm_fast_x_floats(index rows, index in) noexcept { return rows * gemm_fast_stride(in) / 2; }

/// Rounds `rows` rows of x ([rows, in], row stride x_stride) to bf16 into xp (64-byte aligned, row
/// stride gemm_fast_stride(in)), in k order, zeros up to the next whole step.
template <class Arch>
void gemm_fast_pack_x(const float* x, index x_stride, index rows, index in, std::uint16_t* xp) noexcept {
  constexpr index step = 2 * index(simd::width<Arch>);
  const index ps = gemm_fast_stride(in), padded = (in + step - 1) / step * step;
  for (index n = 0; n < rows; ++n) {
    simd::narrow_bf16<Arch>(x + n * x_stride, xp + n * ps, in);
    std::fill(xp + n * ps + in, xp + n * ps + padded, std::uint16_t(0));
  }
}

/// One call of a fast register block: `steps` steps of 2·L values of R weight rows and N x rows.
struct gemm_fast_args {
  const std::uint16_t* w;  // weight row 0 at the first step (rows `stride` elements apart)
  index stride;
  const std::uint16_t* x;  // packed x row 0 at the first step
  index x_stride;
  index steps;
  float* acc;              // accumulator (i, j) at acc + i·acc_stride + j·L, unreduced
  index acc_stride;
  bool first;              // start from 0 instead of acc
  const std::uint16_t* prefetch;  // the next block's weight row 0 at the first step (nullptr: none)
  index prefetch_rows;
};

/// The FMA engine: per pair, the odd halves' product first, then the even ones'.
template <class Arch, int R, int N>
void gemm_fast_block_fma(const gemm_fast_args& a) noexcept {
  using B = simd::batch<float, Arch>;
  constexpr index L = index(simd::width<Arch>);
  B acc[R][N];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < N; ++j) acc[i][j] = a.first ? B(0.0f) : simd::load<Arch>(a.acc + i * a.acc_stride + j * L);
  for (index s = 0; s < a.steps; ++s) {
    const index k = s * 2 * L;
    B xe[N], xo[N];
#pragma GCC unroll 8
    for (int j = 0; j < N; ++j) {
      xe[j] = simd::load_bf16_even<Arch>(a.x + j * a.x_stride + k);
      xo[j] = simd::load_bf16_odd<Arch>(a.x + j * a.x_stride + k);
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const B we = simd::load_bf16_even<Arch>(a.w + i * a.stride + k), wo = simd::load_bf16_odd<Arch>(a.w + i * a.stride + k);
#pragma GCC unroll 8
      for (int j = 0; j < N; ++j) acc[i][j] = simd::fma(xe[j], we, simd::fma(xo[j], wo, acc[i][j]));
    }
    if (a.prefetch)
      for (int i = 0; i < R; ++i)
        if (i < a.prefetch_rows) prefetch_l2(a.prefetch + i * a.stride + k);
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < N; ++j) simd::store(a.acc + i * a.acc_stride + j * L, acc[i][j]);
}

#if GATTN_AVX512_BF16_COMPILED
/// The vdpbf16ps engine (AVX-512 with BF16): one instruction per accumulator and step.
template <int R, int N>
GATTN_AVX512_BF16_TARGET void gemm_fast_block_dp(const gemm_fast_args& a) noexcept {
  __m512 acc[R][N];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < N; ++j) acc[i][j] = a.first ? _mm512_setzero_ps() : _mm512_loadu_ps(a.acc + i * a.acc_stride + j * 16);
  for (index s = 0; s < a.steps; ++s) {
    const index k = s * 32;
    __m512i xv[N];
#pragma GCC unroll 8
    for (int j = 0; j < N; ++j) xv[j] = _mm512_loadu_si512(a.x + j * a.x_stride + k);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m512i wv = _mm512_loadu_si512(a.w + i * a.stride + k);
#pragma GCC unroll 8
      for (int j = 0; j < N; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)xv[j], (__m512bh)wv);
    }
    if (a.prefetch)
      for (int i = 0; i < R; ++i)
        if (i < a.prefetch_rows) prefetch_l2(a.prefetch + i * a.stride + k);
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < N; ++j) _mm512_storeu_ps(a.acc + i * a.acc_stride + j * 16, acc[i][j]);
}
#endif

/// The fast block for runtime r <= R, n <= N: vdpbf16ps when Native, else the FMA engine.
template <class Arch, bool Native, int R = gemm_w_rows<Arch>, int N = gemm_x_rows<Arch>>
void gemm_fast_block_dispatch(int r, int n, const gemm_fast_args& a) noexcept {
  if (r == R && n == N) {
#if GATTN_AVX512_BF16_COMPILED
    if constexpr (Native) return gemm_fast_block_dp<R, N>(a);
#endif
    return gemm_fast_block_fma<Arch, R, N>(a);
  }
  if constexpr (N > 1)
    if (r == R) return gemm_fast_block_dispatch<Arch, Native, R, N - 1>(r, n, a);
  if constexpr (R > 1) return gemm_fast_block_dispatch<Arch, Native, R - 1, gemm_x_rows<Arch>>(r, n, a);
}

/// Runs one register-block call per group of gemm_x_rows x rows: `steps` steps from w and x.
template <class Arch, bool Native>
void gemm_fast_x_groups(const std::uint16_t* w, index R, index stride, const std::uint16_t* xp, index ps, index nrows,
                        index steps, bool first, const std::uint16_t* prefetch, index next, float* acc) noexcept {
  constexpr index L = index(simd::width<Arch>), NB = gemm_x_rows<Arch>;
  for (index j = 0; j < nrows; j += NB) {
    const bool pf = j == 0 && prefetch != nullptr && next > 0;
    const gemm_fast_args a{w, stride, xp + j * ps, ps, steps, acc + j * L, gemm_max_x_rows * L, first,
                           pf ? prefetch : nullptr, next};
    gemm_fast_block_dispatch<Arch, Native>(int(R), int(std::min(NB, nrows - j)), a);
  }
}

/// The `nrows` packed x rows (row stride ps) against the R bf16 weight rows at wr (`stride`
/// elements apart), the sum of each pair (weight row i, x row n) into out[n·gemm_out_cols + i].
/// next: weight rows after the block to prefetch into L2 while the first x group runs.
template <class Arch, bool Native>
void gemm_fast_weight_block(const std::uint16_t* wr, index R, index stride, const std::uint16_t* xp, index ps,
                            index nrows, index in, index next, float* acc, float* out) noexcept {
  constexpr index L = index(simd::width<Arch>), step = 2 * L;
  const index body = in - in % step;
  for (index k0 = 0; k0 < body; k0 += gemm_pass) {
    const index k1 = std::min(body, k0 + gemm_pass);
    gemm_fast_x_groups<Arch, Native>(wr + k0, R, stride, xp + k0, ps, nrows, (k1 - k0) / step, k0 == 0,
                                     wr + R * stride + k0, next, acc);
  }
  if (body < in) {  // the tail as one more step over zero-padded weights
    alignas(64) std::uint16_t tail[gemm_w_rows<Arch> * step];
    std::fill(tail, tail + R * step, std::uint16_t(0));
    for (index i = 0; i < R; ++i) std::memcpy(tail + i * step, wr + i * stride + body, std::size_t(in - body) * 2);
    gemm_fast_x_groups<Arch, Native>(tail, R, step, xp + body, ps, nrows, 1, body == 0, nullptr, 0, acc);
  }
  for (index i = 0; i < R; ++i)
    for (index n1 = 0; n1 < nrows; n1 += L) {
      alignas(64) float sums[L] = {};
      const index group = std::min(L, nrows - n1);
      if (in > 0) gemm_reduce<Arch>(acc + (i * gemm_max_x_rows + n1) * L, group, sums);
      for (index n = n1; n < n1 + group; ++n) out[n * gemm_out_cols + i] = sums[n - n1];
    }
}

/// y[n, r] (row stride y_stride) = Σ_k W[r, k] · x[n, k] in `fast` numerics for the `count` bf16
/// weight rows at w (`stride` bytes apart, even) and `rows` rows of x packed by gemm_fast_pack_x<Arch>
/// at xp. Native (only where pgemm_native_bf16<Arch>) picks vdpbf16ps over the FMA engine.
template <class Arch, bool Native>
void gemm_fast_packed(const void* w, index stride, index count, const std::uint16_t* xp, index rows, index in, float* y,
                      index y_stride) noexcept {
  static_assert(!Native || pgemm_native_bf16<Arch>, "vdpbf16ps needs an AVX-512 arch and AVX512-BF16");
  constexpr index L = index(simd::width<Arch>), RB = gemm_w_rows<Arch>;
  const auto* w16 = static_cast<const std::uint16_t*>(w);
  const index ws = stride / 2, ps = gemm_fast_stride(in);
  alignas(64) float acc[std::size_t(RB * gemm_max_x_rows * L)];
  alignas(64) float out[std::size_t(gemm_max_x_rows * gemm_out_cols)];
  for (index p0 = 0; p0 < count; p0 += gemm_out_cols) {
    const index cols = std::min(gemm_out_cols, count - p0);
    for (index n0 = 0; n0 < rows; n0 += gemm_max_x_rows) {
      const index nrows = std::min(gemm_max_x_rows, rows - n0);
      for (index r0 = p0; r0 < p0 + cols; r0 += RB) {
        const index R = std::min(RB, count - r0);
        const index next = n0 == 0 ? std::min(RB, count - r0 - R) : 0;
        gemm_fast_weight_block<Arch, Native>(w16 + r0 * ws, R, ws, xp + n0 * ps, ps, nrows, in, next, acc,
                                             out + (r0 - p0));
      }
      for (index n = 0; n < nrows; ++n)
        std::copy(out + n * gemm_out_cols, out + n * gemm_out_cols + cols, y + (n0 + n) * y_stride + p0);
    }
  }
}

/// gemm_fast_packed with vdpbf16ps when Arch has it and `dot_products` (core/cpu.hpp's
/// bf16_dot_products_wanted()), else the FMA engine.
template <class Arch>
void gemm_fast_packed_any(const void* w, index stride, index count, const std::uint16_t* xp, index rows, index in,
                          float* y, index y_stride, bool dot_products) noexcept {
  if constexpr (pgemm_native_bf16<Arch>)
    if (dot_products) return gemm_fast_packed<Arch, true>(w, stride, count, xp, rows, in, y, y_stride);
  gemm_fast_packed<Arch, false>(w, stride, count, xp, rows, in, y, y_stride);
}

/// gemm_fast_packed after packing x into a buffer of the call's own (tests; linear_map packs once
/// per call into its caller's scratch).
template <class Arch, bool Native = pgemm_native_bf16<Arch>>
void gemm_fast_rows(const void* w, index stride, index count, const float* x, index x_stride, index rows, index in,
                    float* y, index y_stride) {
  std::vector<float> buffer;
  auto* xp = reinterpret_cast<std::uint16_t*>(gemm_thread_buffer(buffer, gemm_fast_x_floats(rows, in)));
  gemm_fast_pack_x<Arch>(x, x_stride, rows, in, xp);
  gemm_fast_packed<Arch, Native>(w, stride, count, xp, rows, in, y, y_stride);
}

}  GATTN_NAMESPACE_END  // namespace gattn::detail
