// The `gattn` command-line tool end to end: every vector through `gattn run --check` in prefill and
// decode, `gattn cost` on the paper's Table 1 shape, `gattn info`, help and version, the summary line,
// failed writes, and clean refusals of bad input and bad usage.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gattn/io/safetensors.hpp"
#include "support/cli_harness.hpp"
#include "support/delta_vectors.hpp"
#include "support/vectors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_cli {

namespace {

namespace fs = std::filesystem;
namespace test = gattn::test;

using cli_test::cli_result;
using cli_test::run_cli;
using cli_test::scratch_dir;
using cli_test::slurp;

class CliRun : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cli_test::cli_built()) GTEST_SKIP() << "built without the CLI";
  }
};

/// The lines of `text` (each without its newline); a last line without a newline counts too.
/// "gattn: note:" lines are left out: the vector files used as --weights hold F64 tensors (x, y,
/// ...) that the loader notes as fp32 copies, beside what a test counts.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("gattn: note:", 0) != 0) lines.push_back(line);
  return lines;
}

// --check compares with the vector's own `y` (exit 1 above --tol); the output file is compared here too.
TEST_P(CliRun, ReproducesVectorInPrefillAndDecode) {
  const std::string name = GetParam();
  const std::string st = test::data_path(name + ".safetensors");
  const std::string cfg = test::data_path(name + ".config.json");
  const auto ref = gattn::io::safetensors_file::open(st);
  const auto y_ref = ref.read_f64("y");
  const auto config = gattn::io::parse_gattn_config(nlohmann::json::parse(ref.metadata().at("config")));
  const bool causal = !std::holds_alternative<gattn::gqa_config>(config) || std::get<gattn::gqa_config>(config).causal;
  for (const std::string mode : {"", "--decode-from 0", "--decode-from 5", "--reference --decode-from 3"}) {
    if (!causal && !mode.empty()) continue;
    const fs::path out = scratch_dir() / (name + ".y.safetensors");
    const auto r = run_cli("run --check --config '" + cfg + "' --weights '" + st + "' --input '" + st + "' --output '" +
                           out.string() + "' " + mode);
    ASSERT_EQ(r.status, 0) << mode << ": " << r.err;
    EXPECT_THAT(r.out, ::testing::MatchesRegex("check: max\\|y-y_ref\\|/max\\|y_ref\\|=[-+.e0-9]+ tol=0.0001 ok\n")) << mode;
    const auto y = gattn::io::safetensors_file::open(out.string()).read_f64("y");
    ASSERT_EQ(y.size(), y_ref.size());
    EXPECT_LE(test::max_abs_diff(y, y_ref), 1e-4 * test::max_abs(y_ref)) << mode;
  }
}

/// Every vector with more tokens than the longest --decode-from below (the one-token delta-rule
/// vectors have nothing to decode).
std::vector<std::string> all_vectors() {
  auto v = test::gqa_case_names();
  for (const auto& m : test::mla_case_names()) v.push_back(m);
  for (const auto& n : test::delta_case_names())
    if (n.find("_t1") == std::string::npos) v.push_back(n);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Vectors, CliRun, ::testing::ValuesIn(all_vectors()),
                         [](const auto& info) { return info.param; });

TEST(Cli, RunWritesStatisticsMatchingTheVector) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const std::string st = test::data_path("gqa_g1_elementwise_sigmoid.safetensors");
  const fs::path out = scratch_dir() / "stats_y.safetensors", stats = scratch_dir() / "stats.json";
  const auto r = run_cli("run --config '" + test::data_path("gqa_g1_elementwise_sigmoid.config.json") + "' --weights '" +
                         st + "' --input '" + st + "' --output '" + out.string() + "' --stats '" + stats.string() +
                         "' --decode-from 4");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto got = nlohmann::json::parse(slurp(stats));
  const auto want = nlohmann::json::parse(gattn::io::safetensors_file::open(st).metadata().at("stats"));
  for (const auto& [key, value] : want.items()) {
    ASSERT_TRUE(got.contains(key)) << key;
    EXPECT_NEAR(got[key].get<double>(), value.get<double>(), 1e-5) << key;
  }
}

// A delta-rule layer's statistics are its output gate's (docs/spec.md §6, §13): no attention weights.
TEST(Cli, DeltaRunWritesTheOutputGateStatistics) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  for (const std::string name : {"delta_gdn", "delta_kda"}) {
    const std::string st = test::data_path(name + ".safetensors");
    const fs::path stats = scratch_dir() / (name + "_stats.json"), out = scratch_dir() / (name + "_y.safetensors");
    const auto r = run_cli("run --quiet --config '" + test::data_path(name + ".config.json") + "' --weights '" + st +
                           "' --input '" + st + "' --output '" + out.string() + "' --stats '" + stats.string() +
                           "' --decode-from 3");
    ASSERT_EQ(r.status, 0) << r.err;
    const auto got = nlohmann::json::parse(slurp(stats));
    const auto want = nlohmann::json::parse(gattn::io::safetensors_file::open(st).metadata().at("stats"));
    EXPECT_FALSE(got.contains("first_token_attention")) << name;
    for (const char* key : {"max_abs_output", "gate_mean", "gate_frac_below_0.01"}) {
      ASSERT_TRUE(got.contains(key)) << name << ": " << key;
      EXPECT_NEAR(got[key].get<double>(), want[key].get<double>(), 1e-5) << name << ": " << key;
    }
  }
}

TEST(Cli, CostPrintsThePaperTable1Numbers) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  struct row { const char* gate; const char* expected; };
  const row rows[] = {{R"("gate": {"position": "G1", "granularity": "elementwise"})", "201,326,592"},
                      {R"("gate": {"position": "G1", "granularity": "headwise"})", "1,572,864"},
                      {R"("gate": {"position": "G2", "granularity": "elementwise"})", "25,165,824"},
                      {R"("gate": {"position": "G5", "granularity": "elementwise"})", "100,663,296"}};
  for (const row& r : rows) {
    const fs::path cfg = scratch_dir() / "paper15b.json";
    std::ofstream(cfg) << R"({"hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, )"
                       << r.gate << "}";
    const auto res = run_cli("cost --config '" + cfg.string() + "' --layers 24");
    ASSERT_EQ(res.status, 0) << res.err;
    EXPECT_THAT(res.out, ::testing::HasSubstr(r.expected)) << r.gate << "\n" << res.out;
  }
}

