// The fused SDPA-then-gate kernel: flash attention on a CPU (online softmax over key tiles, no
// T×T matrix), with the output norm and the G1 gate applied per row before the single store.
//
// Layout of the computation, per work unit = one KV head r × a block of Br queries of all G query
// heads of that group, stacked into M = G·Br rows (row m = query i0 + m / G, head r·G + m % G), so
// each K/V tile is read once per group:
//   Qt  = (scale·Q_unit)ᵀ, packed once per unit           [d_qk][M_pad]   (M_pad = M rounded up to W)
//   for each key tile [j0, j0 + nk), nk <= Bc, skipping tiles the causal mask hides entirely:
//     Sᵀ = K_tile · Qt      (microkernel: broadcast K[j][c], load Qt rows; K is read in place)
//     online softmax down each column of Sᵀ = across keys, W rows per vector, no horizontal ops;
//       masking only on tiles that cross the diagonal
//     O  = alpha·O + Pᵀᵀ·V  (microkernel: broadcast P[m][j] from Sᵀ, load V rows in place)
//   epilogue per row: O / l (0 for a row without keys), RMSNorm, gate, one store.
// Decode (t_q <= 4 and G·t_q <= 64, see use_decode_path): a dedicated path (decode_sdpa in decode.hpp):
// scores as dot products along d with the G·t_q rows of a KV head against KB keys at a time
// (register accumulators reduced by one haddp), token-row-major streaming of all KV heads (for
// both Q·Kᵀ and P·V), online softmax per row along a key block, key splits across threads
// (flash-decoding, several per thread, dynamic schedule) merged in split order (deterministic).
// Other few-row shapes (t_q > 4 with G·br <= 2W) use the interleaved unit path: a task runs every
// unit over its key split tile by tile, prefetching the next tile of all KV heads, and the partial
// (m, l, O) states of the splits are merged in split order before the epilogue.
// K/V stored as bf16/f16 (sdpa_params::kv_type, docs/spec.md §10 exact numerics): every path takes the
// element type as a template parameter; the unit paths widen each K and V tile into the unit's
// scratch (kpack, vpack) as they reach it, the decode path widens on load, so no widened copy of
// the cache is ever made and the arithmetic is the fp32 path's.
// numerics fast (sdpa_params::products, docs/spec.md §10): the unit paths compute Q·Kᵀ and P·V on
// bf16 operands with fp32 accumulation (kernel/prefill_bf16.hpp, an instantiation of its own per
// engine: vdpbf16ps or FMAs); the decode path ignores it. Exact is the same code as without it.
// Paged K/V (sdpa_params::block_table, docs/spec.md §11): every K/V row address comes from
// detail::key_row / value_row; a unit's key tile and a decode V group are cut at block ends (a
// tile is read in place with one row stride), decode maps each key's row pointer through the
// table, and the software prefetch walks the table (cache_stream::with_blocks). No gather copy.
// Threads: every parallel loop is execution_context::parallel_for (p.exec, or an OpenMP team of
// p.threads), and the plan (key splits) follows its concurrency(); fused_sdpa_batch runs many
// problems on one context.
// Scratch: the caller's (sdpa_params::scratch, sized by sdpa_scratch_floats), carved into the split
// partials [unit][split][row](O | m | l) and one slot per worker of the context (see unit_scratch in
// scratch.hpp for a unit's layout); the kernel's loops run as workers taking tasks from a counter
// (detail::for_each_task), so a slot is never shared. Without it a call allocates its own.
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "gattn/core/config.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/execution.hpp"
#include "gattn/core/scratch_span.hpp"
#include "gattn/core/types.hpp"
#include "gattn/kernel/decode.hpp"
#include "gattn/kernel/epilogue.hpp"
#include "gattn/kernel/kernel_traits.hpp"
#include "gattn/kernel/online_softmax.hpp"
#include "gattn/kernel/prefill_unit.hpp"
#include "gattn/kernel/scratch.hpp"
#include "gattn/kernel/sdpa_params.hpp"
#include "gattn/simd/arch.hpp"
#include "gattn/simd/simd.hpp"

GATTN_NAMESPACE_BEGIN

/// Fused scaled-dot-product attention with the output norm and gate in the epilogue.
/// Validates shapes (throws gattn::shape_error naming the field), allocates nothing when
/// p.scratch holds sdpa_scratch_floats(p, concurrency) floats, and never forms a T×T matrix.
/// Deterministic: bitwise identical results for a fixed concurrency (thread count or
/// p.exec->concurrency(); a call inside an OpenMP parallel region runs serially).
template <class Arch = default_arch>
void fused_sdpa(const sdpa_params& p);

