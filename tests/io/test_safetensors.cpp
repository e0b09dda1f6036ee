// Tests for include/gattn/io/safetensors.hpp: round trips, the reference files, exact widening,
// and one test per kind of hostile file.
#include "gattn/io/safetensors.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

// One namespace per file: the test target is built as a few unity translation units.
namespace test_safetensors {

#ifndef GATTN_TEST_DATA
#error "GATTN_TEST_DATA must be defined as the absolute path of tests/data"
#endif

namespace {

using gattn::format_error;
using gattn::weight_error;
using gattn::io::dtype;
using gattn::io::safetensors_file;
using gattn::io::serialize_safetensors;
using gattn::io::tensor_to_write;
using ::testing::HasSubstr;

std::string data_path(const std::string& relative) { return std::string(GATTN_TEST_DATA) + "/" + relative; }

/// A file whose header is `header` verbatim, followed by `data_bytes` zero bytes.
std::vector<std::uint8_t> raw_file(const std::string& header, std::size_t data_bytes = 0) {
  std::vector<std::uint8_t> out(8 + header.size() + data_bytes, 0);
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(n >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

/// The message of the format_error that parsing `bytes` throws ("" and a test failure if none).
std::string parse_error(std::vector<std::uint8_t> bytes) {
  try {
    safetensors_file::parse(std::move(bytes), "hostile.safetensors");
  } catch (const format_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected gattn::format_error, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected gattn::format_error, parse succeeded";
  return "";
}

/// Checks that the header `header` (with `data_bytes` data bytes) is refused with a message that
/// names the file and contains `word`.
void expect_refused(const std::string& header, std::size_t data_bytes, const std::string& word) {
  const std::string message = parse_error(raw_file(header, data_bytes));
  EXPECT_THAT(message, HasSubstr("hostile.safetensors")) << "header: " << header;
  EXPECT_THAT(message, HasSubstr(word)) << "header: " << header;
}

std::uint32_t float_bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// ---------------------------------------------------------------------------------------------
// Round trips

TEST(SafetensorsRoundTrip, F32AndF64WithMetadata) {
  const std::vector<float> a = {1.0f, -2.5f, 3.25f, std::numeric_limits<float>::infinity(), 0.0f, -0.0f};
  const std::vector<double> b = {1e-300, -7.0, 0.1};
  const std::vector<tensor_to_write> tensors = {{"a", dtype::f32, {2, 3}, a.data()},
                                                {"b.weight", dtype::f64, {3}, b.data()}};
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"config", R"({"x": 1})"}};
  const auto file = safetensors_file::parse(serialize_safetensors(tensors, meta));

  ASSERT_EQ(file.tensors().size(), 2u);
  EXPECT_EQ(file.tensors()[0].name, "a");  // sorted by data offset
  EXPECT_EQ(file.info("a").type, dtype::f32);
  EXPECT_EQ(file.info("a").shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(file.info("a").numel(), 6);
  EXPECT_EQ(file.info("b.weight").begin, 24u);
  EXPECT_EQ(file.info("b.weight").end, 48u);
  EXPECT_EQ(file.metadata(), meta);

  const auto a_back = file.read_f32("a");
  ASSERT_EQ(a_back.size(), a.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(float_bits(a_back[i]), float_bits(a[i])) << i;
  EXPECT_EQ(file.read_f64("b.weight"), b);
  const auto a_wide = file.read_f64("a");
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a_wide[i], static_cast<double>(a[i]));
  // F64 read as f32 rounds to nearest.
  const auto b_narrow = file.read_f32("b.weight");
  EXPECT_EQ(b_narrow[0], 0.0f);
  EXPECT_EQ(b_narrow[1], -7.0f);
  EXPECT_EQ(b_narrow[2], 0.1f);
  EXPECT_TRUE(file.contains("a"));
  EXPECT_FALSE(file.contains("c"));
}

TEST(SafetensorsRoundTrip, HeaderPaddedToEightBytes) {
  const float x = 1.0f;
  const auto bytes = serialize_safetensors({{"x", dtype::f32, {1}, &x}});
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<std::size_t>(i)];
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 4);
}

TEST(SafetensorsRoundTrip, F16AndBf16AndScalarAndEmpty) {
  const std::vector<std::uint16_t> h = {0x3C00, 0xC000, 0x0001, 0x7C00};  // 1, -2, 2^-24, inf
  const std::vector<std::uint16_t> bf = {0x3F80, 0x4049};                 // 1, 3.140625
  const double s = 42.0;
  const std::vector<tensor_to_write> tensors = {{"h", dtype::f16, {4}, h.data()},
                                                {"empty", dtype::f32, {0, 5}, nullptr},
                                                {"bf", dtype::bf16, {1, 2}, bf.data()},
                                                {"scalar", dtype::f64, {}, &s}};
  const auto file = safetensors_file::parse(serialize_safetensors(tensors));
  EXPECT_EQ(file.read_f32("h"), (std::vector<float>{1.0f, -2.0f, std::ldexp(1.0f, -24), INFINITY}));
  EXPECT_EQ(file.read_f64("bf"), (std::vector<double>{1.0, 3.140625}));
  EXPECT_TRUE(file.read_f32("empty").empty());
  EXPECT_EQ(file.info("empty").numel(), 0);
  EXPECT_EQ(file.info("scalar").numel(), 1);
  EXPECT_EQ(file.read_f64("scalar"), std::vector<double>{42.0});
  EXPECT_TRUE(file.metadata().empty());
}

TEST(SafetensorsRoundTrip, WriteAndOpenFile) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "gattn_test_safetensors_roundtrip.safetensors").string();
  const std::vector<float> w = {0.5f, 0.25f};
  gattn::io::write_safetensors(path, {{"w", dtype::f32, {2}, w.data()}}, {{"k", "v"}});
  const auto file = safetensors_file::open(path);
  std::remove(path.c_str());
  EXPECT_EQ(file.read_f32("w"), w);
  EXPECT_EQ(file.metadata().at("k"), "v");
  EXPECT_EQ(file.origin(), path);
}

