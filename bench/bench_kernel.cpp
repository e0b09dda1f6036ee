// Benchmarks of the fused SDPA-then-gate kernel (docs/performance.md contract): kernel/<shape>/<variant>/t:<n>
// for P1, P2, D1, M1 and the S-sweep, variants plain / g1_elementwise / g1_headwise / unfused (the
// tuned unfused Eigen baseline with an elementwise sigmoid gate), and the machine limits
// limits/gemm/t:<n> (Eigen GEMM), limits/read/t:<n> (read bandwidth over 2 GiB), limits/update/t:<n>
// (read-modify-write in place over 2 GiB, bytes read + written) and
// limits/fma/t:<n> (the FMA peak of register-only chains), and limits/D1_floor/{f32,bf16}/t:<n> and
// limits/D1hot_floor/{f32,bf16}/t:1 (D1's cache reads and FMAs alone, cold and hot: bm_decode_floor).
// M1 (MLA absorbed decode): one latent KV head of d_qk = 576 (512 + 64 rope) per token, v = the
// first 512 channels of the same rows (aliasing), 16 query heads. Its `unfused` variant is the
// expanded, non-absorbed decode: per call, k_nope and v of every head are rebuilt from the latent
// cache with W_kvb (random, H·(128 + 128) × 512; Eigen GEMM, Eigen threads = t), k = [k_nope,
// shared k_rope] (192 channels), then the unfused baseline per head (d_qk 192, d_v 128) and the
// elementwise gate. GBps of every decode variant counts the bytes of the cache itself (K + V for
// GQA, the latent rows once for M1), so the variants compare at equal work.
// GQA decode shapes also run g1_elementwise_head_major: the same caches viewed as [H_kv, T, D].
// Decode shapes rotate through independent caches totalling >= 128 MiB (4x the L3); D1hot (D1's
// heads over 256 keys, one cache reused, hot in L2) measures the decode kernel's work without DRAM.
// D1 also runs g1_elementwise_bf16 and g1_elementwise_f16, M1 g1_elementwise_bf16 and
// g1_elementwise_bf16_fast (docs/spec.md §10 fast numerics: vdpbf16ps where the CPU has it), P1
// g1_elementwise_bf16, P1 g1_elementwise_fast and g1_elementwise_bf16_fast (the prefill's Q·Kᵀ and
// P·V on bf16 operands; the label names the engine): caches stored as bf16/f16 (the fp32 values rounded), read through
// sdpa_params::kv_type/k_bits/v_bits; decode GBps counts the 2-byte values actually read, and
// twice as many caches rotate.
// D1 (fp32, bf16) also runs with the decode prefetch forced on and off (`/prefetch:always|never`),
// M1 fast with the bf16 dot products forced (`/dot:always|never`): core/cpu.hpp's vendor choices.
#include <benchmark/benchmark.h>

#include <Eigen/Dense>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "bench_shapes.hpp"
#include "fma_chains.hpp"
#include "gattn/core/cpu.hpp"
#include "gattn/core/memory.hpp"
#include "gattn/kernel/kernel.hpp"

