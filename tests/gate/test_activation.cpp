// Tests of gattn/gate/activation.hpp: scalar and batch overloads on every arch at the edge values
// of docs/testing.md (cases real kernels got wrong, item 8), and a dense sweep against double math (few ulps).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "gattn/gate/activation.hpp"
#include "support/kernel_sweep.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_activation {

namespace {

double ref(gattn::activation a, double u) {
  if (std::isnan(u)) return u;
  const double s = u >= 0 ? 1.0 / (1.0 + std::exp(-u)) : std::exp(u) / (1.0 + std::exp(u));
  switch (a) {
    case gattn::activation::sigmoid: return s;
    case gattn::activation::silu: return std::isinf(u) ? (u > 0 ? u : 0.0) : u * s;
    case gattn::activation::ns_sigmoid: return 0.5 + 0.5 * s;
    case gattn::activation::identity: return u;
  }
  return 0;
}

/// Within `ulps` float ulps of the double value; results below FLT_MIN may flush to 0.
::testing::AssertionResult close(float got, double want, double ulps) {
  if (std::isnan(want)) return std::isnan(got) ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << "want NaN, got " << got;
  if (std::isinf(want)) return got == want ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << "want " << want << " got " << got;
  if (std::isnan(got) || std::isinf(got)) return ::testing::AssertionFailure() << "want " << want << " got " << got;
  const double a = std::fabs(want);
  if (a < std::numeric_limits<float>::min() && std::fabs(got) <= std::numeric_limits<float>::min())
    return ::testing::AssertionSuccess();
  const double tol = ulps * kernel_test::ulp32(a);
  if (std::fabs(double(got) - want) <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "want " << want << " got " << got << " (" << (std::fabs(got - want) / kernel_test::ulp32(a)) << " ulp)";
}

const gattn::activation k_all[] = {gattn::activation::sigmoid, gattn::activation::silu,
                                   gattn::activation::ns_sigmoid, gattn::activation::identity};

std::vector<float> edge_values() {
  const float inf = std::numeric_limits<float>::infinity();
  return {0.0f, -0.0f, 1.0f, -1.0f, 88.0f, -88.0f, 89.0f, -89.0f, 100.0f, -100.0f, 1e30f, -1e30f,
          inf, -inf, std::numeric_limits<float>::quiet_NaN(), 1e-30f, -1e-30f, 15.0f, -15.0f,
          std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 0.5f, -0.5f, 40.0f, -40.0f,
          -170.0f, -87.3f};
}

template <class Arch>
std::vector<float> batch_eval(gattn::activation a, const std::vector<float>& xs) {
  using B = gattn::simd::batch<float, Arch>;
  constexpr std::size_t W = B::size;
  std::vector<float> in(xs), out(xs.size() + W);
  in.resize((xs.size() + W - 1) / W * W, 0.0f);
  out.resize(in.size());
  gattn::act::visit(a, [&](auto fn) {
    for (std::size_t i = 0; i < in.size(); i += W) gattn::simd::store(out.data() + i, fn(gattn::simd::load<Arch>(in.data() + i)));
  });
  out.resize(xs.size());
  return out;
}

TEST(Activation, ScalarEdgeValues) {
  for (auto a : k_all)
    for (float x : edge_values()) EXPECT_TRUE(close(gattn::act::apply(a, x), ref(a, double(x)), 1)) << gattn::to_string(a) << "(" << x << ")";
}

TEST(Activation, BatchEdgeValuesEveryArch) {
  kernel_test::for_each_arch([](auto arch) {
    using A = decltype(arch);
    for (auto a : k_all) {
      const auto xs = edge_values();
      const auto ys = batch_eval<A>(a, xs);
      for (std::size_t i = 0; i < xs.size(); ++i)
        EXPECT_TRUE(close(ys[i], ref(a, double(xs[i])), 4)) << gattn::to_string(a) << "(" << xs[i] << ") arch=" << gattn::arch_name<A>();
    }
  });
}

TEST(Activation, BatchDenseSweepEveryArch) {
  std::vector<float> xs;
  for (float x = -120.0f; x <= 120.0f; x += 0.0371f) xs.push_back(x);
  kernel_test::for_each_arch([&](auto arch) {
    using A = decltype(arch);
    for (auto a : k_all) {
      const auto ys = batch_eval<A>(a, xs);
      int bad = 0;
      for (std::size_t i = 0; i < xs.size(); ++i) {
        const double want = ref(a, double(xs[i]));
        // Near the zero of silu the absolute error is what matters: compare to ulp of |u|·σ scale.
        if (!close(ys[i], want, 4) && !(std::fabs(ys[i] - want) <= 4 * kernel_test::ulp32(std::fabs(xs[i]) * 0.25))) {
          if (++bad < 5) ADD_FAILURE() << gattn::to_string(a) << "(" << xs[i] << ") = " << ys[i] << " want " << want << " arch=" << gattn::arch_name<A>();
        }
      }
      EXPECT_EQ(bad, 0);
    }
  });
}

TEST(Activation, NegativeZeroAndSymmetry) {
  EXPECT_EQ(gattn::act::sigmoid{}(-0.0f), 0.5f);
  EXPECT_EQ(gattn::act::ns_sigmoid{}(-0.0f), 0.75f);
  EXPECT_EQ(gattn::act::silu{}(-0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(gattn::act::identity{}(-0.0f)));
  for (float x : {0.1f, 1.0f, 5.0f, 20.0f})
    EXPECT_NEAR(gattn::act::sigmoid{}(x) + gattn::act::sigmoid{}(-x), 1.0f, 1e-7f);
}

}  // namespace

}  // namespace test_activation