TEST(SafetensorsRoundTrip, IntegerTensorsAreStoredButNotReadAsFloats) {
  const std::vector<std::int32_t> ids = {1, 2, 3};
  const auto file = safetensors_file::parse(serialize_safetensors({{"ids", dtype::i32, {3}, ids.data()}}), "ids.st");
  std::int32_t back[3];
  std::memcpy(back, file.raw("ids"), sizeof back);
  EXPECT_EQ(back[2], 3);
  try {
    (void)file.read_f32("ids");
    ADD_FAILURE() << "expected weight_error";
  } catch (const weight_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("I32"));
    EXPECT_THAT(e.what(), HasSubstr("ids"));
  }
  EXPECT_THROW((void)file.read_f64("ids"), weight_error);
}

TEST(SafetensorsRoundTrip, MissingTensorIsWeightErrorNamingTensorAndFile) {
  const float x = 1.0f;
  const auto file = safetensors_file::parse(serialize_safetensors({{"x", dtype::f32, {1}, &x}}), "some.safetensors");
  try {
    (void)file.info("q_proj.weight");
    ADD_FAILURE() << "expected weight_error";
  } catch (const weight_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("tensor 'q_proj.weight' not found in some.safetensors"));
  }
  EXPECT_THROW((void)file.read_f32("nope"), weight_error);
  EXPECT_THROW((void)file.raw("nope"), weight_error);
}

