// ThreadSanitizer's view of pools shared by threads (ctest threads.tsan, tests/threads/tsan.cmake):
// the two-thread scenario of tests/cache/test_pool_mutex.cpp, built with -fsanitize=thread and
// without OpenMP (its runtime is not instrumented). Exits non-zero on a wrong output or a leaked
// block; ThreadSanitizer itself fails the run on any data race it sees.
#include <cstdio>

#include "support/shared_pool_scenario.hpp"

int main() {
  int failures = 0;
  const struct {
    const char* name;
    gattn::test::shared_pool_result (*run)(gattn::index);
  } cases[] = {{"paged_kv_cache", &gattn::test::shared_paged_pool_run},
               {"delta_state_pool", &gattn::test::shared_state_pool_run}};
  for (const auto& c : cases) {
    const gattn::test::shared_pool_result r = c.run(300);
    const bool ok = r.error.empty() && r.wrong == 0 && r.free_after == r.capacity;
    std::printf("%s: %lld of %lld steps wrong, %lld of %lld free after%s%s: %s\n", c.name,
                static_cast<long long>(r.wrong), static_cast<long long>(r.steps), static_cast<long long>(r.free_after),
                static_cast<long long>(r.capacity), r.error.empty() ? "" : ", error: ", r.error.c_str(),
                ok ? "ok" : "FAILED");
    failures += ok ? 0 : 1;
  }
  return failures == 0 ? 0 : 1;
}
