// Dense projections y[T, out] = x[T, in] · Wᵀ + b on row-major buffers, reading W where it lives
// and in the dtype it is stored in (f32, bf16, f16, block-scaled E4M3), accumulating in fp32.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gattn/core/config.hpp"
#include "gattn/core/cpu.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/execution.hpp"
#include "gattn/core/scratch_span.hpp"
#include "gattn/core/types.hpp"
#include "gattn/core/weights.hpp"
#include "gattn/linalg/gemm.hpp"
#include "gattn/linalg/gemm_fast.hpp"
#include "gattn/linalg/gemv.hpp"
#include "gattn/linalg/packed_gemm.hpp"
#include "gattn/linalg/packed_gemm_fast.hpp"
#include "gattn/linalg/weight_rows.hpp"
#include "gattn/simd/arch.hpp"

GATTN_NAMESPACE_BEGIN

/// How a linear_map's cache-blocked GEMM computes: `exact` takes x and the weights as they are;
/// `fast` rounds both to bf16 (fp32 accumulation, vdpbf16ps where the build has AVX512-BF16),
/// about twice the throughput, within the `fast` tolerance of docs/spec.md §10 (1e-2·max|y|).
/// The layers' config field `numerics` (core/config.hpp) is this enum, passed on unchanged.
using gemm_numerics = gattn::numerics;

/// Rows [first, first + count) of `weight` (count < 0: to the last row), with the same rows of an
/// optional bias. A linear map's output columns are its segments in order.
struct weight_segment {
  weight_view weight;
  index first = 0;
  index count = -1;
  const weight_view* bias = nullptr;  ///< read at construction only
};

/// A linear map in nn.Linear layout over one or more row segments of typed weight views. The map
/// holds views, not copies (only the bias is widened, `out` floats): the weights' memory must
/// outlive it unless the views carry a keep-alive.
class linear_map {
 public:
  /// Up to this many rows go through the GEMV path instead of a GEMM.
  static constexpr index gemv_rows = 2;
  /// Up to this many rows go through the register-blocked small GEMM (detail::gemm_packed, weights
  /// in their stored dtype, x packed once per call); more go to the cache-blocked GEMM
  /// (detail::packed_gemm_tile: x packed per chunk of rows, W widened per k-block), whose packing
  /// pays off once x has enough rows (its register block is 32 rows of x on AVX-512, and each tile
  /// widens its weights once per chunk). On AVX-512 (2304 x 2048 weights, one thread, Zen 5) the
  /// small GEMM still led at 64 rows (f32 82 against 75 GFLOP/s, bf16 88 against 81) and the two
  /// met near 96; bench proj/gemm/... at n:64 and n:128 show the crossover on the L1 projection.
  /// A map mixing dtypes takes the smallest limit.
  static constexpr index small_gemm_rows_f32 = 64;
  static constexpr index small_gemm_rows_16bit = 64;
  static constexpr index small_gemm_rows(storage_type t) {
    return t == storage_type::f32 ? small_gemm_rows_f32 : small_gemm_rows_16bit;
  }
  /// Output rows per unit of parallel work in the GEMV and the small GEMM (enough units to balance
  /// a team).
  static constexpr index gemv_tile_rows = 64;
  /// Output rows per tile of the cache-blocked GEMM (a unit of parallel work): a tile's W k-block
  /// and its transposed y live in the worker's scratch slot.
  static constexpr index gemm_panel_rows = detail::pgemm_tile_cols;

  linear_map() = default;
  linear_map(const weight_view& w, const weight_view* b) : linear_map(std::vector<weight_segment>{{w, 0, -1, b}}) {}
  explicit linear_map(const std::vector<weight_segment>& segments) {
    for (const weight_segment& s : segments) add(s);
  }

  index out() const { return out_; }
  index in() const { return in_; }
  /// Bytes of weights one application reads.
  index weight_bytes() const {
    index b = 0;
    for (const part& p : parts_) b += p.w.bytes();
    return b;
  }

  /// y (rows × out, row stride y_stride) = x (rows × in, row stride x_stride) · Wᵀ + b.
  /// `scratch` (at least scratch_floats(rows, exec.concurrency()) floats) holds x packed for the
  /// GEMMs and each worker's slot of the cache-blocked one; without it the call allocates its own.
  void apply(const float* x, index rows, index x_stride, float* y, index y_stride,
             const execution_context& exec = execution_context{}, scratch_span scratch = {}) const {
    apply(x, rows, x_stride, y, y_stride, gemm_numerics::exact, exec, scratch);
  }

