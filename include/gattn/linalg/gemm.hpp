// The register-blocked GEMM for a few rows of x (batched decode: x packed once per call, weights
// in their stored dtype, fp32 accumulation), and the product with an untransposed weight
// (gemm_cols, MLA's q_nope · W_uk). Block-scaled E4M3 weights are widened a chunk of a register
// block at a time into fp32 on the stack and go through the f32 code, so they give the bits of
// the f32 path over the dequantized weight.
// Templates on Arch so tests can run every ISA of the binary.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gattn/core/block_scales.hpp"
#include "gattn/core/config.hpp"
#include "gattn/core/types.hpp"
#include "gattn/linalg/weight_rows.hpp"
#include "gattn/simd/prefetch.hpp"
#include "gattn/simd/simd.hpp"

GATTN_NAMESPACE_BEGIN namespace detail {

// ---- the small GEMM (batched decode: 3 to ~64 rows of x) ----------------------------------------
//
// y[n, r] = Σ_k W[r, k] · x[n, k] for a few rows of x, reading W in its stored dtype. Structure:
//   - blocks of gemm_w_rows weight rows × gemm_x_rows x rows; every (weight row, x row) pair has its
//     own vector accumulator, so each weight vector is used by every x row of the block and each x
//     vector by every weight row, from registers;
//   - k runs in steps of one 64-byte line per weight row on AVX-512 (f32: 16 values, bf16/f16: 32
//     values in two halves) and in passes of gemm_pass values: a weight block and the pass's x rows
//     stay in L1/L2 while every x group passes over them; between passes the accumulators are
//     stored unreduced to a small scratch and reloaded, so passes never change a bit;
//   - x is packed once per call (gemm_pack_x) with a row stride of an odd number of cache lines (no
//     4K aliasing between the rows of a block). For bf16 weights each step of 2·L values is packed
//     as its L even-indexed values then its L odd-indexed ones: one load of 32-bit lanes of
//     weights gives both halves by a shift and a mask (simd::load_bf16_even/odd), no shuffle;
//   - the next weight block is prefetched into L2 while the first x group runs;
//   - y is written from a staging panel, gemm_out_cols columns of each row at a time.
// Summation order of a pair (the same for every block shape, row count, pass split and thread
// count, so tiling never changes a bit): lane j of the accumulator sums the products whose position
// in the packed step is j, step after step (halves in order); then the lanes summed by simd::haddp
// (gemm_reduce: one tree for every pair); then
// the tail k >= body (in % step values) in order, in scalar fp32. The GEMV (1-2 rows, gemv_rows)
// sums in another order: its results may differ from these in the last bits.

/// How x is packed for the small GEMM: `natural` (f32 and f16 weights) keeps k order; `pairs`
/// (bf16 weights) stores each step of 2·L values as the even-indexed values, then the odd ones.
enum class gemm_x_order { natural, pairs };

inline constexpr gemm_x_order gemm_order_for(storage_type t) noexcept {
  return t == storage_type::bf16 ? gemm_x_order::pairs : gemm_x_order::natural;
}

/// Register block: weight rows × x rows. 32 vector registers (AVX-512): 6 × 4 = 24 accumulators,
/// 4 x vectors, a weight vector and its widened form; 16 (AVX2, SSE) and the others: 3 × 3.
template <class Arch>
inline constexpr int gemm_w_rows = simd::width<Arch> >= 16 ? 6 : 3;
template <class Arch>
inline constexpr int gemm_x_rows = simd::width<Arch> >= 16 ? 4 : 3;
/// Values of k per pass (passes of 512 measured slower on AVX-512).
inline constexpr index gemm_pass = 4096;
/// x rows whose accumulators one call of gemm_packed keeps per weight block (more go in chunks).
inline constexpr index gemm_max_x_rows = 64;

/// Values of k per step: one vector of f32 weights, two vectors (halves) of bf16/f16 ones.
template <class Arch, storage_type S>
inline constexpr index gemm_step = index(simd::width<Arch>) * (S == storage_type::f32 ? 1 : 2);

/// Floats between packed rows of x: `in` rounded up to whole 64-byte lines, an odd number of them.
inline index gemm_packed_stride(index in) noexcept {
  index lines = (in + 15) / 16;
  if (lines % 2 == 0) ++lines;
  return lines * 16;
}

/// Packs `rows` rows of x ([rows, in], row stride x_stride) into xp (64-byte aligned, row stride
/// gemm_packed_stride(in)) in `order` for Arch. The tail after the last whole step of 2·L values
/// stays in k order (for f32 weights, whose step is L, natural order is the same thing).
template <class Arch>
void gemm_pack_x(gemm_x_order order, const float* x, index x_stride, index rows, index in, float* xp) noexcept {
  constexpr index L = index(simd::width<Arch>);
  const index ps = gemm_packed_stride(in);
  for (index n = 0; n < rows; ++n) {
    const float* src = x + n * x_stride;
    float* dst = xp + n * ps;
    index k = 0;
    if (order == gemm_x_order::pairs)
      for (; k + 2 * L <= in; k += 2 * L)
        for (index i = 0; i < L; ++i) {
          dst[k + i] = src[k + 2 * i];
          dst[k + L + i] = src[k + 2 * i + 1];
        }
    for (; k < in; ++k) dst[k] = src[k];
  }
}

/// One call of a register block: steps [k0, k1) of R weight rows and N packed x rows.
struct gemm_block_args {
  const unsigned char* w;        // weight row 0 of the block (rows `stride` bytes apart)
  index stride;
  const float* x;                // packed x row 0 of the block
  index x_stride;
  index k0, k1;                  // multiples of the step, k1 <= the body
  float* acc;                    // accumulator (i, j) at acc + i·acc_stride + j·L, unreduced
  index acc_stride;
  bool first;                    // start from 0 instead of acc
  const unsigned char* prefetch; // the next block's weight row 0 (nullptr: none)
  index prefetch_rows;
};

/// Half h of the weights of one step at p, widened to fp32.
template <class Arch, storage_type S>
inline simd::batch<float, Arch> gemm_weights(const unsigned char* p, int h) noexcept {
  const auto* q = reinterpret_cast<const std::uint16_t*>(p);
  if constexpr (S == storage_type::f32) return simd::load_reg<Arch>(reinterpret_cast<const float*>(p));
  else if constexpr (S == storage_type::bf16) return h == 0 ? simd::load_bf16_even<Arch>(q) : simd::load_bf16_odd<Arch>(q);
  else return simd::load_f16<Arch>(q + h * index(simd::width<Arch>));
}

template <class Arch, storage_type S, int R, int N>
void gemm_block(const gemm_block_args& a) noexcept {
  using B = simd::batch<float, Arch>;
  constexpr index L = index(simd::width<Arch>), E = element_bytes<S>;
  constexpr int H = S == storage_type::f32 ? 1 : 2;
  constexpr index step = gemm_step<Arch, S>;
  B acc[R][N];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < N; ++j) acc[i][j] = a.first ? B(0.0f) : simd::load<Arch>(a.acc + i * a.acc_stride + j * L);
  for (index k = a.k0; k < a.k1; k += step) {
#pragma GCC unroll 2
    for (int h = 0; h < H; ++h) {
      B xv[N];
#pragma GCC unroll 8
      for (int j = 0; j < N; ++j) xv[j] = simd::load_reg<Arch>(a.x + j * a.x_stride + k + h * L);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const B wv = gemm_weights<Arch, S>(a.w + i * a.stride + k * E, h);
#pragma GCC unroll 8
        for (int j = 0; j < N; ++j) acc[i][j] = simd::fma(wv, xv[j], acc[i][j]);
      }
    }
    if (a.prefetch)
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i)
        if (i < a.prefetch_rows) prefetch_l2(a.prefetch + i * a.stride + k * E);
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < N; ++j) simd::store(a.acc + i * a.acc_stride + j * L, acc[i][j]);
}

