// The slices of a weight a rank keeps (SPEC §12). Every shard reads the full weights through these
// two functions only: today they copy just the slice; once weight_map holds non-owning strided
// views they become views, and a rank touches nothing but its own slices.
#pragma once

#include <algorithm>
#include <vector>

#include "gattn/core/error.hpp"
#include "gattn/core/weights.hpp"

namespace gattn {

/// A run of consecutive rows [first, first + count).
struct row_run {
  index first = 0;
  index count = 0;
};

/// The rows `runs` of `t` (a [rows, cols] matrix or a [rows] vector), stacked in order.
inline tensor slice_rows(const tensor& t, const std::vector<row_run>& runs) {
  detail::require<weight_error>(t.shape.size() == 1 || t.shape.size() == 2, "slice_rows: tensor of shape ",
                                shape_string(t.shape), " is not a matrix or a vector");
  const index rows = t.shape[0], cols = t.shape.size() == 2 ? t.shape[1] : 1;
  tensor out;
  index total = 0;
  for (const row_run& r : runs) {
    detail::require<weight_error>(r.first >= 0 && r.count >= 0 && r.first + r.count <= rows, "slice_rows: rows [",
                                  r.first, ", ", r.first + r.count, ") of a tensor of shape ", shape_string(t.shape));
    total += r.count;
  }
  out.shape = t.shape;
  out.shape[0] = total;
  out.data.resize(std::size_t(total * cols));
  float* dst = out.data.data();
  for (const row_run& r : runs) dst = std::copy_n(t.data.data() + r.first * cols, r.count * cols, dst);
  return out;
}

/// Columns [first, first + count) of the [rows, cols] matrix `t`.
inline tensor slice_cols(const tensor& t, index first, index count) {
  detail::require<weight_error>(t.shape.size() == 2 && first >= 0 && count >= 0 && first + count <= t.shape[1],
                                "slice_cols: columns [", first, ", ", first + count, ") of a tensor of shape ",
                                shape_string(t.shape));
  const index rows = t.shape[0], cols = t.shape[1];
  tensor out{{rows, count}, std::vector<float>(std::size_t(rows * count))};
  for (index r = 0; r < rows; ++r)
    std::copy_n(t.data.data() + r * cols + first, count, out.data.data() + r * count);
  return out;
}

}  // namespace gattn
