// The slices of a weight a rank keeps (docs/spec.md §12). Every shard reads the full weights through these
// two functions only, as views into the caller's (mapped) weights: a rank touches nothing but its
// own slices.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "gattn/core/error.hpp"
#include "gattn/core/weights.hpp"

GATTN_NAMESPACE_BEGIN

/// A run of consecutive rows [first, first + count).
struct row_run {
  index first = 0;
  index count = 0;
};

namespace detail {
/// The rows `runs` (`total` of them) of the block-FP8 matrix `t` copied: their E4M3 codes, and a scale
/// row per copied row (blocks of one row by the original block width), so that every copied value
/// keeps the scale of its own block wherever the runs cut the blocks.
inline weight_view copy_fp8_rows(const weight_view& t, const std::vector<row_run>& runs, index total) {
  const block_scales& src = *t.scales();
  const index cols = t.cols(), grid_cols = src.grid_cols;
  struct storage {
    std::vector<std::uint8_t> codes;
    std::vector<float> scales;
  };
  auto copy = std::make_shared<storage>();
  copy->codes.resize(std::size_t(total * cols));
  copy->scales.resize(std::size_t(total * grid_cols));
  index at = 0;
  for (const row_run& r : runs)
    for (index i = 0; i < r.count; ++i, ++at) {
      std::memcpy(copy->codes.data() + at * cols, t.row(r.first + i), std::size_t(cols));
      const index block_row = (src.row0 + r.first + i) / src.block_rows;
      for (index j = 0; j < grid_cols; ++j) copy->scales[std::size_t(at * grid_cols + j)] = src.block(block_row, j);
    }
  block_scales scales = src;
  scales.type = storage_type::f32;  // a bf16 scale widens exactly
  scales.data = copy->scales.data();
  scales.grid_rows = total;
  scales.block_rows = 1;
  scales.row0 = 0;
  std::vector<index> shape = t.shape();
  shape[0] = total;
  return weight_view(copy->codes.data(), std::move(shape), scales, -1,
                     std::shared_ptr<const void>(copy, copy->codes.data()));
}
}  // namespace detail

/// The rows `runs` of `t` (a [rows, cols] matrix or a [rows] vector), stacked in order. One run is a
/// view (no copy); several runs (a fused per_kv_group q_proj cut inside a group) are copied, only
/// those rows, in the stored element type (a block-FP8 matrix with a scale row per copied row).
inline weight_view slice_rows(const weight_view& t, const std::vector<row_run>& runs) {
  detail::require<weight_error>(t.shape().size() == 1 || t.shape().size() == 2, "slice_rows: tensor of shape ",
                                shape_string(t.shape()), " is not a matrix or a vector");
  index total = 0;
  for (const row_run& r : runs) {
    detail::require<weight_error>(r.first >= 0 && r.count >= 0 && r.first + r.count <= t.rows(), "slice_rows: rows [",
                                  r.first, ", ", r.first + r.count, ") of a tensor of shape ", shape_string(t.shape()));
    total += r.count;
  }
  if (runs.size() == 1) return t.row_range(runs[0].first, runs[0].count);
  if (t.type() == storage_type::f8_e4m3) return detail::copy_fp8_rows(t, runs, total);
  const std::size_t row_bytes = std::size_t(t.cols() * storage_bytes(t.type()));
  auto buffer = std::make_shared<std::vector<unsigned char>>(std::size_t(total) * row_bytes);
  unsigned char* dst = buffer->data();
  for (const row_run& r : runs)
    for (index i = 0; i < r.count; ++i, dst += row_bytes) std::memcpy(dst, t.row(r.first + i), row_bytes);
  std::vector<index> shape = t.shape();
  shape[0] = total;
  return weight_view(t.type(), buffer->data(), std::move(shape), -1, std::shared_ptr<const void>(buffer, buffer->data()));
}

/// Columns [first, first + count) of the [rows, cols] matrix `t`: a strided view, no copy.
inline weight_view slice_cols(const weight_view& t, index first, index count) {
  detail::require<weight_error>(t.shape().size() == 2 && first >= 0 && count >= 0 && first + count <= t.cols(),
                                "slice_cols: columns [", first, ", ", first + count, ") of a tensor of shape ",
                                shape_string(t.shape()));
  return t.col_range(first, count);
}

GATTN_NAMESPACE_END  // namespace gattn