TEST(Cli, InfoNamesArchAndTensors) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const auto r = run_cli("info --weights '" + test::data_path("gqa_plain.safetensors") + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("simd arch:"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("kernel choices \\(cpu vendor (amd|intel|other)\\): decode prefetch (on|off)"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("bf16 engine \\(numerics = fast\\): (amx|avx512_bf16|neon_bfdot|fma) \\("));
  EXPECT_THAT(r.out, ::testing::HasSubstr("k_proj.weight  F32  [32, 64]"));
}

TEST(Cli, BadInputIsOneClearLineAndNonZeroStatus) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const fs::path junk = scratch_dir() / "junk.bin";
  std::ofstream(junk) << "this is not a safetensors file at all";
  const fs::path bad_cfg = scratch_dir() / "bad.json";
  std::ofstream(bad_cfg) << R"({"hidden_size": 64, "num_attention_heads": 3, "num_key_value_heads": 2, "head_dim": 16})";
  const std::string st = test::data_path("gqa_plain.safetensors"), cfg = test::data_path("gqa_plain.config.json");
  const fs::path out = scratch_dir() / "never.safetensors";
  struct bad { std::string args, word; };
  const bad cases[] = {
      {"", "missing command"},
      {"frobnicate", "unknown command"},
      {"run --config '" + cfg + "'", "missing required option --weights"},
      {"run --config '" + cfg + "' --weights '" + junk.string() + "' --input '" + st + "' --output '" + out.string() + "'", "junk.bin"},
      {"run --config '" + bad_cfg.string() + "' --weights '" + st + "' --input '" + st + "' --output '" + out.string() + "'", "num_key_value_heads"},
      {"run --config '" + cfg + "' --weights '" + test::data_path("gqa_mqa.safetensors") + "' --input '" + st + "' --output '" + out.string() + "'", "k_proj.weight"},
      {"run --config '" + cfg + "' --weights '" + st + "' --input '" + st + "' --output '" + out.string() + "' --decode-from x", "integer"},
      {"run --config '" + cfg + "' --weights '" + st + "' --input '" + st + "' --output '" + out.string() + "' --decode-from 99", "past the input"},
      {"run --config /nonexistent/c.json --weights '" + st + "' --input '" + st + "' --output '" + out.string() + "'", "/nonexistent/c.json"},
      {"cost --config '" + cfg + "' --layers 0", "--layers"},
  };
  for (const bad& b : cases) {
    const auto r = run_cli(b.args);
    EXPECT_GE(r.status, 1) << b.args;
    EXPECT_LE(r.status, 127) << b.args;
    EXPECT_THAT(r.err, ::testing::HasSubstr(b.word)) << b.args;
    EXPECT_THAT(r.err, ::testing::StartsWith("gattn: ")) << b.args;
  }
  EXPECT_FALSE(fs::exists(out));
}


/// `gattn run` on gqa_plain with `extra` options (no --output unless given).
cli_result run_plain(const std::string& extra) {
  const std::string st = test::data_path("gqa_plain.safetensors");
  return run_cli("run --config '" + test::data_path("gqa_plain.config.json") + "' --weights '" + st + "' --input '" + st +
                 "' " + extra);
}

TEST(Cli, HelpAndVersionExitZero) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const auto v = run_cli("--version");
  EXPECT_EQ(v.status, 0);
  EXPECT_THAT(v.out, ::testing::MatchesRegex("gattn [^ \n]+\n"));
  for (const std::string args : {"--help", "run --help", "cost --help", "info --help", "run --config x.json --help"}) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.status, 0) << args << ": " << r.err;
    EXPECT_THAT(r.out, ::testing::StartsWith("usage: gattn")) << args;
    EXPECT_EQ(r.err, "") << args;
  }
  EXPECT_THAT(run_cli("run --help").out, ::testing::HasSubstr("--kv-dtype"));
  EXPECT_THAT(run_cli("cost --help").out, ::testing::HasSubstr("--layers"));
}

TEST(Cli, UsageErrorIsOneLinePointingToHelp) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  struct bad { std::string args, word, help; };
  const bad cases[] = {{"", "missing command", "'gattn --help'"},
                       {"frobnicate", "unknown command 'frobnicate'", "'gattn --help'"},
                       {"run --config c.json", "missing required option --weights", "'gattn run --help'"},
                       {"run --frobnicate", "unknown argument '--frobnicate'", "'gattn run --help'"},
                       {"run --config c.json --weights w --input x --check --tol -1", "--tol", "'gattn run --help'"},
                       {"run --config c.json --weights w --input x --output y --tol 1e-3", "--tol needs --check", "'gattn run --help'"},
                       {"run --config c.json --weights w --input x --check --kv-dtype fp8", "--kv-dtype must be f32, bf16 or f16", "'gattn run --help'"},
                       {"run --config c.json --weights w --input x --check --kv-numerics slow", "--kv-numerics must be exact or fast", "'gattn run --help'"},
                       {"run --config c.json --weights w --input x --check --layer -3", "--layer", "'gattn run --help'"},
                       {"cost --layers 2", "missing required option --config", "'gattn cost --help'"}};
  for (const bad& b : cases) {
    const auto r = run_cli(b.args);
    EXPECT_EQ(r.status, 2) << b.args;
    const auto lines = lines_of(r.err);
    ASSERT_EQ(lines.size(), 1u) << b.args << ":\n" << r.err;
    EXPECT_THAT(lines[0], ::testing::StartsWith("gattn: ")) << b.args;
    EXPECT_THAT(lines[0], ::testing::HasSubstr(b.word)) << b.args;
    EXPECT_THAT(lines[0], ::testing::EndsWith("(see " + b.help + ")")) << b.args;
    EXPECT_EQ(r.out, "") << b.args;
  }
}