namespace detail {

/// KV head r and query block qb of unit u. Causal: later query blocks see more keys, so they go
/// first (better dynamic balance).
struct unit_coord {
  index r, qb;
};
inline unit_coord unit_coords(const sdpa_params& p, const sdpa_plan& pl, index u) {
  const index rev = pl.units - 1 - u;
  return {rev % p.kv_heads, rev / p.kv_heads};
}

/// Split-KV partial states: [unit][split][row_pad] blocks of (O | m | l), dv_pad + 2 floats a row.
inline index partial_row_floats(const sdpa_plan& pl) { return pl.dv_pad + 2; }
template <class T>  // float or const float
inline T* partial_block(T* partials, const sdpa_plan& pl, index u, index sp) {
  return partials + (u * pl.splits + sp) * pl.rows_pad * partial_row_floats(pl);
}

/// The epilogue of unit (r, qb): each row's O / l, RMSNorm and gate, one store (and its lse).
/// Elementwise gate scores are prefetched gate_prefetch_rows rows ahead.
template <class Arch>
inline void finish_unit(const sdpa_params& p, const sdpa_plan& pl, const unit_scratch& sc, unit_coord c) {
  const index i0 = c.qb * pl.br;
  const index valid_rows = std::min(pl.br, p.t_q - i0) * pl.group;
  auto prefetch_gate = [&](index m) { prefetch_gate_row(p, i0 + m / pl.group, c.r * pl.group + m % pl.group); };
  for (index m = 0; m < std::min(valid_rows, gate_prefetch_rows); ++m) prefetch_gate(m);
  for (index m = 0; m < valid_rows; ++m) {
    if (m + gate_prefetch_rows < valid_rows) prefetch_gate(m + gate_prefetch_rows);
    const index i = i0 + m / pl.group;
    const index h = c.r * pl.group + m % pl.group;
    const softmax_row sr{sc.m[m], sc.l[m], visible_keys(p, i) > 0};
    if (p.lse) p.lse[h * p.t_q + i] = sr.lse();
    finish_row<Arch>(p, sc.o + m * pl.dv_pad, sr.inv_l(), i, h);
  }
}

/// A unit's state after key split sp, kept for merge_unit.
inline void save_partial(const sdpa_plan& pl, const unit_scratch& sc, float* partials, index u, index sp) {
  const index rf = partial_row_floats(pl);
  float* dst = partial_block(partials, pl, u, sp);
  for (index m = 0; m < pl.rows_pad; ++m) {
    std::memcpy(dst + m * rf, sc.o + m * pl.dv_pad, sizeof(float) * std::size_t(pl.dv_pad));
    dst[m * rf + pl.dv_pad] = sc.m[m];
    dst[m * rf + pl.dv_pad + 1] = sc.l[m];
  }
}

/// A unit's state once it has run over its keys: the epilogue, or a partial when keys are split.
template <class Arch>
inline void end_unit(const sdpa_params& p, const sdpa_plan& pl, const unit_scratch& sc, float* partials, index u,
                     index sp) {
  if (pl.splits == 1) finish_unit<Arch>(p, pl, sc, unit_coords(p, pl, u));
  else save_partial(pl, sc, partials, u, sp);
}

/// Prefill task: one unit over one key split (tasks split-major).
template <class Arch, storage_type S, prefill_products E>
inline void unit_task(const sdpa_params& p, const sdpa_plan& pl, float* partials, index task, float* slot) {
  const unit_scratch sc = carve(slot, p, pl, kernel_traits<Arch>::block_keys);
  const index sp = task / pl.units, u = task % pl.units;
  const unit_coord c = unit_coords(p, pl, u);
  const index k_begin = sp * pl.split_len, k_end = std::min(p.t_k, k_begin + pl.split_len);
  run_unit<Arch, S, E>(p, pl, sc, c.r, c.qb, k_begin, k_end);
  end_unit<Arch>(p, pl, sc, partials, u, sp);
}

/// Interleaved task: every unit over key split sp, tile by tile (one unit_scratch per unit, back to
/// back), the next tile's K and V rows of all KV heads prefetched in address order, a share per
/// unit's work.
template <class Arch, storage_type S, prefill_products E>
inline void interleaved_task(const sdpa_params& p, const sdpa_plan& pl, float* partials, index sp, float* slot) {
  constexpr index bc = kernel_traits<Arch>::block_keys;
  const index per_unit = scratch_round(index(pl.scratch_floats));
  unit_info* info = reinterpret_cast<unit_info*>(slot + pl.units * per_unit);
  auto scratch_of = [&](index u) { return carve(slot + u * per_unit, p, pl, bc); };
  const index k_begin = sp * pl.split_len, k_end = std::min(p.t_k, k_begin + pl.split_len);
  index k_last = k_begin;  // end of the keys any unit sees in this split
  for (index u = 0; u < pl.units; ++u) {
    const unit_coord c = unit_coords(p, pl, u);
    ::new (static_cast<void*>(info + u)) unit_info(unit_begin<Arch>(p, pl, scratch_of(u), c.r, c.qb));
    k_last = std::max(k_last, std::min(k_end, info[std::size_t(u)].max_lim));
  }
  cache_stream k_stream = cache_stream(stored_k<S>(p), p.k_token_stride, p.kv_heads, p.k_head_stride, p.d_qk, k_last, 0)
                              .with_blocks(p.block_table, p.block_size, p.k_block_stride);
  cache_stream v_stream = cache_stream(stored_v<S>(p), p.v_token_stride, p.kv_heads, p.v_head_stride, p.d_v, k_last, 0)
                              .with_blocks(p.block_table, p.block_size, p.v_block_stride);
  k_stream.ahead = v_stream.ahead = bc;
  const bool v_in_k = v_inside_k<S>(p);
  k_stream.prefetch_share(k_begin - bc, bc, 0, 1);
  if (!v_in_k) v_stream.prefetch_share(k_begin - bc, bc, 0, 1);
  for (index j0 = k_begin; j0 < k_last; j0 += bc) {
    for (index u = 0; u < pl.units; ++u) {
      k_stream.prefetch_share(j0, bc, u, pl.units);
      if (!v_in_k) v_stream.prefetch_share(j0, bc, u, pl.units);
      const index k_end_u = std::min(k_end, info[std::size_t(u)].max_lim);
      if (j0 < k_end_u) unit_tile<Arch, S, E>(p, pl, scratch_of(u), info[std::size_t(u)], j0, std::min(bc, k_end_u - j0));
    }
  }
  for (index u = 0; u < pl.units; ++u) end_unit<Arch>(p, pl, scratch_of(u), partials, u, sp);
}

/// The split partial states of unit u merged row by row in split order (merge_splits), then its
/// epilogue.
template <class Arch>
inline void merge_unit(const sdpa_params& p, const sdpa_plan& pl, const float* partials, index u, float* slot) {
  const unit_scratch sc = carve(slot, p, pl, kernel_traits<Arch>::block_keys);
  const index rf = partial_row_floats(pl);
  const float* part = partial_block(partials, pl, u, 0);
  for (index m = 0; m < pl.rows_pad; ++m)
    merge_splits(part + m * rf, pl.rows_pad * rf, pl.splits, pl.dv_pad, sc.o + m * pl.dv_pad, sc.m[m], sc.l[m]);
  finish_unit<Arch>(p, pl, sc, unit_coords(p, pl, u));
}

/// The unit paths' scratch: the split partials, and a slot per worker holding one unit's scratch
/// (interleaved: every unit's, then their unit_info).
inline worker_scratch_layout unit_layout(const sdpa_plan& pl, int concurrency) {
  worker_scratch_layout l;
  l.shared = pl.splits > 1 ? pl.units * pl.splits * pl.rows_pad * partial_row_floats(pl) : 0;
  l.slot = index(pl.scratch_floats);
  if (pl.interleave)
    l.slot = pl.units * scratch_round(index(pl.scratch_floats)) +
             (pl.units * index(sizeof(unit_info)) + index(sizeof(float)) - 1) / index(sizeof(float));
  const index tasks = pl.interleave ? pl.splits : pl.units * pl.splits;
  l.workers = workers_for(pl.splits > 1 ? std::max(tasks, pl.units) : tasks, concurrency);
  return l;
}

/// The unit (prefill and interleaved) paths of fused_sdpa for K/V stored as S with products E: both
/// are compile-time parameters, so the fp32 loops are the same code as without them.
template <class Arch, storage_type S, prefill_products E>
void unit_sdpa(const sdpa_params& p, const execution_context& exec) {
  const sdpa_plan pl = make_plan<Arch>(p, exec.concurrency());
  const worker_scratch_layout layout = unit_layout(pl, exec.concurrency());
  std::vector<float> own;  // stays empty when p.scratch is large enough
  const worker_scratch scratch = carve_workers(p.scratch, layout, own);
  float* partials = pl.splits > 1 ? scratch.shared : nullptr;
  const index workers = layout.workers;
  if (pl.interleave)
    for_each_task(exec, pl.splits, workers,
                  [&](index sp, index w) { interleaved_task<Arch, S, E>(p, pl, partials, sp, scratch.slot(w)); });
  else
    for_each_task(exec, pl.units * pl.splits, workers,
                  [&](index task, index w) { unit_task<Arch, S, E>(p, pl, partials, task, scratch.slot(w)); });
  if (pl.splits > 1)
    for_each_task(exec, pl.units, workers, [&](index u, index w) { merge_unit<Arch>(p, pl, partials, u, scratch.slot(w)); });
}

}  // namespace detail

