// `gattn run --batch-lengths`: every causal vector's prefixes, run as one batch, reproduce y[:L_s]
// (y.s in the output file, and --check); bad length lists are usage errors (exit 2, one line).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gattn/io/safetensors.hpp"
#include "support/cli_harness.hpp"
#include "support/delta_vectors.hpp"
#include "support/vectors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_cli_batch {

namespace {

namespace fs = std::filesystem;
namespace test = gattn::test;
using index = gattn::index;

using cli_test::run_cli;
using cli_test::scratch_dir;

std::string join(const std::vector<index>& v) {
  std::string s;
  for (index x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

std::vector<std::string> causal_vectors() {
  std::vector<std::string> v;
  for (const auto& n : test::gqa_case_names())
    if (n != "gqa_noncausal") v.push_back(n);
  for (const auto& m : test::mla_case_names()) v.push_back(m);
  for (const auto& n : test::delta_case_names()) v.push_back(n);
  return v;
}

class CliBatch : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cli_test::cli_built()) GTEST_SKIP() << "built without the CLI";
  }
};

TEST_P(CliBatch, EveryPrefixReproducesItsReference) {
  const std::string name = GetParam();
  const std::string st = test::data_path(name + ".safetensors"), cfg = test::data_path(name + ".config.json");
  const auto ref = gattn::io::safetensors_file::open(st);
  const auto y_ref = ref.read_f64("y");
  const index T = ref.info("x").shape[0], d = ref.info("x").shape[1];
  const std::vector<std::vector<index>> lists{{1}, {T}, {T, 1, (T + 1) / 2, 2 < T ? 2 : 1}, {3 < T ? 3 : T, T, T - 1 > 0 ? T - 1 : 1}};
  for (const auto& lengths : lists) {
    const fs::path out = scratch_dir() / (name + ".y.safetensors");
    for (const char* block : {"", " --block-size 1", " --block-size 64"}) {
      const auto r = run_cli("run --check --quiet --config '" + cfg + "' --weights '" + st + "' --input '" + st +
                             "' --output '" + out.string() + "' --batch-lengths " + join(lengths) + block);
      ASSERT_EQ(r.status, 0) << join(lengths) << block << ": " << r.err;
      EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), std::ptrdiff_t(lengths.size())) << r.out;
      EXPECT_THAT(r.out, ::testing::Not(::testing::HasSubstr("FAILED")));
    }
    const auto file = gattn::io::safetensors_file::open(out.string());
    for (std::size_t s = 0; s < lengths.size(); ++s) {
      const auto y = file.read_f64("y." + std::to_string(s));
      ASSERT_EQ(index(y.size()), lengths[s] * d) << "y." << s;
      const std::vector<double> prefix(y_ref.begin(), y_ref.begin() + std::ptrdiff_t(y.size()));
      EXPECT_LE(test::max_abs_diff(y, prefix), 1e-4 * test::max_abs(prefix)) << join(lengths) << " y." << s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Vectors, CliBatch, ::testing::ValuesIn(causal_vectors()),
                         [](const auto& info) { return info.param; });

TEST(CliBatchUsage, BadListsExitTwoWithOneLine) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const std::string st = test::data_path("gqa_plain.safetensors"), cfg = test::data_path("gqa_plain.config.json");
  const index T = gattn::io::safetensors_file::open(st).info("x").shape[0];
  const std::string base = "run --check --config '" + cfg + "' --weights '" + st + "' --input '" + st + "' ";
  struct bad { std::string args, word; };
  const bad cases[] = {{"--batch-lengths 0", "must be >= 1"},
                       {"--batch-lengths 2,0", "must be >= 1"},
                       {"--batch-lengths " + std::to_string(T + 1), "past the input's"},
                       {"--batch-lengths 2,x", "'x'"},
                       {"--batch-lengths 2,,3", "''"},
                       {"--batch-lengths ''", "''"},
                       {"--batch-lengths -1", "'-1'"},
                       {"--batch-lengths 2 --block-size 0", "--block-size"},
                       {"--block-size 16", "--block-size needs --batch-lengths"},
                       {"--batch-lengths 2 --decode-from 1", "cannot be combined with --decode-from"}};
  for (const bad& b : cases) {
    const auto r = run_cli(base + b.args);
    EXPECT_EQ(r.status, 2) << b.args << ": " << r.err;
    std::istringstream in(r.err);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);)
      if (line.rfind("gattn: note:", 0) != 0) lines.push_back(line);  // the vector's F64 tensors
    ASSERT_EQ(lines.size(), 1u) << b.args << ":\n" << r.err;
    EXPECT_THAT(lines[0], ::testing::HasSubstr(b.word)) << b.args;
    EXPECT_THAT(lines[0], ::testing::EndsWith("(see 'gattn run --help')")) << b.args;
  }
}

TEST(CliBatchUsage, NonCausalLayerIsRefused) {
  if (!cli_test::cli_built()) GTEST_SKIP();
  const std::string st = test::data_path("gqa_noncausal.safetensors"), cfg = test::data_path("gqa_noncausal.config.json");
  const auto r = run_cli("run --check --config '" + cfg + "' --weights '" + st + "' --input '" + st + "' --batch-lengths 2");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, ::testing::HasSubstr("causal"));
}

}  // namespace

}  // namespace test_cli_batch
