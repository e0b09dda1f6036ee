// Weights are used where they are mapped: `gattn run` of a few tokens over a mapped bf16 Qwen3-Next-shaped layer
// (d 2048, H_q 16, H_kv 2, D 256, gate fused in q_proj; ~52 MB) peaks below 1.6x the checkpoint's
// bytes + 40 MB of RSS, i.e. no weight is widened or copied; and its output equals the same
// weights widened to fp32 within 1e-4 * max|y|.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gattn/io/safetensors.hpp"
#include "gattn/simd/convert.hpp"
#include "support/cli_harness.hpp"
#include "support/vectors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_cli_rss {

namespace {

namespace fs = std::filesystem;
using gattn::index;
using gattn::io::dtype;

/// Exit status and peak RSS (bytes) of the CLI run with `args`, without a shell in between.
std::pair<int, long long> run_measured(const std::vector<std::string>& args) {
  std::vector<std::string> argv_s = {GATTN_CLI_PATH};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
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

/// Deterministic N(0, s)-ish values without <random>'s cost for 27 M of them.
struct fast_values {
  std::uint64_t state;
  float next(float scale) {
    float sum = 0;
    for (int i = 0; i < 4; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      sum += float(std::uint32_t(state >> 40)) / float(1u << 24) - 0.5f;
    }
    return sum * scale * 1.7320508f;  // variance of the sum of 4 uniforms is 1/3
  }
};

TEST(CliRss, MappedBf16QwenNextLayerIsNotCopied) {
  if (!cli_test::cli_built()) GTEST_SKIP() << "built without the CLI";
  if (!std::string(GATTN_CLI_LAUNCHER).empty()) GTEST_SKIP() << "the CLI runs under an emulator: its RSS is the emulator's";
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan's shadow memory makes RSS meaningless";
#endif
  const index d = 2048, Hq = 16, Hkv = 2, D = 256, T = 4;
  const fs::path dir = fs::temp_directory_path() / ("gattn_cli_rss_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  struct cleanup {
    fs::path p;
    ~cleanup() { std::error_code ec; fs::remove_all(p, ec); }
  } cleanup_dir{dir};

  struct spec { std::string name; index rows, cols; float scale; };
  const std::vector<spec> specs = {{"q_proj.weight", Hq * 2 * D, d, 0.02f}, {"k_proj.weight", Hkv * D, d, 0.02f},
                                   {"v_proj.weight", Hkv * D, d, 0.02f},     {"o_proj.weight", d, Hq * D, 0.02f},
                                   {"q_norm.weight", D, 1, 0.1f},            {"k_norm.weight", D, 1, 0.1f}};
  fast_values gen{42};
  std::vector<std::vector<std::uint16_t>> bf16(specs.size());
  std::vector<std::vector<float>> f32(specs.size());
  std::vector<gattn::io::tensor_to_write> as_bf16, as_f32;
  long long checkpoint_bytes = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const spec& s = specs[i];
    bf16[i].resize(std::size_t(s.rows * s.cols));
    f32[i].resize(bf16[i].size());
    for (std::size_t k = 0; k < bf16[i].size(); ++k) {
      bf16[i][k] = gattn::round_to_bf16(gen.next(s.scale));
      f32[i][k] = gattn::bf16_to_float(bf16[i][k]);
    }
    std::vector<std::int64_t> shape = s.cols == 1 ? std::vector<std::int64_t>{s.rows} : std::vector<std::int64_t>{s.rows, s.cols};
    as_bf16.push_back({s.name, dtype::bf16, shape, bf16[i].data()});
    as_f32.push_back({s.name, dtype::f32, shape, f32[i].data()});
    checkpoint_bytes += s.rows * s.cols * 2;
  }
  const std::string w_bf16 = (dir / "w_bf16.safetensors").string(), w_f32 = (dir / "w_f32.safetensors").string();
  gattn::io::write_safetensors(w_bf16, as_bf16);
  gattn::io::write_safetensors(w_f32, as_f32);
  bf16.clear();
  f32.clear();
  std::vector<float> x(std::size_t(T * d));
  for (float& v : x) v = gen.next(1.0f);
  const std::string input = (dir / "x.safetensors").string();
  gattn::io::write_safetensors(input, {{"x", dtype::f32, {T, d}, x.data()}});
  const std::string config = (dir / "config.json").string();
  std::ofstream(config) << R"({"attention": "gqa", "hidden_size": 2048, "num_attention_heads": 16,
    "num_key_value_heads": 2, "head_dim": 256, "qk_norm": "rms_zero_centered", "rms_norm_eps": 1e-06,
    "rope_theta": 10000000.0, "partial_rotary_factor": 0.25, "rope_style": "neox", "causal": true,
    "gate": {"position": "G1", "granularity": "elementwise", "shared": false, "activation": "sigmoid",
             "combine": "mul", "source": "fused_q"}})";

  auto run = [&](const std::string& weights, const std::string& out) {
    return run_measured({"run", "--quiet", "--config", config, "--weights", weights, "--input", input, "--output", out,
                         "--decode-from", "2"});
  };
  const std::string y_bf16 = (dir / "y_bf16.safetensors").string(), y_f32 = (dir / "y_f32.safetensors").string();
  const auto [status_bf16, rss_bf16] = run(w_bf16, y_bf16);
  const auto [status_f32, rss_f32] = run(w_f32, y_f32);
  ASSERT_EQ(status_bf16, 0);
  ASSERT_EQ(status_f32, 0);
  const double bound = 1.6 * double(checkpoint_bytes) + 40.0 * 1024 * 1024;
  std::printf("[ rss ] bf16 checkpoint %.1f MB: peak RSS %.1f MB (bound %.1f MB); fp32 checkpoint: %.1f MB\n",
              double(checkpoint_bytes) / 1048576, double(rss_bf16) / 1048576, bound / 1048576, double(rss_f32) / 1048576);
  EXPECT_LT(double(rss_bf16), bound);

  const auto a = gattn::io::safetensors_file::open(y_bf16).read_f32("y");
  const auto b = gattn::io::safetensors_file::open(y_f32).read_f32("y");
  ASSERT_EQ(a.size(), b.size());
  EXPECT_LE(gattn::test::max_abs_diff(a, b), 1e-4 * gattn::test::max_abs(b));
  EXPECT_GT(gattn::test::max_abs(b), 0.0);
}

}  // namespace

}  // namespace test_cli_rss