  /// apply() with a choice of numerics. `fast` changes the cache-blocked GEMM (more rows than the
  /// small GEMM takes) and the small GEMM over bf16 weights (gemm_fast.hpp); the GEMV (up to
  /// gemv_rows rows) and the small GEMM over f32/f16 weights compute exactly either way. Same scratch.
  void apply(const float* x, index rows, index x_stride, float* y, index y_stride, gemm_numerics numerics,
             const execution_context& exec = execution_context{}, scratch_span scratch = {}) const {
    if (rows <= 0 || out_ == 0) return;
    const execution_context& team = team_for(exec);
    if (rows <= gemv_rows) {
      team.parallel_for(index(gemv_tiles_.size()),
                        [&](index i) { gemv_tile(gemv_tiles_[std::size_t(i)], x, rows, x_stride, y, y_stride); });
      return;
    }
    const detail::worker_scratch_layout layout = scratch_layout(rows, team.concurrency());
    std::vector<float> own;  // stays empty when `scratch` is large enough
    const detail::worker_scratch sc = detail::carve_workers(scratch, layout, own);
    if (rows <= small_gemm_limit_) small_gemm(x, rows, x_stride, y, y_stride, team, sc.shared, numerics);
    else large_gemm(x, rows, x_stride, y, y_stride, team, layout.workers, sc, numerics);
  }

  /// Floats of scratch that serve every apply() of up to max_rows rows on `concurrency` threads.
  index reserve_floats(index max_rows, int concurrency) const {
    return std::max(scratch_floats(std::min(max_rows, small_gemm_limit_), concurrency),
                    scratch_floats(max_rows, concurrency));
  }

  /// Floats of scratch apply() needs for `rows` rows on a context of `concurrency` threads.
  index scratch_floats(index rows, int concurrency) const {
    if (rows <= gemv_rows || out_ == 0) return 0;
    const bool small = weight_bytes() < small_map_bytes;
    return scratch_layout(rows, small ? 1 : concurrency).floats();
  }

 private:
  struct part {
    weight_view w;  // exactly the rows used
    index out_first;
  };
  struct tile {  // rows [first, first + count) of parts_[part_index]
    index part_index, first, count;
  };

  std::vector<part> parts_;
  std::vector<tile> gemv_tiles_, gemm_tiles_;
  std::vector<float> bias_;  // empty: no bias
  index in_ = 0, out_ = 0;
  index small_gemm_limit_ = small_gemm_rows_16bit;
  bool has_natural_ = false, has_pairs_ = false;  // packing orders of the small GEMM that the parts need
  execution_context serial_ = execution_context::serial();

  /// Maps reading fewer weight bytes run on the calling thread: a few microseconds of team start-up
  /// dwarf them.
  static constexpr index small_map_bytes = index(1) << 18;
  const execution_context& team_for(const execution_context& exec) const {
    return weight_bytes() < small_map_bytes ? serial_ : exec;
  }

  /// The small GEMM's x packed once (shared by every tile, one copy per packing order the map's
  /// dtypes need: f32 and f16 share the natural order, bf16 takes pairs); for more rows, one
  /// chunk of x packed for the cache-blocked GEMM (shared) and a slot per worker.
  detail::worker_scratch_layout scratch_layout(index rows, int concurrency) const {
    detail::worker_scratch_layout l;
    if (rows <= small_gemm_limit_) {
      l.shared = detail::scratch_round(rows * detail::gemm_packed_stride(in_)) * (index(has_natural_) + index(has_pairs_));
      return l;
    }
    l.shared = detail::pgemm_x_floats<default_arch>(rows, in_);
    l.workers = detail::workers_for(index(gemm_tiles_.size()), concurrency);
    l.slot = detail::pgemm_slot_floats;
    return l;
  }

