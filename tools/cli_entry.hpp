// The CLI's entry point, a template on the arch: with runtime dispatch (tools/CMakeLists.txt)
// gattn_cli.cpp is compiled once per arch and cli_main.cpp calls the one this CPU runs best.
#pragma once

struct cli_entry {
  /// The whole run of `gattn` (main()'s work): parses argv, runs the command, returns the exit status.
  template <class Arch>
  int operator()(Arch, int argc, char** argv) const;
};
