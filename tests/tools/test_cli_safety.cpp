// `gattn run` never destroys what it reads: an --output or --stats naming an input (through a link,
// a hard link, an index's shard or a directory's file) or each other is refused before anything
// runs; a write that fails part-way leaves the earlier output whole; and --block-size is bounded by
// the lengths the input holds.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

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
#include "support/vectors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_cli_safety {

#ifndef GATTN_CLI_PATH
#define GATTN_CLI_PATH ""
#endif
#ifndef GATTN_CLI_LAUNCHER
#define GATTN_CLI_LAUNCHER ""
#endif

namespace {

namespace fs = std::filesystem;
namespace test = gattn::test;
using ::testing::HasSubstr;
using ::testing::StartsWith;

struct cli_result {
  int status = -1;
  std::string out, err;
};

/// A fresh directory for one test, removed with its content at scope exit.
struct scratch {
  fs::path path;
  explicit scratch(const std::string& tag) {
    path = fs::temp_directory_path() / ("gattn_cli_safety_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;
  ~scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Runs `gattn <args>` through the shell; `prefix` is shell text run first (e.g. a ulimit).
cli_result run_cli(const std::string& args, const std::string& prefix = "") {
  static const cli_test::process_temp_dir dir("gattn_cli_safety_io");
  const fs::path out = dir.path / "stdout.txt", err = dir.path / "stderr.txt";
  const std::string cmd = prefix + std::string(GATTN_CLI_LAUNCHER) + "'" + GATTN_CLI_PATH + "' " + args + " >'" +
                          out.string() + "' 2>'" + err.string() + "'";
  const int raw = std::system(cmd.c_str());
  cli_result r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

/// Every regular file under `dir` (links not followed) and its bytes.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && !e.is_symlink()) files[e.path().string()] = slurp(e.path());
  return files;
}

std::string quoted(const std::string& path) { return "'" + path + "'"; }

/// gqa_plain copied into `s`: w.safetensors (weights), x.safetensors (input), c.json (config), a
/// directory `sharded/` holding its tensors in two shards and an index, and `single/` holding
/// model.safetensors.
struct plain_copies {
  std::string w, x, c, sharded, single;
  explicit plain_copies(const scratch& s)
      : w(s.file("w.safetensors")), x(s.file("x.safetensors")), c(s.file("c.json")), sharded(s.file("sharded")),
        single(s.file("single")) {
    fs::copy_file(test::data_path("gqa_plain.safetensors"), w);
    fs::copy_file(test::data_path("gqa_plain.safetensors"), x);
    fs::copy_file(test::data_path("gqa_plain.config.json"), c);
    fs::create_directories(single);
    fs::copy_file(w, single + "/model.safetensors");
    fs::create_directories(sharded);
    const auto file = gattn::io::safetensors_file::open(w);
    std::vector<gattn::io::tensor_to_write> parts[2];
    nlohmann::json map;
    for (std::size_t i = 0; i < file.tensors().size(); ++i) {
      const auto& t = file.tensors()[i];
      parts[i % 2].push_back({t.name, t.type, t.shape, file.raw(t.name)});
      map[t.name] = "part" + std::to_string(i % 2) + ".safetensors";
    }
    for (int p = 0; p < 2; ++p)
      gattn::io::write_safetensors(sharded + "/part" + std::to_string(p) + ".safetensors", parts[p]);
    std::ofstream(sharded + "/model.safetensors.index.json") << nlohmann::json{{"weight_map", map}}.dump();
  }
  std::string run(const std::string& weights, const std::string& extra) const {
    return "run --quiet --config " + quoted(c) + " --weights " + quoted(weights) + " --input " + quoted(x) + " " + extra;
  }
};

class CliSafety : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(GATTN_CLI_PATH).empty()) GTEST_SKIP() << "built without the CLI";
  }
};

// Each case names, as --output or --stats, a file the run reads (or the other output): the run is
// refused with one `gattn: error:` line naming the clash, and no file under the scratch dir changes.
TEST_F(CliSafety, OutputNamingAnInputOrTheOtherOutputIsRefused) {
  const scratch s("clash");
  const plain_copies p(s);
  fs::create_symlink(p.x, s.file("link_to_x"));
  fs::create_hard_link(p.w, s.file("hard_w"));
  fs::create_symlink("sharded", s.file("link_dir"));
  const std::string y = s.file("y.safetensors"), fresh = s.file("fresh.json");
  ASSERT_EQ(run_cli(p.run(p.w, "--output " + quoted(y))).status, 0);
  fs::create_symlink(y, s.file("link_to_y"));
  const std::string shard1 = p.sharded + "/part1.safetensors", index = p.sharded + "/model.safetensors.index.json";
  struct clash { std::string weights, opts; };
  const clash cases[] = {
      {p.w, "--output " + quoted(p.x)},
      {p.w, "--output " + quoted(p.c)},
      {p.w, "--output " + quoted(p.w)},
      {p.w, "--output " + quoted(s.file("link_to_x"))},
      {p.w, "--output " + quoted(s.file("hard_w"))},
      {index, "--output " + quoted(shard1)},
      {index, "--output " + quoted(index)},
      {p.sharded, "--output " + quoted(p.sharded + "/part0.safetensors")},
      {p.sharded, "--output " + quoted(s.file("link_dir") + "/part1.safetensors")},
      {p.sharded, "--output " + quoted(index)},
      {p.single, "--output " + quoted(p.single + "/model.safetensors")},
      {p.w, "--output " + quoted(y) + " --stats " + quoted(p.x)},
      {p.w, "--output " + quoted(y) + " --stats " + quoted(y)},
      {p.w, "--output " + quoted(y) + " --stats " + quoted(s.file("link_to_y"))},
      {p.w, "--output " + quoted(fresh) + " --stats " + quoted(fresh)},
      {p.w, "--output " + quoted(fresh) + " --stats " + quoted(s.path.string() + "/./fresh.json")},
  };
  const auto before = snapshot(s.path);
  for (const clash& c : cases) {
    const auto r = run_cli(p.run(c.weights, c.opts));
    EXPECT_EQ(r.status, 1) << c.opts << ": " << r.err;
    const auto lines = lines_of(r.err);
    ASSERT_EQ(lines.size(), 1u) << c.opts << ":\n" << r.err;
    EXPECT_THAT(lines[0], StartsWith("gattn: error: ")) << c.opts;
    EXPECT_THAT(lines[0], HasSubstr("same file")) << c.opts;
    EXPECT_TRUE(snapshot(s.path) == before) << c.opts << ": a file changed";
  }
  // Relative spellings of one new file, from the scratch directory.
  const auto r = run_cli(p.run(p.w, "--output fresh.json --stats ./fresh.json"), "cd " + quoted(s.path.string()) + " && ");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("same file"));
  EXPECT_FALSE(fs::exists(fresh));
}