TEST(SafetensorsRoundTrip, WriterRefusesBadInput) {
  const float x = 1.0f;
  EXPECT_THROW(serialize_safetensors({{"x", dtype::f32, {1}, &x}, {"x", dtype::f32, {1}, &x}}), format_error);
  EXPECT_THROW(serialize_safetensors({{"__metadata__", dtype::f32, {1}, &x}}), format_error);
  EXPECT_THROW(serialize_safetensors({{"x", dtype::f32, {-1}, &x}}), format_error);
  EXPECT_THROW(serialize_safetensors({{"x", dtype::f32, {1}, nullptr}}), format_error);
  EXPECT_THROW(serialize_safetensors({{"x", dtype::f32, {1 << 30, 1 << 30, 1 << 30}, &x}}), format_error);
  EXPECT_THROW(serialize_safetensors({{"bad\xff", dtype::f32, {1}, &x}}), format_error);
}

TEST(SafetensorsRoundTrip, DtypeNamesAndSizes) {
  EXPECT_EQ(gattn::io::dtype_name(dtype::bf16), "BF16");
  EXPECT_EQ(gattn::io::dtype_name(dtype::boolean), "BOOL");
  EXPECT_EQ(gattn::io::dtype_name(dtype::f8_e4m3), "F8_E4M3");
  EXPECT_EQ(gattn::io::dtype_size(dtype::f64), 8u);
  EXPECT_EQ(gattn::io::dtype_size(dtype::f16), 2u);
  EXPECT_EQ(gattn::io::dtype_size(dtype::u8), 1u);
}

// ---------------------------------------------------------------------------------------------
// The reference files

TEST(SafetensorsReference, GqaPlain) {
  const auto file = safetensors_file::open(data_path("gqa_plain.safetensors"));
  EXPECT_EQ(file.tensors().size(), 11u);
  EXPECT_EQ(file.info("q_proj.weight").type, dtype::f32);
  EXPECT_EQ(file.info("q_proj.weight").shape, (std::vector<std::int64_t>{64, 64}));
  EXPECT_EQ(file.info("y").type, dtype::f64);
  EXPECT_EQ(file.read_f64("y").size(), 13u * 64u);
  EXPECT_EQ(file.read_f32("x").size(), 13u * 64u);
  ASSERT_EQ(file.metadata().count("config"), 1u);
  EXPECT_THAT(file.metadata().at("config"), HasSubstr("\"attention\": \"gqa\""));
  for (double v : file.read_f64("y")) EXPECT_TRUE(std::isfinite(v));
  // Sorted by offset, tiling the data section.
  std::uint64_t expected = 0;
  for (const auto& t : file.tensors()) {
    EXPECT_EQ(t.begin, expected) << t.name;
    expected = t.end;
  }
}

TEST(SafetensorsReference, Qwen3NextBf16Checkpoint) {
  const auto file = safetensors_file::open(data_path("hf_qwen3_next/model.safetensors"));
  const std::string prefix = "model.layers.3.self_attn.";
  const auto& q = file.info(prefix + "q_proj.weight");
  EXPECT_EQ(q.type, dtype::bf16);
  EXPECT_EQ(q.shape, (std::vector<std::int64_t>{256, 64}));
  const auto widened = file.read_f32(prefix + "q_proj.weight");
  ASSERT_EQ(widened.size(), 256u * 64u);
  // Widening is exact: the low 16 bits of every float are zero and the top 16 are the stored bits.
  const std::uint8_t* raw = file.raw(prefix + "q_proj.weight");
  for (std::size_t i = 0; i < widened.size(); ++i) {
    std::uint16_t stored;
    std::memcpy(&stored, raw + 2 * i, 2);
    ASSERT_EQ(float_bits(widened[i]), std::uint32_t{stored} << 16) << i;
  }
  EXPECT_EQ(file.metadata().at("format"), "pt");
}

TEST(SafetensorsReference, HfIoFiles) {
  for (const char* folder : {"hf_qwen3_next", "hf_deepseek_v3_gated"}) {
    const auto file = safetensors_file::open(data_path(std::string(folder) + "/io.safetensors"));
    EXPECT_EQ(file.info("x").type, dtype::f32) << folder;
    EXPECT_EQ(file.info("y").type, dtype::f64) << folder;
    EXPECT_EQ(file.read_f64("y").size(), static_cast<std::size_t>(file.info("y").numel())) << folder;
    EXPECT_THAT(file.metadata().at("prefix"), HasSubstr("self_attn.")) << folder;
  }
}