TEST(Cli, UnknownConfigKeyExitsOneNamingIt) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const fs::path cfg = scratch_dir() / "typo.json";
  std::ofstream(cfg) << R"({"hidden_size": 32, "num_attention_heads": 2, "num_attention_head": 2, "head_dim": 16})";
  const auto r = run_cli("cost --config '" + cfg.string() + "'");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, ::testing::HasSubstr("unknown key 'num_attention_head'"));
  EXPECT_THAT(r.err, ::testing::HasSubstr(cfg.string()));
  EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
}

TEST(Cli, SummaryLineOnStderrUnlessQuiet) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const fs::path out = scratch_dir() / "summary_y.safetensors";
  const auto r = run_plain("--output '" + out.string() + "' --decode-from 5");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "");
  const auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_THAT(lines[0] + "\n", ::testing::MatchesRegex("gattn: run: tokens=13 prefill=5/[.0-9]+ms decode=8/[.0-9]+ms "
                                             "tok/s=[-+.e0-9]+ arch=[^ ]+ threads=[0-9]+\n"));
  const auto q = run_plain("--output '" + out.string() + "' --quiet");
  ASSERT_EQ(q.status, 0) << q.err;
  EXPECT_EQ(q.err, "");
  EXPECT_EQ(q.out, "");
}

TEST(Cli, CheckFailsAboveToleranceOrWithoutY) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const auto strict = run_plain("--check --tol 1e-30 --quiet");
  EXPECT_EQ(strict.status, 1);
  EXPECT_THAT(strict.out, ::testing::HasSubstr("FAILED"));
  EXPECT_THAT(strict.err, ::testing::HasSubstr("above --tol 1e-30"));
  EXPECT_EQ(lines_of(strict.err).size(), 1u) << strict.err;
  // An input without `y`: refused before computing, naming the file.
  const auto src = gattn::io::safetensors_file::open(test::data_path("gqa_plain.safetensors"));
  const auto x = src.read_f32("x");
  const auto& xi = src.info("x");
  const fs::path input = scratch_dir() / "x_only.safetensors";
  gattn::io::write_safetensors(input.string(), {{"x", gattn::io::dtype::f32, {gattn::index(xi.shape[0]), gattn::index(xi.shape[1])}, x.data()}}, {});
  const std::string st = test::data_path("gqa_plain.safetensors");
  const auto r = run_cli("run --check --config '" + test::data_path("gqa_plain.config.json") + "' --weights '" + st +
                         "' --input '" + input.string() + "'");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, ::testing::HasSubstr("'y'"));
  EXPECT_THAT(r.err, ::testing::HasSubstr(input.string()));
}

TEST(Cli, FailedWriteFailsTheRun) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const fs::path out = scratch_dir() / "full_y.safetensors";
  for (const std::string& opts : {"--output '" + out.string() + "' --stats /dev/full", std::string("--output /dev/full")}) {
    const auto r = run_plain(opts);
    EXPECT_EQ(r.status, 1) << opts;
    const auto lines = lines_of(r.err);
    ASSERT_EQ(lines.size(), 1u) << opts << ":\n" << r.err;  // no success summary before the failure
    EXPECT_THAT(lines[0], ::testing::StartsWith("gattn: error: ")) << opts;
    EXPECT_THAT(lines[0], ::testing::HasSubstr("/dev/full")) << opts;
  }
}

TEST(Cli, OutputPathsAreCheckedBeforeComputing) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const fs::path out = scratch_dir() / "early_y.safetensors";
  fs::remove(out);
  struct bad { std::string opts, word; };
  const bad cases[] = {{"--output '" + scratch_dir().string() + "'", "is a directory"},
                       {"--output '" + (scratch_dir() / "no_dir" / "y.safetensors").string() + "'", "does not exist"},
                       {"--output '" + out.string() + "' --stats '" + scratch_dir().string() + "'", "--stats"},
                       // A bad weights file would fail the run later: the path check comes first.
                       {"--output '" + scratch_dir().string() + "' --prefix nowhere.", "is a directory"}};
  for (const bad& b : cases) {
    const auto r = run_plain(b.opts);
    EXPECT_EQ(r.status, 1) << b.opts;
    EXPECT_THAT(r.err, ::testing::HasSubstr(b.word)) << b.opts;
    EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
  }
  EXPECT_FALSE(fs::exists(out)) << "the output was written although --stats was refused";
}

TEST(Cli, KvOptionsAreAccepted) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  // --kv-numerics is parsed but no layer takes fast numerics yet; the tolerance is docs/spec.md §10's for fast.
  const auto r = run_plain("--check --tol 1e-2 --quiet --kv-dtype bf16 --kv-numerics fast --decode-from 4");
  EXPECT_EQ(r.status, 0) << r.err;
}

// The low-precision cache vectors pass at docs/spec.md §10's layer tolerances only when the cache really
// stores their dtype: overriding it to f32 misses (bf16 by ~2e-3, f16 by ~2e-4 of max|y_ref|).
TEST(Cli, KvCacheVectorsNeedTheirCacheDtype) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  struct kv_case { const char* name; const char* tol; };
  for (const kv_case c : {kv_case{"gqa_kv_bf16", "5e-4"}, kv_case{"gqa_kv_f16", "1e-4"}, kv_case{"mla_kv_bf16", "5e-4"}}) {
    const std::string st = test::data_path(std::string(c.name) + ".safetensors");
    const std::string base = "run --config '" + test::data_path(std::string(c.name) + ".config.json") + "' --weights '" +
                             st + "' --input '" + st + "' --check --quiet --tol " + c.tol;
    for (const std::string feed : {"", " --decode-from 5"}) {
      const auto ok = run_cli(base + feed);
      EXPECT_EQ(ok.status, 0) << c.name << feed << ": " << ok.out << ok.err;
      const auto f32 = run_cli(base + feed + " --kv-dtype f32");
      EXPECT_EQ(f32.status, 1) << c.name << feed << " with an f32 cache should miss: " << f32.out;
    }
  }
}

TEST(Cli, WrongPrefixNamesPrefixFileAndPrefixesPresent) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const std::string dir = test::data_path("hf_qwen3_next");
  const auto r = run_cli("run --check --config '" + dir + "/config.json' --weights '" + dir +
                         "/model.safetensors' --input '" + dir + "/io.safetensors' --prefix model.layers.1.self_attn.");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, ::testing::HasSubstr("prefix 'model.layers.1.self_attn.'"));
  EXPECT_THAT(r.err, ::testing::HasSubstr(dir + "/model.safetensors"));
  EXPECT_THAT(r.err, ::testing::HasSubstr("prefixes present: 'model.layers.3.self_attn.'"));
}

