// Tests for include/gattn/io/checkpoint.hpp and file_access.hpp: mapped views, sharded checkpoints
// and directories, and the refusal of endless, oversized or inconsistent inputs (files, indexes,
// config files).
#include "gattn/io/checkpoint.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gattn/io/config_file.hpp"
#include "gattn/io/load_weights.hpp"
#include "gattn/io/safetensors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_checkpoint {

#ifndef GATTN_TEST_DATA
#error "GATTN_TEST_DATA must be defined as the absolute path of tests/data"
#endif

namespace {

namespace fs = std::filesystem;
using gattn::config_error;
using gattn::format_error;
using gattn::io::checkpoint;
using gattn::io::dtype;
using gattn::io::safetensors_file;
using gattn::io::tensor_to_write;
using ::testing::HasSubstr;

std::string data_path(const std::string& relative) { return std::string(GATTN_TEST_DATA) + "/" + relative; }

/// A fresh directory under the system temp dir, removed with its content at scope exit.
struct temp_dir {
  fs::path path;
  explicit temp_dir(const std::string& tag) {
    path = fs::temp_directory_path() / ("gattn_test_checkpoint_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  temp_dir(const temp_dir&) = delete;  // a copy would remove the directory when it dies
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

/// Runs `fn`, which must throw an exception of type E, within `seconds`; returns its message. A
/// call that hangs (the bug these tests guard against: reading a device or FIFO until it ends) is
/// a test failure after the timeout, not a hung test binary: the worker thread is abandoned.
template <class E>
std::string throws_within(const std::function<void()>& fn, double seconds = 30.0) {
  auto message = std::make_shared<std::promise<std::string>>();
  std::future<std::string> result = message->get_future();
  std::thread([fn, message] {
    try {
      fn();
      message->set_value("<no exception>");
    } catch (const E& e) {
      message->set_value(std::string("<ok>") + e.what());
    } catch (const std::exception& e) {
      message->set_value(std::string("<other exception> ") + e.what());
    }
  }).detach();
  if (result.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    ADD_FAILURE() << "the call did not return within " << seconds << " s";
    return "";
  }
  std::string text = result.get();
  if (text.compare(0, 4, "<ok>") != 0) {
    ADD_FAILURE() << "expected the exception type, got: " << text;
    return "";
  }
  return text.substr(4);
}

/// A FIFO nobody writes to: reading it (or opening it for reading) blocks forever.
struct fifo {
  temp_dir dir{"fifo"};
  std::string path = dir.file("pipe");
  fifo() { EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0); }
};

// ---------------------------------------------------------------------------------------------
// Mapped views

std::vector<std::uint8_t> pattern_bytes(std::size_t n, std::uint32_t seed) {
  std::vector<std::uint8_t> out(n);
  std::uint32_t s = seed;
  for (auto& b : out) {
    s = s * 1664525u + 1013904223u;
    b = static_cast<std::uint8_t>(s >> 24);
  }
  return out;
}

TEST(CheckpointViews, MappedViewsEqualTheWrittenBytesAndInMemoryReadsForEveryDtype) {
  // Arbitrary bit patterns (NaNs with payloads, infinities, subnormals) of each float dtype, at
  // unaligned offsets (the 3-element BF16 tensor shifts everything after it by 6 bytes).
  const auto f32 = pattern_bytes(4 * 7, 1), bf16 = pattern_bytes(2 * 3, 2), f16 = pattern_bytes(2 * 9, 3),
             f64 = pattern_bytes(8 * 5, 4);
  const std::vector<tensor_to_write> tensors = {{"b", dtype::bf16, {3}, bf16.data()},
                                                {"a", dtype::f32, {7}, f32.data()},
                                                {"c", dtype::f16, {3, 3}, f16.data()},
                                                {"d", dtype::f64, {5, 1}, f64.data()}};
  const std::vector<std::uint8_t> bytes = gattn::io::serialize_safetensors(tensors);
  temp_dir dir("views");
  write_bytes(dir.file("m.safetensors"), bytes);

  const auto in_memory = safetensors_file::parse(bytes);
  std::map<std::string, gattn::io::tensor_view> views;
  {
    const auto mapped = safetensors_file::open(dir.file("m.safetensors"));
    for (const auto& t : tensors) views.emplace(t.name, mapped.view(t.name));
  }
  // The file object is gone: the views keep the mapping alive.
  for (const auto& t : tensors) {
    const auto& v = views.at(t.name);
    EXPECT_EQ(v.type(), t.type) << t.name;
    EXPECT_EQ(v.shape(), t.shape) << t.name;
    ASSERT_EQ(v.nbytes(), static_cast<std::uint64_t>(v.numel()) * gattn::io::dtype_size(t.type)) << t.name;
    EXPECT_EQ(std::memcmp(v.data(), t.data, v.nbytes()), 0) << t.name;

    const auto want32 = in_memory.read_f32(t.name), got32 = v.to_f32();
    const auto want64 = in_memory.read_f64(t.name), got64 = v.to_f64();
    ASSERT_EQ(got32.size(), want32.size());
    ASSERT_EQ(got64.size(), want64.size());
    EXPECT_EQ(std::memcmp(got32.data(), want32.data(), got32.size() * sizeof(float)), 0) << t.name;
    EXPECT_EQ(std::memcmp(got64.data(), want64.data(), got64.size() * sizeof(double)), 0) << t.name;
    // Element by element against the widening functions, so the check does not rest on read_f32.
    for (std::size_t i = 0; i < got64.size(); ++i) {
      const std::uint8_t* p = static_cast<const std::uint8_t*>(t.data);
      double expect = 0;
      std::uint16_t h = 0;
      float f = 0;
      switch (t.type) {
        case dtype::f32: std::memcpy(&f, p + 4 * i, 4); expect = f; break;
        case dtype::bf16: std::memcpy(&h, p + 2 * i, 2); expect = gattn::io::bf16_to_float(h); break;
        case dtype::f16: std::memcpy(&h, p + 2 * i, 2); expect = gattn::io::f16_to_float(h); break;
        default: std::memcpy(&expect, p + 8 * i, 8); break;
      }
      EXPECT_EQ(std::memcmp(&got64[i], &expect, 8), 0) << t.name << "[" << i << "]";
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Endless and oversized inputs

TEST(CheckpointEndless, DevZeroIsRefusedAtOnceEverywhere) {
  for (const std::string path : {"/dev/zero", "/dev/urandom"}) {
    EXPECT_THAT(throws_within<format_error>([=] { (void)safetensors_file::open(path); }),
                HasSubstr("not a regular file"));
    EXPECT_THAT(throws_within<format_error>([=] { (void)checkpoint::open(path); }), HasSubstr(path));
    EXPECT_THAT(throws_within<format_error>([=] { (void)gattn::io::load_layer_config(path); }),
                HasSubstr("not a regular file"));
  }
}

TEST(CheckpointEndless, FifoIsRefusedWithoutWaitingForAWriter) {
  const fifo f;
  const std::string path = f.path;
  EXPECT_THAT(throws_within<format_error>([=] { (void)safetensors_file::open(path); }), HasSubstr(path));
  EXPECT_THAT(throws_within<format_error>([=] { (void)gattn::io::load_layer_config(path); }),
              HasSubstr("not a regular file"));
  temp_dir dir("fifo_index");
  const std::string index = dir.file("model.safetensors.index.json"), folder = dir.path.string();
  ASSERT_EQ(::mkfifo(index.c_str(), 0600), 0);
  EXPECT_THAT(throws_within<format_error>([=] { (void)checkpoint::open(folder); }),
              HasSubstr("not a regular file"));
}

TEST(CheckpointEndless, ConfigFileLargerThan16MBIsRefusedBeforeReading) {
  temp_dir dir("big_config");
  const std::string path = dir.file("config.json");
  write_text(path, "{");
  fs::resize_file(path, (std::uint64_t{16} << 20) + 1);  // sparse: costs no disk
  const std::string message = throws_within<format_error>([=] { (void)gattn::io::load_layer_config(path); });
  EXPECT_THAT(message, HasSubstr(path));
  EXPECT_THAT(message, HasSubstr("16777216"));
}

TEST(CheckpointEndless, IndexLargerThanTheLimitIsRefusedBeforeReading) {
  temp_dir dir("big_index");
  const std::string path = dir.file("model.safetensors.index.json");
  write_text(path, "{");
  fs::resize_file(path, 100'000'001);
  EXPECT_THAT(throws_within<format_error>([=] { (void)checkpoint::open(path); }), HasSubstr("100000000"));
}

TEST(CheckpointEndless, HeaderNestedDeeperThanTheFormatIsRefusedBeforeBuildingIt) {
  // 1 MB of '[' is 10^6 levels: a DOM would cost ~70 MB before any check could run.
  const std::string deep(1'000'000, '[');
  const std::string header = R"({"w": {"dtype": "F32", "shape": )" + deep;
  std::vector<std::uint8_t> bytes(8, 0);
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(n >> (8 * i));
  bytes.insert(bytes.end(), header.begin(), header.end());
  const std::string message =
      throws_within<format_error>([=] { (void)safetensors_file::parse(bytes, "deep.safetensors"); });
  EXPECT_THAT(message, HasSubstr("deeper than the format's 3 levels"));
  EXPECT_THAT(message, HasSubstr("w.shape"));
}

// ---------------------------------------------------------------------------------------------
// Config files: duplicate keys

std::string write_config(const temp_dir& dir, const std::string& text) {
  const std::string path = dir.file("config.json");
  write_text(path, text);
  return path;
}

TEST(ConfigDuplicateKeys, AreRefusedNamingTheKeyAtAnyDepth) {
  temp_dir dir("dup_config");
  const std::string base = gattn::io::detail::read_capped_file(data_path("gqa_plain.config.json"), "base", 1 << 20);
  ASSERT_EQ(base.front(), '{');
  // The valid file itself loads; the same file with "causal" given twice does not.
  EXPECT_NO_THROW((void)gattn::io::load_layer_config(write_config(dir, base)));
  const std::string twice = "{\"causal\": true, " + base.substr(1, base.rfind('}') - 1) + ", \"causal\": false}";
  try {
    (void)gattn::io::load_layer_config(write_config(dir, twice));
    ADD_FAILURE() << "expected config_error";
  } catch (const config_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("duplicate key 'causal'"));
    EXPECT_THAT(e.what(), HasSubstr(dir.file("config.json")));
  }
  try {
    (void)gattn::io::load_layer_config(write_config(dir, R"({"model_type": "x", "rope_scaling": {"factor": 2, "factor": 4}})"));
    ADD_FAILURE() << "expected config_error";
  } catch (const config_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("duplicate key 'factor' in 'rope_scaling'"));
  }
  // Equal keys in different objects are not duplicates.
  EXPECT_EQ(gattn::io::detail::json_guard::check(R"({"a": {"x": 1}, "b": {"x": 1}, "x": [{"x": 1}, {"x": 2}]})", 8).what,
            gattn::io::detail::json_guard_result::kind::ok);
}

TEST(ConfigDuplicateKeys, NotJsonAndNulBytesAreFormatErrors) {
  temp_dir dir("bad_config");
  EXPECT_THROW((void)gattn::io::load_layer_config(write_config(dir, "{\"a\": ")), format_error);
  EXPECT_THROW((void)gattn::io::load_layer_config(write_config(dir, std::string("{}\0junk", 7))), format_error);
}

// ---------------------------------------------------------------------------------------------
// Sharded checkpoints and directories

/// Writes `file`'s tensors into `shards` shard files plus an index in `dir`, round robin by name.
void write_sharded(const safetensors_file& file, const temp_dir& dir, int shards) {
  std::vector<std::vector<tensor_to_write>> parts(static_cast<std::size_t>(shards));
  nlohmann::json map = nlohmann::json::object();
  std::uint64_t total = 0;
  std::size_t i = 0;
  for (const auto& t : file.tensors()) {
    const std::size_t s = i++ % parts.size();
    const std::string shard = "model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(shards) + ".safetensors";
    parts[s].push_back({t.name, t.type, t.shape, file.raw(t.name)});
    map[t.name] = shard;
    total += t.end - t.begin;
  }
  for (std::size_t s = 0; s < parts.size(); ++s)
    gattn::io::write_safetensors(
        dir.file("model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(shards) + ".safetensors"), parts[s]);
  write_text(dir.file("model.safetensors.index.json"),
             nlohmann::json{{"metadata", {{"total_size", total}}}, {"weight_map", map}}.dump(2));
}

class CheckpointSharded : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointSharded, DirectoryOfShardsLoadsTheSameWeightsAsTheSingleFile) {
  const auto single = safetensors_file::open(data_path(GetParam() + "/model.safetensors"));
  temp_dir dir("sharded_" + GetParam());
  write_sharded(single, dir, 3);

  for (const std::string& path : {dir.path.string(), dir.file("model.safetensors.index.json")}) {
    const auto sharded = checkpoint::open(path);
    EXPECT_EQ(sharded.shards().size(), std::min<std::size_t>(3, single.tensors().size()));
    EXPECT_EQ(sharded.tensors().size(), single.tensors().size());
    EXPECT_TRUE(sharded.metadata().count("total_size"));
    const auto want = gattn::io::load_weights(single, "", true).all();
    const auto got = gattn::io::load_weights(sharded, "", true).all();
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [name, t] : want) {
      ASSERT_TRUE(got.count(name)) << name;
      EXPECT_EQ(got.at(name).shape(), t.shape()) << name;
      EXPECT_EQ(got.at(name).type(), t.type()) << name;
      ASSERT_EQ(got.at(name).bytes(), t.bytes()) << name;
      EXPECT_EQ(std::memcmp(got.at(name).data(), t.data(), std::size_t(t.bytes())), 0) << name;
    }
    for (const auto& t : single.tensors()) EXPECT_EQ(sharded.info(t.name).type, t.type) << t.name;
  }
  // The data folder itself (model.safetensors next to io.safetensors) is a checkpoint too.
  EXPECT_EQ(checkpoint::open(data_path(GetParam())).tensors().size(), single.tensors().size());
}

INSTANTIATE_TEST_SUITE_P(HfFolders, CheckpointSharded,
                         ::testing::Values("hf_qwen3_next", "hf_deepseek_v3_gated", "extra_hf_deepseek_v2_plain",
                                           "extra_hf_kimi_k3_nope", "extra_hf_qwen3_next_7",
                                           "extra_hf_qwen3_paper_elementwise", "extra_hf_qwen3_paper_headwise_bias"),
                         [](const auto& info) { return info.param; });

/// A two-shard checkpoint in a temp dir: a.safetensors holds "x", b.safetensors holds "y" and "z".
struct two_shards {
  temp_dir dir;
  std::vector<float> x{1, 2}, y{3}, z{4, 5, 6};
  explicit two_shards(const std::string& tag) : dir(tag) {
    gattn::io::write_safetensors(dir.file("a.safetensors"), {{"x", dtype::f32, {2}, x.data()}});
    gattn::io::write_safetensors(dir.file("b.safetensors"),
                                 {{"y", dtype::f32, {1}, y.data()}, {"z", dtype::f32, {3}, z.data()}});
  }
  std::string index(const std::string& text) const {
    write_text(dir.file("model.safetensors.index.json"), text);
    return dir.file("model.safetensors.index.json");
  }
};

/// The format_error message of opening `path` as a checkpoint ("" and a failure if none).
std::string open_error(const std::string& path) {
  return throws_within<format_error>([=] { (void)checkpoint::open(path); });
}

TEST(CheckpointIndexHostile, ConsistentIndexLoads) {
  const two_shards c("index_ok");
  const auto ck =
      checkpoint::open(c.index(R"({"metadata": {"m": "v"}, "weight_map": {"x": "a.safetensors", "y": "b.safetensors", "z": "b.safetensors"}})"));
  EXPECT_EQ(ck.read_f32("z"), c.z);
  EXPECT_EQ(ck.metadata().at("m"), "v");
  EXPECT_THROW((void)ck.info("w"), gattn::weight_error);
}

TEST(CheckpointIndexHostile, MissingShard) {
  const two_shards c("index_missing");
  const std::string m = open_error(c.index(R"({"weight_map": {"x": "a.safetensors", "y": "c.safetensors"}})"));
  EXPECT_THAT(m, HasSubstr("model.safetensors.index.json"));
  EXPECT_THAT(m, HasSubstr("'c.safetensors'"));
  EXPECT_THAT(m, HasSubstr("'y'"));
}

TEST(CheckpointIndexHostile, ShardNamesThatEscapeTheDirectory) {
  const two_shards c("index_escape");
  for (const std::string shard : {"../a.safetensors", "sub/../../a.safetensors", "/etc/passwd", ""}) {
    const std::string m = open_error(c.index(R"({"weight_map": {"x": ")" + shard + R"("}})"));
    EXPECT_THAT(m, HasSubstr("model.safetensors.index.json")) << shard;
    EXPECT_THAT(m, HasSubstr("tensor 'x' maps to shard '" + shard + "'")) << shard;
  }
}

TEST(CheckpointIndexHostile, TensorListedButAbsentFromItsShard) {
  const two_shards c("index_absent");
  const std::string m =
      open_error(c.index(R"({"weight_map": {"x": "a.safetensors", "y": "a.safetensors", "z": "b.safetensors"}})"));
  EXPECT_THAT(m, HasSubstr("tensor 'y' is listed in shard 'a.safetensors' but absent from it"));
}

TEST(CheckpointIndexHostile, TensorInTwoShardsOrNotListed) {
  const two_shards c("index_two");
  std::vector<float> again{7};
  // "y" is in b and in c; the index puts it in b.
  gattn::io::write_safetensors(c.dir.file("c.safetensors"),
                               {{"y", dtype::f32, {1}, again.data()}, {"w", dtype::f32, {1}, again.data()}});
  std::string m = open_error(c.index(
      R"({"weight_map": {"x": "a.safetensors", "y": "b.safetensors", "z": "b.safetensors", "w": "c.safetensors"}})"));
  EXPECT_THAT(m, HasSubstr("tensor 'y' is in shard 'c.safetensors', but the index puts it in shard 'b.safetensors'"));
  m = open_error(c.index(R"({"weight_map": {"x": "a.safetensors", "y": "b.safetensors"}})"));
  EXPECT_THAT(m, HasSubstr("tensor 'z' of shard 'b.safetensors' is not in weight_map"));
}

TEST(CheckpointIndexHostile, TensorListedTwice) {
  const two_shards c("index_twice");
  const std::string m = open_error(
      c.index(R"({"weight_map": {"x": "a.safetensors", "y": "b.safetensors", "z": "b.safetensors", "x": "b.safetensors"}})"));
  EXPECT_THAT(m, HasSubstr("tensor 'x' is listed twice in weight_map"));
}

TEST(CheckpointIndexHostile, TruncatedShard) {
  const two_shards c("index_truncated");
  fs::resize_file(c.dir.file("b.safetensors"), fs::file_size(c.dir.file("b.safetensors")) - 4);
  const std::string m =
      open_error(c.index(R"({"weight_map": {"x": "a.safetensors", "y": "b.safetensors", "z": "b.safetensors"}})"));
  EXPECT_THAT(m, HasSubstr("b.safetensors"));
  EXPECT_THAT(m, HasSubstr("'z'"));  // the header's tensor beyond the end of the data
}

TEST(CheckpointIndexHostile, NotJsonNotAnObjectTooDeepOrWrongTypes) {
  const two_shards c("index_json");
  EXPECT_THAT(open_error(c.index("{\"weight_map\": ")), HasSubstr("not valid JSON"));
  EXPECT_THAT(open_error(c.index("[1]")), HasSubstr("not a JSON object"));
  EXPECT_THAT(open_error(c.index(R"({"metadata": {}})")), HasSubstr("'weight_map' is missing"));
  EXPECT_THAT(open_error(c.index(R"({"weight_map": {"x": 1}})")), HasSubstr("value for tensor 'x' is not a string"));
  EXPECT_THAT(open_error(c.index(R"({"weight_map": {"x": "a.safetensors"}, "metadata": [[[[1]]]]})")),
              HasSubstr("nested deeper than 3 levels"));
}

TEST(CheckpointDirectory, NeedsAnIndexModelSafetensorsOrExactlyOneFile) {
  temp_dir dir("dir_choice");
  EXPECT_THAT(open_error(dir.path.string()), HasSubstr("0 *.safetensors files"));
  std::vector<float> v{1};
  gattn::io::write_safetensors(dir.file("one.safetensors"), {{"v", dtype::f32, {1}, v.data()}});
  EXPECT_EQ(checkpoint::open(dir.path.string()).read_f32("v"), v);
  EXPECT_EQ(checkpoint::open(dir.path.string()).origin(), dir.path.string());
  gattn::io::write_safetensors(dir.file("two.safetensors"), {{"w", dtype::f32, {1}, v.data()}});
  EXPECT_THAT(open_error(dir.path.string()), HasSubstr("2 *.safetensors files"));
  gattn::io::write_safetensors(dir.file("model.safetensors"), {{"m", dtype::f32, {1}, v.data()}});
  EXPECT_TRUE(checkpoint::open(dir.path.string()).contains("m"));
}

}  // namespace

}  // namespace test_checkpoint