TEST(SafetensorsReference, MissingFileNamesPath) {
  const std::string path = data_path("does/not/exist.safetensors");
  try {
    (void)safetensors_file::open(path);
    ADD_FAILURE() << "expected format_error";
  } catch (const format_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
  }
}

TEST(SafetensorsReference, DirectoryIsRefused) {
  try {
    (void)safetensors_file::open(GATTN_TEST_DATA);
    ADD_FAILURE() << "expected format_error";
  } catch (const format_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("directory"));
  }
}

TEST(SafetensorsReference, ErrorsWhileParsingAFileNameThePath) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "gattn_test_safetensors_short.safetensors").string();
  {
    std::ofstream out(path, std::ios::binary);
    out << "abc";
  }
  try {
    (void)safetensors_file::open(path);
    ADD_FAILURE() << "expected format_error";
  } catch (const format_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
    EXPECT_THAT(e.what(), HasSubstr("shorter"));
  }
  std::remove(path.c_str());
}

// ---------------------------------------------------------------------------------------------
// Exact widening

TEST(SafetensorsWidening, Bf16) {
  EXPECT_EQ(gattn::io::bf16_to_float(0x0000), 0.0f);
  EXPECT_EQ(float_bits(gattn::io::bf16_to_float(0x8000)), 0x80000000u);  // -0
  EXPECT_EQ(gattn::io::bf16_to_float(0x3F80), 1.0f);
  EXPECT_EQ(gattn::io::bf16_to_float(0xC040), -3.0f);
  EXPECT_EQ(gattn::io::bf16_to_float(0x0001), std::ldexp(1.0f, -133));  // smallest subnormal
  EXPECT_EQ(gattn::io::bf16_to_float(0x007F), std::ldexp(127.0f, -133));  // largest subnormal
  EXPECT_EQ(gattn::io::bf16_to_float(0x7F7F), std::ldexp(255.0f, 120));   // largest finite
  EXPECT_EQ(gattn::io::bf16_to_float(0x7F80), INFINITY);
  EXPECT_EQ(gattn::io::bf16_to_float(0xFF80), -INFINITY);
  EXPECT_TRUE(std::isnan(gattn::io::bf16_to_float(0x7FC0)));
  EXPECT_EQ(float_bits(gattn::io::bf16_to_float(0xFFC1)), 0xFFC10000u);  // sign and payload kept
}