// tests/data/hf_qwen3_next: 8 layers, full_attention_interval 4, so layers 3 and 7 are full attention;
// the checkpoint holds layer 3 (io.safetensors' metadata prefix).
TEST(Cli, LayerPicksAQwen3NextFullAttentionLayer) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const std::string dir = test::data_path("hf_qwen3_next");
  const std::string base = "run --check --quiet --config '" + dir + "/config.json' --weights '" + dir +
                           "/model.safetensors' --input '" + dir + "/io.safetensors' --layer ";
  const auto ok = run_cli(base + "3");
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_THAT(ok.out, ::testing::HasSubstr(" ok\n"));
  const auto linear = run_cli(base + "2");  // a Gated DeltaNet layer, not in this checkpoint
  EXPECT_EQ(linear.status, 1);
  EXPECT_THAT(linear.err, ::testing::HasSubstr("linear_num_key_heads"));  // this config leaves them out
  const auto absent = run_cli(base + "7");  // a gattn layer, but not in this checkpoint
  EXPECT_EQ(absent.status, 1);
  EXPECT_THAT(absent.err, ::testing::HasSubstr("prefix 'model.layers.7.self_attn.'"));
  const auto gattn_config = run_plain("--check --layer 0");
  EXPECT_EQ(gattn_config.status, 1);
  EXPECT_THAT(gattn_config.err, ::testing::HasSubstr("describes one layer"));
}

// --check's default tolerance is docs/spec.md §10's for the layer's cache: 5e-4 for a bf16 cache.
// Against a reference that kept K and V in fp32 a bf16 cache misses, and the failure says why.
TEST(Cli, CheckToleranceFollowsTheCacheDtype) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const std::string st = test::data_path("gqa_kv_bf16.safetensors");
  const auto bf16 = run_cli("run --check --quiet --config '" + test::data_path("gqa_kv_bf16.config.json") +
                            "' --weights '" + st + "' --input '" + st + "'");
  EXPECT_EQ(bf16.status, 0) << bf16.out << bf16.err;
  EXPECT_THAT(bf16.out, ::testing::HasSubstr(" tol=0.0005 ok"));
  const std::string dir = test::data_path("hf_qwen3_next");
  const std::string base = "run --check --quiet --config '" + dir + "/config.json' --weights '" + dir +
                           "/model.safetensors' --input '" + dir + "/io.safetensors' --kv-dtype ";
  const auto f32 = run_cli(base + "f32");
  EXPECT_EQ(f32.status, 0) << f32.err;
  EXPECT_THAT(f32.out, ::testing::HasSubstr(" tol=0.0001 ok"));
  const auto rounded = run_cli(base + "bf16");  // an fp32 reference: misses by ~2e-3
  EXPECT_EQ(rounded.status, 1);
  EXPECT_THAT(rounded.out, ::testing::HasSubstr(" tol=0.0005 FAILED"));
  EXPECT_THAT(rounded.err, ::testing::HasSubstr("the default for a bf16 cache"));
  EXPECT_THAT(rounded.err, ::testing::HasSubstr("give --tol"));
  const auto given = run_cli(base + "bf16 --tol 1e-2");
  EXPECT_EQ(given.status, 0) << given.err;
}

// `--numerics fast` (or the config's `numerics`) runs the projections in bf16 operands, and --check's
// default tolerance becomes docs/spec.md §10's fast one, 1e-2. delta_gdn and delta_kda have 70 tokens:
// a prefill of 66 takes the bf16 GEMM; --numerics exact overrides a config's fast.
TEST(Cli, NumericsFastChecksAtTheFastTolerance) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  for (const char* name : {"delta_gdn", "delta_kda", "gqa_plain", "mla_gated"}) {
    const std::string st = test::data_path(std::string(name) + ".safetensors");
    const std::string base = "run --check --quiet --config '" + test::data_path(std::string(name) + ".config.json") +
                             "' --weights '" + st + "' --input '" + st + "' ";
    const std::string decode = std::string(name).rfind("delta", 0) == 0 ? " --decode-from 66" : " --decode-from 5";
    for (const std::string& feed : {std::string(), decode}) {
      const auto fast = run_cli(base + "--numerics fast" + feed);
      EXPECT_EQ(fast.status, 0) << name << feed << ": " << fast.out << fast.err;
      EXPECT_THAT(fast.out, ::testing::HasSubstr(" tol=0.01 ok")) << name << feed;
    }
    const auto exact = run_cli(base + "--numerics exact");
    EXPECT_EQ(exact.status, 0) << name << ": " << exact.err;
    EXPECT_THAT(exact.out, ::testing::HasSubstr(" tol=0.0001 ok")) << name;
  }
  std::ifstream in(test::data_path("delta_gdn.config.json"));
  nlohmann::json j = nlohmann::json::parse(in);
  j["numerics"] = "fast";
  const fs::path cfg = scratch_dir() / "delta_gdn_fast.config.json";
  std::ofstream(cfg) << j.dump();
  const std::string st = test::data_path("delta_gdn.safetensors");
  const std::string base = "run --check --quiet --config '" + cfg.string() + "' --weights '" + st + "' --input '" + st + "'";
  const auto from_config = run_cli(base);
  EXPECT_EQ(from_config.status, 0) << from_config.err;
  EXPECT_THAT(from_config.out, ::testing::HasSubstr(" tol=0.01 ok"));
  const auto overridden = run_cli(base + " --numerics exact");
  EXPECT_EQ(overridden.status, 0) << overridden.err;
  EXPECT_THAT(overridden.out, ::testing::HasSubstr(" tol=0.0001 ok"));
  const auto bad = run_cli(base + " --numerics bf16");
  EXPECT_EQ(bad.status, 2);
  EXPECT_THAT(bad.err, ::testing::HasSubstr("--numerics must be exact or fast"));
  EXPECT_THAT(run_cli("run --help").out, ::testing::HasSubstr("--numerics M"));
}

