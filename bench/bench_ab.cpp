// Interleaved in-process A/B of the gate's cost (docs/performance.md: gate overhead <= 1% of P1, <= 3% of D1,
// "measured as an interleaved A/B in one process"): ab/<shape>/g1_elementwise_vs_plain/t:<n>.
//
// Independent runs on the shared VM move by 5-10%, more than the overhead to resolve. Here both
// variants run on the inputs of kernel/<shape> (bench_shapes.hpp, the same buffers) inside one timed
// loop: each benchmark iteration is one pair, the fused kernel with the elementwise G1 gate (A) and
// the same kernel without a gate (B), in the order A B, then B A, then A B, ... so slow drift and
// the position inside a pair cancel. Each call is timed alone with std::chrono::steady_clock.
// Decode shapes advance the cache after every call exactly as kernel/D1 does (c = (c + 1) % caches),
// so both variants read cold memory; with D1's two caches the ABBA order also swaps which cache
// each variant reads from pair to pair.
//
// Time: manual, the sum of the timed calls. One benchmark iteration is a block of pairs (20 for P1,
// 300 for D1), long enough that Google Benchmark runs one block per repetition, so the reported
// time is a block's time and --benchmark_repetitions=5 gives 5 independent medians. Counters, per
// repetition (over every pair of its blocks):
//   overhead_pct  100 x median over pairs of (t_gated - t_plain) / t_plain
//   gated_ms      median of the gated calls
//   plain_ms      median of the plain calls
//   pairs         number of pairs
//   overhead_p25_pct, overhead_p75_pct  quartiles of the same paired differences (their spread)
//   cpu_overhead_pct    the same median on the process CPU time of each call
//                       (clock_gettime(CLOCK_PROCESS_CPUTIME_ID), all threads; OpenMP spin-waits count)
//   clean_pairs, clean_overhead_pct  the pairs in which neither call had an involuntary context
//                       switch (getrusage ru_nivcsw, all threads), and the median over them
// On a loaded VM a preempted call's wall time grows in scheduler ticks (4 ms here), which swamps
// a 1% difference; the CPU-time and clean-pair medians separate the kernel from the queueing.
// GATTN_AB_DUMP=FILE appends each pair's samples to FILE (CSV) for a closer look.
// Untimed warm-up first: each variant once per cache (thread-local scratch, pages, OpenMP threads).
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <time.h>

#include "bench_shapes.hpp"
#include "gattn/kernel/kernel.hpp"

// One namespace per file: gattn_bench is built as one unity translation unit.
namespace bench_ab {

namespace {

using gattn::index;
using gattn_bench::inputs;
using gattn_bench::shape;

/// The q-quantile of v (linear interpolation between order statistics; q = 0.5: the median).
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double x = q * double(v.size() - 1);
  const std::size_t i = std::size_t(x);
  if (i + 1 >= v.size()) return v.back();
  return v[i] + (x - double(i)) * (v[i + 1] - v[i]);
}
double median(const std::vector<double>& v) { return quantile(v, 0.5); }

/// Involuntary context switches of the whole process so far (all threads).
long involuntary_switches() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_nivcsw;
}

/// CPU time of the whole process so far, in seconds (all threads).
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

/// One timed call: wall (steady clock) and process CPU seconds, involuntary context switches.
struct sample {
  double wall = 0, cpu = 0;
  long switches = 0;
};