TEST(SafetensorsWidening, F16) {
  using gattn::io::f16_to_float;
  EXPECT_EQ(float_bits(f16_to_float(0x0000)), 0x00000000u);
  EXPECT_EQ(float_bits(f16_to_float(0x8000)), 0x80000000u);  // -0
  EXPECT_EQ(f16_to_float(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_float(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_to_float(0xC000), -2.0f);
  EXPECT_EQ(f16_to_float(0x7BFF), 65504.0f);                  // largest finite
  EXPECT_EQ(f16_to_float(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(f16_to_float(0x03FF), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(f16_to_float(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_float(0x7C00), INFINITY);
  EXPECT_EQ(f16_to_float(0xFC00), -INFINITY);
  EXPECT_TRUE(std::isnan(f16_to_float(0x7E00)));
  EXPECT_TRUE(std::isnan(f16_to_float(0x7C01)));  // signalling NaN stays NaN
  EXPECT_EQ(float_bits(f16_to_float(0xFE01)), 0xFFC02000u);  // sign and payload kept
  // Every finite f16 must round-trip through float exactly: compare against a direct formula.
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const std::uint32_t e = (b >> 10) & 0x1F, m = b & 0x3FF;
    if (e == 0x1F) continue;
    const double magnitude = e == 0 ? std::ldexp(double(m), -24) : std::ldexp(1.0 + m / 1024.0, int(e) - 15);
    const double expected = (b & 0x8000) ? -magnitude : magnitude;
    ASSERT_EQ(double(f16_to_float(static_cast<std::uint16_t>(b))), expected) << std::hex << b;
  }
}

TEST(SafetensorsWidening, Float8) {
  using gattn::io::f8_e4m3_to_float;
  using gattn::io::f8_e5m2_to_float;
  EXPECT_EQ(f8_e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(f8_e4m3_to_float(0x7E), 448.0f);                  // largest finite
  EXPECT_EQ(f8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));    // smallest subnormal
  EXPECT_EQ(f8_e4m3_to_float(0x81), -std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(f8_e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(f8_e4m3_to_float(0xFF)));
  EXPECT_EQ(f8_e5m2_to_float(0x3C), 1.0f);
  EXPECT_EQ(f8_e5m2_to_float(0x7C), INFINITY);
  EXPECT_EQ(f8_e5m2_to_float(0x01), std::ldexp(1.0f, -16));
  EXPECT_TRUE(std::isnan(f8_e5m2_to_float(0x7F)));
  const std::vector<std::uint8_t> bytes = {0x38, 0x40};
  const auto file = safetensors_file::parse(serialize_safetensors({{"f8", dtype::f8_e4m3, {2}, bytes.data()}}));
  EXPECT_EQ(file.read_f32("f8"), (std::vector<float>{1.0f, 2.0f}));
}

// ---------------------------------------------------------------------------------------------
// Hostile files: each must throw gattn::format_error naming the file and the problem.

TEST(SafetensorsHostile, ShorterThanEightBytes) {
  for (std::size_t n = 0; n < 8; ++n) {
    const std::string message = parse_error(std::vector<std::uint8_t>(n, 0));
    EXPECT_THAT(message, HasSubstr("shorter")) << n;
    EXPECT_THAT(message, HasSubstr("hostile.safetensors"));
  }
}

TEST(SafetensorsHostile, HeaderLengthBeyondFile) {
  auto bytes = raw_file("{}");
  bytes[0] = 3;  // claims a 3-byte header, the file has 2
  EXPECT_THAT(parse_error(bytes), HasSubstr("exceeds"));
  bytes[0] = 0;
  bytes[4] = 1;  // 2^32
  EXPECT_THAT(parse_error(bytes), HasSubstr("too large"));
}

TEST(SafetensorsHostile, HeaderLengthTooLargeOrOverflowing) {
  std::vector<std::uint8_t> bytes(16, 0xFF);  // header length 2^64 - 1: 8 + N would overflow
  EXPECT_THAT(parse_error(bytes), HasSubstr("too large"));
  auto big = raw_file("{}");
  const std::uint64_t n = 100'000'001;
  for (int i = 0; i < 8; ++i) big[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(n >> (8 * i));
  EXPECT_THAT(parse_error(big), HasSubstr("100000000"));
}

TEST(SafetensorsHostile, HeaderNotJson) {
  expect_refused("not json", 0, "JSON");
  expect_refused("", 0, "JSON");
  expect_refused("{\"a\": ", 0, "JSON");
  expect_refused(std::string("{}\0", 3), 0, "JSON");  // nlohmann alone would stop at the NUL
  expect_refused(std::string("{\"a\0\": 1}", 9), 0, "JSON");
}

TEST(SafetensorsHostile, HeaderNotUtf8) {
  expect_refused("{\"\xff\xfe\": {}}", 0, "UTF-8");
  expect_refused("{\"\xc3\": {}}", 0, "UTF-8");  // truncated two-byte sequence
}

TEST(SafetensorsHostile, HeaderNotAnObject) {
  expect_refused("[1, 2]", 0, "not a JSON object");
  expect_refused("42", 0, "not a JSON object");
  expect_refused("\"x\"", 0, "not a JSON object");
}

TEST(SafetensorsHostile, EntryNotAnObject) {
  expect_refused(R"({"w": [1, 2]})", 0, "entry is not a JSON object");
  expect_refused(R"({"w": "F32"})", 0, "'w'");
}

TEST(SafetensorsHostile, EntryLacksAField) {
  expect_refused(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", 4, "lacks 'dtype'");
  expect_refused(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", 4, "lacks 'shape'");
  expect_refused(R"({"w": {"dtype": "F32", "shape": [1]}})", 4, "lacks 'data_offsets'");
}

TEST(SafetensorsHostile, EntryHasWrongTypesOrUnknownKeys) {
  expect_refused(R"({"w": {"dtype": 3, "shape": [1], "data_offsets": [0, 4]}})", 4, "dtype is not a string");
  expect_refused(R"({"w": {"dtype": "F32", "shape": 1, "data_offsets": [0, 4]}})", 4, "shape is not an array");
  expect_refused(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": "0-4"}})", 4, "data_offsets");
  expect_refused(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4, "pair");
  expect_refused(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}})", 8, "pair");
  expect_refused(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 4]}})", 4, "non-negative");
  expect_refused(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0.0, 4]}})", 4, "non-negative integers");
  expect_refused(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": 1}})", 4, "unknown key 'x'");
}

TEST(SafetensorsHostile, UnknownDtype) {
  expect_refused(R"({"w": {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}})", 4, "unknown dtype \"F33\"");
  expect_refused(R"({"w": {"dtype": "f32", "shape": [1], "data_offsets": [0, 4]}})", 4, "unknown dtype");
  expect_refused(R"({"w": {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}})", 1, "unknown dtype");
}

TEST(SafetensorsHostile, NegativeOrNonIntegerDims) {
  expect_refused(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4, "[-1]");
  expect_refused(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4, "not a non-negative integer");
  expect_refused(R"({"w": {"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]}})", 4, "not a non-negative integer");
  expect_refused(R"({"w": {"dtype": "F32", "shape": ["1"], "data_offsets": [0, 4]}})", 4, "not a non-negative integer");
  expect_refused(R"({"w": {"dtype": "F32", "shape": [[1]], "data_offsets": [0, 4]}})", 4, "nests deeper");
  // Larger than int64: stored by nlohmann as uint64, or as a float beyond uint64.
  expect_refused(R"({"w": {"dtype": "F32", "shape": [9223372036854775808], "data_offsets": [0, 4]}})", 4,
                 "not a non-negative integer");
  expect_refused(R"({"w": {"dtype": "F32", "shape": [99999999999999999999999], "data_offsets": [0, 4]}})", 4,
                 "not a non-negative integer");
}

