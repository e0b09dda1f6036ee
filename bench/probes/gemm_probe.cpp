// Measures the small GEMM over bf16 weights from L1, L2 and DRAM against the FMA peak of the run.
// The small GEMM (gemm_packed, as linear_map runs it in a batched decode step) runs on weight sets
// of different sizes, so that the weights come from L1, L2 or DRAM, with the activations packed
// once and hot:
//   l1     x [4, 1024],  W [12, 1024]:   24 KiB of weights and 16 KiB of x, called over and over;
//   w_l2   x [4, 1024],  W [192, 1024]: 384 KiB of weights, streamed from L2;
//   x_l2   x [32, 1024], W [12, 1024]:  128 KiB of x, streamed from L2;
//   bd32   x [32, 2048], W [9216, 2048]: BD32's fused q/gate/k/v projection, 36 MiB (DRAM);
//   oproj  x [32, 4096], W [2048, 4096]: BD32's o_proj, 16 MiB (DRAM);
// and an FMA loop with no memory traffic (limits/fma's) as the peak of the same run.
// Variants alternate in rounds; prints each one's median GFLOP/s and its share of the peak.
//   build/bench/gattn_gemm_probe [rounds]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "gattn/core/memory.hpp"
#include "gattn/linalg/gemm.hpp"
#include "gattn/simd/convert.hpp"
#include "gattn/simd/simd.hpp"
#include "fma_chains.hpp"
#include "probe_timing.hpp"

namespace {

using Arch = gattn::default_arch;
using gattn::index;
using clock_type = gattn_bench::probe_clock;
using gattn_bench::median;

struct problem {
  const char* name;
  index rows, in, out;
  // bf16 [out, in] on huge pages, as a layer's weights sit in the benchmarks (bench_weights.hpp) and
  // in an engine's arena: on 4 KiB pages every 4 KiB weight row is a new page, and BD32's
  // projection measured 0.59-0.68 of the peak there against 0.74-0.78 here.
  gattn::streamed_vector<std::uint16_t> w;
  std::vector<float> xp, y;      // packed x, y [rows, out]
  int calls = 1;                 // per timed sample: about 2 GFLOP

  problem(const char* n, index r, index i, index o) : name(n), rows(r), in(i), out(o) {
    std::mt19937 g(1);
    std::normal_distribution<float> nd;
    std::vector<float> wf(std::size_t(in * out)), x(std::size_t(rows * in));
    for (float& v : wf) v = nd(g);
    for (float& v : x) v = nd(g);
    w.resize(wf.size());
    gattn::simd::narrow_bf16(wf.data(), w.data(), index(wf.size()));
    xp.resize(std::size_t(rows * gattn::detail::gemm_packed_stride(in)) + 16);
    gattn::detail::gemm_pack_x<Arch>(gattn::detail::gemm_order_for(gattn::storage_type::bf16), x.data(), in, rows, in,
                                     xp.data());
    y.resize(std::size_t(rows * out));
    calls = std::max(1, int(2e9 / flops()));
  }
  double flops() const { return 2.0 * double(rows * in * out); }
  double run() {
    const auto t0 = clock_type::now();
    for (int c = 0; c < calls; ++c)
      gattn::detail::gemm_packed<Arch, gattn::storage_type::bf16>(reinterpret_cast<const unsigned char*>(w.data()),
                                                                   in * 2, out, xp.data(), rows, in, y.data(), out);
    return flops() * calls / std::chrono::duration<double>(clock_type::now() - t0).count();
  }
};

/// FLOP/s of fma_chains (limits/fma's loop), about 1 GFLOP.
double fma_peak() {
  constexpr long steps = 1 << 21;
  const auto t0 = clock_type::now();
  volatile float sink = gattn_bench::fma_chains(steps);
  (void)sink;
  return gattn_bench::fma_chain_flops(steps) / std::chrono::duration<double>(clock_type::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 15;
  std::vector<problem> ps;
  ps.emplace_back("l1", 4, 1024, 12);
  ps.emplace_back("w_l2", 4, 1024, 192);
  ps.emplace_back("x_l2", 32, 1024, 12);
  ps.emplace_back("bd32", 32, 2048, 9216);
  ps.emplace_back("oproj", 32, 4096, 2048);
  std::vector<std::vector<double>> rate(ps.size());
  std::vector<double> peak;
  for (int r = 0; r < rounds; ++r) {
    peak.push_back(fma_peak());
    for (std::size_t i = 0; i < ps.size(); ++i) {
      const std::size_t j = (i + std::size_t(r)) % ps.size();  // each round starts one later
      rate[j].push_back(ps[j].run());
    }
  }
  const double pk = median(peak);
  std::printf("fma peak %.1f GFLOP/s (median of %d)\n", pk * 1e-9, rounds);
  for (std::size_t i = 0; i < ps.size(); ++i)
    std::printf("%-6s x [%ld, %ld] W [%ld, %ld] bf16 (%.0f KiB): %.1f GFLOP/s = %.2f of peak\n", ps[i].name,
                long(ps[i].rows), long(ps[i].in), long(ps[i].out), long(ps[i].in),
                double(ps[i].w.size()) * 2.0 / 1024.0, median(rate[i]) * 1e-9, median(rate[i]) / pk);
  return 0;
}
