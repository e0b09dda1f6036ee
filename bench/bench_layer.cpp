// Whole-layer benchmarks (docs/performance.md): layer/L1P (Qwen3-Next full-attention layer, prefill T = 2048)
// and layer/L1D (decode one token at 8192 cached), variants plain / g1_elementwise / g1_headwise /
// unfused (elementwise gate, the Eigen baseline SDPA); layer/L1D/g1_elementwise_bf16 (bf16 weights
// used in place and a bf16 KV cache); layer/L1P/g1_elementwise_bf16_fast (the same with the layer's
// numerics = fast: bf16-operand projections); proj/gemv/{f32,bf16,f16,f8_e4m3} (the fused q/k/v/gate projection of
// one decode token alone, GBps = weight bytes, for limits/read); proj/gemm/{dtype}/n:N (the same for N
// rows, GFLOPS for limits/fma; bf16_fast with gemm_numerics::fast); and the MLA layer, layer/MLAP (prefill
// T = 2048; MLAP64 and MLAP512 at shorter prompts, absorbed vs expanded) and layer/MLAD (decode at 8192 cached, absorbed vs expanded).
#include <benchmark/benchmark.h>

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "gattn/attention/gqa_layer.hpp"
#include "gattn/attention/mla_layer.hpp"
#include "gattn/baseline/sdpa_backend.hpp"
#include "gattn/simd/convert.hpp"
#include "bench_weights.hpp"

