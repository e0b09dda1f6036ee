// Rotary position embedding (docs/spec.md §2.4): cos/sin of a position and the neox / interleaved
// rotation of head vectors. The frequencies come from core/rope_frequencies.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "gattn/core/config.hpp"
#include "gattn/core/rope_frequencies.hpp"

GATTN_NAMESPACE_BEGIN

/// The rotation of one layer: immutable after construction, so calls share it without copying.
class rope_rotator {
 public:
  rope_rotator() = default;
  explicit rope_rotator(const rope_config& c) : style_(c.style), freq_(make_rope_frequencies(c)) {}

  index half() const { return index(freq_.inv_freq.size()); }
  bool active() const { return style_ != rope_style::none && half() > 0; }

  /// cos/sin of one absolute position into cos[half()] and sin[half()] (the caller's buffers, so
  /// that a const layer shared by threads allocates nothing per call). Angles are formed in double
  /// so that long contexts (p ~ 1e6) keep their phase; only the final cos/sin are rounded to float.
  void angles(index pos, float* cos, float* sin) const {
    const index h = half();
    for (index i = 0; i < h; ++i) {
      const double angle = double(pos) * freq_.inv_freq[std::size_t(i)];
      cos[i] = float(std::cos(angle) * freq_.attention_factor);
      sin[i] = float(std::sin(angle) * freq_.attention_factor);
    }
  }

  /// Rotates the first R channels of one head vector by the angles of one position (from angles()).
  void rotate(float* x, const float* c, const float* s) const {
    if (!active()) return;
    const index h = half();
    if (style_ == rope_style::neox) {
      for (index i = 0; i < h; ++i) {  // pairs (i, i + R/2)
        const float a = x[i], b = x[i + h];
        x[i] = a * c[i] - b * s[i];
        x[i + h] = b * c[i] + a * s[i];
      }
    } else {
      for (index i = 0; i < h; ++i) {  // pairs (2i, 2i+1)
        const float a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * c[i] - b * s[i];
        x[2 * i + 1] = b * c[i] + a * s[i];
      }
    }
  }

 private:
  rope_style style_ = rope_style::none;
  rope_frequencies freq_;
};

GATTN_NAMESPACE_END  // namespace gattn