// The same runs with distinct outputs succeed: the refusal is about identity, not about names.
TEST_F(CliSafety, DistinctOutputsNextToTheInputsAreWritten) {
  const scratch s("distinct");
  const plain_copies p(s);
  const std::string y = p.sharded + "/y.safetensors", stats = p.sharded + "/stats.json";
  const auto r = run_cli(p.run(p.sharded, "--output " + quoted(y) + " --stats " + quoted(stats)));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(gattn::io::safetensors_file::open(y).contains("y"));
  EXPECT_THAT(slurp(stats), StartsWith("{"));
}

// An output is replaced, not rewritten: a hard link to the earlier output keeps the earlier bytes,
// the file keeps its mode, and nothing else is left in the directory.
TEST_F(CliSafety, OutputIsReplacedByRenameKeepingItsMode) {
  const scratch s("rename");
  const plain_copies p(s);
  const std::string y = s.file("out/y.safetensors"), stats = s.file("out/stats.json");
  fs::create_directories(s.file("out"));
  std::ofstream(y) << "earlier output";
  std::ofstream(stats) << "earlier stats";
  ASSERT_EQ(::chmod(y.c_str(), 0640), 0);
  fs::create_hard_link(y, s.file("earlier_y"));
  fs::create_hard_link(stats, s.file("earlier_stats"));
  const auto r = run_cli(p.run(p.w, "--output " + quoted(y) + " --stats " + quoted(stats)));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(slurp(s.file("earlier_y")), "earlier output");
  EXPECT_EQ(slurp(s.file("earlier_stats")), "earlier stats");
  EXPECT_THAT(slurp(stats), StartsWith("{"));
  EXPECT_TRUE(gattn::io::safetensors_file::open(y).contains("y"));
  struct stat st {};
  ASSERT_EQ(::stat(y.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(s.file("out"))) names.push_back(e.path().filename().string());
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("y.safetensors", "stats.json"));
}