TEST(SafetensorsHostile, ShapeProductOverflow) {
  // The element count overflows int64 (2^32 * 2^32, 2^62 * 4), or the byte count overflows uint64 (2^61 * 8).
  expect_refused(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})", 4,
                 "overflows");
  expect_refused(R"({"w": {"dtype": "F64", "shape": [4611686018427387904, 4], "data_offsets": [0, 8]}})", 8,
                 "overflows");
  expect_refused(R"({"w": {"dtype": "F64", "shape": [2305843009213693952], "data_offsets": [0, 8]}})", 8,
                 "overflows");
  // A zero dim makes the product zero whatever the other dims are.
  const auto file = safetensors_file::parse(
      raw_file(R"({"w": {"dtype": "F32", "shape": [9223372036854775807, 0], "data_offsets": [0, 0]}})"));
  EXPECT_EQ(file.info("w").numel(), 0);
  EXPECT_TRUE(file.read_f32("w").empty());
}

TEST(SafetensorsHostile, SizeDoesNotMatchOffsets) {
  expect_refused(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 4, "needs 8 bytes");
  expect_refused(R"({"w": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 8]}})", 8, "span 8");
}

TEST(SafetensorsHostile, BeginAfterEnd) {
  expect_refused(R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [4, 0]}})", 4, "begin > end");
}

