// Tensor-parallel benchmarks (docs/spec.md §12, docs/performance.md): the L1 layer (Qwen3-Next full attention, fused
// elementwise G1 gate) split by heads over the ranks of `mpirun -np P build/bench/gattn_tp_bench`,
// one thread per rank. tp/L1P/p:P prefills T = 2048; tp/L1D/p:P decodes one token at 8192 cached;
// tp/allreduce/<shape>/p:P times the one all-reduce a call adds (T·d fp32 values).
//
// Every iteration ends in a collective, so every rank must run the same iterations: they are
// fixed per benchmark (Google Benchmark would otherwise pick them from each rank's own timing),
// and every rank runs every benchmark; rank 0 alone reports.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "gattn/mpi/mpi_communicator.hpp"
#include "gattn/parallel/tp_layer.hpp"
#include "bench_weights.hpp"

namespace {

using gattn::index;

using gattn_bench::l1_weights;
using gattn_bench::normal;
/// docs/performance.md's L1 (the elementwise G1 gate fused in q_proj).
inline gattn::gqa_config l1_config() { return gattn_bench::l1_g1_elementwise(); }

gattn::communicator* group = nullptr;

/// Projection + attention FLOPs of the whole layer (all ranks) for one call, as bench_layer.cpp counts them.
double l1_flops(const gattn::gqa_config& c, index t_q, index t_k) {
  const index n_cols = c.q_heads * 2 * c.head_dim + 2 * c.kv_heads * c.head_dim;
  const double proj = 2.0 * double(t_q) * double(c.hidden) * double(n_cols + c.q_heads * c.head_dim);
  const double pairs = double(t_q) * (double(t_k) - 0.5 * double(t_q - 1));
  return proj + 4.0 * pairs * double(c.head_dim) * double(c.q_heads);
}

void bm_tp_layer(benchmark::State& st, bool decode) {
  const auto cfg = l1_config();
  const gattn::tp_layer layer(cfg, l1_weights(cfg), *group);
  const index d = cfg.hidden, T = decode ? 1 : 2048, cached = decode ? 8192 : 0;
  gattn::kv_cache cache = layer.make_cache(cached + T);
  if (decode) {  // this rank's KV heads of a full cache (values do not matter)
    const auto kv = normal(cache.key_width(), 1.0f, 7);
    for (index t = 0; t < cached; ++t) {
      std::copy(kv.begin(), kv.end(), cache.key(t));
      std::copy(kv.begin(), kv.end(), cache.value(t));
    }
    cache.commit(cached);
  }
  const auto x = normal(T * d, 1.0f, 8);
  std::vector<float> y(x.size());
  group->barrier();
  for (auto _ : st) {
    cache.truncate(cached);
    layer.prefill({x.data(), T, d, d}, cache, {y.data(), T, d, d});
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GFLOPS"] =
      benchmark::Counter(l1_flops(cfg, T, cached + T) * double(st.iterations()) * 1e-9, benchmark::Counter::kIsRate);
  st.counters["tokens_per_s"] = benchmark::Counter(double(T) * double(st.iterations()), benchmark::Counter::kIsRate);
}

/// The all-reduce of a call's output rows alone: T·d fp32 values.
void bm_allreduce(benchmark::State& st, index values) {
  std::vector<float> y(static_cast<std::size_t>(values), 1.0f);
  group->barrier();
  for (auto _ : st) {
    group->all_reduce_sum(y.data(), values);
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["bytes"] = double(values) * 4.0;
  st.counters["GBps"] = benchmark::Counter(double(values) * 4.0 * double(st.iterations()) * 1e-9,
                                           benchmark::Counter::kIsRate);
}

void register_benchmarks(int ranks) {
  const std::string p = "/p:" + std::to_string(ranks);
  benchmark::RegisterBenchmark(("tp/L1P" + p).c_str(), bm_tp_layer, false)
      ->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2);
  benchmark::RegisterBenchmark(("tp/L1D" + p).c_str(), bm_tp_layer, true)
      ->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(100);
  benchmark::RegisterBenchmark(("tp/allreduce/L1P" + p).c_str(), bm_allreduce, index(2048) * 2048)
      ->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(20);
  benchmark::RegisterBenchmark(("tp/allreduce/L1D" + p).c_str(), bm_allreduce, index(2048))
      ->Unit(benchmark::kMicrosecond)->UseRealTime()->Iterations(2000);
}

/// What ranks other than 0 report: nothing.
class silent_reporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  gattn::mpi_session session(&argc, &argv);
  gattn::mpi_communicator comm;
  group = &comm;
#ifdef _OPENMP
  omp_set_num_threads(1);  // one thread per rank (docs/performance.md: 2 ranks x 1 thread against 1 x 1)
#endif
  std::vector<char*> args(argv, argv + argc);
  if (comm.rank() != 0)  // only rank 0 writes files
    args.erase(std::remove_if(args.begin() + 1, args.end(),
                              [](const char* a) { return std::strncmp(a, "--benchmark_out", 15) == 0; }),
               args.end());
  int n = int(args.size());
  benchmark::Initialize(&n, args.data());
  register_benchmarks(comm.size());
  if (comm.rank() == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    silent_reporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  benchmark::Shutdown();
  return 0;
}
