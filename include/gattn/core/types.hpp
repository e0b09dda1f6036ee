// Basic index type and small row-major views shared by kernels, layers and the reference.
#pragma once

#include <cstddef>

namespace gattn {

/// Signed index type for sizes and strides (negative strides are never used, but signed
/// arithmetic keeps `a - b` comparisons free of wrap-around).
using index = std::ptrdiff_t;

/// A row-major matrix view: element (r, c) lives at data[r * row_stride + c].
template <class T>
struct matrix_view {
  T* data = nullptr;
  index rows = 0;
  index cols = 0;
  index row_stride = 0;

  T* row(index r) const { return data + r * row_stride; }
  T& operator()(index r, index c) const { return data[r * row_stride + c]; }
};

}  // namespace gattn
