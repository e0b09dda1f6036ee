// The paper's per-layer diagnostics (docs/spec.md §6), from whole arrays or fed chunk by chunk.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gattn/core/error.hpp"
#include "gattn/core/types.hpp"

GATTN_NAMESPACE_BEGIN

/// docs/spec.md §6 statistics of one layer on one input. Optional members are absent when they do not
/// apply (no gate; or not a G1 `mul` gate without output norm for the sparsity fractions).
///
/// Thresholds compare in double, `|x| < τ` with τ = 0.01 or 0.001 as doubles, exactly as the
/// reference does. The reference's x are float64, ours are the float results of the layer: a value
/// within rounding of τ may fall on the other side, so fractions can differ from the reference by a
/// few counts out of N (in practice 0 or 1), while means agree to float rounding.
struct layer_statistics {
  /// Mean over query heads and queries i >= 1 of p_{i,0}; 1.0 when no such query exists (T = 1).
  double first_token_attention = 1.0;
  /// max |y|; NaN when y held a NaN (as torch's max does).
  double max_abs_output = 0;
  std::optional<double> gate_mean;            ///< mean activated gate value
  std::optional<double> gate_frac_below_001;  ///< fraction of activated gate values with |g| < 0.01

  /// Fractions of docs/spec.md §6 at one threshold.
  struct sparsity {
    double pre_gate = 0;     ///< |sdpa| < τ
    double mean_scaled = 0;  ///< |sdpa · gate_mean| < τ (product first, then abs)
    double gated = 0;        ///< |gated| < τ
  };
  std::optional<sparsity> below_001;   ///< τ = 0.01
  std::optional<sparsity> below_0001;  ///< τ = 0.001

  /// The vectors' `stats` object: keys first_token_attention, max_abs_output, gate_mean,
  /// gate_frac_below_0.01, frac_below_{0.01,0.001}_{pre_gate,mean_scaled,gated}; absent ones omitted.
  nlohmann::json to_json() const {
    nlohmann::json j = nlohmann::json::object();
    j["first_token_attention"] = first_token_attention;
    j["max_abs_output"] = max_abs_output;
    if (gate_mean) j["gate_mean"] = *gate_mean;
    if (gate_frac_below_001) j["gate_frac_below_0.01"] = *gate_frac_below_001;
    const auto put = [&j](const char* tau, const std::optional<sparsity>& s) {
      if (!s) return;
      const std::string prefix = std::string("frac_below_") + tau;
      j[prefix + "_pre_gate"] = s->pre_gate;
      j[prefix + "_mean_scaled"] = s->mean_scaled;
      j[prefix + "_gated"] = s->gated;
    };
    put("0.01", below_001);
    put("0.001", below_0001);
    return j;
  }

  /// Inverse of to_json (reads a vector's `stats`); a sparsity pair is present only when all three
  /// of its keys are. Throws format_error when a present key is not a number.
  static layer_statistics from_json(const nlohmann::json& j) {
    detail::require<format_error>(j.is_object(), "statistics: JSON is not an object but ", j.type_name());
    const auto number = [&j](const std::string& key) -> std::optional<double> {
      if (!j.contains(key)) return std::nullopt;
      detail::require<format_error>(j[key].is_number(), "statistics: '", key, "' is not a number");
      return j[key].get<double>();
    };
    layer_statistics s;
    if (auto v = number("first_token_attention")) s.first_token_attention = *v;
    if (auto v = number("max_abs_output")) s.max_abs_output = *v;
    s.gate_mean = number("gate_mean");
    s.gate_frac_below_001 = number("gate_frac_below_0.01");
    const auto get = [&](const char* tau) -> std::optional<sparsity> {
      const std::string prefix = std::string("frac_below_") + tau;
      auto pre = number(prefix + "_pre_gate"), scaled = number(prefix + "_mean_scaled"), gated = number(prefix + "_gated");
      if (!pre || !scaled || !gated) return std::nullopt;
      return sparsity{*pre, *scaled, *gated};
    };
    s.below_001 = get("0.01");
    s.below_0001 = get("0.001");
    return s;
  }
};

/// Accumulates the docs/spec.md §6 statistics while a layer runs, so prefill chunks and decode steps give
/// the same numbers as one prefill over the whole sequence (to the rounding of a different
/// summation split; feeding the same values in the same order gives identical results).
///
/// Sums and counts are kept in double / int64. The sparsity "mean_scaled" fraction needs the final
/// gate mean, so the SDPA values themselves are kept (as float, O(T·H·D) memory: this is a
/// diagnostic, not a hot path; a histogram could not reproduce the exact `<` comparisons).
class statistics_observer {
 public:
  /// p_{i,0} of one query (absolute position `query_pos`) for `heads` query heads. Position 0 is
  /// skipped (it can only see itself), per docs/spec.md §6. Throws shape_error on a negative position or
  /// head count, or a null pointer with heads > 0.
  void add_first_token_probs(index query_pos, const float* p_first_per_head, index heads) {
    detail::require<shape_error>(query_pos >= 0 && heads >= 0 && (heads == 0 || p_first_per_head != nullptr),
                                 "statistics: add_first_token_probs(query_pos=", query_pos, ", heads=", heads,
                                 ") needs query_pos >= 0, heads >= 0 and data");
    if (query_pos == 0) return;
    for (index h = 0; h < heads; ++h) first_sum_ += double(p_first_per_head[h]);
    first_count_ += heads;
  }

