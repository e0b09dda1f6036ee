// io::load_weights hands out views into the mapped checkpoint (no copy, the mapping kept alive),
// and a layer built from bf16/f16 views computes what the same weights widened to fp32 compute;
// block-FP8 weights come with their scales, are refused without them, and the FP8 folders'
// layers reproduce their vectors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "gattn/attention/any_layer.hpp"
#include "gattn/io/config_file.hpp"
#include "gattn/io/hf_config.hpp"
#include "gattn/io/load_weights.hpp"
#include "gattn/io/safetensors.hpp"
#include "gattn/simd/convert.hpp"
#include "support/fp8_weights.hpp"
#include "support/kernel_sweep.hpp"
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

// Every vector's layer with its matrices in block FP8 (blocks that cut heads, rows and columns; F32
// and BF16 scales): the layer from the FP8 views computes what the dequantized fp32 weights do,
// in prefill (small GEMM or packed GEMM) and decode (GEMV, MLA's absorbed W_uk / W_uv).
TEST_P(LowPrecisionCheckpoint, LayerFromFp8ViewsEqualsTheDequantizedWeights) {
  const test::vector_case c = test::load_vector_case(GetParam());
  for (bool bf16_scales : {false, true}) {
    const weight_map views = test::fp8_weights(c.weights, bf16_scales ? 16 : 7, bf16_scales ? 24 : 13, bf16_scales);
    const weight_map widened = test::widened_weights(views);
    for (const auto& [name, v] : views.all())
      ASSERT_EQ(v.type(), v.shape().size() == 2 ? storage_type::f8_e4m3 : storage_type::f32) << name;
    for (bool decode : {false, true}) {
      if (decode && !gattn::any_layer(c.config, widened).causal()) continue;
      const auto want = run(c.config, widened, c.x, c.tokens, c.hidden, decode);
      const auto got = run(c.config, views, c.x, c.tokens, c.hidden, decode);
      EXPECT_LE(test::max_abs_diff(got, want), 1e-4 * test::max_abs(want))
          << GetParam() << (bf16_scales ? " bf16 scales" : " f32 scales") << (decode ? " decode" : " forward");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Vectors, LowPrecisionCheckpoint, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return info.param; });

namespace {

/// A [2, 3] F8 weight with F32 scales in blocks of [1, 2] ([2, 2] scales), and whatever else `extra` adds.
std::vector<std::uint8_t> fp8_file(std::vector<tensor_to_write> extra = {}, bool with_scales = true) {
  static const std::vector<std::uint8_t> codes = {0x38, 0x40, 0xB8, 0x30, 0x00, 0x7E};  // 1, 2, -1, 0.5, 0, 448
  static const std::vector<float> scales = {0.5f, 2.0f, -1.0f, 0.25f};
  std::vector<tensor_to_write> t = {{"l.q_proj.weight", dtype::f8_e4m3, {2, 3}, codes.data()}};
  if (with_scales) t.push_back({"l.q_proj.weight_scale_inv", dtype::f32, {2, 2}, scales.data()});
  for (auto& e : extra) t.push_back(e);
  return io::serialize_safetensors(t);
}

io::load_options blocks(index b0, index b1) {
  io::load_options o;
  o.fp8 = io::fp8_format{b0, b1};
  return o;
}

/// The weight_error message of loading `bytes` under "l." with `options`, or "" when it loads.
std::string load_refusal(const std::vector<std::uint8_t>& bytes, const io::load_options& options) {
  try {
    (void)io::load_weights(safetensors_file::parse(bytes), "l.", options);
  } catch (const weight_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(LoadWeights, Fp8WeightsAreViewsOfTheirCodesWithTheirScales) {
  const auto file = safetensors_file::parse(fp8_file());
  const weight_map w = io::load_weights(file, "l.", blocks(1, 2));
  ASSERT_EQ(w.all().size(), 1u);  // the scales travel with their weight
  const weight_view& v = w.get("q_proj.weight", {2, 3});
  EXPECT_EQ(v.type(), storage_type::f8_e4m3);
  EXPECT_EQ(v.data(), static_cast<const void*>(file.view("l.q_proj.weight").data()));
  EXPECT_EQ(v.bytes(), 6);
  EXPECT_EQ(v.widened(), (std::vector<float>{0.5f, 1.0f, -2.0f, -0.5f, 0.0f, 0.25f * 448}));
  EXPECT_EQ(v.row_range(1, 1).col_range(1, 2).widened(), (std::vector<float>{-0.0f, 112.0f}));
  const io::weight_report r = io::load_report(w);
  EXPECT_TRUE(r.all_in_place());
  EXPECT_EQ(r.fp8, std::vector<std::string>{"q_proj.weight"});
  EXPECT_EQ(r.summary(), "all 1 tensors are views of the checkpoint (1 of them block-scaled FP8)");
  io::load_options strict = blocks(1, 2);
  strict.strict_in_place = true;
  EXPECT_NO_THROW((void)io::load_weights(file, "l.", strict));
}

TEST(LoadWeights, Fp8WithoutWhatReadsItIsRefusedNamingTheTensor) {
  const auto has = [](const std::string& msg, const char* part) { return msg.find(part) != std::string::npos; };
  EXPECT_TRUE(has(load_refusal(fp8_file({}, false), blocks(1, 2)), "block scales 'l.q_proj.weight_scale_inv' are missing"));
  EXPECT_TRUE(has(load_refusal(fp8_file(), blocks(2, 2)), "have shape [2, 2], expected [1, 2]"));
  EXPECT_TRUE(has(load_refusal(fp8_file(), io::load_options{}), "weight 'l.q_proj.weight' is F8_E4M3, but no FP8 block size"));
  const std::vector<std::uint16_t> half = {0x3C00, 0x3C00, 0x3C00, 0x3C00};
  EXPECT_TRUE(has(load_refusal(io::serialize_safetensors({{"l.a.weight", dtype::f8_e4m3, {2, 2}, half.data()},
                                                          {"l.a.weight_scale_inv", dtype::f16, {2, 1}, half.data()}}),
                               blocks(1, 2)),
                  "have dtype F16"));
  EXPECT_TRUE(has(load_refusal(io::serialize_safetensors({{"l.e.weight", dtype::f8_e5m2, {2, 2}, half.data()}}), blocks(1, 2)),
                  "'l.e.weight' has dtype F8_E5M2"));
  const std::vector<float> one = {1.0f};
  EXPECT_TRUE(has(load_refusal(io::serialize_safetensors({{"l.b.weight", dtype::bf16, {1, 2}, half.data()},
                                                          {"l.b.weight_scale_inv", dtype::f32, {1, 1}, one.data()}}),
                               blocks(1, 2)),
                  "block scales 'l.b.weight_scale_inv' belong to no F8_E4M3 weight"));
  EXPECT_TRUE(has(load_refusal(io::serialize_safetensors({{"l.n.weight", dtype::f8_e4m3, {4}, half.data()},
                                                          {"l.n.weight_scale_inv", dtype::f32, {1}, one.data()}}),
                               blocks(1, 2)),
                  "FP8 weights must be matrices"));
  const std::vector<float> nan_scales = {0.5f, std::nanf(""), 1.0f, 1.0f};
  EXPECT_TRUE(has(load_refusal(fp8_file({{"l.k_proj.weight", dtype::f8_e4m3, {2, 3}, half.data()},
                                         {"l.k_proj.weight_scale_inv", dtype::f32, {2, 2}, nan_scales.data()}}),
                               blocks(1, 2)),
                  "'l.k_proj.weight' (F8_E4M3 [2, 3]): weight_view: block scale [0, 1] is nan"));
}

/// The Hugging Face FP8 folders: `io.safetensors` names the layer and its prefix.
struct fp8_folder {
  layer_config config;
  weight_map weights;
  std::vector<float> x;
  std::vector<double> y;
  index tokens = 0, hidden = 0;
};
fp8_folder open_fp8_folder(const std::string& dir, bool as_directory) {
  const std::string path = test::data_path(dir);
  const auto io_file = safetensors_file::open(path + "/io.safetensors");
  const index layer = std::stoll(io_file.metadata().at("layer"));
  fp8_folder f{io::load_layer_config(path + "/config.json", layer), {}, io_file.read_f32("x"), io_file.read_f64("y"), 0, 0};
  io::load_options options;
  if (!as_directory) options.fp8 = io::load_quantization(path + "/config.json");
  // A directory checkpoint reads the block size from its config.json; a file needs the option.
  f.weights = io::load_weights(io::checkpoint::open(as_directory ? path : path + "/model.safetensors"),
                               io_file.metadata().at("prefix"), options);
  f.hidden = index(io_file.view("x").shape()[1]);
  f.tokens = index(io_file.view("x").shape()[0]);
  return f;
}

TEST(LoadWeights, Fp8FoldersReproduceTheirVectorsInPrefillAndDecode) {
  for (const char* dir : {"hf_qwen3_next_fp8", "hf_qwen3_next_linear_fp8", "hf_deepseek_v3_fp8"})
    for (bool as_directory : {false, true}) {
      const fp8_folder f = open_fp8_folder(dir, as_directory);
      EXPECT_FALSE(io::load_report(f.weights).fp8.empty()) << dir;
      for (const auto& [name, v] : f.weights.all()) {
        if (name.find("proj") != std::string::npos && name.find("in_proj_ba") == std::string::npos) {
          EXPECT_EQ(v.type(), storage_type::f8_e4m3) << dir << " " << name;
        }
      }
      const any_layer layer(f.config, f.weights);
      const index d = f.hidden, T = f.tokens;
      std::vector<float> y(std::size_t(T * d));
      double worst = 0, scale = 0;
      for (index first : {T, index(5), index(0)}) {  // prefill, prefill then decode, decode from the start
        kv_cache cache = layer.is_delta() ? kv_cache() : layer.make_cache(T);
        delta_state state = layer.is_delta() ? layer.make_state() : delta_state();
        auto step = [&](index t0, index n) {
          if (layer.is_delta()) layer.prefill({f.x.data() + t0 * d, n, d, d}, state, {y.data() + t0 * d, n, d, d});
          else layer.prefill({f.x.data() + t0 * d, n, d, d}, cache, {y.data() + t0 * d, n, d, d});
        };
        if (first > 0) step(0, first);
        for (index t = first; t < T; ++t) step(t, 1);
        for (std::size_t i = 0; i < y.size(); ++i) {
          worst = std::max(worst, std::abs(double(y[i]) - f.y[i]));
          scale = std::max(scale, std::abs(f.y[i]));
        }
        EXPECT_LE(worst, 1e-4 * scale) << dir << " first decode at " << first << (as_directory ? " (directory)" : "");
      }
    }
}

/// A fixed pseudo-random input of n values about N(0, 1).
std::vector<float> linalg_test_input(index n) {
  std::mt19937 gen(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (float& v : x) v = nd(gen);
  return x;
}

/// Resident bytes of this process (/proc/self/statm), or -1 where it cannot be read.
double resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  double pages_total = 0, pages_resident = -1;
  if (!(statm >> pages_total >> pages_resident)) return -1;
  return pages_resident * 4096.0;
}

// A Qwen3-Next linear-attention layer at its real size (d 2048, H_k 16, H_v 32, D 128) with
// in_proj_qkvz [12288, 2048] and out_proj [2048, 4096] in block FP8 (blocks of 96 × 16, BF16 scales):
// built from the mapped file it adds the FP8 bytes it reads and little else to the resident size
// (no widened copy), and computes what the same layer from its dequantized fp32 copy computes.
TEST(LoadWeights, RealSizeFp8LayerRunsFromTheMappingWithoutACopy) {
  if (kernel_test::sweep() == kernel_test::sweep_size::small)
    GTEST_SKIP() << "a 32 MiB layer: the native and reduced sweeps run it (minutes under qemu or sanitizers)";
  delta_config c;
  c.hidden = 2048;
  c.key_heads = 16;
  c.value_heads = 32;
  c.key_head_dim = c.value_head_dim = 128;
  const index qkvz = 2 * 16 * 128 + 2 * 32 * 128, v = 32 * 128, b0 = 96, b1 = 16;
  std::mt19937 gen(20261207);
  std::uniform_int_distribution<int> code(0, 0x7D);  // finite magnitudes up to 240
  const auto codes = [&](index n) {
    std::vector<std::uint8_t> out(static_cast<std::size_t>(n));
    for (auto& b : out) b = std::uint8_t(code(gen) | (gen() & 1 ? 0x80 : 0));
    return out;
  };
  const auto scales = [&](index rows, index cols, float size) {
    std::vector<std::uint16_t> out(std::size_t(((rows + b0 - 1) / b0) * ((cols + b1 - 1) / b1)));
    std::uniform_real_distribution<float> u(0.5f * size, 1.5f * size);
    for (auto& s : out) s = round_to_bf16(u(gen));
    return out;
  };
  const auto w_qkvz = codes(qkvz * 2048), w_out = codes(2048 * v);
  const auto s_qkvz = scales(qkvz, 2048, 1e-4f), s_out = scales(2048, v, 1e-4f);
  std::vector<std::uint16_t> ba(64 * 2048), conv(std::size_t((2 * 16 * 128 + v) * 4)), a_log(32), dt(32), norm(128);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto* t : {&ba, &conv, &a_log, &dt, &norm})
    for (auto& x : *t) x = round_to_bf16(0.05f * nd(gen));
  for (auto& x : norm) x = round_to_bf16(1.0f + 0.05f * nd(gen));
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "gattn_real_size_fp8.safetensors";
  io::write_safetensors(path.string(),
                        {{"in_proj_qkvz.weight", dtype::f8_e4m3, {qkvz, 2048}, w_qkvz.data()},
                         {"in_proj_qkvz.weight_scale_inv", dtype::bf16, {(qkvz + b0 - 1) / b0, 2048 / b1}, s_qkvz.data()},
                         {"out_proj.weight", dtype::f8_e4m3, {2048, v}, w_out.data()},
                         {"out_proj.weight_scale_inv", dtype::bf16, {(2048 + b0 - 1) / b0, v / b1}, s_out.data()},
                         {"in_proj_ba.weight", dtype::bf16, {64, 2048}, ba.data()},
                         {"conv1d.weight", dtype::bf16, {2 * 16 * 128 + v, 1, 4}, conv.data()},
                         {"A_log", dtype::bf16, {32}, a_log.data()},
                         {"dt_bias", dtype::bf16, {32}, dt.data()},
                         {"norm.weight", dtype::bf16, {128}, norm.data()}});
  const index T = 8, d = 2048;
  const auto x = linalg_test_input(T * d);
  std::vector<float> y(std::size_t(T * d)), want(y.size());
  const double before = resident_bytes();
  {
    io::load_options options;
    options.fp8 = io::fp8_format{b0, b1};
    options.strict_in_place = true;
    const weight_map w = io::load_weights(io::checkpoint::open(path.string()), "", options);
    std::filesystem::remove(path);  // the mapping stays
    const delta_layer layer(c, w);
    layer.forward({x.data(), T, d, d}, {y.data(), T, d, d});
    const double grown = resident_bytes() - before, fp8_bytes = double(w_qkvz.size() + w_out.size());
    if (before >= 0) {
      EXPECT_LE(grown, fp8_bytes + 16.0 * (1 << 20)) << "resident size grew by " << grown / (1 << 20) << " MiB for "
                                                     << fp8_bytes / (1 << 20) << " MiB of FP8 weights";
    }
    const delta_layer widened(c, test::widened_weights(w));
    widened.forward({x.data(), T, d, d}, {want.data(), T, d, d});
  }
  EXPECT_LE(test::max_abs_diff(y, want), 1e-4 * test::max_abs(want));
  EXPECT_GT(test::max_abs(want), 0.0);
}

}  // namespace test_load_weights
}  // namespace gattn