/// sums[q] = the lanes of accumulator q summed, for the n <= L accumulators at acc (L floats
/// apart), all at once by one simd::haddp (the rest of its rows zero): every pair's lanes go
/// through the same tree whatever n is, and L reductions cost about what one simd::hadd did
/// (BD32's step spent 8% of its time in per-pair hadds).
template <class Arch>
inline void gemm_reduce(const float* acc, index n, float* sums) noexcept {
  using B = simd::batch<float, Arch>;
  constexpr index L = index(simd::width<Arch>);
  B rows[L];
  for (index q = 0; q < L; ++q) rows[q] = q < n ? simd::load<Arch>(acc + q * L) : B(0.0f);
  simd::store(sums, simd::haddp(rows));
}

/// gemm_block<R, N> for runtime r <= R, n <= N.
template <class Arch, storage_type S, int R = gemm_w_rows<Arch>, int N = gemm_x_rows<Arch>>
void gemm_block_dispatch(int r, int n, const gemm_block_args& a) noexcept {
  if (r == R && n == N) return gemm_block<Arch, S, R, N>(a);
  if constexpr (N > 1)
    if (r == R) return gemm_block_dispatch<Arch, S, R, N - 1>(r, n, a);
  if constexpr (R > 1) return gemm_block_dispatch<Arch, S, R - 1, gemm_x_rows<Arch>>(r, n, a);
}