// A hybrid model's config does not say which layer to run: the weights' one layer does, else the
// run is refused; --prefix naming a layer picks it.
TEST(Cli, RunOnAHybridModelTakesTheLayerFromTheWeights) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const std::string dir = test::data_path("hf_qwen3_next");
  const auto single = gattn::io::safetensors_file::open(dir + "/model.safetensors");
  std::vector<gattn::io::tensor_to_write> tensors;
  std::vector<std::string> names;
  for (const auto& t : single.tensors()) names.push_back(t.name);
  for (const std::string& name : names) {  // layer 3's weights, and the same again as layer 7's
    const auto& t = single.info(name);
    tensors.push_back({name, t.type, t.shape, single.raw(name)});
    std::string seven = name;
    seven.replace(seven.find("layers.3."), 9, "layers.7.");
    tensors.push_back({seven, t.type, t.shape, single.raw(name)});
  }
  const fs::path two = scratch_dir() / "two_layers.safetensors";
  gattn::io::write_safetensors(two.string(), tensors);
  const std::string base = "run --check --quiet --config '" + dir + "/config.json' --input '" + dir + "/io.safetensors'";
  const auto one = run_cli(base + " --weights '" + dir + "/model.safetensors'");
  EXPECT_EQ(one.status, 0) << one.err;
  const auto both = run_cli(base + " --weights '" + two.string() + "'");
  EXPECT_EQ(both.status, 1);
  EXPECT_THAT(both.err, ::testing::HasSubstr("--layer"));
  const auto named = run_cli(base + " --weights '" + two.string() + "' --prefix model.layers.7.self_attn.");
  EXPECT_EQ(named.status, 0) << named.err;
  const auto chosen = run_cli(base + " --weights '" + two.string() + "' --layer 7");
  EXPECT_EQ(chosen.status, 0) << chosen.err;
}

// A one-layer checkpoint of a hybrid model names its layer by its own weights, whichever kind it is
// (a Gated DeltaNet layer has no o_proj: its out_proj sits beside its conv1d), under either Qwen3.5
// prefix; with two layers, --layer chooses.
TEST(Cli, TheLayerOfAOneLayerCheckpointIsFoundByItsOwnWeights) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  for (const char* folder : {"hf_qwen3_next_linear", "hf_kimi_linear", "hf_qwen3_5", "hf_qwen3_5_linear",
                             "extra_hf_qwen3_5_text_linear_r4"}) {
    const std::string dir = test::data_path(folder);
    const auto r = run_cli("run --check --quiet --config '" + dir + "/config.json' --weights '" + dir +
                           "/model.safetensors' --input '" + dir + "/io.safetensors'");
    EXPECT_EQ(r.status, 0) << folder << ": " << r.err;
    EXPECT_THAT(r.out, ::testing::HasSubstr(" ok\n")) << folder;
  }
  const std::string dir = test::data_path("hf_qwen3_5_linear");
  const auto single = gattn::io::safetensors_file::open(dir + "/model.safetensors");
  std::vector<gattn::io::tensor_to_write> tensors;
  std::vector<std::string> names;
  for (const auto& t : single.tensors()) names.push_back(t.name);
  for (const std::string& name : names) {  // layer 0's weights, and the same again as layer 4's
    const auto& t = single.info(name);
    tensors.push_back({name, t.type, t.shape, single.raw(name)});
    std::string four = name;
    four.replace(four.find("layers.0."), 9, "layers.4.");
    tensors.push_back({four, t.type, t.shape, single.raw(name)});
  }
  const fs::path two = scratch_dir() / "two_linear_layers.safetensors";
  gattn::io::write_safetensors(two.string(), tensors);
  const std::string base = "run --check --quiet --config '" + dir + "/config.json' --input '" + dir +
                           "/io.safetensors' --weights '" + two.string() + "'";
  const auto both = run_cli(base);
  EXPECT_EQ(both.status, 1);
  EXPECT_THAT(both.err, ::testing::HasSubstr("'model.language_model.layers.4.linear_attn.'"));
  EXPECT_THAT(both.err, ::testing::HasSubstr("--layer"));
  for (const char* layer : {"0", "4"}) {
    const auto chosen = run_cli(base + " --layer " + layer);
    EXPECT_EQ(chosen.status, 0) << layer << ": " << chosen.err;
  }
}

// `info --weights` lists the layers in the file, each with its kind and, for Gated DeltaNet, the layout
// of its input projections; and the kinds of the config beside it.
TEST(Cli, InfoNamesTheLayerKinds) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const auto q35 = run_cli("info --weights '" + test::data_path("hf_qwen3_5_linear/model.safetensors") + "'");
  ASSERT_EQ(q35.status, 0) << q35.err;
  EXPECT_THAT(q35.out, ::testing::HasSubstr("layer 'model.language_model.layers.0.linear_attn.': gated_deltanet, split "
                                            "input projections\n"));
  EXPECT_THAT(q35.out, ::testing::HasSubstr("6 linear-attention (gated_deltanet, split input projections): 0, 1, 2, 4, 5, 6"));
  EXPECT_THAT(q35.out, ::testing::HasSubstr("2 softmax-attention (gqa): 3, 7"));
  const auto next = run_cli("info --weights '" + test::data_path("hf_qwen3_next_linear") + "'");
  ASSERT_EQ(next.status, 0) << next.err;
  EXPECT_THAT(next.out, ::testing::HasSubstr("layer 'model.layers.0.linear_attn.': gated_deltanet, fused input projections"));
  const auto full = run_cli("info --weights '" + test::data_path("hf_qwen3_5/model.safetensors") + "'");
  EXPECT_THAT(full.out, ::testing::HasSubstr("layer 'model.language_model.layers.3.self_attn.': gqa\n"));
  const auto kimi = run_cli("info --weights '" + test::data_path("hf_kimi_linear") + "'");
  EXPECT_THAT(kimi.out, ::testing::HasSubstr("layer 'model.layers.1.self_attn.': kda\n"));
  const auto mla = run_cli("info --weights '" + test::data_path("hf_deepseek_v3_gated") + "'");
  EXPECT_THAT(mla.out, ::testing::HasSubstr("layer 'model.layers.0.self_attn.': mla\n"));
}

