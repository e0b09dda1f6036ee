// consumer_dispatched: the installed gattn_add_dispatched() and gattn::dispatch, as docs/api.md shows
// them: the entry must run for the arch dispatch names, and compute the right SDPA.
#include <cstdio>
#include <cstring>

#include <gattn/simd/dispatch.hpp>

#include "dispatched_entry.hpp"

int main() {
  const char* arch = nullptr;
  const double err = gattn::dispatch(probe_entry{}, &arch);
  const char* chosen = gattn::dispatched_arch_name();
  const bool ok = arch && chosen && std::strcmp(arch, chosen) == 0 && err < 1e-5;
  std::printf("consumer_dispatched: dispatch chose %s, the entry ran %s, max error %.2g: %s\n", chosen ? chosen : "none",
              arch ? arch : "none", err, ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