/// Output columns staged per panel before they are written to y: whole 64-byte lines of every y
/// row, and a multiple of the register block's weight rows.
inline constexpr index gemm_out_cols = 48;

/// The `nrows` x rows from xp (row stride ps) against the R weight rows at wr, the sums of each
/// pair (weight row i, x row n) into out[n·gemm_out_cols + i]. acc: the block's accumulators.
/// next: how many weight rows after the block to prefetch into L2 while the first x group runs.
template <class Arch, storage_type S>
void gemm_weight_block(const unsigned char* wr, index R, index stride, const float* xp, index ps, index nrows, index in,
                       index next, float* acc, float* out) noexcept {
  constexpr index L = index(simd::width<Arch>), E = element_bytes<S>;
  constexpr index NB = gemm_x_rows<Arch>, step = gemm_step<Arch, S>;
  const index body = in - in % step;
  for (index k0 = 0; k0 < body; k0 += gemm_pass) {
    const index k1 = std::min(body, k0 + gemm_pass);
    for (index j = 0; j < nrows; j += NB) {
      const bool pf = j == 0 && next > 0;
      const gemm_block_args a{wr, stride, xp + j * ps, ps, k0, k1, acc + j * L, gemm_max_x_rows * L, k0 == 0,
                              pf ? wr + R * stride : nullptr, next};
      gemm_block_dispatch<Arch, S>(int(R), int(std::min(NB, nrows - j)), a);
    }
  }
  for (index i = 0; i < R; ++i)
    for (index n1 = 0; n1 < nrows; n1 += L) {
      alignas(64) float sums[L] = {};
      const index group = std::min(L, nrows - n1);
      if (body > 0) gemm_reduce<Arch>(acc + (i * gemm_max_x_rows + n1) * L, group, sums);
      for (index n = n1; n < n1 + group; ++n) {
        const float* x = xp + n * ps;
        const unsigned char* row = wr + i * stride;
        float s = sums[n - n1];
        for (index k = body; k < in; ++k) s += weight_as_f32<S>(row + k * E) * x[k];
        out[n * gemm_out_cols + i] = s;
      }
    }
}

/// Values of k an E4M3 weight block widens at a time (gemm_w_rows rows of them, on the stack).
inline constexpr index gemm_e4m3_chunk = 512;