// `cost` on a Qwen3.5 config counts both kinds of layer, the Gated DeltaNet ones as Qwen3.5 stores
// them (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a), its weights in the text model's dtype.
TEST(Cli, CostCountsBothLayerKindsOfQwen3_5) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  for (const char* folder : {"hf_qwen3_5_linear", "extra_hf_qwen3_5_text_linear_r4"}) {
    const auto r = run_cli("cost --config '" + test::data_path(std::string(folder) + "/config.json") + "'");
    ASSERT_EQ(r.status, 0) << folder << ": " << r.err;
    EXPECT_THAT(r.out, ::testing::HasSubstr("softmax-attention (3")) << folder;
    for (const char* name : {"in_proj_qkv ", "in_proj_z ", "in_proj_b ", "in_proj_a ", "q_proj ", "o_proj "})
      EXPECT_THAT(r.out, ::testing::HasSubstr(name)) << folder;
    EXPECT_THAT(r.out, ::testing::Not(::testing::HasSubstr("in_proj_qkvz"))) << folder;
    EXPECT_THAT(r.out, ::testing::HasSubstr("weight bytes (bf16)")) << folder;
    EXPECT_THAT(r.out, ::testing::HasSubstr("memory per sequence")) << folder;
  }
  const auto r = run_cli("cost --config '" + test::data_path("hf_qwen3_5_linear/config.json") + "'");
  EXPECT_THAT(r.out, ::testing::StartsWith("model: 8 layers: 2 softmax-attention (3, 7), 6 gated delta-rule (0, 1, 2, 4, 5, 6)\n"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("x 6 layers"));
  const auto next = run_cli("cost --config '" + test::data_path("hf_qwen3_next_linear/config.json") + "'");
  EXPECT_THAT(next.out, ::testing::HasSubstr("in_proj_qkvz "));
}

TEST(Cli, RunHelpNamesEveryFormOfWeights) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const auto help = run_cli("run --help");
  EXPECT_THAT(help.out, ::testing::HasSubstr(".safetensors file"));
  EXPECT_THAT(help.out, ::testing::HasSubstr("model.safetensors.index.json"));
  EXPECT_THAT(help.out, ::testing::HasSubstr("a directory"));
}

// `cost` counts a Hugging Face model's weights in its torch_dtype unless --weight-dtype says
// otherwise, and prints each row of the cache table once.
TEST(Cli, CostTakesTheWeightDtypeFromTorchDtype) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const std::string cfg = test::data_path("hf_deepseek_v3_gated/config.json");  // torch_dtype bfloat16
  const auto def = run_cli("cost --config '" + cfg + "'");
  ASSERT_EQ(def.status, 0) << def.err;
  EXPECT_THAT(def.out, ::testing::HasSubstr("weight bytes (bf16)"));
  EXPECT_THAT(def.out, ::testing::HasSubstr("x 1 layer\n"));
  const auto f32 = run_cli("cost --config '" + cfg + "' --weight-dtype f32");
  ASSERT_EQ(f32.status, 0) << f32.err;
  EXPECT_THAT(f32.out, ::testing::HasSubstr("weight bytes (f32)"));
  std::map<std::string, int> rows;
  bool in_cache = false;
  for (const std::string& l : lines_of(def.out)) {
    if (l.rfind("KV cache per token", 0) == 0) in_cache = true;
    else if (l.empty()) in_cache = false;
    else if (in_cache) ++rows[l.substr(0, l.find("  ", 2))];  // the label, up to the gap before the numbers
  }
  EXPECT_EQ(rows.size(), 2u) << def.out;  // the cache's f32 row and bf16 for comparison
  for (const auto& [row, n] : rows) EXPECT_EQ(n, 1) << row;
}

TEST(Cli, CostCountsEveryLayerKind) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  // Qwen3-Next: 2 full-attention layers (3, 7) and 6 Gated DeltaNet layers, each kind counted, then
  // the model's totals with the memory one sequence holds.
  const std::string hybrid = test::data_path("hf_qwen3_next_linear/config.json");
  const auto r = run_cli("cost --config '" + hybrid + "' --context 1000");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::StartsWith("model: 8 layers: 2 softmax-attention (3, 7), 6 gated delta-rule (0, 1, 2, 4, 5, 6)\n"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("x 2 layers"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("x 6 layers"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("State per sequence"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("memory per sequence"));
  // A config without the linear layers' sizes cannot describe them: the missing key is named.
  const std::string cfg = test::data_path("hf_qwen3_next/config.json");
  const auto partial = run_cli("cost --config '" + cfg + "'");
  EXPECT_EQ(partial.status, 1);
  EXPECT_THAT(partial.err, ::testing::HasSubstr("linear_num_key_heads"));
  const auto forced = run_cli("cost --config '" + cfg + "' --layers 5");
  ASSERT_EQ(forced.status, 0) << forced.err;
  EXPECT_THAT(forced.out, ::testing::HasSubstr("counting --layers 5"));
  EXPECT_THAT(forced.out, ::testing::HasSubstr("x 5 layers"));
}

}  // namespace

namespace {

class CliHuggingFace : public ::testing::TestWithParam<std::string> {};

TEST_P(CliHuggingFace, ReproducesCheckpointInPrefillAndDecode) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const std::string dir = test::data_path(GetParam());
  const auto y_ref = gattn::io::safetensors_file::open(dir + "/io.safetensors").read_f64("y");
  for (const std::string mode : {"", "--decode-from 0", "--decode-from 6", "--reference"}) {
    const fs::path out = scratch_dir() / (GetParam() + ".y.safetensors");
    const auto r = run_cli("run --config '" + dir + "/config.json' --weights '" + dir + "/model.safetensors' --input '" +
                           dir + "/io.safetensors' --output '" + out.string() + "' " + mode);
    ASSERT_EQ(r.status, 0) << mode << ": " << r.err;
    const auto y = gattn::io::safetensors_file::open(out.string()).read_f64("y");
    ASSERT_EQ(y.size(), y_ref.size());
    EXPECT_LE(test::max_abs_diff(y, y_ref), 1e-4 * test::max_abs(y_ref)) << mode;
  }
}

// --batch-lengths: prefixes of the folder's x as one batch (a prefill of half of each, then decode
// steps together) reproduce y[:L] for every sequence.
TEST_P(CliHuggingFace, ReproducesCheckpointInABatch) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const std::string dir = test::data_path(GetParam());
  const auto T = gattn::io::safetensors_file::open(dir + "/io.safetensors").info("x").shape[0];
  const auto r = run_cli("run --check --quiet --config '" + dir + "/config.json' --weights '" + dir +
                         "/model.safetensors' --input '" + dir + "/io.safetensors' --batch-lengths " + std::to_string(T) +
                         ",1," + std::to_string((T + 1) / 2) + " --block-size 4");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 3) << r.out;
  EXPECT_THAT(r.out, ::testing::Not(::testing::HasSubstr("FAILED")));
}