// One namespace per file: gattn_bench is built as one unity translation unit.
namespace bench_kernel {

namespace {

using gattn::index;
using gattn_bench::fill;
using gattn_bench::head_major;
using gattn_bench::inputs;
using gattn_bench::k_shapes;
using gattn_bench::shape;
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using StridedMap = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
using StridedMapMut = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;

/// The tuned unfused Eigen baseline (docs/performance.md): per query head S.noalias() = Q·Kᵀ, the scale
/// folded into exp, the causal mask by a row loop, O = P·V, then an elementwise sigmoid gate.
/// Parallel over heads with OpenMP (Eigen itself runs serially inside the region). Scratch S is
/// allocated once per thread outside the timed loop.
struct unfused {
  std::vector<RowMat> s_buf;
  explicit unfused(const shape& s, int threads) {
    for (int t = 0; t < threads; ++t) s_buf.emplace_back(s.t_q, s.t_k);
  }
  void run(const inputs& in, index c, int threads) {
    const shape& s = in.s;
    const index g = s.hq / s.hkv;
    const float scale = 1.0f / std::sqrt(float(s.d));
    const index off = s.t_k - s.t_q;
    const float* kk = in.k[std::size_t(c)].data();
    const float* vv = in.v[std::size_t(c)].data();
    float* out = const_cast<float*>(in.out.data());
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (index h = 0; h < s.hq; ++h) {
#ifdef _OPENMP
      RowMat& S = s_buf[std::size_t(omp_get_thread_num())];
#else
      RowMat& S = s_buf[0];
#endif
      const index r = h / g;
      StridedMap Q(in.q.data() + h * s.d, s.t_q, s.d, Eigen::OuterStride<>(s.hq * s.d));
      StridedMap K(kk + r * s.d, s.t_k, s.d, Eigen::OuterStride<>(s.hkv * s.d));
      StridedMap V(vv + r * s.d, s.t_k, s.d, Eigen::OuterStride<>(s.hkv * s.d));
      StridedMapMut O(out + h * s.d, s.t_q, s.d, Eigen::OuterStride<>(s.hq * s.d));
      S.noalias() = Q * K.transpose();
      for (index i = 0; i < s.t_q; ++i) {
        const index vis = std::min(s.t_k, i + off + 1);
        auto row = S.row(i);
        for (index j = vis; j < s.t_k; ++j) row(j) = 0.0f;
        const float m = row.head(vis).maxCoeff();
        row.head(vis) = ((row.head(vis).array() - m) * scale).exp();
        row.head(vis) /= row.head(vis).sum();
      }
      O.noalias() = S * V;
      StridedMap U(in.u_elem.data() + h * s.d, s.t_q, s.d, Eigen::OuterStride<>(s.hq * s.d));
      O.array() *= (1.0f + (-U.array()).exp()).inverse();
    }
  }
};

/// The expanded (non-absorbed) MLA decode for M1: rebuild k_nope and v of every head from the
/// latent cache with W_kvb, then the unfused per-head baseline with the elementwise gate.
struct unfused_mla {
  static constexpr index d_nope = 128, d_rope = 64, d_vh = 128;
  index d_c;
  RowMat w_k, w_v, kn, vv, q;  // W_kb [H·128, d_c], W_vb [H·128, d_c]; rebuilt K/V [T, H·128]; q [H, 192]
  std::vector<RowMat> s_buf;
  std::vector<float> out, u;
  unfused_mla(const shape& s, int threads) : d_c(s.d - d_rope) {
    w_k = RowMat::Random(s.hq * d_nope, d_c) * 0.05f;
    w_v = RowMat::Random(s.hq * d_vh, d_c) * 0.05f;
    kn.resize(s.t_k, s.hq * d_nope);
    vv.resize(s.t_k, s.hq * d_vh);
    q = RowMat::Random(s.hq, d_nope + d_rope);
    for (int t = 0; t < threads; ++t) s_buf.emplace_back(1, s.t_k);
    out.resize(std::size_t(s.hq * d_vh));
    u.resize(std::size_t(s.hq * d_vh));
    fill(u, 4);
  }
  void run(const inputs& in, index c, int threads) {
    const shape& s = in.s;
    const float* lat = in.k[std::size_t(c)].data();
    StridedMap C(lat, s.t_k, d_c, Eigen::OuterStride<>(s.d));
    StridedMap R(lat + d_c, s.t_k, d_rope, Eigen::OuterStride<>(s.d));
    Eigen::setNbThreads(threads);
    kn.noalias() = C * w_k.transpose();
    vv.noalias() = C * w_v.transpose();
    Eigen::setNbThreads(1);
    const float scale = 1.0f / std::sqrt(float(d_nope + d_rope));
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (index h = 0; h < s.hq; ++h) {
#ifdef _OPENMP
      RowMat& S = s_buf[std::size_t(omp_get_thread_num())];
#else
      RowMat& S = s_buf[0];
#endif
      StridedMap K(kn.data() + h * d_nope, s.t_k, d_nope, Eigen::OuterStride<>(s.hq * d_nope));
      StridedMap V(vv.data() + h * d_vh, s.t_k, d_vh, Eigen::OuterStride<>(s.hq * d_vh));
      S.noalias() = q.row(h).head(d_nope) * K.transpose();
      S.noalias() += q.row(h).tail(d_rope) * R.transpose();
      auto row = S.row(0);
      const float m = row.maxCoeff();
      row = ((row.array() - m) * scale).exp();
      row /= row.sum();
      Eigen::Map<Eigen::RowVectorXf> O(out.data() + h * d_vh, d_vh);
      O.noalias() = row * V;
      Eigen::Map<const Eigen::RowVectorXf> U(u.data() + h * d_vh, d_vh);
      O.array() *= (1.0f + (-U.array()).exp()).inverse();
    }
  }
};

/// Decode: bytes of the cache as stored (K and V; the latent rows once for MLA; 2 per value for
/// bf16/f16, the bytes actually read). Prefill: FLOPs.
double work(const shape& s, gattn::storage_type kv) {
  return s.decode ? s.cache_bytes(gattn_bench::value_bytes(kv))
                  : 4.0 * double(s.t_q) * double(s.t_k) * double(s.d) * double(s.hq) / 2.0;
}

void bm_kernel(benchmark::State& st, shape s, std::string variant, int threads) {
  Eigen::setNbThreads(1);
  const gattn::storage_type kv = gattn_bench::variant_storage(variant);
  inputs& in = gattn_bench::shared_inputs(s, kv);  // the largest inputs are reused across benchmarks
  std::unique_ptr<unfused> base;
  std::unique_ptr<unfused_mla> base_mla;
  if (variant == "unfused") {
    if (s.mla) base_mla = std::make_unique<unfused_mla>(s, threads);
    else base = std::make_unique<unfused>(s, threads);
  }
  // `_fast` also runs the prefill's products on bf16 operands (sdpa_params::products); the label
  // names the engine (avx512_bf16 = vdpbf16ps, fma = the portable one).
  const bool fast = gattn_bench::variant_numerics(variant) == gattn::kv_numerics::fast;
  auto params = [&](index cache) {
    gattn::sdpa_params p = in.params(cache, variant, threads);
    if (fast) p.products = gattn::numerics::fast;
    return p;
  };
  if (fast && !s.decode) st.SetLabel(gattn::detail::to_string(gattn::detail::prefill_engine<gattn::default_arch>(params(0))));
  index c = 0;
  for (auto _ : st) {
    if (base) base->run(in, c, threads);
    else if (base_mla) base_mla->run(in, c, threads);
    else gattn::fused_sdpa(params(c));
    benchmark::DoNotOptimize(in.out.data());
    benchmark::ClobberMemory();
    c = (c + 1) % in.caches;
  }
  const double w = work(s, kv);
  if (s.decode) st.counters["GBps"] = benchmark::Counter(w / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  else st.counters["GFLOPS"] = benchmark::Counter(w / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

/// bm_kernel with a vendor-dependent kernel choice (core/cpu.hpp) forced one way: the evidence
/// behind `automatic`. set(choice) for the run, back to automatic after.
void bm_kernel_forced(benchmark::State& st, shape s, std::string variant, int threads, void (*set)(gattn::kernel_choice),
                      gattn::kernel_choice choice) {
  set(choice);
  bm_kernel(st, s, std::move(variant), threads);
  set(gattn::kernel_choice::automatic);
}

void bm_gemm(benchmark::State& st, int threads) {
  const index n = 4096;
  Eigen::setNbThreads(threads);
  RowMat a = RowMat::Random(n, n), b = RowMat::Random(n, n), c(n, n);
  for (auto _ : st) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
  }
  Eigen::setNbThreads(1);
  st.counters["GFLOPS"] = benchmark::Counter(2.0 * double(n) * n * n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

/// The FMA peak: fma_chains on every thread (16 independent register chains, no memory traffic).
/// The ceiling for compute-bound shapes (M1).
void bm_fma(benchmark::State& st, int threads) {
  constexpr long steps = 1 << 22;
  for (auto _ : st) {
    float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    total += gattn_bench::fma_chains(steps);
    benchmark::DoNotOptimize(total);
  }
  st.counters["GFLOPS"] =
      benchmark::Counter(gattn_bench::fma_chain_flops(steps) * threads / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void bm_read(benchmark::State& st, int threads) {
  const std::size_t n = std::size_t(2) << 30 >> 2;  // 2 GiB of floats
  // Huge-page backed like the decode caches, so the ratio compares like with like.
  static gattn::streamed_vector<float> buf;
  if (buf.size() != n) {
    buf.assign(n, 1.0f);
  }
  for (auto _ : st) {
    float total = 0;
    using B = gattn::simd::batch<float, gattn::default_arch>;
    constexpr std::size_t W = B::size;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
#ifdef _OPENMP
      const std::size_t nt = std::size_t(omp_get_num_threads()), id = std::size_t(omp_get_thread_num());
#else
      const std::size_t nt = 1, id = 0;
#endif
      const std::size_t chunk = (n / nt) / (4 * W) * (4 * W);
      const float* p = buf.data() + id * chunk;
      B a0(0.0f), a1(0.0f), a2(0.0f), a3(0.0f);
      for (std::size_t i = 0; i < chunk; i += 4 * W) {
        a0 += gattn::simd::load<gattn::default_arch>(p + i);
        a1 += gattn::simd::load<gattn::default_arch>(p + i + W);
        a2 += gattn::simd::load<gattn::default_arch>(p + i + 2 * W);
        a3 += gattn::simd::load<gattn::default_arch>(p + i + 3 * W);
      }
      total += gattn::simd::hadd((a0 + a1) + (a2 + a3));
    }
    benchmark::DoNotOptimize(total);
  }
  st.counters["GBps"] = benchmark::Counter(double(n) * 4.0 / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

/// Read-modify-write bandwidth: every float of 2 GiB read, scaled and written back in place, as a
/// decode step of the delta-rule layers treats its states (decay and rank-1 update, one pass).
/// GBps counts the bytes read plus the bytes written: the limit for delta/BD32's state traffic,
/// which limits/read (reads only) overstates, since written lines go back to memory as well.
void bm_update(benchmark::State& st, int threads) {
  const std::size_t n = std::size_t(2) << 30 >> 2;
  static gattn::streamed_vector<float> buf;
  if (buf.size() != n) buf.assign(n, 1.0f);
  for (auto _ : st) {
#pragma omp parallel num_threads(threads)
    {
#ifdef _OPENMP
      const std::size_t nt = std::size_t(omp_get_num_threads()), id = std::size_t(omp_get_thread_num());
#else
      const std::size_t nt = 1, id = 0;
#endif
      using B = gattn::simd::batch<float, gattn::default_arch>;
      constexpr std::size_t W = B::size;
      const std::size_t chunk = (n / nt) / (4 * W) * (4 * W);
      float* p = buf.data() + id * chunk;
      const B decay(0.999f), add(1e-3f);
      for (std::size_t i = 0; i < chunk; i += 4 * W)
        for (std::size_t j = 0; j < 4 * W; j += W)
          gattn::simd::store(p + i + j, gattn::simd::fma(gattn::simd::load<gattn::default_arch>(p + i + j), decay, add));
    }
    benchmark::DoNotOptimize(buf.data());
    benchmark::ClobberMemory();
  }
  st.counters["GBps"] = benchmark::Counter(double(n) * 8.0 / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

/// The floor under any exact decode kernel of `s` (a GQA decode shape) with its cache stored as S:
/// the K and V caches read once in address order (key block by key block, K then V, as the kernel
/// does; no software prefetch, so the hardware prefetchers see the best order there is) with the
/// kernel's own FMAs (G·d per key and head for q·k, G·d_v for p·v, the values widened in
/// registers) and nothing else: no reductions, no softmax, no gate. Caches rotate like the
/// kernel's (>= 128 MiB in all) unless the shape is hot. Its bf16/fp32 ratio bounds what the
/// kernel's can reach on this machine; its time against the hot one says how far memory and
/// compute overlap here.
template <gattn::storage_type S>
void bm_decode_floor(benchmark::State& st, const shape& s, int threads) {
  using E = gattn::storage_element_t<S>;
  using Arch = gattn::default_arch;
  using B = gattn::simd::batch<float, Arch>;
  constexpr index W = index(B::size);
  const index g = s.hq / s.hkv, d = s.d, keys = s.t_k, heads = s.hkv, bc = 32;
  if (g != 4 || d % (2 * W) != 0 || d > 512 || keys % (bc * threads) != 0) {
    st.SkipWithError("the decode floor is written for G = 4, d <= 512 a multiple of two vectors, 32 keys per thread");
    return;
  }
  const std::size_t one = std::size_t(keys * heads * d);  // elements of K (or V) of one cache
  const double bytes = 2.0 * double(one) * double(sizeof(E));
  const std::size_t copies =
      s.hot ? 1 : std::max<std::size_t>(2, std::size_t(std::ceil(2.0 * 64.0 * 1024 * 1024 / bytes)));
  static gattn::streamed_vector<E> bufs[2];  // cold and hot, kept across the interleaved runs
  gattn::streamed_vector<E>& buf = bufs[s.hot ? 1 : 0];
  if (buf.size() != 2 * one * copies) buf.assign(2 * one * copies, E(S == gattn::storage_type::f32 ? 1 : 0x3f80));
  alignas(64) float q[4 * 512];
  for (index i = 0; i < 4 * d; ++i) q[i] = 1e-4f * float(i % 7);
  std::size_t call = 0;
  for (auto _ : st) {
    const E* k = buf.data() + 2 * one * (call++ % copies);
    const E* v = k + one;
    float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
#ifdef _OPENMP
      const index nt = omp_get_num_threads(), id = omp_get_thread_num();
#else
      const index nt = 1, id = 0;
#endif
      const index row = heads * d, span = keys / nt;
      B acc[8];
      for (B& a : acc) a = B(0.0f);
      const B p0(1e-3f), p1(2e-3f), p2(3e-3f), p3(4e-3f);
      for (index j0 = id * span; j0 < (id + 1) * span; j0 += bc) {
        const E* kb = k + j0 * row;
        for (index c = 0; c < bc * row; c += 2 * W) {  // q·k: each value meets the G = 4 query rows
          const index ch = c % d;
          const B x = gattn::simd::load_widened<Arch, S>(kb + c), y = gattn::simd::load_widened<Arch, S>(kb + c + W);
          acc[0] = gattn::simd::fma(gattn::simd::load<Arch>(q + ch), x, acc[0]);
          acc[1] = gattn::simd::fma(gattn::simd::load<Arch>(q + d + ch), x, acc[1]);
          acc[2] = gattn::simd::fma(gattn::simd::load<Arch>(q + 2 * d + ch), x, acc[2]);
          acc[3] = gattn::simd::fma(gattn::simd::load<Arch>(q + 3 * d + ch), x, acc[3]);
          acc[4] = gattn::simd::fma(gattn::simd::load<Arch>(q + ch + W), y, acc[4]);
          acc[5] = gattn::simd::fma(gattn::simd::load<Arch>(q + d + ch + W), y, acc[5]);
          acc[6] = gattn::simd::fma(gattn::simd::load<Arch>(q + 2 * d + ch + W), y, acc[6]);
          acc[7] = gattn::simd::fma(gattn::simd::load<Arch>(q + 3 * d + ch + W), y, acc[7]);
        }
        const E* vb = v + j0 * row;
        for (index c = 0; c < bc * row; c += 2 * W) {  // p·v: each value meets the 4 probabilities
          const B x = gattn::simd::load_widened<Arch, S>(vb + c), y = gattn::simd::load_widened<Arch, S>(vb + c + W);
          acc[0] = gattn::simd::fma(p0, x, acc[0]);
          acc[1] = gattn::simd::fma(p1, x, acc[1]);
          acc[2] = gattn::simd::fma(p2, x, acc[2]);
          acc[3] = gattn::simd::fma(p3, x, acc[3]);
          acc[4] = gattn::simd::fma(p0, y, acc[4]);
          acc[5] = gattn::simd::fma(p1, y, acc[5]);
          acc[6] = gattn::simd::fma(p2, y, acc[6]);
          acc[7] = gattn::simd::fma(p3, y, acc[7]);
        }
      }
      B sum(0.0f);
      for (const B& a : acc) sum += a;
      total += gattn::simd::hadd(sum);
    }
    benchmark::DoNotOptimize(total);
  }
  st.counters["GBps"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["ns_per_key_head"] = benchmark::Counter(double(keys * heads) * 1e-9,
                                                      benchmark::Counter::kIsIterationInvariantRate |
                                                          benchmark::Counter::kInvert);
}

int register_all() {
  benchmark::AddCustomContext("gattn_arch", gattn::default_arch_name());
  benchmark::AddCustomContext("gattn_simd_width", std::to_string(gattn::simd::width<gattn::default_arch>));
  for (int t : {1, 2}) {
    benchmark::RegisterBenchmark(("limits/gemm/t:" + std::to_string(t)).c_str(), bm_gemm, t)
        ->UseRealTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("limits/read/t:" + std::to_string(t)).c_str(), bm_read, t)
        ->UseRealTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("limits/fma/t:" + std::to_string(t)).c_str(), bm_fma, t)
        ->UseRealTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("limits/update/t:" + std::to_string(t)).c_str(), bm_update, t)
        ->UseRealTime()->Unit(benchmark::kMillisecond);
  }
  for (const shape& s : k_shapes)
    for (const char* variant : {"plain", "g1_elementwise", "g1_headwise", "unfused"})
      for (int t : {1, 2}) {
        const std::string name = std::string("kernel/") + s.name + "/" + variant + "/t:" + std::to_string(t);
        benchmark::RegisterBenchmark(name.c_str(), bm_kernel, s, std::string(variant), t)
            ->UseRealTime()->Unit(benchmark::kMillisecond);
      }
  // Low-precision caches (docs/spec.md §10; exact numerics: K/V widened to fp32 in registers, fast: bf16
  // dot products where the CPU has them): D1 in bf16 and f16, M1 (V inside K, one latent head) in
  // bf16 exact and fast, P1 reading a bf16 cache; fp32's rounded values, same gate.
  for (const char* name : {"D1/g1_elementwise_bf16", "D1/g1_elementwise_f16", "M1/g1_elementwise_bf16",
                           "M1/g1_elementwise_bf16_fast", "P1/g1_elementwise_bf16", "P1/g1_elementwise_fast",
                           "P1/g1_elementwise_bf16_fast"})
    for (int t : {1, 2}) {
      const std::string full(name);
      const shape& s = *gattn_bench::find_shape(full.substr(0, full.find('/')).c_str());
      benchmark::RegisterBenchmark(("kernel/" + full + "/t:" + std::to_string(t)).c_str(), bm_kernel, s,
                                   full.substr(full.find('/') + 1), t)
          ->UseRealTime()->Unit(benchmark::kMillisecond);
    }
  // D1's kernel with its cache hot in L2 (k_d1_hot): the compute half of D1's time, in the same run.
  for (const char* variant : {"g1_elementwise", "g1_elementwise_bf16"})
    benchmark::RegisterBenchmark((std::string("kernel/D1hot/") + variant + "/t:1").c_str(), bm_kernel,
                                 gattn_bench::k_d1_hot, std::string(variant), 1)
        ->UseRealTime()->Unit(benchmark::kMicrosecond);
  // The floor under D1's exact kernel, cold and hot, in fp32 and bf16 (bm_decode_floor).
  for (const shape* s : {gattn_bench::find_shape("D1"), &gattn_bench::k_d1_hot})
    for (int t : {1, 2}) {
      if (s->hot && t != 1) continue;
      const std::string at = std::string("limits/") + (s->hot ? "D1hot" : "D1") + "_floor/";
      const std::string th = "/t:" + std::to_string(t);
      benchmark::RegisterBenchmark((at + "f32" + th).c_str(), bm_decode_floor<gattn::storage_type::f32>, *s, t)
          ->UseRealTime()->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark((at + "bf16" + th).c_str(), bm_decode_floor<gattn::storage_type::bf16>, *s, t)
          ->UseRealTime()->Unit(benchmark::kMicrosecond);
    }
  // The vendor-dependent choices forced each way (docs/performance.md: they measured opposite on AMD and Intel).
  const std::pair<const char*, gattn::kernel_choice> choices[] = {{"always", gattn::kernel_choice::always},
                                                                  {"never", gattn::kernel_choice::never}};
  for (const char* name : {"D1/g1_elementwise", "D1/g1_elementwise_bf16", "M1/g1_elementwise_bf16_fast"})
    for (const auto& [label, choice] : choices)
      for (int t : {1, 2}) {
        const std::string full(name);
        const bool fast = full.find("_fast") != std::string::npos;
        const shape& s = *gattn_bench::find_shape(full.substr(0, full.find('/')).c_str());
        const std::string bm = "kernel/" + full + (fast ? "/dot:" : "/prefetch:") + label + "/t:" + std::to_string(t);
        benchmark::RegisterBenchmark(bm.c_str(), bm_kernel_forced, s, full.substr(full.find('/') + 1), t,
                                     fast ? &gattn::set_bf16_dot_products : &gattn::set_decode_prefetch, choice)
            ->UseRealTime()->Unit(benchmark::kMillisecond);
      }
  for (const shape& s : k_shapes)
    if (s.decode && !s.mla)
      for (int t : {1, 2}) {
        const std::string name = std::string("kernel/") + s.name + "/" + head_major + "/t:" + std::to_string(t);
        benchmark::RegisterBenchmark(name.c_str(), bm_kernel, s, head_major, t)->UseRealTime()->Unit(benchmark::kMillisecond);
      }
  return 0;
}
const int registered = register_all();

}  // namespace

}  // namespace bench_kernel