/// gemm_weight_block for E4M3 rows (scales in sc, row 0 at wr): each chunk of the block's rows is
/// widened exactly into fp32 (widen_e4m3_row) and run through the f32 register blocks, the
/// accumulators carried from chunk to chunk as between passes; the tail as in the f32 path over
/// the widened values. So every sum is the f32 path's over the dequantized weight, bit for bit.
template <class Arch>
void gemm_weight_block_e4m3(const unsigned char* wr, index R, index stride, const block_scales& sc, const float* xp,
                            index ps, index nrows, index in, float* acc, float* out) noexcept {
  constexpr index L = index(simd::width<Arch>), NB = gemm_x_rows<Arch>, WS = gemm_e4m3_chunk + 16;
  alignas(64) float wide[std::size_t(gemm_w_rows<Arch> * WS)];
  const index body = in - in % gemm_step<Arch, storage_type::f32>;
  for (index k0 = 0; k0 < body; k0 += gemm_e4m3_chunk) {
    const index k1 = std::min(body, k0 + gemm_e4m3_chunk);
    for (index i = 0; i < R; ++i) widen_e4m3_row<Arch>(wr + i * stride, sc, i, k0, k1 - k0, wide + i * WS);
    for (index j = 0; j < nrows; j += NB) {
      const gemm_block_args a{reinterpret_cast<const unsigned char*>(wide), WS * 4, xp + j * ps + k0, ps, 0, k1 - k0,
                              acc + j * L, gemm_max_x_rows * L, k0 == 0, nullptr, 0};
      gemm_block_dispatch<Arch, storage_type::f32>(int(R), int(std::min(NB, nrows - j)), a);
    }
  }
  for (index i = 0; i < R; ++i)
    for (index n1 = 0; n1 < nrows; n1 += L) {
      alignas(64) float sums[L] = {};
      const index group = std::min(L, nrows - n1);
      if (body > 0) gemm_reduce<Arch>(acc + (i * gemm_max_x_rows + n1) * L, group, sums);
      for (index n = n1; n < n1 + group; ++n) {
        const float* x = xp + n * ps;
        float s = sums[n - n1];
        for (index k = body; k < in; ++k) s += e4m3_to_float(wr[i * stride + k]) * sc.of(i, k) * x[k];
        out[n * gemm_out_cols + i] = s;
      }
    }
}

/// y[n, r] (row stride y_stride) = Σ_k W[r, k] · x[n, k] for the `count` weight rows at `w`
/// (`stride` bytes apart) and `rows` rows of x packed by gemm_pack_x<Arch>(gemm_order_for(S), ...)
/// at xp (row stride gemm_packed_stride(in)).
/// y is written gemm_out_cols columns at a time, row by row, from a staging panel: a register
/// block yields gemm_w_rows columns of every row (6 on AVX-512), and y's rows are often a
/// multiple of 4 KiB apart (BD32's q/gate/k/v projection: 9216 floats), so writing each block's
/// columns in place put 32 rows' lines in one L1 set. Measured on that projection (bf16, 32 rows,
/// one thread, 3 runs of 20): 9.6 ms written in place, 8.6 with y's rows padded apart, 8.2 staged
/// (with gemm_reduce).
template <class Arch, storage_type S>
void gemm_packed(const unsigned char* w, index stride, index count, const float* xp, index rows, index in, float* y,
                 index y_stride, const block_scales* sc = nullptr) noexcept {
  constexpr index L = index(simd::width<Arch>), RB = gemm_w_rows<Arch>;
  static_assert(gemm_out_cols % RB == 0, "a panel holds whole register blocks");
  const index ps = gemm_packed_stride(in);
  // Accumulators of one weight block: (weight row i, x row n) at acc + (i·gemm_max_x_rows + n)·L.
  alignas(64) float acc[std::size_t(RB * gemm_max_x_rows * L)];
  alignas(64) float out[std::size_t(gemm_max_x_rows * gemm_out_cols)];
  for (index p0 = 0; p0 < count; p0 += gemm_out_cols) {
    const index cols = std::min(gemm_out_cols, count - p0);
    for (index n0 = 0; n0 < rows; n0 += gemm_max_x_rows) {
      const index nrows = std::min(gemm_max_x_rows, rows - n0);
      for (index r0 = p0; r0 < p0 + cols; r0 += RB) {
        const index R = std::min(RB, count - r0);
        const index next = n0 == 0 ? std::min(RB, count - r0 - R) : 0;  // later chunks find them in L2
        if constexpr (S == storage_type::f8_e4m3)
          gemm_weight_block_e4m3<Arch>(w + r0 * stride, R, stride, sc->from_row(r0), xp + n0 * ps, ps, nrows, in, acc,
                                       out + (r0 - p0));
        else
          gemm_weight_block<Arch, S>(w + r0 * stride, R, stride, xp + n0 * ps, ps, nrows, in, next, acc, out + (r0 - p0));
      }
      for (index n = 0; n < nrows; ++n)
        std::copy(out + n * gemm_out_cols, out + n * gemm_out_cols + cols, y + (n0 + n) * y_stride + p0);
    }
  }
}

