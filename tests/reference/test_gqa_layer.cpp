// The double-precision reference layer reproduces every GQA vector (an independent PyTorch oracle).
#include <gtest/gtest.h>

#include "gattn/reference/gqa_layer.hpp"
#include "support/vectors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_reference_gqa_layer {

namespace {

using gattn::test::load_vector_case;
using gattn::test::max_abs;
using gattn::test::max_abs_diff;

class ReferenceGqaLayer : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceGqaLayer, MatchesVectorInDouble) {
  const auto c = load_vector_case(GetParam());
  const auto& cfg = std::get<gattn::gqa_config>(c.config);
  const auto r = gattn::reference::gqa_forward(cfg, c.weights, c.x.data(), c.tokens);
  // Both sides are float64 math on the same float32 inputs: only summation order differs.
  EXPECT_LE(max_abs_diff(r.y, c.y), 1e-10 * std::max(1.0, max_abs(c.y)));
  EXPECT_LE(max_abs_diff(r.sdpa, c.sdpa), 1e-10 * std::max(1.0, max_abs(c.sdpa)));
  EXPECT_LE(max_abs_diff(r.gated, c.gated), 1e-10 * std::max(1.0, max_abs(c.gated)));
  EXPECT_LE(max_abs_diff(r.probs_first, c.probs_first), 1e-10);
}

INSTANTIATE_TEST_SUITE_P(Vectors, ReferenceGqaLayer, ::testing::ValuesIn(gattn::test::gqa_case_names()),
                         [](const auto& info) { return info.param; });

}  // namespace

}  // namespace test_reference_gqa_layer
