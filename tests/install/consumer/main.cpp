// Consumer of an installed gattn: compiles against the installed headers and package config only.
#include <cstdio>

#include <gattn/gattn.hpp>
#define GATTN_CONSUMER_HEADER "gattn/gattn.hpp"

int main() {
  gattn::gate_config gate;
  gate.enabled = true;
  try {
    gattn::detail::require<gattn::config_error>(false, "consumer check ", 42);
  } catch (const gattn::error& e) {
    std::printf("gattn consumer OK (%s): gate.enabled=%d, error: %s\n", GATTN_CONSUMER_HEADER,
                static_cast<int>(gate.enabled), e.what());
    return 0;
  }
  return 1;
}
