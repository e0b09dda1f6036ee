// main() of the runtime-dispatched CLI: runs gattn_cli.cpp's entry compiled for the best arch this
// CPU has (gattn/simd/dispatch.hpp; built with no ISA flags of its own, so it runs on any x86-64).
#include <cstdio>
#include <exception>

#include "gattn/simd/dispatch.hpp"
#include "cli_entry.hpp"

int main(int argc, char** argv) {
  try {
    return gattn::dispatch(cli_entry{}, argc, argv);
  } catch (const std::exception& e) {  // no arch runs here; the entry reports its own errors
    std::fprintf(stderr, "gattn: internal error: %s\n", e.what());
    return 3;
  }
}
