// Dense projections through Eigen: y[T, out] = x[T, in] · Wᵀ + b on row-major buffers.
#pragma once

#include <vector>

#include <Eigen/Core>

#include "gattn/core/types.hpp"

namespace gattn {

using row_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// A linear map in nn.Linear layout: weight [out, in] row-major, optional bias [out].
struct linear_map {
  row_matrix weight;
  Eigen::VectorXf bias;  ///< empty: no bias

  index out() const { return index(weight.rows()); }
  index in() const { return index(weight.cols()); }

  /// y (rows × out, row stride y_stride) = x (rows × in, row stride x_stride) · Wᵀ + b.
  /// Eigen evaluates `noalias` products straight into the destination: no temporary.
  void apply(const float* x, index rows, index x_stride, float* y, index y_stride) const {
    using stride = Eigen::OuterStride<>;
    Eigen::Map<const row_matrix, 0, stride> X(x, rows, in(), stride(x_stride));
    Eigen::Map<row_matrix, 0, stride> Y(y, rows, out(), stride(y_stride));
    Y.noalias() = X * weight.transpose();
    if (bias.size() != 0) Y.rowwise() += bias.transpose();
  }
};

}  // namespace gattn
