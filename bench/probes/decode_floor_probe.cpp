// Measures what bounds a bf16 decode step: read order, prefetch scheme and FMAs over D1's cache.
// The loop of limits/D1_floor (bench_kernel.cpp: D1's bf16 K and V read once, the kernel's FMAs,
// nothing else) runs over caches that rotate through 256 MiB, with these varied one at a time:
//   order     address: each key block's K, then its V, in address order;
//             kernel:  the decode kernel's order (4 keys of one head at a time for K, 8 for V);
//   prefetch  none; per slice (each slice's lines 128 KiB ahead, just before it is read); per call
//             (a microkernel call's address-ordered share at once: cache_stream::prefetch_share);
//             paced (that share spread over the call's steps); own slices (the slices the call
//             itself reads 128 KiB later, at once: cache_stream::prefetch_slices, the kernel's);
//   side by side: in the kernel's order, a call's slices read a step of each in turn, as the
//             microkernels read them, instead of one after another;
//   idle      dependent FMAs between each block's K and V (work that issues no loads, like the
//             softmax), 4 cycles each.
// Prints the median time of each variant over rounds that alternate them.
//   build/bench/gattn_decode_floor_probe [rounds]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gattn/core/memory.hpp"
#include "gattn/simd/convert.hpp"
#include "gattn/simd/simd.hpp"

namespace {

using Arch = gattn::default_arch;
using B = gattn::simd::batch<float, Arch>;
using E = std::uint16_t;  // bf16
constexpr long W = long(B::size);
constexpr long keys = 8192, heads = 8, d = 128, block = 32, row = heads * d, cache = keys * row;
constexpr long ahead = 128 * 1024 / long(sizeof(E));  // prefetch distance, elements
constexpr long line = 64 / long(sizeof(E));
static_assert(d % (2 * W) == 0, "two vectors per step");

enum class order { address, kernel };
enum class prefetch { none, per_slice, per_call, paced, own_slices };
struct variant {
  const char* name;
  order ord;
  prefetch pf;
  int idle;
  bool side_by_side = false;  // kernel order: a call's slices read side by side
};

alignas(64) float q[4 * d];

void prefetch_run(const E* base, long from, long n) {  // elements [from, from + n) of a cache, if they exist
  for (long e = from; e < std::min(from + n, cache); e += line) __builtin_prefetch(base + e, 0, 1);
}

/// The kernel's FMAs on one slice (d values of one key and head): each value meets 4 query rows.
struct accumulators {
  B a[8];
  accumulators() {
    for (B& x : a) x = B(0.0f);
  }
  /// The same FMAs on n slices read side by side, a step of each in turn (how the kernel's
  /// microkernels read their keys).
  void interleaved(const E* const* p, long n, const E* pf_base = nullptr, long pf_from = 0, long pf_n = 0) {
    const long steps = d / (2 * W), per_step = (pf_n + steps - 1) / steps;
    for (long c = 0; c < d; c += 2 * W) {
      if (pf_base) prefetch_run(pf_base, pf_from + c / (2 * W) * per_step, std::min(per_step, pf_n - c / (2 * W) * per_step));
      for (long i = 0; i < n; ++i) {
        const B x = gattn::simd::load_widened<Arch, gattn::storage_type::bf16>(p[i] + c);
        const B y = gattn::simd::load_widened<Arch, gattn::storage_type::bf16>(p[i] + c + W);
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) {
          a[g] = gattn::simd::fma(gattn::simd::load<Arch>(q + g * d + c), x, a[g]);
          a[4 + g] = gattn::simd::fma(gattn::simd::load<Arch>(q + g * d + c + W), y, a[4 + g]);
        }
      }
    }
  }
  void slice(const E* p) {
#pragma GCC unroll 4
    for (long c = 0; c < d; c += 2 * W) {
      const B x = gattn::simd::load_widened<Arch, gattn::storage_type::bf16>(p + c);
      const B y = gattn::simd::load_widened<Arch, gattn::storage_type::bf16>(p + c + W);
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        a[g] = gattn::simd::fma(gattn::simd::load<Arch>(q + g * d + c), x, a[g]);
        a[4 + g] = gattn::simd::fma(gattn::simd::load<Arch>(q + g * d + c + W), y, a[4 + g]);
      }
    }
  }
};


