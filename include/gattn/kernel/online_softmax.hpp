// Online (streaming) softmax state for W query rows at once: running max m and sum l, with the
// rescale / accumulate / end-tile steps of flash attention, the merge of split-KV partial states,
// and their numerical guards.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "gattn/core/types.hpp"
#include "gattn/simd/simd.hpp"

GATTN_NAMESPACE_BEGIN

/// Running softmax statistics of a batch of rows (one lane per row). O itself lives with the
/// caller; this state says how to rescale it.
///   After keys 0..j: m = max_k s_k, l = Σ_k exp(s_k - m), O = Σ_k exp(s_k - m)·v_k.
template <class B>
struct online_softmax_state {
  B m = B(-std::numeric_limits<float>::infinity());
  B l = B(0.0f);

  /// Starts a tile whose (masked) row maxima are `tile_max`. Returns the factor alpha by which
  /// the caller multiplies its O (l is rescaled by end_tile), and sets `m_use`, the value to
  /// subtract from this tile's scores.
  ///   Guard 1: a row that has seen no key yet keeps m = -inf; exp(s - m) would be
  ///   exp(-inf - (-inf)) = NaN, so m_use = 0 there (every s is -inf too, p = exp(-inf) = 0).
  ///   Guard 2: alpha = 1 exactly when the max does not move (also covers -inf == -inf), so
  ///   a stable max never perturbs O and l; otherwise exp(m_old - m_new) in [0, 1), and 0 for
  ///   m_old = -inf (O and l are 0 then anyway).
  B rescale(const B& tile_max, B& m_use) noexcept {
    const B inf = B(std::numeric_limits<float>::infinity());
    const B m_new = simd::max(m, tile_max);
    m_use = simd::select(m_new == -inf, B(0.0f), m_new);
    const B alpha = simd::select(m_new == m, B(1.0f), simd::exp_nonpositive(m - m_use));
    m = m_new;
    return alpha;
  }

  /// p = exp(s - m_use) for one score (masked scores are -inf: p = 0 exactly); adds p to the
  /// tile's partial sum. s - m_use <= 0; very negative finite s stays finite (s - m never
  /// overflows to +inf), so a score of -FLT_MAX is not "masked": it only becomes 0 when a larger
  /// score exists.
  static B accumulate(const B& s, const B& m_use, B& tile_sum) noexcept {
    const B p = simd::exp_nonpositive(s - m_use);
    tile_sum += p;
    return p;
  }

  /// Ends a tile: l = alpha·l + tile_sum. Summing per tile first (like O, see fused_sdpa.hpp)
  /// makes the rounding error grow with the tile length plus the tile count, not the key count.
  void end_tile(const B& alpha, const B& tile_sum) noexcept { l = simd::fma(l, alpha, tile_sum); }
};

/// One row's final (m, l), and whether the row sees any key (from positions: visible_keys).
/// Only a row without keys has output exactly 0 and lse -inf. A row with keys whose l is 0 or
/// NaN (every score -inf or +inf after an fp32 overflow, or NaN) gets 1/l = inf or NaN: its
/// output is not finite, never a finite wrong row (docs/spec.md §2.6).
struct softmax_row {
  float m = -std::numeric_limits<float>::infinity();
  float l = 0.0f;
  bool has_keys = false;

  /// Weight of a partial state with max `m_part` inside the merged state of max `m_all`:
  /// exp(m_part - m_all), 0 for an empty partial (m_part = -inf; guards -inf - -inf).
  static float weight(float m_part, float m_all) noexcept {
    if (m_part == -std::numeric_limits<float>::infinity()) return 0.0f;
    return std::exp(m_part - m_all);
  }
  /// Natural-log log-sum-exp of the row's scaled scores: m + log(l); -inf without keys.
  float lse() const noexcept { return has_keys ? m + std::log(l) : -std::numeric_limits<float>::infinity(); }
  float inv_l() const noexcept { return has_keys ? 1.0f / l : 0.0f; }
};

/// The merge step of split-KV (flash-decoding): one row's partial states over `splits` key
/// splits, split s at part + s·stride as (O_s[0, dv), m_s, l_s), into M = max m_s,
/// O = Σ w_s O_s and l = Σ w_s l_s with w_s = exp(m_s - M), in split order (deterministic). A split
/// of weight 0 (none of the row's keys in it, or a negligible one) is skipped, not multiplied by 0:
/// its O may hold masked values (0·NaN). `o` may be O_0 itself (in-place merge into split 0).
inline void merge_splits(const float* part, index stride, index splits, index dv, float* o, float& m_out,
                         float& l_out) noexcept {
  float m_all = -std::numeric_limits<float>::infinity();
  for (index s = 0; s < splits; ++s) m_all = std::max(m_all, part[s * stride + dv]);
  float l = 0.0f;
  for (index s = 0; s < splits; ++s) {
    const float* blk = part + s * stride;
    const float w = softmax_row::weight(blk[dv], m_all);
    if (s == 0) {
      for (index c = 0; c < dv; ++c) o[c] = w == 0.0f ? 0.0f : w * blk[c];
    } else if (w != 0.0f) {
      for (index c = 0; c < dv; ++c) o[c] += w * blk[c];
    }
    if (w != 0.0f) l += w * blk[dv + 1];
  }
  m_out = m_all;
  l_out = l;
}

GATTN_NAMESPACE_END  // namespace gattn
