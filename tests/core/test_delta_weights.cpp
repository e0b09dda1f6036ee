// Tests for include/gattn/core/delta_weights.hpp: the Gated DeltaNet weight contract in both layouts of
// its input projections (docs/spec.md §13 fused, §14 split), the layout read from the weights' names,
// and the refusals that name the tensors.
#include "gattn/core/delta_weights.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "support/random_delta_layer.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_delta_weights {
namespace {

using gattn::delta_config;
using gattn::delta_kind;
using gattn::gdn_layout;
using gattn::index;
using gattn::weight_map;
using ::testing::HasSubstr;

std::string weight_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const gattn::weight_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no weight_error";
  return "";
}

weight_map without(const weight_map& w, const std::vector<std::string>& drop) {
  weight_map out;
  for (const auto& [name, v] : w.all())
    if (std::find(drop.begin(), drop.end(), name) == drop.end()) out.set(name, v);
  return out;
}

// small_delta: H_k 2, H_v 8, D_k 16, D_v 12, d 40.
const delta_config gdn = gattn::test::small_delta(delta_kind::gated_deltanet);

TEST(DeltaWeights, GdnLayoutIsReadFromTheWeightNames) {
  EXPECT_EQ(gattn::detect_gdn_layout(gattn::test::random_delta_weights(gdn, 1)), gdn_layout::fused);
  const weight_map split = gattn::test::random_delta_weights(gdn, 1, {}, false, gdn_layout::split);
  EXPECT_EQ(gattn::detect_gdn_layout(split), gdn_layout::split);
  EXPECT_EQ(gattn::detect_gdn_layout(weight_map{}), gdn_layout::fused);
  // Any one tensor of the split layout says so, a bias included.
  weight_map one;
  one.set("in_proj_a.bias", {8}, std::vector<float>(8, 0.0f));
  EXPECT_EQ(gattn::detect_gdn_layout(one), gdn_layout::split);
  EXPECT_STREQ(gattn::to_string(gdn_layout::split), "split");
  EXPECT_STREQ(gattn::to_string(gdn_layout::fused), "fused");
}

TEST(DeltaWeights, SplitContractNamesAndShapesItsTensors) {
  const weight_map w = gattn::test::random_delta_weights(gdn, 2, {}, true, gdn_layout::split);
  const auto contract = gattn::detail::check_delta_weights(gdn, w);
  EXPECT_EQ(contract.layout, gdn_layout::split);
  EXPECT_EQ(contract.weights.size(), 9u);
  EXPECT_EQ(contract["in_proj_qkv.weight"].shapes.front(), (std::vector<index>{2 * 2 * 16 + 8 * 12, 40}));
  EXPECT_EQ(contract["in_proj_qkv.weight"].bias, "in_proj_qkv.bias");
  EXPECT_EQ(contract["in_proj_z.weight"].shapes.front(), (std::vector<index>{8 * 12, 40}));
  EXPECT_EQ(contract["in_proj_b.weight"].shapes.front(), (std::vector<index>{8, 40}));
  EXPECT_EQ(contract["in_proj_a.weight"].shapes.front(), (std::vector<index>{8, 40}));
  EXPECT_EQ(contract["conv1d.weight"].shapes.front(), (std::vector<index>{160, 1, 4}));
  EXPECT_THROW(contract["in_proj_qkvz.weight"], gattn::weight_error);
  const auto fused = gattn::detail::check_delta_weights(gdn, gattn::test::random_delta_weights(gdn, 2));
  EXPECT_EQ(fused.layout, gdn_layout::fused);
  EXPECT_EQ(fused.weights.size(), 7u);
  EXPECT_THROW(fused["in_proj_z.weight"], gattn::weight_error);
}

// Both layouts at once would have the layer read one and drop the other silently: refused, naming one
// tensor of each, wherever the contract is read.
TEST(DeltaWeights, BothLayoutsAreRefusedNamingATensorOfEach) {
  const weight_map fused = gattn::test::random_delta_weights(gdn, 3);
  const weight_map split = gattn::test::random_delta_weights(gdn, 3, {}, false, gdn_layout::split);
  weight_map both = fused;
  both.set("in_proj_z.weight", split.all().at("in_proj_z.weight"));
  for (const std::string& m : {weight_error_of([&] { gattn::detect_gdn_layout(both); }),
                               weight_error_of([&] { gattn::detail::check_delta_weights(gdn, both); })}) {
    EXPECT_THAT(m, HasSubstr("'in_proj_qkvz.weight'"));
    EXPECT_THAT(m, HasSubstr("'in_proj_z.weight'"));
    EXPECT_THAT(m, HasSubstr("not both"));
  }
  weight_map stray_bias = split;  // a fused bias beside split weights is the same mistake
  stray_bias.set("in_proj_ba.bias", {16}, std::vector<float>(16, 0.0f));
  EXPECT_THAT(weight_error_of([&] { gattn::detail::check_delta_weights(gdn, stray_bias); }),
              HasSubstr("'in_proj_ba.bias'"));
}