// One namespace per file: gattn_bench is built as one unity translation unit.
namespace bench_layer {

namespace {

using gattn::index;

using gattn_bench::normal;

/// Qwen3-Next full attention: d 2048, H_q 16, H_kv 2, D 256, partial RoPE 0.25, fused_q gate.
gattn::gqa_config qwen3_next(const std::string& variant) {
  gattn::gqa_config c;
  c.hidden = 2048;
  c.q_heads = 16;
  c.kv_heads = 2;
  c.head_dim = 256;
  c.qk_norm = gattn::norm_kind::rms_zero_centered;
  c.partial_rotary_factor = 0.25;
  c.rope.theta = 1e7;
  c.rope.rotary_dim = 64;
  if (variant != "plain") {
    c.gate.enabled = true;
    c.gate.source = gattn::gate_source::fused_q;
    c.gate.granularity = variant == "g1_headwise" ? gattn::granularity::headwise : gattn::granularity::elementwise;
  }
  return c;
}

gattn::weight_map qwen3_next_weights(const gattn::gqa_config& c) {
  const index d = c.hidden, D = c.head_dim;
  const index per = !c.gate.enabled ? 0 : c.gate.granularity == gattn::granularity::elementwise ? D : 1;
  gattn::weight_map w;
  const float s = 1.0f / std::sqrt(float(d));
  w.set("q_proj.weight", {c.q_heads * (D + per), d}, normal(c.q_heads * (D + per) * d, s, 1));
  w.set("k_proj.weight", {c.kv_heads * D, d}, normal(c.kv_heads * D * d, s, 2));
  w.set("v_proj.weight", {c.kv_heads * D, d}, normal(c.kv_heads * D * d, s, 3));
  w.set("o_proj.weight", {d, c.q_heads * D}, normal(d * c.q_heads * D, 1.0f / std::sqrt(float(c.q_heads * D)), 4));
  w.set("q_norm.weight", {D}, normal(D, 0.1f, 5));
  w.set("k_norm.weight", {D}, normal(D, 0.1f, 6));
  return w;
}

using gattn_bench::stored_as;

/// Projection + attention FLOPs of one call (2 per multiply-add; causal attention counts half).
double gqa_flops(const gattn::gqa_config& c, index t_q, index t_k, index n_cols) {
  const double proj = 2.0 * double(t_q) * double(c.hidden) * double(n_cols + c.q_heads * c.head_dim);
  const double pairs = double(t_q) * (double(t_k) - 0.5 * double(t_q - 1));
  return proj + 4.0 * pairs * double(c.head_dim) * double(c.q_heads);
}

void set_threads(int threads) {
#ifdef _OPENMP
  omp_set_num_threads(threads);
#else
  (void)threads;
#endif
}

void bm_gqa_layer(benchmark::State& st, std::string variant, bool decode, int threads) {
  set_threads(threads);
  const bool fast = variant == "g1_elementwise_bf16_fast";      // ... and numerics = fast
  const bool bf16 = fast || variant == "g1_elementwise_bf16";  // bf16 weights and bf16 KV cache
  auto cfg = qwen3_next(bf16 ? "g1_elementwise" : variant);
  if (bf16) cfg.kv_cache_type = gattn::storage_type::bf16;
  if (fast) cfg.numerics = gattn::numerics::fast;
  const auto storage = bf16 ? gattn::storage_type::bf16 : gattn::storage_type::f32;
  gattn::gqa_layer layer(cfg, stored_as(qwen3_next_weights(cfg), storage));
  if (variant == "unfused") layer.set_sdpa(&gattn::unfused_sdpa);
  const index d = cfg.hidden, T = decode ? 1 : 2048, cached = decode ? 8192 : 0;
  gattn::kv_cache cache(cfg, cached + T);
  if (decode) {  // a full cache of random K/V rows (already normed and roped: values do not matter)
    const auto kv = normal(cache.key_width(), 1.0f, 7);
    for (index t = 0; t < cached; ++t) cache.append(kv.data(), 0, kv.data(), 0, 1);
  }
  const auto x = normal(T * d, 1.0f, 8);
  std::vector<float> y(x.size());
  for (auto _ : st) {
    cache.truncate(cached);
    layer.prefill({x.data(), T, d, d}, cache, {y.data(), T, d, d});
    benchmark::DoNotOptimize(y.data());
  }
  const index per = !cfg.gate.enabled ? 0 : cfg.gate.granularity == gattn::granularity::elementwise ? 256 : 1;
  const index n_cols = cfg.q_heads * (256 + per) + 2 * cfg.kv_heads * 256;
  const double flops = gqa_flops(cfg, T, cached + T, n_cols);
  st.counters["GFLOPS"] = benchmark::Counter(flops * double(st.iterations()) * 1e-9, benchmark::Counter::kIsRate);
  if (decode) {
    const double element = bf16 ? 2.0 : 4.0;
    const double bytes = element * (double(n_cols + cfg.q_heads * 256) * double(d) + 2.0 * double(cached) * double(cache.key_width()));
    st.counters["GBps"] = benchmark::Counter(bytes * double(st.iterations()) * 1e-9, benchmark::Counter::kIsRate);
  }
}

/// DeepSeek-V3 attention shape at d 2048: H 16, q_lora 1536, d_c 512, d_rope 64, d_nope 128, d_v 128.
gattn::mla_config deepseek(bool gated) {
  gattn::mla_config c;
  c.hidden = 2048;
  c.heads = 16;
  c.q_lora_rank = 1536;
  c.kv_lora_rank = 512;
  c.qk_rope_head_dim = 64;
  c.qk_nope_head_dim = 128;
  c.v_head_dim = 128;
  c.rope.style = gattn::rope_style::interleaved;
  c.rope.rotary_dim = 64;
  c.gate.enabled = gated;
  return c;
}

gattn::weight_map deepseek_weights(const gattn::mla_config& c) {
  gattn::weight_map w;
  const index d = c.hidden, H = c.heads, qk = c.qk_head_dim();
  auto lin = [&](const char* name, index out, index in, unsigned seed) {
    w.set(name, {out, in}, normal(out * in, 1.0f / std::sqrt(float(in)), seed));
  };
  lin("q_a_proj.weight", c.q_lora_rank, d, 1);
  w.set("q_a_layernorm.weight", {c.q_lora_rank}, std::vector<float>(std::size_t(c.q_lora_rank), 1.0f));
  lin("q_b_proj.weight", H * qk, c.q_lora_rank, 2);
  lin("kv_a_proj_with_mqa.weight", c.kv_lora_rank + c.qk_rope_head_dim, d, 3);
  w.set("kv_a_layernorm.weight", {c.kv_lora_rank}, std::vector<float>(std::size_t(c.kv_lora_rank), 1.0f));
  lin("kv_b_proj.weight", H * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank, 4);
  lin("o_proj.weight", d, H * c.v_head_dim, 5);
  if (c.gate.enabled) lin("g_proj.weight", H * c.v_head_dim, d, 6);
  return w;
}

void bm_mla_layer(benchmark::State& st, gattn::mla_form form, bool gated, bool decode, index prompt, int threads) {
  set_threads(threads);
  const auto cfg = deepseek(gated);
  gattn::mla_layer layer(cfg, deepseek_weights(cfg));
  layer.set_form(form);
  const index d = cfg.hidden, T = decode ? 1 : prompt, cached = decode ? 8192 : 0;
  gattn::kv_cache cache(cfg, cached + T);
  if (decode) {
    const auto row = normal(cache.key_width(), 1.0f, 7);
    for (index t = 0; t < cached; ++t) std::copy(row.begin(), row.end(), cache.key(t));
    cache.commit(cached);
  }
  const auto x = normal(T * d, 1.0f, 8);
  std::vector<float> y(x.size());
  for (auto _ : st) {
    cache.truncate(cached);
    layer.prefill({x.data(), T, d, d}, cache, {y.data(), T, d, d});
    benchmark::DoNotOptimize(y.data());
  }
  gattn::mla_layer chooser(cfg, deepseek_weights(cfg));  // what `automatic` would pick here
  st.SetLabel(std::string("automatic picks ") + gattn::to_string(chooser.choose_form(T, cached + T)));
  st.counters["tokens_per_s"] = benchmark::Counter(double(T) * double(st.iterations()), benchmark::Counter::kIsRate);
}

/// The fused q/k/v/gate projection of Qwen3-Next (9216 x 2048, one segment per head's q and gate
/// rows, as gqa_layer builds it) applied to `rows` tokens: the decode GEMV on its own.
void bm_projection(benchmark::State& st, gattn::storage_type type, index rows, int threads,
                   gattn::gemm_numerics numerics) {
  set_threads(threads);
  const auto cfg = qwen3_next("g1_elementwise");
  const gattn::weight_map w = stored_as(qwen3_next_weights(cfg), type);
  const index d = cfg.hidden, D = cfg.head_dim;
  const gattn::weight_view& q = w.get("q_proj.weight", {cfg.q_heads * 2 * D, d});
  std::vector<gattn::weight_segment> parts;
  for (index h = 0; h < cfg.q_heads; ++h) parts.push_back({q, h * 2 * D, D, nullptr});
  parts.push_back({w.get("k_proj.weight", {cfg.kv_heads * D, d}), 0, -1, nullptr});
  parts.push_back({w.get("v_proj.weight", {cfg.kv_heads * D, d}), 0, -1, nullptr});
  for (index h = 0; h < cfg.q_heads; ++h) parts.push_back({q, h * 2 * D + D, D, nullptr});
  const gattn::linear_map m(parts);
  // The engine of the cache-blocked GEMM with bf16 operands (fewer rows take the small GEMM).
  if (numerics == gattn::gemm_numerics::fast)
    st.SetLabel(rows > gattn::linear_map::small_gemm_rows(type) ? gattn::fast_gemm_engine_name<gattn::default_arch>()
                                                                 : "small gemm");
  const auto x = normal(rows * d, 1.0f, 9);
  std::vector<float> y(std::size_t(rows * m.out()));
  for (auto _ : st) {
    m.apply(x.data(), rows, d, y.data(), m.out(), numerics);
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GBps"] = benchmark::Counter(double(m.weight_bytes()) * double(st.iterations()) * 1e-9, benchmark::Counter::kIsRate);
  st.counters["GFLOPS"] = benchmark::Counter(2.0 * double(rows) * double(m.out()) * double(m.in()) * double(st.iterations()) * 1e-9,
                                             benchmark::Counter::kIsRate);
}

int register_layers() {
  for (int t : {1, 2}) {
    const std::string ts = "/t:" + std::to_string(t);
    for (auto type : {gattn::storage_type::f32, gattn::storage_type::bf16, gattn::storage_type::f16, gattn::storage_type::f8_e4m3})
      benchmark::RegisterBenchmark(("proj/gemv/" + std::string(gattn::to_string(type)) + ts).c_str(), bm_projection, type,
                                   index(1), t, gattn::gemm_numerics::exact)
          ->Unit(benchmark::kMicrosecond)->UseRealTime();
    // The same projection for N rows (batched decode, prefill at n:2048): the GEMV at n:1, the
    // small GEMM up to linear_map::small_gemm_rows, the cache-blocked GEMM beyond (n:128 and n:256
    // show the crossover); bf16_fast: bf16 weights with gemm_numerics::fast.
    for (auto type : {gattn::storage_type::f32, gattn::storage_type::bf16, gattn::storage_type::f16, gattn::storage_type::f8_e4m3})
      for (index n : {index(1), index(8), index(32), index(64), index(128), index(256), index(2048)})
        benchmark::RegisterBenchmark(("proj/gemm/" + std::string(gattn::to_string(type)) + "/n:" + std::to_string(n) + ts).c_str(),
                                     bm_projection, type, n, t, gattn::gemm_numerics::exact)
            ->Unit(benchmark::kMicrosecond)->UseRealTime();
    for (index n : {index(32), index(256), index(2048)})
      benchmark::RegisterBenchmark(("proj/gemm/bf16_fast/n:" + std::to_string(n) + ts).c_str(), bm_projection,
                                   gattn::storage_type::bf16, n, t, gattn::gemm_numerics::fast)
          ->Unit(benchmark::kMicrosecond)->UseRealTime();
    benchmark::RegisterBenchmark(("layer/L1D/g1_elementwise_bf16" + ts).c_str(), bm_gqa_layer,
                                 std::string("g1_elementwise_bf16"), true, t)
        ->Unit(benchmark::kMillisecond)->UseRealTime();
    benchmark::RegisterBenchmark(("layer/L1P/g1_elementwise_bf16_fast" + ts).c_str(), bm_gqa_layer,
                                 std::string("g1_elementwise_bf16_fast"), false, t)
        ->Unit(benchmark::kMillisecond)->UseRealTime();
    for (const char* v : {"plain", "g1_elementwise", "g1_headwise", "unfused"}) {
      benchmark::RegisterBenchmark(("layer/L1P/" + std::string(v) + ts).c_str(), bm_gqa_layer, std::string(v), false, t)
          ->Unit(benchmark::kMillisecond)->UseRealTime();
      benchmark::RegisterBenchmark(("layer/L1D/" + std::string(v) + ts).c_str(), bm_gqa_layer, std::string(v), true, t)
          ->Unit(benchmark::kMillisecond)->UseRealTime();
    }
    for (auto form : {gattn::mla_form::absorbed, gattn::mla_form::expanded})
      for (bool gated : {false, true}) {
        const std::string v = std::string(gated ? "g1_elementwise_" : "plain_") + gattn::to_string(form);
        // MLAP: prefill at T = 2048; MLAP64 / MLAP512 locate the absorbed/expanded crossover.
        for (index T : {index(64), index(512), index(2048)})
          benchmark::RegisterBenchmark(("layer/MLAP" + (T == 2048 ? std::string() : std::to_string(T)) + "/" + v + ts).c_str(),
                                       bm_mla_layer, form, gated, false, T, t)
              ->Unit(benchmark::kMillisecond)->UseRealTime();
        benchmark::RegisterBenchmark(("layer/MLAD/" + v + ts).c_str(), bm_mla_layer, form, gated, true, index(1), t)
            ->Unit(benchmark::kMillisecond)->UseRealTime();
      }
  }
  return 0;
}

const int registered = register_layers();

}  // namespace

}  // namespace bench_layer