// A write cut short (the file size limit stands in for a full disk or quota) fails the run with
// one line, and the earlier output stays whole: no truncated file, no temporary file left behind.
TEST_F(CliSafety, WriteCutShortKeepsTheEarlierOutput) {
  if (!std::string(GATTN_CLI_LAUNCHER).empty()) GTEST_SKIP() << "the emulator's own writes count against the limit";
  const scratch s("cut");
  const plain_copies p(s);
  fs::create_directories(s.file("out"));
  const std::string y = s.file("out/y.safetensors");
  ASSERT_EQ(run_cli(p.run(p.w, "--output " + quoted(y))).status, 0);
  const auto before = snapshot(s.file("out"));
  ASSERT_GT(before.at(y).size(), 512u);
  // 1 block of 512 bytes: less than the output, more than the one line on stderr.
  const auto r = run_cli(p.run(p.w, "--output " + quoted(y)), "ulimit -f 1; ");
  EXPECT_EQ(r.status, 1) << r.err;
  const auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_THAT(lines[0], StartsWith("gattn: error: "));
  EXPECT_THAT(lines[0], HasSubstr(y));
  EXPECT_TRUE(snapshot(s.file("out")) == before) << "the earlier output changed";
}

/// Exit status and peak RSS (bytes) of the CLI run with `args`, without a shell in between.
std::pair<int, long long> run_measured(const std::vector<std::string>& args) {
  std::vector<std::string> argv_s = {GATTN_CLI_PATH};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  struct rusage ru {};
  if (pid < 0 || ::wait4(pid, &status, 0, &ru) != pid) return {-1, 0};
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), static_cast<long long>(ru.ru_maxrss) * 1024};
}

// A block larger than the longest sequence holds nothing more: the pool is bounded by the lengths,
// whatever --block-size says (4194304 tokens per block once took 2 GB for 18 tokens).
TEST_F(CliSafety, BlockSizeIsBoundedByTheLengths) {
  const std::string st = test::data_path("gqa_plain.safetensors"), cfg = test::data_path("gqa_plain.config.json");
  for (const std::string block : {"1099511627776", "4194304", "13", "5"}) {
    const auto r = run_cli("run --quiet --check --config " + quoted(cfg) + " --weights " + quoted(st) + " --input " +
                           quoted(st) + " --batch-lengths 13,5,1 --block-size " + block);
    ASSERT_EQ(r.status, 0) << block << ": " << r.err;
    EXPECT_EQ(lines_of(r.out).size(), 3u) << r.out;
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("FAILED"))) << block;
  }
  if (!std::string(GATTN_CLI_LAUNCHER).empty()) return;  // RSS would be the emulator's
#if defined(__SANITIZE_ADDRESS__)
  return;  // ASan's shadow memory makes RSS meaningless
#endif
  const auto [status, rss] = run_measured({"run", "--quiet", "--check", "--config", cfg, "--weights", st, "--input", st,
                                           "--batch-lengths", "13,5", "--block-size", "4194304"});
  ASSERT_EQ(status, 0);
  EXPECT_LT(rss, 200ll << 20) << "peak RSS " << rss / 1048576 << " MB";
}

}  // namespace

}  // namespace test_cli_safety
