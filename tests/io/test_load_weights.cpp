// io::load_weights hands out views into the mapped checkpoint (no copy, the mapping kept alive),
// and a layer built from bf16/f16 views computes what the same weights widened to fp32 compute.
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "gattn/attention/any_layer.hpp"
#include "gattn/io/load_weights.hpp"
#include "gattn/io/safetensors.hpp"
#include "gattn/simd/convert.hpp"
#include "support/vectors.hpp"

namespace gattn {
// Named, not anonymous: the test target is built as a few unity translation units.
namespace test_load_weights {

using io::dtype;
using io::safetensors_file;
using io::tensor_to_write;

TEST(LoadWeights, Bf16F16F32AreViewsIntoTheMappingAndKeepItAlive) {
  const std::vector<std::uint16_t> bf = {0x3F80, 0x4000, 0xC040, 0x0000};  // 1, 2, -3, 0
  const std::vector<std::uint16_t> hf = {0x3C00, 0x4000, 0xC200, 0x0000};  // 1, 2, -3, 0 (keeps c 4-aligned)
  const std::vector<float> f = {0.5f, -1.5f};
  const std::vector<double> d = {0.1, 1e300};
  const std::vector<std::uint8_t> u = {7};
  const auto bytes = io::serialize_safetensors({{"l.a.weight", dtype::bf16, {2, 2}, bf.data()},
                                                {"l.b.weight", dtype::f16, {4}, hf.data()},
                                                {"l.c.weight", dtype::f32, {1, 2}, f.data()},
                                                {"l.d.weight", dtype::f64, {2}, d.data()},
                                                {"l.e.index", dtype::u8, {1}, u.data()}});
  weight_map w;
  const void* mapped_a = nullptr;
  {
    const auto file = safetensors_file::parse(bytes);
    w = io::load_weights(file, "l.", /*skip_non_float=*/true);
    mapped_a = file.view("l.a.weight").data();
    EXPECT_EQ(w.get("a.weight", {2, 2}).data(), mapped_a);
    EXPECT_EQ(w.get("b.weight", {4}).data(), file.view("l.b.weight").data());
    EXPECT_EQ(w.get("c.weight", {1, 2}).data(), file.view("l.c.weight").data());
    EXPECT_THROW(io::load_weights(file, "l."), weight_error);  // u8 refused unless skipped
  }
  // the file object is gone; the views hold its bytes
  EXPECT_EQ(w.all().size(), 4u);
  EXPECT_EQ(w.get("a.weight", {2, 2}).type(), storage_type::bf16);
  EXPECT_EQ(w.get("a.weight", {2, 2}).data(), mapped_a);
  EXPECT_EQ(w.widened("a.weight", {2, 2}), (std::vector<float>{1, 2, -3, 0}));
  EXPECT_EQ(w.get("b.weight", {4}).type(), storage_type::f16);
  EXPECT_EQ(w.widened("b.weight", {4}), (std::vector<float>{1, 2, -3, 0}));
  EXPECT_EQ(w.widened("c.weight", {1, 2}), f);
  // F64 has no fast path: rounded into an owned fp32 copy
  EXPECT_EQ(w.get("d.weight", {2}).type(), storage_type::f32);
  EXPECT_EQ(w.widened("d.weight", {2}), (std::vector<float>{0.1f, float(1e300)}));
}

TEST(LoadWeights, AMisalignedTensorIsCopiedNotReadUnaligned) {
  // a 1-byte tensor first puts the bf16 tensor at an odd offset of the data section
  const std::vector<std::uint8_t> u = {1};
  const std::vector<std::uint16_t> bf = {0x3F80, 0xBF80};
  const auto file = safetensors_file::parse(
      io::serialize_safetensors({{"a", dtype::u8, {1}, u.data()}, {"b", dtype::bf16, {2}, bf.data()}}));
  ASSERT_NE(reinterpret_cast<std::uintptr_t>(file.view("b").data()) % 2, 0u);
  const weight_map w = io::load_weights(file, "", true);
  const weight_view& v = w.get("b", {2});
  EXPECT_NE(v.data(), static_cast<const void*>(file.view("b").data()));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.data()) % alignof(float), 0u);
  EXPECT_EQ(v.widened(), (std::vector<float>{1, -1}));
}

