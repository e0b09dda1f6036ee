// The double-precision gated delta-rule layer reproduces every delta vector (an independent PyTorch
// oracle), reads Hugging Face layouts, and refuses bad weights naming the tensor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "gattn/reference/delta_layer.hpp"
#include "support/delta_vectors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_reference_delta_layer {

namespace {

using gattn::index;
using gattn::weight_map;
using gattn::reference::delta_layer_forward;
using gattn::test::delta_case;
using gattn::test::delta_relative_error;
using gattn::test::load_delta_case;
using gattn::test::load_hf_delta_case;

gattn::reference::delta_result run(const delta_case& c, const weight_map& w) {
  return delta_layer_forward(c.config, w, c.x.data(), c.tokens, c.hidden);
}

// Both sides are float64 math on the same inputs (fp32 or bf16 weights widened exactly): only the
// summation order differs.
void expect_matches(const delta_case& c, const gattn::reference::delta_result& r, double tol) {
  EXPECT_EQ(r.tokens, c.tokens);
  EXPECT_LE(delta_relative_error(r.y, c.y), tol) << c.name << ": y";
  EXPECT_LE(delta_relative_error(r.o, c.o), tol) << c.name << ": o";
  EXPECT_LE(delta_relative_error(r.gated, c.gated), tol) << c.name << ": gated";
  EXPECT_LE(delta_relative_error(r.state, c.state), tol) << c.name << ": state";
}

class ReferenceDeltaLayer : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceDeltaLayer, MatchesVectorInDouble) {
  const delta_case c = load_delta_case(GetParam());
  expect_matches(c, run(c, c.weights), 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Vectors, ReferenceDeltaLayer, ::testing::ValuesIn(gattn::test::delta_case_names()),
                         [](const auto& info) { return info.param; });

class ReferenceDeltaLayerHf : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceDeltaLayerHf, MatchesBf16CheckpointInDouble) {
  const delta_case c = load_hf_delta_case(GetParam());
  for (const auto& [name, v] : c.weights.all()) EXPECT_EQ(v.type(), gattn::storage_type::bf16) << name;
  expect_matches(c, run(c, c.weights), 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Folders, ReferenceDeltaLayerHf,
                         ::testing::Values("hf_qwen3_next_linear", "hf_kimi_linear"),
                         [](const auto& info) { return info.param; });

}  // namespace

}  // namespace test_reference_delta_layer
