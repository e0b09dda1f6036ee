// Tests of gattn/gate/gate.hpp: a gate applied to the rows of a strided [heads, width] target
// (elementwise and headwise scores, head-shared views), and the activated values the
// diagnostics report.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gattn/gate/gate.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_gate {

namespace {

using gattn::index;

double sigmoid(double u) { return 1.0 / (1.0 + std::exp(-u)); }

TEST(Gate, RowsOfAStridedTargetElementwiseAndHeadwise) {
  const index tokens = 2, heads = 3, width = 4, tstride = 15, hstride = 5;  // one unused column per head
  std::vector<float> target(std::size_t(tokens * tstride));
  for (std::size_t i = 0; i < target.size(); ++i) target[i] = 0.25f * float(i) - 3.0f;
  std::vector<float> u(std::size_t(tokens * heads * width));
  for (std::size_t i = 0; i < u.size(); ++i) u[i] = std::cos(float(i));
  for (bool headwise : {false, true}) {
    const gattn::gate_shape s{heads, width, headwise ? 1 : width};
    const gattn::gate_scores view{u.data(), heads * s.per_head, s.per_head};
    std::vector<float> z = target;
    gattn::apply_gate_rows(z.data(), tokens, tstride, hstride, s, view, gattn::activation::sigmoid, gattn::combine::mul);
    for (index t = 0; t < tokens; ++t)
      for (index h = 0; h < heads; ++h)
        for (index k = 0; k < hstride; ++k) {
          const std::size_t at = std::size_t(t * tstride + h * hstride + k);
          if (k == width) {
            EXPECT_EQ(z[at], target[at]) << "wrote outside the head";
            continue;
          }
          const double g = sigmoid(u[std::size_t(t * heads * s.per_head + h * s.per_head + (headwise ? 0 : k))]);
          EXPECT_NEAR(z[at], target[at] * g, 1e-6 * (1 + std::fabs(target[at]))) << headwise << " " << t << h << k;
        }
  }
}

TEST(Gate, ActivatedValuesOfAHeadSharedView) {
  const gattn::gate_shape s{3, 2, 2};
  std::vector<float> u = {0.5f, -1.0f, 99.0f, 99.0f, 99.0f, 99.0f};  // one token, head-shared: head 0's scores
  const gattn::gate_scores shared{u.data(), 6, 0};
  std::vector<float> out(6, -1.0f);
  gattn::activated_gate_values(out.data(), 1, s, shared, gattn::activation::silu);
  for (index h = 0; h < 3; ++h) {
    EXPECT_NEAR(out[std::size_t(2 * h)], 0.5 * sigmoid(0.5), 1e-6);
    EXPECT_NEAR(out[std::size_t(2 * h + 1)], -1.0 * sigmoid(-1.0), 1e-6);
  }
}

}  // namespace

}  // namespace test_gate