// Without --layer: the one layer the weights hold, found by its own weights (o_proj under self_attn.,
// out_proj beside conv1d under linear_attn.), names the layer of a hybrid model's config.
INSTANTIATE_TEST_SUITE_P(Checkpoints, CliHuggingFace, ::testing::Values("hf_qwen3_next", "hf_deepseek_v3_gated", "hf_qwen3_next_fp8",
                                           "hf_deepseek_v3_fp8", "extra_hf_deepseek_v2_plain",
                                           "extra_hf_kimi_k3_nope", "extra_hf_qwen3_next_7",
                                           "extra_hf_qwen3_paper_elementwise", "extra_hf_qwen3_paper_headwise_bias",
                                           "hf_qwen3_next_linear", "hf_kimi_linear", "hf_qwen3_5", "hf_qwen3_5_linear",
                                           "extra_hf_qwen3_5_text_linear_r4", "extra_hf_qwen3_5_moe_linear_mha",
                                           "extra_hf_qwen3_5_moe_full_7", "extra_hf_qwen3_5_text_ungated"),
                         [](const auto& info) { return info.param; });

}  // namespace

namespace {

// The block-FP8 Gated DeltaNet folder: its block size from config.json's quantization_config, in
// prefill, decode and a batch of prefixes; `info` says which tensors are FP8, `cost` counts them so.
TEST(CliFp8, LinearFolderRunsAndIsDescribed) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const std::string dir = test::data_path("hf_qwen3_next_linear_fp8");
  for (const std::string mode : {"", "--decode-from 0", "--decode-from 7", "--batch-lengths 20,25"}) {
    const auto r = run_cli("run --check --quiet --layer 0 --config '" + dir + "/config.json' --weights '" + dir +
                           "/model.safetensors' --input '" + dir + "/io.safetensors' " + mode);
    EXPECT_EQ(r.status, 0) << mode << ": " << r.err;
    EXPECT_THAT(r.out, ::testing::HasSubstr(" ok")) << mode;
  }
  const auto info = run_cli("info --weights '" + dir + "/model.safetensors'");
  ASSERT_EQ(info.status, 0) << info.err;
  EXPECT_THAT(info.out, ::testing::HasSubstr("2 tensors are block-scaled FP8"));
  const auto cost = run_cli("cost --config '" + dir + "/config.json'");
  ASSERT_EQ(cost.status, 0) << cost.err;
  EXPECT_THAT(cost.out, ::testing::HasSubstr("f8_e4m3"));
}

// --weights takes a checkpoint directory: here the shards of hf_qwen3_next written with an index.
TEST(CliCheckpoint, WeightsDirectoryOfShardsInRunAndInfo) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const std::string src = test::data_path("hf_qwen3_next");
  const auto single = gattn::io::safetensors_file::open(src + "/model.safetensors");
  const fs::path dir = scratch_dir() / "sharded";
  fs::create_directories(dir);
  std::vector<gattn::io::tensor_to_write> parts[2];
  nlohmann::json map;
  for (std::size_t i = 0; i < single.tensors().size(); ++i) {
    const auto& t = single.tensors()[i];
    parts[i % 2].push_back({t.name, t.type, t.shape, single.raw(t.name)});
    map[t.name] = "part" + std::to_string(i % 2) + ".safetensors";
  }
  for (int s = 0; s < 2; ++s)
    gattn::io::write_safetensors((dir / ("part" + std::to_string(s) + ".safetensors")).string(), parts[s]);
  std::ofstream(dir / "model.safetensors.index.json") << nlohmann::json{{"weight_map", map}}.dump();

  const auto info = run_cli("info --weights '" + dir.string() + "'");
  ASSERT_EQ(info.status, 0) << info.err;
  EXPECT_THAT(info.out, ::testing::HasSubstr(std::to_string(single.tensors().size()) + " tensors"));
  EXPECT_THAT(info.out, ::testing::HasSubstr(single.tensors().back().name));

  const fs::path out = scratch_dir() / "sharded.y.safetensors";
  const auto r = run_cli("run --config '" + src + "/config.json' --weights '" + dir.string() + "' --input '" + src +
                         "/io.safetensors' --output '" + out.string() + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto y_ref = gattn::io::safetensors_file::open(src + "/io.safetensors").read_f64("y");
  EXPECT_LE(test::max_abs_diff(gattn::io::safetensors_file::open(out.string()).read_f64("y"), y_ref),
            1e-4 * test::max_abs(y_ref));
}

// Devices and FIFOs never end: each is refused before it is read (exit 1), instead of being read
// into memory until the machine runs out.
TEST(CliCheckpoint, EndlessInputsAreRefusedAtOnce) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const std::string dir = test::data_path("hf_qwen3_next");
  const std::string cfg = dir + "/config.json", w = dir + "/model.safetensors", x = dir + "/io.safetensors";
  const fs::path out = scratch_dir() / "endless.y.safetensors";
  const std::string o = " --output '" + out.string() + "'";
  const std::vector<std::string> cases = {
      "info --weights /dev/zero", "info --weights /dev/urandom",
      "run --config /dev/zero --weights '" + w + "' --input '" + x + "'" + o,
      "run --config '" + cfg + "' --weights /dev/zero --input '" + x + "'" + o,
      "run --config '" + cfg + "' --weights '" + w + "' --input /dev/zero" + o};
  for (const std::string& args : cases) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.status, 1) << args << ": " << r.err;
    EXPECT_THAT(r.err, ::testing::StartsWith("gattn: ")) << args;
    EXPECT_THAT(r.err, ::testing::HasSubstr("not a regular file")) << args;
  }
  EXPECT_FALSE(fs::exists(out));
}