namespace detail {
/// The unit paths with products E for p's storage type.
template <class Arch, prefill_products E>
void unit_sdpa_stored(const sdpa_params& p, const execution_context& exec) {
  switch (p.kv_type) {
    case storage_type::bf16: unit_sdpa<Arch, storage_type::bf16, E>(p, exec); return;
    case storage_type::f16: unit_sdpa<Arch, storage_type::f16, E>(p, exec); return;
    case storage_type::f8_e4m3: break;  // refused before any kernel runs
    case storage_type::f32: break;
  }
  unit_sdpa<Arch, storage_type::f32, E>(p, exec);
}

/// Runs a validated p on `exec` (the caller's context, or p.exec, or OpenMP with p.threads).
template <class Arch>
void fused_sdpa_on(const sdpa_params& p, const execution_context& exec) {
  if (p.t_q == 0) return;
  if (use_decode_path(p)) {
    decode_sdpa<Arch>(p, exec);
    return;
  }
  switch (prefill_engine<Arch>(p)) {
    case prefill_products::bf16_dp:
      if constexpr (prefill_native_bf16<Arch>) return unit_sdpa_stored<Arch, prefill_products::bf16_dp>(p, exec);
      [[fallthrough]];
    case prefill_products::bf16_fma: unit_sdpa_stored<Arch, prefill_products::bf16_fma>(p, exec); return;
    case prefill_products::fp32: break;
  }
  unit_sdpa_stored<Arch, prefill_products::fp32>(p, exec);
}
}  // namespace detail

