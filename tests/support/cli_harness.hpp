// Test support for the `gattn` command-line tool: where the built CLI is (GATTN_CLI_PATH, empty
// when the build has no CLI) and the launcher it runs under (GATTN_CLI_LAUNCHER: the cross
// build's emulator, else empty), a scratch directory of this process, and a run through the shell
// that captures the exit status, stdout and stderr.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#ifndef GATTN_CLI_PATH
#define GATTN_CLI_PATH ""
#endif
// Shell words put before the CLI's path: the cross-compiling emulator when there is one.
#ifndef GATTN_CLI_LAUNCHER
#define GATTN_CLI_LAUNCHER ""
#endif

namespace cli_test {

namespace fs = std::filesystem;

/// True when the test binary was built with the CLI next to it.
inline bool cli_built() { return !std::string(GATTN_CLI_PATH).empty(); }

struct cli_result {
  int status = -1;
  std::string out, err;
};

/// A directory of this process under the system's temporary directory (made on first use).
/// A directory of this process's own, removed with everything in it when the process exits.
struct process_temp_dir {
  fs::path path;
  explicit process_temp_dir(const std::string& stem)
      : path(fs::temp_directory_path() / (stem + "_" + std::to_string(::getpid()))) {
    fs::create_directories(path);
  }
  ~process_temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  process_temp_dir(const process_temp_dir&) = delete;
  process_temp_dir& operator=(const process_temp_dir&) = delete;
};

inline fs::path scratch_dir() {
  static const process_temp_dir dir("gattn_cli_test");
  return dir.path;
}

/// The whole content of the file at p (empty when it cannot be read).
inline std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Runs `gattn <args>` through the shell (args are shell words, quoted by the caller).
inline cli_result run_cli(const std::string& args) {
  const fs::path out = scratch_dir() / "stdout.txt", err = scratch_dir() / "stderr.txt";
  const std::string cmd = std::string(GATTN_CLI_LAUNCHER) + "'" + GATTN_CLI_PATH + "' " + args + " >'" + out.string() +
                          "' 2>'" + err.string() + "'";
  const int raw = std::system(cmd.c_str());
  cli_result r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

}  // namespace cli_test