// `gattn info` names the CPU features gattn's kernels care about twice: those the build was compiled
// for (the binary needs them) and those this CPU has (/proc/cpuinfo's spelling).
TEST(Cli, InfoPrintsBuiltAndPresentCpuFeatures) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const auto r = run_cli("info");
  ASSERT_EQ(r.status, 0) << r.err;
  std::string line;
  for (const std::string& l : lines_of(r.out))
    if (l.rfind("features: built for ", 0) == 0) line = l;
  ASSERT_FALSE(line.empty()) << r.out;
  const std::size_t semi = line.find("; this CPU has ");
  ASSERT_NE(semi, std::string::npos) << line;
  const std::string built = line.substr(0, semi) + " ", has = line.substr(semi) + " ";
  const auto listed = [](const std::string& list, const std::string& name) {
    return list.find(" " + name + " ") != std::string::npos;
  };
  // This test is compiled with GATTN_SIMD's flags. A CLI built with runtime dispatch runs the
  // arch it chose, not those flags: then only "built for ⊆ this CPU has" holds.
  const bool dispatched = r.out.find("dispatch: at run time") != std::string::npos;
  const std::pair<const char*, bool> compiled[] = {
#ifdef __AVX512F__
      {"avx512f", true},
#else
      {"avx512f", false},
#endif
#ifdef __AVX512BW__
      {"avx512bw", true},
#else
      {"avx512bw", false},
#endif
#ifdef __AVX512BF16__
      {"avx512_bf16", true},
#else
      {"avx512_bf16", false},
#endif
#ifdef __AVX2__
      {"avx2", true},
#else
      {"avx2", false},
#endif
#ifdef __FMA__
      {"fma", true},
#else
      {"fma", false},
#endif
#ifdef __F16C__
      {"f16c", true},
#else
      {"f16c", false},
#endif
  };
  std::string flags;
  {
    std::ifstream in("/proc/cpuinfo");
    std::string l;
    while (flags.empty() && std::getline(in, l))
      if (l.rfind("flags", 0) == 0 && l.find(':') != std::string::npos) flags = " " + l.substr(l.find(':') + 1) + " ";
  }
  for (const auto& [name, compiled_on] : compiled) {
    const bool on = dispatched ? listed(built, name) : compiled_on;
    EXPECT_EQ(listed(built, name), on) << name << ": " << line;
    if (on) {
      EXPECT_TRUE(listed(has, name)) << name << " is built for, so this CPU runs it: " << line;
    }
    if (!flags.empty()) {
      EXPECT_EQ(listed(has, name), listed(flags, name)) << name << ": " << line;
    }
  }
  if (!dispatched && !compiled[0].second && !compiled[3].second && !compiled[5].second) {
    EXPECT_THAT(line, ::testing::StartsWith("features: built for none;"));
  }
}

// `gattn cost` prints weight bytes at --weight-dtype (default f32) and cache bytes at the config's
// kv_cache_dtype, which --kv-dtype overrides.
TEST(Cli, CostPrintsWeightAndCacheBytesAtTheChosenTypes) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const fs::path cfg = scratch_dir() / "paper15b_bf16.json";
  std::ofstream(cfg) << R"({"hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, )"
                     << R"("gate": {"position": "G1", "granularity": "elementwise"}, "kv_cache_dtype": "bf16"})";
  const std::string c = "cost --config '" + cfg.string() + "' --layers 24";
  const auto line_with = [](const std::string& out, const std::string& what) {
    for (const std::string& l : lines_of(out))
      if (l.find(what) != std::string::npos) return l;
    return std::string();
  };

  const auto def = run_cli(c);
  ASSERT_EQ(def.status, 0) << def.err;
  EXPECT_THAT(line_with(def.out, "weight bytes (f32)"), ::testing::HasSubstr("109,051,904 B")) << def.out;
  EXPECT_THAT(def.out, ::testing::HasSubstr("kv_cache_dtype bf16"));
  const std::string kv = line_with(def.out, "bf16 (cache)");
  EXPECT_THAT(kv, ::testing::HasSubstr("2,048 B")) << def.out;    // per token, per layer
  EXPECT_THAT(kv, ::testing::HasSubstr("49,152 B")) << def.out;   // x 24 layers

  const auto bf16 = run_cli(c + " --weight-dtype bf16 --kv-dtype f32");
  ASSERT_EQ(bf16.status, 0) << bf16.err;
  const std::string w = line_with(bf16.out, "weight bytes (bf16)");
  EXPECT_THAT(w, ::testing::HasSubstr("54,525,952 B")) << bf16.out;
  EXPECT_THAT(w, ::testing::HasSubstr("1,308,622,848 B")) << bf16.out;
  EXPECT_THAT(bf16.out, ::testing::HasSubstr("kv_cache_dtype f32"));
  EXPECT_THAT(line_with(bf16.out, "f32 (cache)"), ::testing::HasSubstr("98,304 B")) << bf16.out;

  const auto f16 = run_cli(c + " --weight-dtype f16 --kv-dtype f16");
  ASSERT_EQ(f16.status, 0) << f16.err;
  EXPECT_THAT(line_with(f16.out, "weight bytes (f16)"), ::testing::HasSubstr("54,525,952 B")) << f16.out;
  EXPECT_THAT(line_with(f16.out, "f16 (cache)"), ::testing::HasSubstr("2,048 B")) << f16.out;

  for (const char* bad : {" --weight-dtype fp8", " --kv-dtype int4"}) {
    const auto r = run_cli(c + bad);
    EXPECT_EQ(r.status, 2) << bad;
    EXPECT_THAT(r.err, ::testing::HasSubstr("must be f32, bf16 or f16")) << bad;
    EXPECT_EQ(r.out, "") << bad;
  }
}

}  // namespace

}  // namespace test_cli
