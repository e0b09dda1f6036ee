// Gate activations (docs/spec.md §4) as Eigen-style functors: a scalar `operator()(float)` and a batch
// overload over gattn::simd, numerically safe at ±88, ±89, ±1e30, ±inf, NaN and -0.
#pragma once

#include <cmath>
#include <limits>
#include <utility>

#include "gattn/core/config.hpp"
#include "gattn/simd/simd.hpp"

GATTN_NAMESPACE_BEGIN namespace act {

// Shared idea: never evaluate exp(+large). With a = -|u| <= 0, e = exp(a) in [0, 1]:
//   σ(u) = 1/(1+e) for u >= 0, e/(1+e) for u < 0.
// So ±inf and ±1e30 give 0 or 1 without inf/inf, -0 gives 0.5, NaN stays NaN (the u >= 0 test is
// false for NaN and e is NaN). The scalar overloads compute in double and round once.

/// σ(u) = 1 / (1 + e^-u)
struct sigmoid {
  static constexpr activation kind = activation::sigmoid;
  float operator()(float u) const noexcept {
    const double e = std::exp(-std::fabs(double(u)));
    return float(u >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e));
  }
  template <class B>
  B operator()(const B& u) const noexcept {
    const B e = simd::exp(simd::min(u, -u));  // -|u|; NaN propagates through -u (second operand)
    const B r = B(1.0f) / (B(1.0f) + e);
    return simd::select(u >= B(0.0f), r, e * r);
  }
};

/// silu(u) = u·σ(u)
struct silu {
  static constexpr activation kind = activation::silu;
  float operator()(float u) const noexcept {
    if (u == -std::numeric_limits<float>::infinity()) return -0.0f;  // u·σ(u) -> 0, not -inf·0
    const double e = std::exp(-std::fabs(double(u)));
    return float(double(u) * (u >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e)));
  }
  template <class B>
  B operator()(const B& u) const noexcept {
    // For u < 0: u·e/(1+e) with e = h², h = exp(-|u|/2): (u·h)·(h/(1+e)) keeps u·e^u finite and
    // normal down to u ~ -170 (e alone would underflow at u = -88 while u·e^u is still ~1e-37).
    const B h = simd::exp(B(0.5f) * simd::min(u, -u));
    const B e = h * h;
    const B r = B(1.0f) / (B(1.0f) + e);
    const B neg = (u * h) * (h * r);
    const B out = simd::select(u >= B(0.0f), u * r, neg);
    return simd::select(u == B(-std::numeric_limits<float>::infinity()), B(-0.0f), out);  // -inf·0
  }
};

/// ns_sigmoid(u) = 0.5 + 0.5·σ(u) (non-saturating at 0: the gate never closes fully)
struct ns_sigmoid {
  static constexpr activation kind = activation::ns_sigmoid;
  float operator()(float u) const noexcept { return float(0.5 + 0.5 * double(sigmoid{}(u))); }
  template <class B>
  B operator()(const B& u) const noexcept {
    return simd::fma(B(0.5f), sigmoid{}(u), B(0.5f));
  }
};

/// identity(u) = u
struct identity {
  static constexpr activation kind = activation::identity;
  float operator()(float u) const noexcept { return u; }
  template <class B>
  B operator()(const B& u) const noexcept { return u; }
};

/// The one runtime -> compile-time switch: calls f(functor) for the activation `a`.
template <class F>
decltype(auto) visit(activation a, F&& f) {
  switch (a) {
    case activation::sigmoid: return std::forward<F>(f)(sigmoid{});
    case activation::silu: return std::forward<F>(f)(silu{});
    case activation::ns_sigmoid: return std::forward<F>(f)(ns_sigmoid{});
    case activation::identity: break;
  }
  return std::forward<F>(f)(identity{});
}

/// Scalar evaluation of a runtime activation.
inline float apply(activation a, float u) {
  return visit(a, [u](auto fn) { return fn(u); });
}

}  GATTN_NAMESPACE_END  // namespace gattn::act