// A legal file whose data is not aligned loads as fp32 copies: load_report says which and why, and
// load_options::strict_in_place refuses them instead.
TEST(LoadWeights, CopiesAreReportedAndStrictInPlaceRefusesThem) {
  const std::vector<std::uint8_t> u = {1};
  const std::vector<std::uint16_t> bf = {0x3F80, 0xBF80, 0x4000, 0x0000};
  const std::vector<double> d = {0.5};
  const auto file = safetensors_file::parse(io::serialize_safetensors(
      {{"l.a.index", dtype::u8, {1}, u.data()}, {"l.b.weight", dtype::bf16, {2, 2}, bf.data()},
       {"l.c.weight", dtype::f64, {1}, d.data()}}));
  ASSERT_NE(reinterpret_cast<std::uintptr_t>(file.view("l.b.weight").data()) % 2, 0u);
  io::load_options lenient;
  lenient.skip_non_float = true;
  const weight_map w = io::load_weights(file, "l.", lenient);
  const io::weight_report r = io::load_report(w);
  EXPECT_FALSE(r.all_in_place());
  EXPECT_EQ(r.tensors, 2);
  ASSERT_EQ(r.converted.size(), 2u);
  EXPECT_EQ(r.converted[0].name, "b.weight");
  EXPECT_EQ(r.converted[0].bytes, 4 * 4);  // a bf16 tensor widened: twice its stored size
  EXPECT_NE(std::string(r.converted[0].reason).find("not aligned"), std::string::npos);
  EXPECT_NE(std::string(r.converted[1].reason).find("F64"), std::string::npos);
  EXPECT_NE(r.summary().find("2 of 2 tensors are fp32 copies"), std::string::npos) << r.summary();
  EXPECT_NE(w.get("b.weight", {2, 2}).row_range(1, 1).conversion(), nullptr);  // sub-views say so too
  io::load_options strict = lenient;
  strict.strict_in_place = true;
  try {
    (void)io::load_weights(file, "l.", strict);
    ADD_FAILURE() << "strict_in_place accepted a misaligned tensor";
  } catch (const weight_error& e) {
    EXPECT_NE(std::string(e.what()).find("'l.b.weight' (BF16 [2, 2]) cannot be viewed in place"), std::string::npos)
        << e.what();
  }
  // An aligned file: every tensor a view, and strict_in_place accepts it.
  const auto aligned = safetensors_file::parse(io::serialize_safetensors({{"l.b.weight", dtype::bf16, {2, 2}, bf.data()}}));
  EXPECT_TRUE(io::load_report(io::load_weights(aligned, "l.", strict)).all_in_place());
  EXPECT_EQ(io::load_report(io::load_weights(aligned, "l.", strict)).summary(), "all 1 tensors are views of the checkpoint");
}

/// The case's weights rounded to `type` and stored in a safetensors buffer, as a checkpoint would.
safetensors_file stored_as(const weight_map& fp32, dtype type, std::vector<std::vector<std::uint16_t>>& keep) {
  std::vector<tensor_to_write> tensors;
  std::vector<std::vector<std::int64_t>> shapes;
  for (const auto& [name, v] : fp32.all()) {
    std::vector<std::uint16_t> bits;
    for (float x : v.widened()) bits.push_back(type == dtype::bf16 ? round_to_bf16(x) : round_to_f16(x));
    keep.push_back(std::move(bits));
    tensors.push_back({name, type, std::vector<std::int64_t>(v.shape().begin(), v.shape().end()), keep.back().data()});
  }
  return safetensors_file::parse(io::serialize_safetensors(tensors));
}

std::vector<float> run(const layer_config& cfg, const weight_map& w, const std::vector<float>& x, index T, index d,
                       bool decode) {
  const any_layer layer(cfg, w);
  std::vector<float> y(std::size_t(T * d));
  if (!decode) {
    layer.forward({x.data(), T, d, d}, {y.data(), T, d, d});
    return y;
  }
  kv_cache cache = layer.make_cache(T);
  for (index t = 0; t < T; ++t) layer.decode({x.data() + t * d, 1, d, d}, cache, {y.data() + t * d, 1, d, d});
  return y;
}

class LowPrecisionCheckpoint : public ::testing::TestWithParam<std::string> {};

TEST_P(LowPrecisionCheckpoint, LayerFromViewsEqualsTheFp32Widening) {
  const test::vector_case c = test::load_vector_case(GetParam());
  for (dtype type : {dtype::bf16, dtype::f16}) {
    std::vector<std::vector<std::uint16_t>> keep;
    const safetensors_file file = stored_as(c.weights, type, keep);
    const weight_map views = io::load_weights(file);
    weight_map widened;
    for (const auto& [name, v] : views.all()) {
      ASSERT_EQ(v.type(), type == dtype::bf16 ? storage_type::bf16 : storage_type::f16) << name;
      widened.set(name, v.shape(), v.widened());
    }
    for (bool decode : {false, true}) {
      const bool causal = gattn::any_layer(c.config, widened).causal();
      if (decode && !causal) continue;
      const auto want = run(c.config, widened, c.x, c.tokens, c.hidden, decode);
      const auto got = run(c.config, views, c.x, c.tokens, c.hidden, decode);
      EXPECT_LE(test::max_abs_diff(got, want), 1e-4 * test::max_abs(want))
          << GetParam() << (type == dtype::bf16 ? " bf16" : " f16") << (decode ? " decode" : " forward");
    }
  }
}

std::vector<std::string> all_cases() {
  auto names = test::gqa_case_names();
  for (const auto& n : test::mla_case_names()) names.push_back(n);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Vectors, LowPrecisionCheckpoint, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return info.param; });

}  // namespace test_load_weights
}  // namespace gattn
