// Whole-layer benchmarks of the gated delta-rule layers (docs/performance.md, delta-rule shapes):
// layer/L1P_gdn (a Qwen3-Next linear-attention layer, d 2048, H_k 16, H_v 32, D_k = D_v = 128, bf16
// weights, prefill T = 4096), layer/L1P_gdn_fast (the same with numerics = fast: out_proj in bf16
// operands) and layer/L1D_gdn (one decode step of that layer), t:1 and t:2; layer/L1D_gdn_fp8 and
// layer/L1P_gdn_fp8: in_proj_qkvz and out_proj in block FP8 (128 × 128 blocks, BF16 scales) as the
// Qwen3-Next FP8 release stores them.
// Counters: tokens_per_s; GFLOPS = the projections (2 per weight) plus the delta rule counted as the
// chunked form does it; L1D's GBps = the weights' bytes and the state read and written once.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "gattn/attention/delta_layer.hpp"
#include "gattn/diagnostics/cost_model.hpp"
#include "bench_weights.hpp"

// One namespace per file: gattn_bench is built as one unity translation unit.
namespace bench_delta_layer {
namespace {

using gattn::index;

/// Qwen3-Next-80B's linear-attention layer.
gattn::delta_config qwen3_next_linear() {
  gattn::delta_config c;
  c.kind = gattn::delta_kind::gated_deltanet;
  c.hidden = 2048;
  c.key_heads = 16;
  c.value_heads = 32;
  c.key_head_dim = 128;
  c.value_head_dim = 128;
  return c;
}

/// Random weights named and shaped by the layer's contract: projections N(0, 1/in), Qwen3-Next's
/// decay initialisation (A in [1, 16], dt around softplus⁻¹(0.01)), norm weights near 1.
gattn::weight_map weights(const gattn::delta_config& c, bool fp8) {
  gattn::weight_map w;
  unsigned seed = 1;
  for (const gattn::delta_weight_spec& s : gattn::detail::delta_weights(c, w).weights) {
    const std::vector<index>& shape = s.shapes.front();
    index n = 1;
    for (index e : shape) n *= e;
    std::vector<float> v = gattn_bench::normal(n, 1.0f / std::sqrt(float(shape.size() == 3 ? shape[2] : shape.back())), ++seed);
    if (s.name == "A_log")
      for (index h = 0; h < n; ++h) v[std::size_t(h)] = std::log(1.0f + 15.0f * float(h) / float(n));
    if (s.name == "dt_bias") std::fill(v.begin(), v.end(), -4.6f);
    if (s.name == "norm.weight") std::fill(v.begin(), v.end(), 1.0f);
    w.set(s.name, shape, v);
  }
  gattn::weight_map stored = gattn_bench::stored_as(w, gattn::storage_type::bf16);
  if (fp8)
    for (const char* name : {"in_proj_qkvz.weight", "out_proj.weight"})
      stored.set(name, gattn_bench::stored_fp8(w.all().at(name)));
  return stored;
}

/// Bytes of every weight of `w` (what one decode step reads of them).
double weight_bytes(const gattn::weight_map& w) {
  double b = 0;
  for (const auto& [name, v] : w.all()) b += double(v.bytes());
  return b;
}

void set_threads(int threads) {
#ifdef _OPENMP
  omp_set_num_threads(threads);
#else
  (void)threads;
#endif
}

void bm_delta_layer(benchmark::State& st, bool decode, int threads, gattn::numerics numerics, bool fp8) {
  set_threads(threads);
  gattn::delta_config cfg = qwen3_next_linear();
  cfg.numerics = numerics;
  const gattn::weight_map w = weights(cfg, fp8);
  const gattn::delta_layer layer(cfg, w);
  const index d = cfg.hidden, T = decode ? 1 : 4096;
  const auto x = gattn_bench::normal(T * d, 1.0f, 9);
  std::vector<float> y(x.size());
  gattn::delta_state state = layer.make_state();
  // One untimed call grows the state's workspace (and the projections' scratch): a steady call
  // touches no fresh page.
  layer.prefill({x.data(), T, d, d}, state, {y.data(), T, d, d});
  for (auto _ : st) {
    if (!decode) state.clear();
    layer.prefill({x.data(), T, d, d}, state, {y.data(), T, d, d});
    benchmark::DoNotOptimize(y.data());
  }
  const gattn::layer_cost c = gattn::cost(cfg);
  const double per_call = double(T) * (c.projection_flops_per_token() + c.recurrence_flops_per_token);
  const double n = double(st.iterations());
  st.counters["GFLOPS"] = benchmark::Counter(per_call * n * 1e-9, benchmark::Counter::kIsRate);
  st.counters["tokens_per_s"] = benchmark::Counter(double(T) * n, benchmark::Counter::kIsRate);
  if (decode) {
    const double bytes = weight_bytes(w) + 2.0 * 4.0 * double(cfg.state_values());
    st.counters["GBps"] = benchmark::Counter(bytes * n * 1e-9, benchmark::Counter::kIsRate);
  }
}

const bool registered = [] {
  for (int t : {1, 2}) {
    const std::string ts = "/t:" + std::to_string(t);
    for (bool fp8 : {false, true}) {
      const std::string v = fp8 ? "_fp8" : "";
      benchmark::RegisterBenchmark(("layer/L1P_gdn" + v + ts).c_str(), bm_delta_layer, false, t, gattn::numerics::exact, fp8)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
      benchmark::RegisterBenchmark(("layer/L1D_gdn" + v + ts).c_str(), bm_delta_layer, true, t, gattn::numerics::exact, fp8)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
    benchmark::RegisterBenchmark(("layer/L1P_gdn_fast" + ts).c_str(), bm_delta_layer, false, t, gattn::numerics::fast, false)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  return true;
}();

}  // namespace
}  // namespace bench_delta_layer