template <class Arch>
void fused_sdpa(const sdpa_params& p) {
  detail::validate(p);
  if (p.exec != nullptr) detail::fused_sdpa_on<Arch>(p, *p.exec);
  else detail::fused_sdpa_on<Arch>(p, execution_context::with_threads(p.threads));
}

/// Floats of scratch (sdpa_params::scratch) that fused_sdpa needs for p's shape and t_q on a
/// context of `concurrency` threads, for any t_k: the plan is taken at the most key splits a
/// context can have, so one size serves every length of the cache.
template <class Arch = default_arch>
index sdpa_scratch_floats(const sdpa_params& p, int concurrency) {
  if (p.t_q <= 0 || p.q_heads <= 0 || p.kv_heads <= 0 || p.q_heads % p.kv_heads != 0) return 0;
  sdpa_params longest = p;
  longest.t_k = index(1) << 40;
  const int c = std::max(1, concurrency);
  if (detail::use_decode_path(p)) return detail::decode_layout(detail::make_decode_plan<Arch>(longest, c), c).floats();
  return detail::unit_layout(detail::make_plan<Arch>(longest, c), c).floats();
}

/// A batch of independent problems (docs/spec.md §11: e.g. one per sequence, prefill chunks and decode
/// tokens mixed; each problem's exec field is ignored). `scratch` serves the problems that run
/// with the whole context (unless they bring their own) or is split into one slot per worker when
/// they run one per thread (their own scratch is then unused). Each problem is validated before any runs.
/// When count >= exec.concurrency(), the problems run in parallel, each on one thread (a batch of
/// single-token decodes fills the threads); otherwise one after the other, each with the whole
/// context. Each output is what that problem gives alone on the same context (bitwise when
/// count < concurrency; on one thread otherwise); deterministic for fixed inputs and concurrency.
template <class Arch = default_arch>
void fused_sdpa_batch(const sdpa_params* problems, index count, const execution_context& exec,
                      scratch_span scratch = {}) {
  detail::require<shape_error>(count >= 0 && (count == 0 || problems != nullptr), "fused_sdpa_batch: count=", count,
                               problems == nullptr ? " with problems null" : " must be >= 0");
  for (index i = 0; i < count; ++i) detail::validate(problems[i]);
  if (count >= exec.concurrency()) {
    const execution_context one = execution_context::serial();
    detail::worker_scratch_layout layout;
    for (index i = 0; i < count; ++i) layout.slot = std::max(layout.slot, sdpa_scratch_floats<Arch>(problems[i], 1));
    layout.workers = detail::workers_for(count, exec.concurrency());
    std::vector<float> own;  // stays empty when `scratch` is large enough
    const detail::worker_scratch slots = detail::carve_workers(scratch, layout, own);
    detail::for_each_task(exec, count, layout.workers, [&](index i, index w) {
      sdpa_params p = problems[i];
      p.scratch = {slots.slot(w), layout.slot};
      detail::fused_sdpa_on<Arch>(p, one);
    });
    return;
  }
  for (index i = 0; i < count; ++i) {
    sdpa_params p = problems[i];
    if (p.scratch.data == nullptr) p.scratch = scratch;
    detail::fused_sdpa_on<Arch>(p, exec);
  }
}

GATTN_NAMESPACE_END  // namespace gattn