/// gemm_packed for a runtime storage type; `sc`: the block scales of f8_e4m3 rows (row 0 at w).
template <class Arch>
void gemm_packed(storage_type t, const void* w, index stride, index count, const float* xp, index rows, index in,
                 float* y, index y_stride, const block_scales* sc = nullptr) noexcept {
  const auto* p = static_cast<const unsigned char*>(w);
  switch (t) {
    case storage_type::f32: gemm_packed<Arch, storage_type::f32>(p, stride, count, xp, rows, in, y, y_stride); break;
    case storage_type::bf16: gemm_packed<Arch, storage_type::bf16>(p, stride, count, xp, rows, in, y, y_stride); break;
    case storage_type::f16: gemm_packed<Arch, storage_type::f16>(p, stride, count, xp, rows, in, y, y_stride); break;
    case storage_type::f8_e4m3:
      gemm_packed<Arch, storage_type::f8_e4m3>(p, stride, count, xp, rows, in, y, y_stride, sc);
      break;
  }
}

/// The 64-byte aligned start of at least n floats in v (grown, never shrunk).
inline float* gemm_thread_buffer(std::vector<float>& v, index n) {
  const std::size_t need = std::size_t(n) + 16;
  if (v.size() < need) v.resize(need);
  const auto addr = reinterpret_cast<std::uintptr_t>(v.data());
  return v.data() + ((64 - addr % 64) % 64) / sizeof(float);
}

/// y[n, r] (row stride y_stride) = Σ_k W[r, k] · x[n, k] for the `count` weight rows at `w`
/// (`stride` bytes apart) and `rows` rows of x: gemm_packed after packing x into a buffer of the
/// call's own. (linear_map packs once per call, into its caller's scratch, and calls gemm_packed
/// per tile.)
template <class Arch>
void gemm_rows(storage_type t, const void* w, index stride, index count, const float* x, index x_stride, index rows,
               index in, float* y, index y_stride, const block_scales* sc = nullptr) {
  std::vector<float> buffer;
  float* xp = gemm_thread_buffer(buffer, rows * gemm_packed_stride(in));
  gemm_pack_x<Arch>(gemm_order_for(t), x, x_stride, rows, in, xp);
  gemm_packed<Arch>(t, w, stride, count, xp, rows, in, y, y_stride, sc);
}