TEST(SafetensorsHostile, OffsetsBeyondData) {
  expect_refused(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 3, "beyond the data section");
  expect_refused(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [18446744073709551612, 18446744073709551615]}})",
                 4, "beyond");
}

TEST(SafetensorsHostile, OverlappingTensors) {
  expect_refused(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                     "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                 8, "overlap");
  // Two tensors aliasing the same bytes.
  expect_refused(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                     "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                 4, "overlap");
}

TEST(SafetensorsHostile, GapBetweenTensors) {
  expect_refused(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                     "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                 12, "gap of 4 bytes");
  expect_refused(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8, "gap");
}

TEST(SafetensorsHostile, TrailingBytes) {
  expect_refused(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 5, "1 trailing bytes");
  expect_refused("{}", 1, "trailing");
}

TEST(SafetensorsHostile, DuplicateNames) {
  expect_refused(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                     "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                 8, "duplicate tensor name 'a'");
  expect_refused(R"({"a": {"dtype": "F32", "dtype": "F64", "shape": [1], "data_offsets": [0, 4]}})", 4,
                 "duplicate key 'dtype'");
  expect_refused(R"({"__metadata__": {"k": "1", "k": "2"}})", 0, "duplicate key 'k'");
}

TEST(SafetensorsHostile, MetadataNotAnObjectOfStrings) {
  expect_refused(R"({"__metadata__": "x"})", 0, "__metadata__ is not a JSON object");
  expect_refused(R"({"__metadata__": ["x"]})", 0, "__metadata__ is not a JSON object");
  expect_refused(R"({"__metadata__": {"n": 1}})", 0, "value for 'n' is not a string");
  expect_refused(R"({"__metadata__": {"o": {"a": "b"}}})", 0, "value for 'o' is not a string");
}

TEST(SafetensorsHostile, DeeplyNestedHeaderDoesNotOverflowTheStack) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  expect_refused(R"({"w": {"dtype": "F32", "shape": )" + deep + R"(, "data_offsets": [0, 4]}})", 4, "at 'w.shape[]'");
  expect_refused(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": )" + deep + "}}", 4, "at 'w.data_offsets[]'");
  expect_refused(R"({"__metadata__": {"m": )" + deep + "}}", 0, "at '__metadata__.m[]'");
}

TEST(SafetensorsHostile, NestingDeeperThanTheFormatIsRefusedBeforeTheDomIsBuilt) {
  // The format has 3 levels (header, entry, shape); a fourth is refused by the streaming pass,
  // which is what keeps a 100 MB header of '[' from costing gigabytes.
  expect_refused(R"({"w": {"dtype": "F32", "shape": [[1]], "data_offsets": [0, 4]}})", 4,
                 "nests deeper than the format's 3 levels");
  expect_refused(R"({"__metadata__": {"m": {"n": ["v"]}}})", 0, "nests deeper");
  expect_refused(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": {"y": [1]}}})", 4,
                 "nests deeper");
}

TEST(SafetensorsHostile, ValidEdgeCasesAreAccepted) {
  // Empty header and no data; whitespace padding after the JSON; zero-size tensors sharing an offset.
  EXPECT_TRUE(safetensors_file::parse(raw_file("{}")).tensors().empty());
  EXPECT_TRUE(safetensors_file::parse(raw_file("{}      ")).tensors().empty());
  const auto file = safetensors_file::parse(raw_file(R"({"b": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]},
      "a": {"dtype": "I8", "shape": [], "data_offsets": [0, 1]},
      "c": {"dtype": "F16", "shape": [2, 0], "data_offsets": [1, 1]}})",
                                                     1));
  ASSERT_EQ(file.tensors().size(), 3u);
  EXPECT_EQ(file.tensors()[0].name, "b");
  EXPECT_EQ(file.tensors()[1].name, "a");
  EXPECT_EQ(file.tensors()[2].name, "c");
}

}  // namespace

}  // namespace test_safetensors
