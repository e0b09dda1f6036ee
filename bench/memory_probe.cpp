// The probe behind the README's "Session 15: cold decode pays its memory time in full". Two parts:
//   1. One thread reading a cold 256 MiB buffer (huge pages), GB/s:
//      - demand loads in address order (what limits/read measures);
//      - prefetcht2 alone, in address order (the hardware's stream prefetchers follow it);
//      - prefetcht2 alone, one line per 4 KiB page, pages shuffled: nothing for the hardware to
//        follow, so the rate is what software prefetches alone keep in flight;
//      - demand loads in BD's decode order: each 4 KiB is 4 tokens × 2 KV heads × 512 B (bf16,
//        D 256), and a head's 4 slices are read side by side, one 64-byte line of each in turn (as
//        the score microkernel reads them), or one slice after another.
//   2. The decode kernel on BD's shape (1 query, 2304 keys, 16 query heads, 2 KV heads, D 256, bf16
//      cache, elementwise gate), ns per key and KV head:
//      - cold: a cache not touched since the others (the rotation passes 128 MiB) were read;
//      - L3-warm: the same right after a sweep of demand loads over it (4.5 MiB: in L3, not L2);
//      - again: the same cache a second time;
//      - sweep + kernel: the sweep and the call timed together, sweeping by prefetcht2 or by loads.
// Rounds alternate everything; prints medians.
//   build/bench/gattn_memory_probe [rounds]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "bench_shapes.hpp"
#include "gattn/core/memory.hpp"
#include "gattn/kernel/cache_stream.hpp"
#include "gattn/simd/simd.hpp"
#include "probe_timing.hpp"

namespace {

using Arch = gattn::default_arch;
using B = gattn::simd::batch<float, Arch>;
using clock_type = gattn_bench::probe_clock;
using gattn_bench::median;
using gattn_bench::seconds_since;

/// A cold buffer and the read patterns of part 1.
struct raw_memory {
  static constexpr std::size_t bytes = std::size_t(256) << 20, page = 4096;
  gattn::streamed_vector<float> buf, other;  // `other` is read between samples to evict `buf`
  std::vector<unsigned> pages;               // 4 KiB pages in a shuffled order
  volatile float sink = 0;

  raw_memory() : buf(bytes / 4, 1.0f), other(std::size_t(64) << 18, 1.0f), pages(bytes / page) {
    std::iota(pages.begin(), pages.end(), 0u);
    std::shuffle(pages.begin(), pages.end(), std::mt19937(1));
  }
  const char* base() const { return reinterpret_cast<const char*>(buf.data()); }
  void evict() {
    B s(0.0f);
    for (std::size_t i = 0; i < other.size(); i += 16) s += gattn::simd::load<Arch>(other.data() + i);
    sink = gattn::simd::hadd(s);
  }
  template <class F>
  double rate(F&& read) {
    evict();
    const auto t0 = clock_type::now();
    read();
    return double(bytes) / seconds_since(t0) * 1e-9;
  }
  double demand_address() {
    return rate([&] {
      B s(0.0f);
      for (std::size_t i = 0; i < buf.size(); i += 16) s += gattn::simd::load<Arch>(buf.data() + i);
      sink = gattn::simd::hadd(s);
    });
  }
  double prefetch_address() {
    return rate([&] {
      for (std::size_t i = 0; i < bytes; i += 64) gattn::detail::prefetch_l2(base() + i);
    });
  }
  double prefetch_shuffled() {
    return rate([&] {
      for (std::size_t l = 0; l < page; l += 64)
        for (unsigned p : pages) gattn::detail::prefetch_l2(base() + std::size_t(p) * page + l);
    });
  }
  double demand_bd_order(bool side_by_side) {
    return rate([&] {
      B s(0.0f);
      auto at = [&](std::size_t offset) {
        s += gattn::simd::load<Arch>(reinterpret_cast<const float*>(base() + offset));
      };
      for (std::size_t p = 0; p < bytes; p += page)
        for (std::size_t head = 0; head < 1024; head += 512)
          if (side_by_side) {
            for (std::size_t l = 0; l < 512; l += 64)
              for (std::size_t token = 0; token < page; token += 1024) at(p + token + head + l);
          } else {
            for (std::size_t token = 0; token < page; token += 1024)
              for (std::size_t l = 0; l < 512; l += 64) at(p + token + head + l);
          }
      sink = gattn::simd::hadd(s);
    });
  }
};

/// Part 2: BD's decode on rotating bf16 caches.
struct bd_decode {
  gattn_bench::shape s{"BD", 1, 2304, 16, 2, 256, true};
  gattn_bench::inputs& in = gattn_bench::shared_inputs(s, gattn::storage_type::bf16);
  gattn::index next = 0;
  volatile unsigned sink = 0;

