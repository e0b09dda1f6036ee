// Timing helpers shared by the standalone probes (gattn_*_probe): medians of wall-clock samples.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace gattn_bench {

using probe_clock = std::chrono::steady_clock;

/// The median of v (the upper one for an even count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Seconds since t0.
inline double seconds_since(probe_clock::time_point t0) {
  return std::chrono::duration<double>(probe_clock::now() - t0).count();
}

}  // namespace gattn_bench
