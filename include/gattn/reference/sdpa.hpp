// The oracle: scaled dot-product attention in double precision, plain loops (docs/spec.md §2.5-§2.7).
// Deliberately naive: it materialises each score row and shares nothing with the fast kernel.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "gattn/core/error.hpp"
#include "gattn/core/types.hpp"

GATTN_NAMESPACE_BEGIN namespace reference {

/// Shapes of one attention problem. q is [t_q, q_heads, d_qk], k is [t_k, kv_heads, d_qk],
/// v is [t_k, kv_heads, d_v], out is [t_q, q_heads, d_v]; all dense, row-major.
struct sdpa_shape {
  index t_q = 0, t_k = 0;
  index q_heads = 0, kv_heads = 0;
  index d_qk = 0, d_v = 0;
  double scale = 1.0;
  bool causal = true;  ///< bottom-right: key j visible to query i iff j <= i + (t_k - t_q)
};

inline void validate(const sdpa_shape& s) {
  detail::require<shape_error>(s.t_q >= 0 && s.t_k >= 0, "sdpa: t_q=", s.t_q, " t_k=", s.t_k, " must be >= 0");
  detail::require<shape_error>(s.q_heads > 0 && s.kv_heads > 0 && s.q_heads % s.kv_heads == 0,
                               "sdpa: q_heads=", s.q_heads, " must be a positive multiple of kv_heads=", s.kv_heads);
  detail::require<shape_error>(s.d_qk > 0 && s.d_v > 0, "sdpa: d_qk=", s.d_qk, " d_v=", s.d_v, " must be > 0");
}

/// out[i, h, :] = softmax_j(scale · q_ih · k_j,r(h)) · v_j,r(h) with r(h) = h / G.
/// A row that sees no key gets exactly 0. `probs_first` (optional, [q_heads, t_q]) receives
/// p_{i,0}, the attention query i gives key 0 (0 when key 0 is hidden from it); `lse`
/// (optional, [q_heads, t_q]) the log-sum-exp of each row's scores (−inf for a row with no key).
template <class Q, class K, class V>
void sdpa(const sdpa_shape& s, const Q* q, const K* k, const V* v, double* out,
          double* probs_first = nullptr, double* lse = nullptr) {
  validate(s);
  const index group = s.q_heads / s.kv_heads;
  std::vector<double> score(static_cast<std::size_t>(s.t_k));
  for (index h = 0; h < s.q_heads; ++h) {
    const index r = h / group;
    for (index i = 0; i < s.t_q; ++i) {
      const index visible = s.causal ? std::min(s.t_k, std::max<index>(0, i + (s.t_k - s.t_q) + 1)) : s.t_k;
      double* o = out + (i * s.q_heads + h) * s.d_v;
      std::fill(o, o + s.d_v, 0.0);
      if (probs_first) probs_first[h * s.t_q + i] = 0.0;
      if (lse) lse[h * s.t_q + i] = -std::numeric_limits<double>::infinity();
      if (visible == 0) continue;  // no key: output exactly 0 (docs/spec.md §2.6)
      double m = -std::numeric_limits<double>::infinity();
      for (index j = 0; j < visible; ++j) {
        double dot = 0;
        for (index c = 0; c < s.d_qk; ++c)
          dot += double(q[(i * s.q_heads + h) * s.d_qk + c]) * double(k[(j * s.kv_heads + r) * s.d_qk + c]);
        score[j] = s.scale * dot;
        m = std::max(m, score[j]);
      }
      double l = 0;
      for (index j = 0; j < visible; ++j) {
        score[j] = std::exp(score[j] - m);
        l += score[j];
      }
      if (lse) lse[h * s.t_q + i] = m + std::log(l);
      for (index j = 0; j < visible; ++j) {
        const double p = score[j] / l;
        if (j == 0 && probs_first) probs_first[h * s.t_q + i] = p;
        for (index c = 0; c < s.d_v; ++c) o[c] += p * double(v[(j * s.kv_heads + r) * s.d_v + c]);
      }
    }
  }
}

}  GATTN_NAMESPACE_END  // namespace gattn::reference