/// One phase (K or V) of a key block j0: `group` keys of one head per call in the kernel's order.
void phase(const variant& v, const E* x, long j0, long group, accumulators& acc) {
  const long b0 = j0 * row;
  if (v.ord == order::address) {
    for (long s = 0; s < block * heads; ++s) {
      if (v.pf == prefetch::per_slice) prefetch_run(x, b0 + s * d + ahead, d);
      acc.slice(x + b0 + s * d);
    }
    return;
  }
  for (long t0 = 0; t0 < block; t0 += group)
    for (long r = 0; r < heads; ++r) {
      if (v.pf == prefetch::per_call) prefetch_run(x, b0 + t0 * row + ahead + r * group * d, group * d);
      if (v.side_by_side) {
        const E* slices[8];
        for (long i = 0; i < group; ++i) slices[i] = x + b0 + (t0 + i) * row + r * d;
        if (v.pf == prefetch::own_slices)  // the slices this call reads `ahead` later, at once
          for (long i = 0; i < group; ++i) prefetch_run(x, b0 + (t0 + i) * row + r * d + ahead, d);
        if (v.pf == prefetch::paced)  // the call's share spread over its steps
          acc.interleaved(slices, group, x, b0 + t0 * row + ahead + r * group * d, group * d);
        else
          acc.interleaved(slices, group);
        continue;
      }
      for (long i = 0; i < group; ++i) {
        const long off = b0 + (t0 + i) * row + r * d;
        if (v.pf == prefetch::per_slice) prefetch_run(x, off + ahead, d);
        acc.slice(x + off);
      }
    }
}

float run(const variant& v, const E* k, const E* val) {
  accumulators acc;
  B chain(1.0f);
  const B mul(0.99999f), add(1e-7f);
  for (long j0 = 0; j0 < keys; j0 += block) {
    phase(v, k, j0, 4, acc);
    for (int i = 0; i < v.idle; ++i) chain = gattn::simd::fma(chain, mul, add);
    phase(v, val, j0, 8, acc);
  }
  B sum = chain;
  for (const B& x : acc.a) sum += x;
  return gattn::simd::hadd(sum);
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7;
  const variant variants[] = {
      {"address order, no prefetch", order::address, prefetch::none, 0},
      {"address order, prefetch per slice", order::address, prefetch::per_slice, 0},
      {"kernel order, no prefetch", order::kernel, prefetch::none, 0},
      {"kernel order, prefetch per slice", order::kernel, prefetch::per_slice, 0},
      {"kernel order, prefetch per call", order::kernel, prefetch::per_call, 0},
      {"address order, no prefetch, idle 600", order::address, prefetch::none, 600},
      {"address order, no prefetch, idle 1500", order::address, prefetch::none, 1500},
      {"address order, prefetch per slice, idle 1500", order::address, prefetch::per_slice, 1500},
      {"kernel order, prefetch per call, idle 1500", order::kernel, prefetch::per_call, 1500},
      {"kernel order side by side, prefetch per call", order::kernel, prefetch::per_call, 0, true},
      {"kernel order side by side, prefetch paced", order::kernel, prefetch::paced, 0, true},
      {"kernel order side by side, prefetch own slices", order::kernel, prefetch::own_slices, 0, true},
  };
  constexpr int n_variants = int(sizeof(variants) / sizeof(variants[0]));
  constexpr long copies = 8;  // 8 × (K + V) of 16 MiB each: 256 MiB, 8× the L3
  gattn::streamed_vector<E> buf(std::size_t(2 * cache * copies), E(0x3f80));
  for (long i = 0; i < 4 * d; ++i) q[i] = 1e-4f * float(i % 7);
  std::vector<std::vector<double>> medians(n_variants);
  long call = 0;
  volatile float sink = 0;
  for (int round = 0; round < rounds; ++round)
    for (int vi = 0; vi < n_variants; ++vi) {
      std::vector<double> ms;
      for (int it = 0; it < 40; ++it) {
        const E* k = buf.data() + 2 * cache * (call++ % copies);
        const auto t0 = std::chrono::steady_clock::now();
        sink = sink + run(variants[vi], k, k + cache);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      std::nth_element(ms.begin(), ms.begin() + long(ms.size() / 2), ms.end());
      medians[std::size_t(vi)].push_back(ms[ms.size() / 2]);
    }
  std::printf("D1 bf16 floor loop, medians of %d rounds (each the median of 40 calls):\n", rounds);
  for (int vi = 0; vi < n_variants; ++vi) {
    std::vector<double>& m = medians[std::size_t(vi)];
    std::sort(m.begin(), m.end());
    std::printf("  %-46s %.3f ms (rounds %.3f to %.3f)\n", variants[vi].name, m[m.size() / 2], m.front(), m.back());
  }
  return 0;
}