TEST(DeltaWeights, EverySplitTensorIsRequiredAndShapeChecked) {
  const weight_map split = gattn::test::random_delta_weights(gdn, 4, {}, false, gdn_layout::split);
  for (const std::string name : {"in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight"}) {
    EXPECT_THAT(weight_error_of([&] { gattn::detail::check_delta_weights(gdn, without(split, {name})); }),
                HasSubstr("missing weight '" + name + "'"));
    weight_map bad = split;
    bad.set(name, {3, 40}, std::vector<float>(120, 0.0f));
    const std::string m = weight_error_of([&] { gattn::detail::check_delta_weights(gdn, bad); });
    EXPECT_THAT(m, HasSubstr("'" + name + "' has shape [3, 40]"));
  }
  weight_map bad_bias = split;
  bad_bias.set("in_proj_b.bias", {7}, std::vector<float>(7, 0.0f));
  EXPECT_THAT(weight_error_of([&] { gattn::detail::check_delta_weights(gdn, bad_bias); }), HasSubstr("'in_proj_b.bias'"));
}

// Neither layout present: the message names the fused tensor and the split alternative.
TEST(DeltaWeights, NeitherLayoutNamesBoth) {
  const weight_map fused = gattn::test::random_delta_weights(gdn, 5);
  const std::string m = weight_error_of(
      [&] { gattn::detail::check_delta_weights(gdn, without(fused, {"in_proj_qkvz.weight", "in_proj_ba.weight"})); });
  EXPECT_THAT(m, HasSubstr("missing weight 'in_proj_qkvz.weight'"));
  EXPECT_THAT(m, HasSubstr("'in_proj_qkv.weight'"));
  EXPECT_THAT(m, HasSubstr("'in_proj_a.weight'"));
}

// The helper the layer tests build fused weights with puts every row where Qwen3-Next keeps it.
TEST(DeltaWeights, FusedFromSplitFollowsTheFusedLayout) {
  const weight_map split = gattn::test::random_delta_weights(gdn, 6, {}, true, gdn_layout::split);
  const weight_map fused = gattn::test::fused_from_split(gdn, split);
  EXPECT_EQ(gattn::detect_gdn_layout(fused), gdn_layout::fused);
  EXPECT_NO_THROW(gattn::detail::check_delta_weights(gdn, fused));
  const index Dk = 16, Dv = 12, r = 4, per_group = 2 * Dk + 2 * r * Dv;
  const auto& qkvz = fused.all().at("in_proj_qkvz.weight");
  const auto& qkv = split.all().at("in_proj_qkv.weight");
  const auto& z = split.all().at("in_proj_z.weight");
  EXPECT_EQ(qkvz.at(per_group + 3, 5), qkv.at(Dk + 3, 5));                   // q of key head 1
  EXPECT_EQ(qkvz.at(per_group + Dk + 2, 7), qkv.at(2 * Dk + Dk + 2, 7));     // k of key head 1
  EXPECT_EQ(qkvz.at(per_group + 2 * Dk + 1, 0), qkv.at(4 * Dk + r * Dv + 1, 0));  // v of value head 4
  EXPECT_EQ(qkvz.at(per_group + 2 * Dk + r * Dv, 9), z.at(r * Dv, 9));       // z of value head 4
  const auto& ba = fused.all().at("in_proj_ba.weight");
  EXPECT_EQ(ba.at(2 * r + 1, 2), split.all().at("in_proj_b.weight").at(r + 1, 2));
  EXPECT_EQ(ba.at(2 * r + r + 1, 2), split.all().at("in_proj_a.weight").at(r + 1, 2));
  EXPECT_EQ(fused.all().at("in_proj_ba.bias").at(r, 0), split.all().at("in_proj_a.bias").at(0, 0));
}

}  // namespace
}  // namespace test_delta_weights