  /// `n` values of the layer output y (any chunk of rows).
  void add_output(const float* y, index n) {
    check(y, n, "add_output");
    for (index i = 0; i < n; ++i) {
      const double a = std::fabs(double(y[i]));
      if (std::isnan(a)) saw_nan_output_ = true;
      else if (a > max_abs_) max_abs_ = a;
    }
  }

  /// `n` activated gate values (after the activation, as multiplied or added into the target).
  void add_gate(const float* activated_gate, index n) {
    check(activated_gate, n, "add_gate");
    for (index i = 0; i < n; ++i) {
      const double g = double(activated_gate[i]);
      gate_sum_ += g;
      if (std::fabs(g) < 0.01) ++gate_below_001_;
    }
    gate_count_ += n;
  }

  /// `n` matching SDPA outputs (before the gate) and gated values (what enters o_proj). Call this
  /// only for a G1 `mul` gate without output norm, where docs/spec.md §6 defines the sparsity fractions.
  void add_sdpa_and_gated(const float* sdpa, const float* gated, index n) {
    check(sdpa, n, "add_sdpa_and_gated (sdpa)");
    check(gated, n, "add_sdpa_and_gated (gated)");
    sdpa_.insert(sdpa_.end(), sdpa, sdpa + n);
    for (index i = 0; i < n; ++i) {
      const double s = std::fabs(double(sdpa[i])), g = std::fabs(double(gated[i]));
      if (s < 0.01) ++pre_below_001_;
      if (s < 0.001) ++pre_below_0001_;
      if (g < 0.01) ++gated_below_001_;
      if (g < 0.001) ++gated_below_0001_;
    }
  }

  /// The statistics of everything fed so far. The gate entries are present once a gate value was
  /// fed; the sparsity entries once at least one SDPA value and one gate value were fed
  /// (mean_scaled needs gate_mean).
  layer_statistics result() const {
    layer_statistics r;
    r.first_token_attention = first_count_ > 0 ? first_sum_ / double(first_count_) : 1.0;
    r.max_abs_output = saw_nan_output_ ? std::nan("") : max_abs_;
    if (gate_count_ > 0) {
      r.gate_mean = gate_sum_ / double(gate_count_);
      r.gate_frac_below_001 = double(gate_below_001_) / double(gate_count_);
    }
    if (!sdpa_.empty() && r.gate_mean) {
      const double m = *r.gate_mean;
      std::int64_t scaled_001 = 0, scaled_0001 = 0;
      for (float s : sdpa_) {
        const double v = std::fabs(double(s) * m);  // product first, then abs, as the reference
        if (v < 0.01) ++scaled_001;
        if (v < 0.001) ++scaled_0001;
      }
      const double n = double(sdpa_.size());
      r.below_001 = layer_statistics::sparsity{double(pre_below_001_) / n, double(scaled_001) / n,
                                               double(gated_below_001_) / n};
      r.below_0001 = layer_statistics::sparsity{double(pre_below_0001_) / n, double(scaled_0001) / n,
                                                double(gated_below_0001_) / n};
    }
    return r;
  }

  /// Forgets everything fed so far.
  void reset() { *this = statistics_observer(); }

 private:
  static void check(const float* p, index n, const char* what) {
    detail::require<shape_error>(n >= 0 && (n == 0 || p != nullptr), "statistics: ", what, " got n=", n,
                                 n > 0 ? " with a null pointer" : "", "; n must be >= 0");
  }

  double first_sum_ = 0;
  std::int64_t first_count_ = 0;
  double max_abs_ = 0;
  bool saw_nan_output_ = false;
  double gate_sum_ = 0;
  std::int64_t gate_count_ = 0, gate_below_001_ = 0;
  std::vector<float> sdpa_;
  std::int64_t pre_below_001_ = 0, pre_below_0001_ = 0, gated_below_001_ = 0, gated_below_0001_ = 0;
};

/// Whole-sequence inputs of compute_statistics. `probs_first` is laid out as in the vectors,
/// [heads, tokens] (row h holds p_{i,0} for i = 0..tokens-1). A null `gate` means no gate; null
/// `sdpa`/`gated` means the sparsity fractions do not apply.
struct statistics_arrays {
  const float* probs_first = nullptr;
  index heads = 0;
  index tokens = 0;
  const float* y = nullptr;
  index y_size = 0;
  const float* gate = nullptr;
  index gate_size = 0;
  const float* sdpa = nullptr;
  const float* gated = nullptr;
  index sdpa_size = 0;
};

/// docs/spec.md §6 statistics of one prefill, computed from whole arrays (same numbers as feeding a
/// statistics_observer query by query).
inline layer_statistics compute_statistics(const statistics_arrays& a) {
  detail::require<shape_error>(a.heads >= 0 && a.tokens >= 0 && (a.heads * a.tokens == 0 || a.probs_first),
                               "statistics: probs_first [", a.heads, ", ", a.tokens, "] needs data");
  statistics_observer obs;
  std::vector<float> column(static_cast<std::size_t>(a.heads));
  for (index i = 0; i < a.tokens; ++i) {
    for (index h = 0; h < a.heads; ++h) column[std::size_t(h)] = a.probs_first[h * a.tokens + i];
    obs.add_first_token_probs(i, column.data(), a.heads);
  }
  obs.add_output(a.y, a.y_size);
  if (a.gate) obs.add_gate(a.gate, a.gate_size);
  if (a.sdpa || a.gated) obs.add_sdpa_and_gated(a.sdpa, a.gated, a.sdpa_size);
  return obs.result();
}

GATTN_NAMESPACE_END  // namespace gattn