void bm_ab(benchmark::State& st, const shape* s, std::string gated, std::string plain, int threads, index pairs) {
  Eigen::setNbThreads(1);
  inputs& in = gattn_bench::shared_inputs(*s);
  index c = 0;
  using clock = std::chrono::steady_clock;
  // One call of `variant` on cache c, timed alone; then the next cache, as kernel/<shape> does.
  // Around the steady-clock interval (outside it): the process CPU time and its involuntary context
  // switches (every thread's), to tell the kernel's time from time spent descheduled.
  auto call = [&](const std::string& variant) {
    const gattn::sdpa_params p = in.params(c, variant, threads);
    const long sw0 = involuntary_switches();
    const double cpu0 = process_cpu_seconds();
    const auto t0 = clock::now();
    gattn::fused_sdpa(p);
    benchmark::DoNotOptimize(in.out.data());
    benchmark::ClobberMemory();
    const auto t1 = clock::now();
    const double cpu1 = process_cpu_seconds();
    const long sw1 = involuntary_switches();
    c = (c + 1) % in.caches;
    return sample{std::chrono::duration<double>(t1 - t0).count(), cpu1 - cpu0, sw1 - sw0};
  };
  for (index w = 0; w < in.caches; ++w) {  // warm-up, untimed: every cache once per variant
    call(gated);
    call(plain);
  }
  c = 0;
  std::vector<sample> sg, sp;
  std::vector<char> first;  // gated ran first in this pair
  bool gated_first = true;
  for (auto _ : st) {
    double block = 0;
    for (index i = 0; i < pairs; ++i) {
      sample a, b;
      if (gated_first) {
        a = call(gated);
        b = call(plain);
      } else {
        b = call(plain);
        a = call(gated);
      }
      first.push_back(gated_first);
      gated_first = !gated_first;
      sg.push_back(a);
      sp.push_back(b);
      block += a.wall + b.wall;
    }
    st.SetIterationTime(block);
  }
  std::vector<double> tg, tp, rel, rel_cpu, rel_clean;
  for (std::size_t i = 0; i < sg.size(); ++i) {
    tg.push_back(sg[i].wall);
    tp.push_back(sp[i].wall);
    rel.push_back((sg[i].wall - sp[i].wall) / sp[i].wall);
    rel_cpu.push_back((sg[i].cpu - sp[i].cpu) / sp[i].cpu);
    if (sg[i].switches == 0 && sp[i].switches == 0) rel_clean.push_back(rel.back());
  }
  st.counters["overhead_pct"] = 100.0 * median(rel);
  st.counters["gated_ms"] = 1e3 * median(tg);
  st.counters["plain_ms"] = 1e3 * median(tp);
  st.counters["pairs"] = double(rel.size());
  // The spread of the paired differences: how well one repetition resolves the overhead.
  st.counters["overhead_p25_pct"] = 100.0 * quantile(rel, 0.25);
  st.counters["overhead_p75_pct"] = 100.0 * quantile(rel, 0.75);
  // The same median on process CPU time (all threads; OpenMP's spin-waits count as CPU time).
  st.counters["cpu_overhead_pct"] = 100.0 * median(rel_cpu);
  // The same median over the pairs in which neither call was preempted (0 when there is none).
  st.counters["clean_pairs"] = double(rel_clean.size());
  st.counters["clean_overhead_pct"] = 100.0 * median(rel_clean);
  // GATTN_AB_DUMP=FILE appends every pair: benchmark, pair, gated first, then wall s, CPU s and
  // involuntary switches of the gated call and of the plain call.
  if (const char* dump = std::getenv("GATTN_AB_DUMP")) {
    if (std::FILE* f = std::fopen(dump, "a")) {
      for (std::size_t i = 0; i < sg.size(); ++i)
        std::fprintf(f, "ab/%s/t:%d,%zu,%d,%.9f,%.9f,%ld,%.9f,%.9f,%ld\n", s->name, threads, i, int(first[i]),
                     sg[i].wall, sg[i].cpu, sg[i].switches, sp[i].wall, sp[i].cpu, sp[i].switches);
      std::fclose(f);
    }
  }
}

int register_all() {
  // Pairs per benchmark iteration: one iteration (about 8 s of P1 at one thread, 2.6 s of D1, on an
  // idle VM) outlasts Google Benchmark's min_time, so each repetition is one block of pairs and the
  // names carry no /iterations: suffix.
  struct ab_shape {
    const char* name;
    index pairs;
  };
  for (const ab_shape& a : {ab_shape{"P1", 20}, ab_shape{"D1", 300}}) {
    const shape* s = gattn_bench::find_shape(a.name);
    for (int t : {1, 2}) {
      const std::string name = std::string("ab/") + a.name + "/g1_elementwise_vs_plain/t:" + std::to_string(t);
      benchmark::RegisterBenchmark(name.c_str(), bm_ab, s, std::string("g1_elementwise"), std::string("plain"), t,
                                   a.pairs)
          ->UseManualTime()->Unit(benchmark::kMillisecond);
    }
  }
  return 0;
}
const int registered = register_all();

}  // namespace

}  // namespace bench_ab