/// y[n, c] (row stride y_stride) = Σ_k x[n, k] · W[k, c] for the `k_count` weight rows at `w`
/// (`stride` bytes apart, `cols` values used of each) and `rows` rows of x: a product with the
/// weight NOT transposed (MLA's q_nope · W_uk), reading W in its stored dtype. Each x element is
/// broadcast over four vectors of a weight row; the sum over k runs in order, in fp32.
template <class Arch, storage_type S>
void gemm_cols(const unsigned char* w, index stride, index k_count, index cols, const float* x, index x_stride,
               index rows, float* y, index y_stride) noexcept {
  using B = simd::batch<float, Arch>;
  constexpr index L = index(simd::width<Arch>), E = element_bytes<S>;
  for (index n = 0; n < rows; ++n) {
    const float* xn = x + n * x_stride;
    float* yn = y + n * y_stride;
    index c = 0;
    for (; c + 4 * L <= cols; c += 4 * L) {
      B acc[4] = {B(0.0f), B(0.0f), B(0.0f), B(0.0f)};
      for (index k = 0; k < k_count; ++k) {
        const B xb = simd::broadcast<Arch>(xn[k]);
        for (int i = 0; i < 4; ++i)
          acc[i] = simd::fma(load_weights_as_f32<Arch, S>(w + k * stride + (c + i * L) * E), xb, acc[i]);
      }
      for (int i = 0; i < 4; ++i) simd::store(yn + c + i * L, acc[i]);
    }
    for (; c + L <= cols; c += L) {
      B acc(0.0f);
      for (index k = 0; k < k_count; ++k)
        acc = simd::fma(load_weights_as_f32<Arch, S>(w + k * stride + c * E), simd::broadcast<Arch>(xn[k]), acc);
      simd::store(yn + c, acc);
    }
    for (; c < cols; ++c) {
      float s = 0.0f;
      for (index k = 0; k < k_count; ++k) s += xn[k] * weight_as_f32<S>(w + k * stride + c * E);
      yn[c] = s;
    }
  }
}

/// gemm_cols for E4M3 weights (scales in sc, row 0 at w): each weight vector widened and times
/// its lanes' scales (one rounding, as weight_view::at), then the f32 path's FMA. The lanes'
/// scales change only at block edges: they are gathered when k enters a new block row.
template <class Arch>
void gemm_cols_e4m3(const unsigned char* w, index stride, const block_scales& sc, index k_count, index cols,
                    const float* x, index x_stride, index rows, float* y, index y_stride) noexcept {
  using B = simd::batch<float, Arch>;
  constexpr index L = index(simd::width<Arch>);
  for (index n = 0; n < rows; ++n) {
    const float* xn = x + n * x_stride;
    float* yn = y + n * y_stride;
    index c = 0;
    for (; c + L <= cols; c += L) {
      alignas(64) float lane_scale[L];
      B acc(0.0f), scale(0.0f);
      for (index k = 0; k < k_count; ++k) {
        if (k == 0 || (sc.row0 + k) % sc.block_rows == 0) {
          for (index l = 0; l < L; ++l) lane_scale[l] = sc.of(k, c + l);
          scale = simd::load<Arch>(lane_scale);
        }
        acc = simd::fma(simd::load_e4m3<Arch>(w + k * stride + c) * scale, simd::broadcast<Arch>(xn[k]), acc);
      }
      simd::store(yn + c, acc);
    }
    for (; c < cols; ++c) {
      float s = 0.0f;
      for (index k = 0; k < k_count; ++k) s += xn[k] * (e4m3_to_float(w[k * stride + c]) * sc.of(k, c));
      yn[c] = s;
    }
  }
}

/// gemm_cols for a runtime storage type; `sc`: the block scales of f8_e4m3 rows (row 0 at w).
template <class Arch>
void gemm_cols(storage_type t, const void* w, index stride, index k_count, index cols, const float* x, index x_stride,
               index rows, float* y, index y_stride, const block_scales* sc = nullptr) noexcept {
  const auto* p = static_cast<const unsigned char*>(w);
  switch (t) {
    case storage_type::f32: gemm_cols<Arch, storage_type::f32>(p, stride, k_count, cols, x, x_stride, rows, y, y_stride); break;
    case storage_type::bf16: gemm_cols<Arch, storage_type::bf16>(p, stride, k_count, cols, x, x_stride, rows, y, y_stride); break;
    case storage_type::f16: gemm_cols<Arch, storage_type::f16>(p, stride, k_count, cols, x, x_stride, rows, y, y_stride); break;
    case storage_type::f8_e4m3: gemm_cols_e4m3<Arch>(p, stride, *sc, k_count, cols, x, x_stride, rows, y, y_stride); break;
  }
}

}  GATTN_NAMESPACE_END  // namespace gattn::detail
