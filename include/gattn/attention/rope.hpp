// Rotary position embedding (SPEC §2.4): cos/sin tables for a range of positions and the neox /
// interleaved rotation of head vectors. The frequencies come from core/rope_frequencies.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "gattn/core/config.hpp"
#include "gattn/core/rope_frequencies.hpp"

namespace gattn {

/// cos/sin rows for a range of absolute positions, ready to rotate any number of heads.
class rope_rotator {
 public:
  rope_rotator() = default;
  explicit rope_rotator(const rope_config& c) : style_(c.style), freq_(make_rope_frequencies(c)) {}

  index half() const { return index(freq_.inv_freq.size()); }
  bool active() const { return style_ != rope_style::none && half() > 0; }

  /// Prepares positions [first, first + count). Angles are formed in double so that long
  /// contexts (p ~ 1e6) keep their phase; only the final cos/sin are rounded to float.
  void prepare(index first, index count) {
    first_ = first;
    const index h = half();
    cos_.resize(std::size_t(count * h));
    sin_.resize(std::size_t(count * h));
    for (index t = 0; t < count; ++t) {
      for (index i = 0; i < h; ++i) {
        const double angle = double(first + t) * freq_.inv_freq[std::size_t(i)];
        cos_[std::size_t(t * h + i)] = float(std::cos(angle) * freq_.attention_factor);
        sin_[std::size_t(t * h + i)] = float(std::sin(angle) * freq_.attention_factor);
      }
    }
  }

  /// Rotates the first R channels of one head vector of the token at absolute position `pos`
  /// (which must lie in the prepared range).
  void rotate(float* x, index pos) const {
    if (!active()) return;
    const index h = half();
    const float* c = cos_.data() + (pos - first_) * h;
    const float* s = sin_.data() + (pos - first_) * h;
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
  index first_ = 0;
  std::vector<float> cos_, sin_;
};

}  // namespace gattn
