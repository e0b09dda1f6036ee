// The block scales beside a block-FP8 weight (docs/spec.md §15): the official FP8 releases store a
// weight W [R, C] as E4M3 codes w and a scale per B0 × B1 block, s [⌈R/B0⌉, ⌈C/B1⌉] (F32 or BF16,
// named `<weight>_scale_inv` although it multiplies): W[i, j] = e4m3(w[i, j]) · s[⌊i/B0⌋, ⌊j/B1⌋].
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "gattn/core/config.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/types.hpp"

GATTN_NAMESPACE_BEGIN

/// Where the scale of each element of an FP8 weight view is. A view of rows or columns of a
/// stored tensor keeps the whole scale tensor and moves its origin (row0, col0): a slice that cuts
/// a block (a tensor-parallel rank's rows, one head of a projection) uses that block's scale.
struct block_scales {
  storage_type type = storage_type::f32;  ///< of the scale tensor: f32 or bf16
  const void* data = nullptr;             ///< the scale tensor, row-major and dense
  index grid_rows = 0, grid_cols = 0;     ///< its shape [⌈R/B0⌉, ⌈C/B1⌉]
  index block_rows = 0, block_cols = 0;   ///< B0, B1
  index row0 = 0, col0 = 0;               ///< the view's element (0, 0) in the stored tensor

  /// s[br, bc], widened exactly (bf16 is the top half of an fp32).
  float block(index br, index bc) const noexcept {
    const auto* p = static_cast<const unsigned char*>(data);
    const std::size_t at = std::size_t(br * grid_cols + bc);
    if (type == storage_type::bf16) {
      std::uint16_t h;
      std::memcpy(&h, p + 2 * at, sizeof h);
      const std::uint32_t bits = std::uint32_t{h} << 16;
      float f;
      std::memcpy(&f, &bits, sizeof f);
      return f;
    }
    float f;
    std::memcpy(&f, p + 4 * at, sizeof f);
    return f;
  }
  /// The scale of the view's element (r, c).
  float of(index r, index c) const noexcept { return block((row0 + r) / block_rows, (col0 + c) / block_cols); }
  /// The first column after c (of the view) where the scale may change: the end of c's block.
  index block_end_col(index c) const noexcept { return ((col0 + c) / block_cols + 1) * block_cols - col0; }

  /// The scales along row r of the view, block by block, without a division per block: the scale
  /// of the current run of columns, where the run ends, then next() to the following run.
  struct row_runs {
    const block_scales* s;
    index block_row, block_col, end;
    float scale() const noexcept { return s->block(block_row, block_col); }
    void next() noexcept {
      ++block_col;
      end += s->block_cols;
    }
  };
  /// The runs of row r from column c on (the first one ends at c's block end).
  row_runs runs_of_row(index r, index c = 0) const noexcept {
    return {this, (row0 + r) / block_rows, (col0 + c) / block_cols, block_end_col(c)};
  }

  /// The scales of the view's rows from `first` on / columns from `first` on.
  block_scales from_row(index first) const noexcept {
    block_scales s = *this;
    s.row0 += first;
    return s;
  }
  block_scales from_col(index first) const noexcept {
    block_scales s = *this;
    s.col0 += first;
    return s;
  }
};

namespace detail {
/// Checks that `s` describes the scales of a view of `rows` × `cols` E4M3 values: f32 or bf16,
/// positive block sizes, a grid that covers the view, finite scales (a NaN or infinite scale would
/// turn every product of its block into NaN). `what` names the weight in messages.
inline void check_block_scales(const block_scales& s, index rows, index cols, const std::string& what) {
  require<weight_error>(s.type == storage_type::f32 || s.type == storage_type::bf16, what, ": block scales of type ",
                        to_string(s.type), " (F32 or BF16 expected)");
  require<weight_error>(s.block_rows > 0 && s.block_cols > 0, what, ": block size [", s.block_rows, ", ",
                        s.block_cols, "] must be positive");
  require<weight_error>(s.grid_rows >= 0 && s.grid_cols >= 0 && s.row0 >= 0 && s.col0 >= 0, what,
                        ": negative block-scale grid or origin");
  require<weight_error>(s.data != nullptr || s.grid_rows * s.grid_cols == 0, what, ": null block scales");
  if (rows == 0 || cols == 0) return;
  const index last_row = (s.row0 + rows - 1) / s.block_rows, last_col = (s.col0 + cols - 1) / s.block_cols;
  require<weight_error>(last_row < s.grid_rows && last_col < s.grid_cols, what, ": block scales of shape [",
                        s.grid_rows, ", ", s.grid_cols, "] do not cover rows [", s.row0, ", ", s.row0 + rows,
                        ") and columns [", s.col0, ", ", s.col0 + cols, ") in blocks of [", s.block_rows, ", ",
                        s.block_cols, "]");
  for (index br = s.row0 / s.block_rows; br <= last_row; ++br)
    for (index bc = s.col0 / s.block_cols; bc <= last_col; ++bc)
      require<weight_error>(std::isfinite(s.block(br, bc)), what, ": block scale [", br, ", ", bc, "] is ",
                            s.block(br, bc), " (must be finite)");
}
}  // namespace detail

GATTN_NAMESPACE_END  // namespace gattn
