// The layers' statistics observer reproduces the `stats` metadata of every vector (docs/spec.md §6), in one
// prefill and in token-by-token decode.
#include <gtest/gtest.h>

#include "gattn/attention/any_layer.hpp"
#include "support/vectors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_layer_statistics {

namespace {

using index = gattn::index;
namespace test = gattn::test;

class LayerStatistics : public ::testing::TestWithParam<std::string> {};

TEST_P(LayerStatistics, MatchesVectorStats) {
  const auto c = test::load_vector_case(GetParam());
  gattn::any_layer layer(c.config, c.weights);
  const index T = c.tokens, d = c.hidden;
  for (bool decode : {false, true}) {
    if (decode && !layer.causal()) continue;
    gattn::statistics_observer obs;
    std::vector<float> y(std::size_t(T * d));
    gattn::kv_cache cache = layer.make_cache(T);
    if (!decode) {
      layer.prefill({c.x.data(), T, d, d}, cache, {y.data(), T, d, d}, &obs);
    } else {
      for (index t = 0; t < T; ++t) layer.decode({c.x.data() + t * d, 1, d, d}, cache, {y.data() + t * d, 1, d, d}, &obs);
    }
    const nlohmann::json got = obs.result().to_json();
    for (const auto& [key, want] : c.stats.items()) {
      ASSERT_TRUE(got.contains(key)) << key << (decode ? " (decode)" : "");
      const double g = got[key].get<double>(), w = want.get<double>();
      if (key.rfind("frac", 0) == 0 || key.rfind("gate_frac", 0) == 0) {
        // fractions of values under a threshold: float vs float64 may flip a value at the boundary
        EXPECT_NEAR(g, w, 2.5e-3) << key << (decode ? " (decode)" : "");
      } else {
        EXPECT_NEAR(g, w, 1e-5 * std::max(1.0, std::abs(w))) << key << (decode ? " (decode)" : "");
      }
    }
    for (const auto& [key, value] : got.items()) EXPECT_TRUE(c.stats.contains(key)) << "extra key " << key;
  }
}

std::vector<std::string> all_cases() {
  auto v = test::gqa_case_names();
  for (const auto& m : test::mla_case_names()) v.push_back(m);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Vectors, LayerStatistics, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return info.param; });

}  // namespace

}  // namespace test_layer_statistics