  /// The small GEMM, x packed into `packed_base` (scratch_layout's shared floats). With `fast`, the
  /// bf16 weights' copy of x (the `pairs` one) is x rounded to bf16 instead (gemm_fast_pack_x: it
  /// takes no more floats), and their tiles run gemm_fast.hpp.
  void small_gemm(const float* x, index rows, index x_stride, float* y, index y_stride, const execution_context& team,
                  float* packed_base, gemm_numerics numerics) const {
    const bool fast = numerics == gemm_numerics::fast, dot_products = fast && bf16_dot_products_wanted();
    const index per_order = detail::scratch_round(rows * detail::gemm_packed_stride(in_));
    float* p = packed_base;
    const float* packed[2] = {nullptr, nullptr};  // by detail::gemm_x_order
    for (detail::gemm_x_order o : {detail::gemm_x_order::natural, detail::gemm_x_order::pairs}) {
      if (!(o == detail::gemm_x_order::pairs ? has_pairs_ : has_natural_)) continue;
      if (fast && o == detail::gemm_x_order::pairs)
        detail::gemm_fast_pack_x<default_arch>(x, x_stride, rows, in_, reinterpret_cast<std::uint16_t*>(p));
      else
        detail::gemm_pack_x<default_arch>(o, x, x_stride, rows, in_, p);
      packed[int(o)] = p;
      p += per_order;
    }
    team.parallel_for(index(gemv_tiles_.size()), [&](index i) {
      const tile& t = gemv_tiles_[std::size_t(i)];
      const storage_type type = parts_[std::size_t(t.part_index)].w.type();
      const float* xp = packed[int(detail::gemm_order_for(type))];
      if (fast && type == storage_type::bf16) small_gemm_fast_tile(t, xp, rows, y, y_stride, dot_products);
      else small_gemm_tile(t, xp, rows, y, y_stride);
    });
  }

  void add(const weight_segment& s) {
    const weight_view& w = s.weight;
    const index count = s.count < 0 ? w.rows() - s.first : s.count;
    if (parts_.empty() && out_ == 0) in_ = w.cols();
    detail::require<shape_error>(w.cols() == in_, "linear_map: a segment has ", w.cols(), " input columns, the map ",
                                 in_, " (shape ", shape_string(w.shape()), ")");
    const weight_view rows = w.row_range(s.first, count);
    if (s.bias) {
      detail::require<shape_error>(s.bias->rows() == w.rows() && s.bias->cols() == 1, "linear_map: bias of shape ",
                                   shape_string(s.bias->shape()), " for a weight of ", w.rows(), " rows");
      if (bias_.empty()) bias_.assign(std::size_t(out_), 0.0f);
      const std::vector<float> b = s.bias->row_range(s.first, count).widened();
      bias_.insert(bias_.end(), b.begin(), b.end());
    } else if (!bias_.empty()) {
      bias_.resize(std::size_t(out_ + count), 0.0f);
    }
    const index part_index = index(parts_.size());
    parts_.push_back({rows, out_});
    small_gemm_limit_ = std::min(small_gemm_limit_, small_gemm_rows(w.type()));
    (detail::gemm_order_for(w.type()) == detail::gemm_x_order::pairs ? has_pairs_ : has_natural_) = true;
    for (index r = 0; r < count; r += gemv_tile_rows)
      gemv_tiles_.push_back({part_index, r, std::min(gemv_tile_rows, count - r)});
    for (index r = 0; r < count; r += gemm_panel_rows)
      gemm_tiles_.push_back({part_index, r, std::min(gemm_panel_rows, count - r)});
    out_ += count;
  }

  const void* tile_rows(const tile& t) const { return parts_[std::size_t(t.part_index)].w.row(t.first); }
  /// The block scales of an E4M3 tile's rows (row 0 at tile_rows), or nothing.
  struct tile_scales {
    block_scales scales;
    const block_scales* get() const { return scales.data ? &scales : nullptr; }
  };
  tile_scales scales_of(const tile& t) const {
    const block_scales* s = parts_[std::size_t(t.part_index)].w.scales();
    return {s ? s->from_row(t.first) : block_scales{}};
  }
  index tile_out(const tile& t) const { return parts_[std::size_t(t.part_index)].out_first + t.first; }

  void add_bias(const tile& t, index rows, float* y, index y_stride) const {
    if (bias_.empty()) return;
    const index o = tile_out(t);
    for (index r = 0; r < rows; ++r)
      for (index c = 0; c < t.count; ++c) y[r * y_stride + o + c] += bias_[std::size_t(o + c)];
  }

  void gemv_tile(const tile& t, const float* x, index rows, index x_stride, float* y, index y_stride) const {
    const weight_view& w = parts_[std::size_t(t.part_index)].w;
    const index stride = w.row_stride() * storage_bytes(w.type());
    const tile_scales sc = scales_of(t);
    for (index r = 0; r < rows; ++r)
      detail::gemv_rows<default_arch>(w.type(), tile_rows(t), stride, t.count, x + r * x_stride, in_,
                                      y + r * y_stride + tile_out(t), sc.get());
    add_bias(t, rows, y, y_stride);
  }

