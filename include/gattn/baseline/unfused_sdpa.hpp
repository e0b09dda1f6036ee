// The unfused baseline: SDPA as usually written over Eigen (S = Q·Kᵀ materialised per head, a row
// loop for softmax and mask, O = P·V), then the same epilogue. Tuned as docs/performance.md describes
// (noalias products, scale folded into exp, row-loop mask) so the benchmarks compare against a
// fair opponent; also a third, independent path the tests can compare the kernel with.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <Eigen/Core>

#include "gattn/kernel/epilogue.hpp"
#include "gattn/linalg/linear_map.hpp"
#include "gattn/baseline/dense_kv.hpp"
#include "gattn/kernel/sdpa_params.hpp"

GATTN_NAMESPACE_BEGIN

/// A dense row-major float matrix (the baseline's score matrix).
using row_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Runs `p` (same contract as fused_sdpa: strides, bottom-right causal mask, lse, epilogue) the
/// unfused way. Memory is O(T_q·T_k) per thread: this is the baseline, not a production path.
/// Paged or bf16/f16 K/V are widened into dense copies first (exact).
inline void unfused_sdpa(const sdpa_params& p) {
  if (!detail::dense_f32_kv(p)) {
    detail::validate(p);
    std::vector<float> k, v;
    unfused_sdpa(detail::dense_kv_view(p, k, v));
    return;
  }
  using stride = Eigen::OuterStride<>;
  const index group = p.q_heads / p.kv_heads;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const execution_context exec = p.exec ? *p.exec : execution_context::with_threads(p.threads);
  exec.parallel_for(p.q_heads, [&](index h) {
    thread_local row_matrix scores;
    scores.resize(p.t_q, p.t_k);
    const index r = h / group;
    Eigen::Map<const row_matrix, 0, stride> Q(p.q + h * p.q_head_stride, p.t_q, p.d_qk, stride(p.q_token_stride));
    Eigen::Map<const row_matrix, 0, stride> K(p.k + r * p.k_head_stride, p.t_k, p.d_qk, stride(p.k_token_stride));
    Eigen::Map<const row_matrix, 0, stride> V(p.v + r * p.v_head_stride, p.t_k, p.d_v, stride(p.v_token_stride));
    Eigen::Map<row_matrix, 0, stride> O(p.out + h * p.out_head_stride, p.t_q, p.d_v, stride(p.out_token_stride));
    scores.noalias() = Q * K.transpose();
    for (index i = 0; i < p.t_q; ++i) {
      const index visible = detail::visible_keys(p, i);
      float* s = scores.row(i).data();
      float m = neg_inf;
      for (index j = 0; j < visible; ++j) m = std::max(m, s[j]);
      float l = 0.0f;
      for (index j = 0; j < visible; ++j) {
        s[j] = std::exp(p.scale * (s[j] - m));  // the scale folded into the exponent
        l += s[j];
      }
      // Only a row without keys is exactly 0; l = 0 or NaN with keys (overflowed scores) is not
      // finite, never a finite wrong row (docs/spec.md §2.6).
      const float inv = visible > 0 ? 1.0f / l : 0.0f;
      for (index j = 0; j < visible; ++j) s[j] *= inv;
      if (p.lse) p.lse[h * p.t_q + i] = visible ? p.scale * m + std::log(l) : neg_inf;
    }
    // O = P·V over the visible keys only (a masked key's 0 times a NaN or Inf V row would be
    // NaN): per block of rows, the keys every row of the block sees as one product, then each
    // row's remaining keys of the diagonal.
    constexpr index block = 64;
    for (index i0 = 0; i0 < p.t_q; i0 += block) {
      const index n = std::min(block, p.t_q - i0);
      const index common = detail::visible_keys(p, i0);
      if (common > 0)
        O.middleRows(i0, n).noalias() = scores.block(i0, 0, n, common) * V.topRows(common);
      else
        O.middleRows(i0, n).setZero();
      for (index i = i0; i < i0 + n; ++i) {
        const index extra = detail::visible_keys(p, i) - common;
        if (extra > 0)
          O.row(i).noalias() += scores.row(i).segment(common, extra) * V.middleRows(common, extra);
      }
    }
  });
  apply_sdpa_epilogue(p, p.epilogue);
}

GATTN_NAMESPACE_END  // namespace gattn
