// The double-precision reference MLA layer reproduces every MLA vector.
#include <gtest/gtest.h>

#include "gattn/reference/mla_layer.hpp"
#include "support/vectors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_reference_mla_layer {

namespace {

using gattn::test::load_vector_case;
using gattn::test::max_abs;
using gattn::test::max_abs_diff;

class ReferenceMlaLayer : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceMlaLayer, MatchesVectorInDouble) {
  const auto c = load_vector_case(GetParam());
  const auto& cfg = std::get<gattn::mla_config>(c.config);
  const auto r = gattn::reference::mla_forward(cfg, c.weights, c.x.data(), c.tokens);
  EXPECT_LE(max_abs_diff(r.y, c.y), 1e-10 * std::max(1.0, max_abs(c.y)));
  EXPECT_LE(max_abs_diff(r.sdpa, c.sdpa), 1e-10 * std::max(1.0, max_abs(c.sdpa)));
  EXPECT_LE(max_abs_diff(r.gated, c.gated), 1e-10 * std::max(1.0, max_abs(c.gated)));
  EXPECT_LE(max_abs_diff(r.probs_first, c.probs_first), 1e-10);
}

INSTANTIATE_TEST_SUITE_P(Vectors, ReferenceMlaLayer, ::testing::ValuesIn(gattn::test::mla_case_names()),
                         [](const auto& info) { return info.param; });

}  // namespace

}  // namespace test_reference_mla_layer
