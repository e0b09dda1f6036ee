// Batched decode (docs/performance.md, docs/spec.md §11): layer/BD<B>/g1_elementwise[_bf16]/t:<n>,
// B sequences of the L1 layer (Qwen3-Next full attention, fused_q elementwise gate) with one new
// token each, in one gqa_layer::step. Contexts are spread over 512-4096 (the midpoints of B equal slices, so every B
// has the same mean context, 2304); fp32 weights and caches, or (`_bf16`) bf16 weights used in
// place and bf16 caches; BD32 also runs `_bf16_fast`: the bf16 layer with numerics = fast and
// kv_numerics = fast (docs/spec.md §10: bf16-operand projections, bf16 dot products over the cache).
// Counters: tokens_per_s and GFLOPS (projections + attention, 2 per multiply-add; the same count
// for every variant).
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "gattn/attention/gqa_layer.hpp"
#include "bench_weights.hpp"

// One namespace per file: gattn_bench is built as one unity translation unit.
namespace bench_batch {

namespace {

using gattn::index;

using gattn_bench::l1_g1_elementwise;
using gattn_bench::l1_weights;
using gattn_bench::normal;

index context_of(index s, index batch) { return 512 + (4096 - 512) * (2 * s + 1) / (2 * batch); }

void bm_batched_decode(benchmark::State& st, index batch, int threads, gattn::storage_type storage, bool fast) {
#ifdef _OPENMP
  omp_set_num_threads(threads);  // Eigen's GEMM inside the projections still uses OpenMP's team
#endif
  const gattn::execution_context exec = gattn::execution_context::with_threads(threads);
  auto cfg = l1_g1_elementwise();
  cfg.kv_cache_type = storage;  // weights and cache alike: f32, or bf16 as a real checkpoint serves
  if (fast) {
    cfg.numerics = gattn::numerics::fast;
    cfg.kv_numerics = gattn::kv_numerics::fast;
  }
  const gattn::gqa_layer layer(cfg, gattn_bench::stored_as(l1_weights(cfg), storage));
  const index d = cfg.hidden;
  std::vector<gattn::kv_cache> caches;
  caches.reserve(std::size_t(batch));
  double attention_flops = 0;
  for (index s = 0; s < batch; ++s) {  // random K/V rows: values do not matter for the time
    const index t = context_of(s, batch);
    caches.emplace_back(cfg, t + 1);
    const auto kv = normal(caches.back().key_width(), 1.0f, unsigned(7 + s));
    caches.back().append(kv.data(), 0, kv.data(), 0, t);  // stride 0: the same row t times
    attention_flops += 4.0 * double(t + 1) * double(cfg.head_dim) * double(cfg.q_heads);
  }
  std::vector<gattn::sequence_cache> handles(caches.begin(), caches.end());
  std::vector<index> cu(std::size_t(batch + 1));
  for (index s = 0; s <= batch; ++s) cu[std::size_t(s)] = s;
  const auto x = normal(batch * d, 1.0f, 8);
  std::vector<float> y(x.size());
  gattn::layer_workspace ws;
  layer.reserve(ws, batch, batch);
  for (auto _ : st) {
    for (index s = 0; s < batch; ++s) caches[std::size_t(s)].truncate(context_of(s, batch));
    layer.step({x.data(), batch, d, d}, cu.data(), batch, handles.data(), {y.data(), batch, d, d}, ws, nullptr, exec);
    benchmark::DoNotOptimize(y.data());
  }
  const index n_cols = cfg.q_heads * 2 * cfg.head_dim + 2 * cfg.kv_heads * cfg.head_dim;
  const double projection_flops = 2.0 * double(batch) * double(d) * double(n_cols + cfg.q_heads * cfg.head_dim);
  const double iterations = double(st.iterations());
  st.counters["tokens_per_s"] = benchmark::Counter(double(batch) * iterations, benchmark::Counter::kIsRate);
  st.counters["GFLOPS"] =
      benchmark::Counter((projection_flops + attention_flops) * iterations * 1e-9, benchmark::Counter::kIsRate);
}

int register_batched_decode() {
  for (int t : {1, 2})
    for (const auto storage : {gattn::storage_type::f32, gattn::storage_type::bf16})
    for (index b : {index(1), index(8), index(32)})
      benchmark::RegisterBenchmark(("layer/BD" + std::to_string(b) + "/g1_elementwise" +
                                    (storage == gattn::storage_type::bf16 ? "_bf16" : "") + "/t:" + std::to_string(t)).c_str(),
                                   bm_batched_decode, b, t, storage, false)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
  for (int t : {1, 2})
    benchmark::RegisterBenchmark(("layer/BD32/g1_elementwise_bf16_fast/t:" + std::to_string(t)).c_str(), bm_batched_decode,
                                 index(32), t, gattn::storage_type::bf16, true)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  return 0;
}

const int registered = register_batched_decode();

}  // namespace

}  // namespace bench_batch