  gattn::index fresh() { return next = (next + 1) % in.caches; }
  void load_sweep(gattn::index c) {
    unsigned sum = 0;
    const auto& k = in.k_bits[std::size_t(c)];
    const auto& v = in.v_bits[std::size_t(c)];
    for (std::size_t i = 0; i < k.size(); i += 32) sum += unsigned(k[i]) + unsigned(v[i]);
    sink = sum;
  }
  void prefetch_sweep(gattn::index c) {
    const auto* k = reinterpret_cast<const char*>(in.k_bits[std::size_t(c)].data());
    const auto* v = reinterpret_cast<const char*>(in.v_bits[std::size_t(c)].data());
    const std::size_t bytes = in.k_bits[std::size_t(c)].size() * 2;
    for (std::size_t i = 0; i < bytes; i += 64) {
      gattn::detail::prefetch_l2(k + i);
      gattn::detail::prefetch_l2(v + i);
    }
  }
  /// ns per key and KV head of before(c) and one kernel call on cache c, timed together.
  template <class F>
  double time(gattn::index c, F&& before) {
    const auto t0 = clock_type::now();
    before(c);
    gattn::fused_sdpa(in.params(c, "g1_elementwise_bf16", 1));
    return seconds_since(t0) * 1e9 / double(s.t_k * s.hkv);
  }
};

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  raw_memory raw;
  std::vector<double> da, pa, ps, db, ds;
  for (int r = 0; r < rounds; ++r) {
    da.push_back(raw.demand_address());
    pa.push_back(raw.prefetch_address());
    ps.push_back(raw.prefetch_shuffled());
    db.push_back(raw.demand_bd_order(true));
    ds.push_back(raw.demand_bd_order(false));
  }
  std::printf("cold 256 MiB, one thread (GB/s, median of %d):\n", rounds);
  std::printf("  demand loads, address order             %5.1f\n", median(da));
  std::printf("  prefetcht2 alone, address order         %5.1f\n", median(pa));
  std::printf("  prefetcht2 alone, pages shuffled        %5.1f\n", median(ps));
  std::printf("  demand loads, BD's order, side by side  %5.1f\n", median(db));
  std::printf("  demand loads, BD's order, one by one    %5.1f\n", median(ds));

  bd_decode bd;
  const auto nothing = [](gattn::index) {};
  std::vector<double> cold, warm, again, pf_sweep, ld_sweep;
  for (int r = 0; r < 20 * rounds; ++r) {
    cold.push_back(bd.time(bd.fresh(), nothing));
    const gattn::index c = bd.fresh();
    bd.load_sweep(c);
    warm.push_back(bd.time(c, nothing));
    again.push_back(bd.time(c, nothing));
    pf_sweep.push_back(bd.time(bd.fresh(), [&](gattn::index i) { bd.prefetch_sweep(i); }));
    ld_sweep.push_back(bd.time(bd.fresh(), [&](gattn::index i) { bd.load_sweep(i); }));
  }
  std::printf("BD's decode, bf16, one thread (ns per key and KV head, median of %d):\n", 20 * rounds);
  std::printf("  cold %.1f, L3-warm %.1f, again %.1f; prefetch sweep + kernel %.1f, load sweep + kernel %.1f\n",
              median(cold), median(warm), median(again), median(pf_sweep), median(ld_sweep));
  return 0;
}