  /// xp: x packed by detail::gemm_pack_x in the order of this tile's dtype.
  void small_gemm_tile(const tile& t, const float* xp, index rows, float* y, index y_stride) const {
    const weight_view& w = parts_[std::size_t(t.part_index)].w;
    detail::gemm_packed<default_arch>(w.type(), tile_rows(t), w.row_stride() * storage_bytes(w.type()), t.count, xp,
                                      rows, in_, y + tile_out(t), y_stride, scales_of(t).get());
    add_bias(t, rows, y, y_stride);
  }

  /// small_gemm_tile in `fast` numerics for a bf16 tile; xp: x packed by detail::gemm_fast_pack_x.
  void small_gemm_fast_tile(const tile& t, const float* xp, index rows, float* y, index y_stride, bool dot_products) const {
    const weight_view& w = parts_[std::size_t(t.part_index)].w;
    detail::gemm_fast_packed_any<default_arch>(tile_rows(t), w.row_stride() * 2, t.count,
                                               reinterpret_cast<const std::uint16_t*>(xp), rows, in_, y + tile_out(t),
                                               y_stride, dot_products);
    add_bias(t, rows, y, y_stride);
  }

  /// The cache-blocked GEMM: x packed one chunk of rows at a time (on the calling thread, then
  /// shared by every tile; as bf16 pairs for `fast`), the tiles on the team, each in its worker's
  /// slot.
  void large_gemm(const float* x, index rows, index x_stride, float* y, index y_stride, const execution_context& team,
                  index workers, const detail::worker_scratch& sc, gemm_numerics numerics) const {
    const bool fast = numerics == gemm_numerics::fast, dot_products = fast && bf16_dot_products_wanted();
    auto* xp16 = reinterpret_cast<std::uint16_t*>(sc.shared);
    for (index m0 = 0; m0 < rows; m0 += detail::pgemm_chunk) {
      const index m = std::min(detail::pgemm_chunk, rows - m0);
      if (fast) detail::pgemm_fast_pack_x<default_arch>(x + m0 * x_stride, x_stride, m, in_, xp16);
      else detail::pgemm_pack_x<default_arch>(x + m0 * x_stride, x_stride, m, in_, sc.shared);
      float* yt = y + m0 * y_stride;
      detail::for_each_task(team, index(gemm_tiles_.size()), workers, [&](index i, index w) {
        const tile& t = gemm_tiles_[std::size_t(i)];
        const weight_view& wv = parts_[std::size_t(t.part_index)].w;
        const index stride = wv.row_stride() * storage_bytes(wv.type());
        const tile_scales scales = scales_of(t);
        if (fast)
          detail::packed_gemm_fast_tile<default_arch>(wv.type(), tile_rows(t), stride, t.count, xp16, m, in_,
                                                      yt + tile_out(t), y_stride, sc.slot(w), dot_products, scales.get());
        else
          detail::packed_gemm_tile<default_arch>(wv.type(), tile_rows(t), stride, t.count, sc.shared, m, in_,
                                                 yt + tile_out(t), y_stride, sc.slot(w), scales.get());
        add_bias(t, m, yt, y_stride);
      });
    }
  }
};

/// y[rows, cols] = x[rows, k] · W for a weight view W [k, cols] used in place, in its stored dtype
/// with fp32 accumulation (not transposed, unlike linear_map: MLA's q_nope_h · W_uk_h). On the
/// calling thread: it is applied per head, on small blocks.
class transposed_map {
 public:
  transposed_map() = default;
  explicit transposed_map(const weight_view& w) : w_(w) {}

  index in() const { return w_.rows(); }
  index out() const { return w_.cols(); }

  void apply(const float* x, index rows, index x_stride, float* y, index y_stride) const {
    if (rows <= 0 || out() == 0) return;
    detail::gemm_cols<default_arch>(w_.type(), w_.data(), w_.row_stride() * storage_bytes(w_.type()), in(), out(), x,
                                    x_stride, rows, y, y_stride, w_.scales());
  }

 private:
  weight_view w_;
};

/// A linear_map over all rows of `w` ([out, in]) with the optional bias `b` ([out]).
inline linear_map make_linear(const weight_view& w, const weight_view* b) { return linear_map(w, b); }

GATTN_NAMESPACE_END  // namespace gattn
