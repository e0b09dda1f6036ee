// Dense projections through Eigen: y[T, out] = x[T, in] · Wᵀ + b on row-major buffers.
#pragma once

#include <algorithm>
#include <vector>

#include <Eigen/Core>

#include "gattn/core/types.hpp"
#include "gattn/core/weights.hpp"

namespace gattn {

using row_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// A linear map in nn.Linear layout: weight [out, in] row-major, optional bias [out].
struct linear_map {
  row_matrix weight;
  Eigen::VectorXf bias;  ///< empty: no bias

  /// Up to this many rows go through matrix-vector products instead of one GEMM.
  static constexpr index gemv_rows = 2;

  index out() const { return index(weight.rows()); }
  index in() const { return index(weight.cols()); }

  /// y (rows × out, row stride y_stride) = x (rows × in, row stride x_stride) · Wᵀ + b.
  /// Eigen evaluates `noalias` products straight into the destination: no temporary.
  void apply(const float* x, index rows, index x_stride, float* y, index y_stride) const {
    using stride = Eigen::OuterStride<>;
    if (rows <= gemv_rows) {
      // Decode: a GEMM would pack the whole weight matrix for one token; a row-major GEMV streams
      // it once, which is what a memory-bound step needs.
      // Eigen does not thread matrix-vector products, so the output rows are split here.
      const index blocks = std::min<index>(64, std::max<index>(1, out() / 256));
      for (index r = 0; r < rows; ++r) {
        Eigen::Map<const Eigen::VectorXf> xr(x + r * x_stride, in());
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (blocks > 1)
#endif
        for (index b = 0; b < blocks; ++b) {
          const index first = out() * b / blocks, count = out() * (b + 1) / blocks - first;
          Eigen::Map<Eigen::VectorXf> yr(y + r * y_stride + first, count);
          yr.noalias() = weight.middleRows(first, count) * xr;
          if (bias.size() != 0) yr += bias.segment(first, count);
        }
      }
      return;
    }
    Eigen::Map<const row_matrix, 0, stride> X(x, rows, in(), stride(x_stride));
    Eigen::Map<row_matrix, 0, stride> Y(y, rows, out(), stride(y_stride));
    Y.noalias() = X * weight.transpose();
    if (bias.size() != 0) Y.rowwise() += bias.transpose();
  }
};

/// A linear_map holding a copy of `w` ([out, in]) and of the optional bias `b` ([out]).
inline linear_map make_linear(const tensor& w, const tensor* b) {
  linear_map m;
  m.weight = Eigen::Map<const row_matrix>(w.data.data(), w.shape[0], w.shape[1]);
  if (b) m.bias = Eigen::Map<const Eigen::VectorXf>(b->data.data(), b->shape[0]);
  return m;
}

}  // namespace gattn
