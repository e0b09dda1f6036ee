// Tests of gattn/kernel/fused_sdpa.hpp: every arch the build targets against the double oracle
// over the docs/testing.md sweep (one oracle per problem, reused by every arch), plus the exact and
// robustness cases (no-key rows, huge/very negative logits, determinism, concurrency, errors).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "support/kernel_sweep.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_fused_sdpa {

namespace {

using gattn::index;
using kernel_test::problem;

/// Runs `pr` on every arch and checks the tolerance rule of docs/testing.md:
///   max|fast - oracle| <= 2·e_base + 2·ulp32(max|oracle|)  and  |fast - oracle| <= 1e-5 + 1e-5·|oracle|.
void check_all_archs(problem& pr, const std::vector<double>& ref, double e_base, const std::vector<int>& thread_counts,
                     const std::string& what) {
  kernel_test::for_each_arch([&](auto arch) {
    using A = decltype(arch);
    for (int th : thread_counts) {
      std::vector<float> out(pr.out_size(), -7.0f);
      auto p = pr.params(out.data());
      p.threads = th;
      gattn::fused_sdpa<A>(p);
      const auto r = kernel_test::compare(out, pr.ots, ref, pr.t_q, pr.hq, pr.dv);
      const double tol = 2 * e_base + 2 * kernel_test::ulp32(r.max_ref);
      EXPECT_LE(r.max_err, tol) << what << " arch=" << gattn::arch_name<A>() << " threads=" << th
                                << " e_base=" << e_base;
      EXPECT_LE(r.worst_rel, 1.0) << what << " arch=" << gattn::arch_name<A>() << " threads=" << th
                                  << " max_err=" << r.max_err;
    }
  });
}

void run_case(problem pr, unsigned seed, const std::vector<int>& threads = {1, 2}) {
  pr.fill(seed);
  const auto ref = pr.oracle();
  // e_base: the largest error of the natural float32 roundings of the naive algorithm (scale on q
  // or on the dot product; divide by l early or late, as the kernel does). Rows differ in which
  // variant is lucky, so the max keeps the rule from failing by chance.
  double e_base = 0;
  for (bool pre : {true, false})
    for (bool late : {true, false}) e_base = std::max(e_base, kernel_test::max_abs_diff(pr.naive32(pre, late), ref));
  std::ostringstream what;
  what << "t_q=" << pr.t_q << " t_k=" << pr.t_k << " hq=" << pr.hq << " hkv=" << pr.hkv << " dqk=" << pr.dqk
       << " dv=" << pr.dv << " causal=" << pr.causal;
  check_all_archs(pr, ref, e_base, threads, what.str());
}

problem make(index tq, index tk, index hq, index hkv, index dqk, index dv, bool causal = true) {
  problem p;
  p.t_q = tq; p.t_k = tk; p.hq = hq; p.hkv = hkv; p.dqk = dqk; p.dv = dv; p.causal = causal;
  return p;
}

const std::vector<index> k_lengths = {1, 2, 3, 11, 17, 63, 64, 65, 113, 127, 128, 129, 255, 257, 1023, 1025};
const std::vector<index> k_dims = {8, 16, 24, 40, 59, 64, 80, 96, 111, 128, 256};
const std::vector<std::pair<index, index>> k_heads = {{1, 1}, {6, 1}, {6, 2}, {16, 4}, {27, 1}, {28, 4}, {48, 2}, {65, 5}};

// The archs every kernel test runs: the default arch first, gattn's scalar arch among them, none
// twice (and the list is logged with the sweep size).
TEST(KernelArch, InstantiatesTheDefaultArchFirstAndScalar) {
  std::vector<std::string> archs;
  kernel_test::for_each_arch([&](auto arch) { archs.push_back(gattn::arch_name<decltype(arch)>()); });
  std::string names;
  for (const std::string& a : archs) names += a + " ";
  std::printf("[ kernel ] default arch %s; instantiated: %s; sweep: %s\n", gattn::default_arch_name().c_str(),
              names.c_str(), kernel_test::to_string(kernel_test::sweep()));
  RecordProperty("kernel_archs", names);
  RecordProperty("kernel_sweep", kernel_test::to_string(kernel_test::sweep()));
  ASSERT_FALSE(archs.empty());
  EXPECT_EQ(archs.front(), gattn::default_arch_name());
  EXPECT_EQ(std::count(archs.begin(), archs.end(), "scalar"), 1) << names;
  EXPECT_EQ(std::set<std::string>(archs.begin(), archs.end()).size(), archs.size()) << "an arch twice: " << names;
}

// T_q x T_k over the whole length list (T_q != T_k included: decode with a cache, chunked
// prefill), capped by oracle cost: heads shrink for long pairs.
TEST(KernelSweep, Lengths) {
  const auto mode = kernel_test::sweep();
  unsigned seed = 1;
  for (std::size_t a = 0; a < k_lengths.size(); ++a)
    for (std::size_t b = 0; b < k_lengths.size(); ++b) {
      if (mode == kernel_test::sweep_size::reduced && (a + b) % 3 != 0) continue;
      if (mode == kernel_test::sweep_size::small && (a + b) % 7 != 0) continue;
      const index tq = k_lengths[a], tk = k_lengths[b];
      const double cost = double(tq) * double(tk);
      if (mode != kernel_test::sweep_size::full && cost > 3e5) continue;
      if (cost > 1.1e6 && tq > 1) {
        // (the longest pairs: one head, short d; still every tile boundary)
        if (tq != tk && std::max(tq, tk) > 1023 && std::min(tq, tk) > 257) continue;
        run_case(make(tq, tk, 1, 1, 16, 16), seed++, {2});
        continue;
      }
      const bool big = cost > 1.5e5;
      run_case(make(tq, tk, big ? 2 : 6, big ? 1 : 2, big ? 24 : 40, big ? 24 : 40), seed++, {1, 2});
    }
}

// Every head dim (odd ones exercise the masked channel tails) at tile-boundary lengths.
TEST(KernelSweep, HeadDims) {
  const auto mode = kernel_test::sweep();
  std::vector<std::pair<index, index>> tt = {{1, 129}, {17, 17}, {65, 65}, {3, 257}, {129, 129}};
  if (mode == kernel_test::sweep_size::small) tt = {{1, 65}, {17, 17}};
  if (mode == kernel_test::sweep_size::reduced) tt = {{1, 129}, {65, 65}, {3, 257}};
  unsigned seed = 100;
  for (index d : k_dims)
    for (auto [tq, tk] : tt) run_case(make(tq, tk, 6, 2, d, d), seed++, {1, 2});
}

// Every (H_q, H_kv) grouping (GQA stacking across 1..65 heads, tails of the stacked rows).
TEST(KernelSweep, HeadGroups) {
  const auto mode = kernel_test::sweep();
  std::vector<std::pair<index, index>> tt = {{1, 1025}, {2, 129}, {63, 63}, {129, 129}};
  if (mode != kernel_test::sweep_size::full) tt = {{1, 257}, {63, 63}};
  unsigned seed = 200;
  for (auto [hq, hkv] : k_heads)
    for (auto [tq, tk] : tt) {
      if (mode == kernel_test::sweep_size::small && hq > 28) continue;
      run_case(make(tq, tk, hq, hkv, 24, 24), seed++, {1, 2});
    }
}

// MLA shapes: expanded (192, 128) and absorbed decode (576, 512), 16 heads on one latent head,
// with v aliasing the first d_v channels of k (the latent cache).
TEST(KernelSweep, MlaPairs) {
  const auto mode = kernel_test::sweep();
  run_case(make(65, 65, 4, 4, 192, 128), 300, {1, 2});
  run_case(make(1, mode == kernel_test::sweep_size::small ? 129 : 1025, 16, 1, 576, 512), 301, {1, 2});
  problem alias = make(3, 300, 16, 1, 576, 512);
  alias.v_aliases_k = true;
  run_case(alias, 302, {1, 2});
  if (mode == kernel_test::sweep_size::full) run_case(make(2, 2049, 16, 1, 576, 512), 303, {1, 2});
}

TEST(KernelSweep, NonCausalAndStrided) {
  run_case(make(65, 129, 6, 2, 40, 40, false), 400);
  run_case(make(129, 17, 6, 2, 59, 59, false), 401);
  problem s = make(33, 70, 6, 2, 40, 24);  // d_qk != d_v, padded token strides everywhere
  s.q_pad = 5; s.k_pad = 3; s.v_pad = 7; s.out_pad = 11;
  run_case(s, 402);
  problem dec = make(1, 5000, 8, 2, 64, 64);  // split-KV decode with strided views
  dec.q_pad = 1; dec.k_pad = 16; dec.v_pad = 2; dec.out_pad = 3;
  run_case(dec, 403, {1, 2, 3});
}

// Head-major K/V views ([H_kv, T, D] with spare capacity, Hugging Face's cache layout) on every
// path: decode (one split and split-KV), the interleaved few-row units, and prefill tiles.
TEST(KernelSweep, HeadMajorCacheViews) {
  auto head_major = [](problem p, index k_spare, index v_spare) {
    p.head_major_kv = true;
    p.k_pad = k_spare;
    p.v_pad = v_spare;
    return p;
  };
  run_case(head_major(make(1, 300, 8, 2, 64, 64), 5, 0), 410);
  run_case(head_major(make(1, 5000, 32, 8, 128, 128), 16, 3), 411, {1, 2, 3});
  run_case(head_major(make(3, 129, 12, 4, 40, 24), 0, 7), 412);
  run_case(head_major(make(9, 200, 2, 2, 64, 64), 1, 1), 413);
  run_case(head_major(make(65, 129, 6, 2, 59, 59, false), 2, 9), 414);
}

// Golden: V holds its KV-head index, so a wrong group mapping shows at once.
TEST(KernelGolden, GroupMapping) {
  for (auto [hq, hkv] : k_heads) {
    problem pr = make(5, 70, hq, hkv, 16, 16);
    pr.fill(7);
    for (index j = 0; j < pr.t_k; ++j)
      for (index r = 0; r < hkv; ++r)
        for (index c = 0; c < pr.dv; ++c) pr.v[std::size_t(j * pr.vts + r * pr.dv + c)] = float(r);
    kernel_test::for_each_arch([&](auto arch) {
      std::vector<float> out(pr.out_size());
      auto p = pr.params(out.data());
      gattn::fused_sdpa<decltype(arch)>(p);
      for (index i = 0; i < pr.t_q; ++i)
        for (index h = 0; h < hq; ++h)
          for (index c = 0; c < pr.dv; ++c)
            ASSERT_NEAR(out[std::size_t(i * pr.ots + h * pr.dv + c)], float(h / (hq / hkv)), 1e-5 * (1 + h))
                << "hq=" << hq << " hkv=" << hkv << " h=" << h << " arch=" << gattn::arch_name<decltype(arch)>();
    });
  }
}

// Rows that see no key (t_q > t_k, causal): SDPA output exactly 0, lse = -inf, no NaN.
TEST(KernelExact, RowsWithoutKeysAreZero) {
  for (auto [tq, tk] : std::vector<std::pair<index, index>>{{10, 3}, {70, 1}, {5, 0}, {130, 64}}) {
    problem pr = make(tq, tk, 6, 2, 24, 24);
    pr.fill(11);
    const auto ref = pr.oracle();
    kernel_test::for_each_arch([&](auto arch) {
      for (int th : {1, 2}) {
        std::vector<float> out(pr.out_size(), 99.0f), lse(std::size_t(pr.hq * pr.t_q), 5.0f);
        auto p = pr.params(out.data());
        p.lse = lse.data();
        p.threads = th;
        gattn::fused_sdpa<decltype(arch)>(p);
        for (index i = 0; i < tq; ++i)
          for (index h = 0; h < pr.hq; ++h) {
            const bool none = i + tk - tq + 1 <= 0;
            for (index c = 0; c < pr.dv; ++c) {
              const float o = out[std::size_t(i * pr.ots + h * pr.dv + c)];
              if (none) ASSERT_EQ(o, 0.0f) << "i=" << i;
              else ASSERT_NEAR(o, ref[std::size_t((i * pr.hq + h) * pr.dv + c)], 1e-5);
            }
            if (none) ASSERT_EQ(lse[std::size_t(h * tq + i)], -std::numeric_limits<float>::infinity());
            else ASSERT_TRUE(std::isfinite(lse[std::size_t(h * tq + i)]));
          }
      }
    });
  }
}

// lse = log Σ_j exp(scale·q·k_j) over the visible keys, in natural log.
TEST(KernelExact, LogSumExp) {
  for (auto [tq, tk] : std::vector<std::pair<index, index>>{{17, 17}, {1, 3000}, {65, 200}}) {
    problem pr = make(tq, tk, 6, 2, 40, 40);
    pr.fill(12);
    const auto dq = pr.dense_q(), dk = pr.dense_k();
    std::vector<double> ref(std::size_t(pr.hq * tq));
    for (index h = 0; h < pr.hq; ++h)
      for (index i = 0; i < tq; ++i) {
        const index vis = std::min(tk, i + tk - tq + 1);
        double m = -1e300, s = 0;
        std::vector<double> sc(static_cast<std::size_t>(vis), 0.0);
        for (index j = 0; j < vis; ++j) {
          double d = 0;
          for (index c = 0; c < pr.dqk; ++c)
            d += double(dq[std::size_t((i * pr.hq + h) * pr.dqk + c)]) * dk[std::size_t((j * pr.hkv + h / 3) * pr.dqk + c)];
          sc[std::size_t(j)] = d * pr.eff_scale();
          m = std::max(m, sc[std::size_t(j)]);
        }
        for (double x : sc) s += std::exp(x - m);
        ref[std::size_t(h * tq + i)] = m + std::log(s);
      }
    kernel_test::for_each_arch([&](auto arch) {
      for (int th : {1, 2}) {
        std::vector<float> out(pr.out_size()), lse(ref.size());
        auto p = pr.params(out.data());
        p.lse = lse.data();
        p.threads = th;
        gattn::fused_sdpa<decltype(arch)>(p);
        for (std::size_t x = 0; x < ref.size(); ++x) ASSERT_NEAR(lse[x], ref[x], 2e-5 * (1 + std::fabs(ref[x])));
      }
    });
  }
}

// Large logits (|s| ~ 1e4) never overflow the running sum; very negative finite logits
// (down to -FLT_MAX) are not "masked".
TEST(KernelExact, ExtremeLogits) {
  // |s| ~ 1e4: scale the N(0,1) scores up; compare with the tolerance rule (e_base grows too).
  {
    problem pr = make(65, 130, 6, 2, 16, 16);
    pr.scale = 2500.0f;
    run_case(pr, 13);
  }
  // Every score -FLT_MAX (d = 2, q = -FLT_MAX/2, k = 1): uniform softmax, output = mean of V.
  problem pr = make(4, 40, 2, 1, 2, 8);
  pr.scale = 1.0f;
  pr.fill(14);
  for (auto& x : pr.q) x = -std::numeric_limits<float>::max() / 2;
  for (auto& x : pr.k) x = 1.0f;
  kernel_test::for_each_arch([&](auto arch) {
    std::vector<float> out(pr.out_size());
    auto p = pr.params(out.data());
    gattn::fused_sdpa<decltype(arch)>(p);
    for (index i = 0; i < pr.t_q; ++i) {
      const index vis = i + pr.t_k - pr.t_q + 1;
      for (index h = 0; h < pr.hq; ++h)
        for (index c = 0; c < pr.dv; ++c) {
          double mean = 0;
          for (index j = 0; j < vis; ++j) mean += pr.v[std::size_t(j * pr.vts + c)];
          mean /= double(vis);
          ASSERT_NEAR(out[std::size_t(i * pr.ots + h * pr.dv + c)], mean, 1e-5) << gattn::arch_name<decltype(arch)>();
        }
    }
  });
  // Key 0 at -FLT_MAX beside ordinary keys: it gets weight 0, the others a normal softmax.
  problem mix = make(3, 50, 2, 1, 2, 8);
  mix.scale = 1.0f;
  mix.fill(15);
  mix.k[0] = std::numeric_limits<float>::max() / 2;  // key 0: score -FLT_MAX for every query
  mix.k[1] = std::numeric_limits<float>::max() / 2;
  for (index i = 0; i < mix.t_q; ++i)
    for (index h = 0; h < mix.hq; ++h) {
      mix.q[std::size_t(i * mix.qts + h * 2)] = -1.0f;
      mix.q[std::size_t(i * mix.qts + h * 2 + 1)] = -1.0f;
    }
  const auto ref = mix.oracle();
  kernel_test::for_each_arch([&](auto arch) {
    std::vector<float> out(mix.out_size());
    auto p = mix.params(out.data());
    gattn::fused_sdpa<decltype(arch)>(p);
    for (std::size_t x = 0; x < ref.size(); ++x) ASSERT_NEAR(out[x], ref[x], 1e-5);
  });
}

// Bitwise identical reruns for a fixed thread count (prefill and split-KV decode).
TEST(KernelExact, DeterministicReruns) {
  for (auto [tq, tk] : std::vector<std::pair<index, index>>{{300, 300}, {1, 6000}, {4, 3000}}) {
    problem pr = make(tq, tk, 8, 2, 64, 64);
    pr.fill(16);
    for (int th : {1, 2, 3}) {
      std::vector<float> a(pr.out_size()), b(pr.out_size());
      auto p = pr.params(a.data());
      p.threads = th;
      gattn::fused_sdpa(p);
      for (int rep = 0; rep < 3; ++rep) {
        p.out = b.data();
        gattn::fused_sdpa(p);
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "threads=" << th;
      }
    }
  }
}

// Concurrent calls from 4 user threads (each with its own OpenMP team) equal serial results.
TEST(KernelExact, ConcurrentCallers) {
  std::vector<problem> probs = {make(200, 200, 6, 2, 64, 64), make(1, 4000, 8, 2, 128, 128),
                                make(77, 300, 16, 4, 59, 59), make(3, 2000, 16, 1, 192, 128)};
  std::vector<std::vector<float>> expect;
  for (std::size_t x = 0; x < probs.size(); ++x) {
    probs[x].fill(unsigned(20 + x));
    expect.emplace_back(probs[x].out_size());
    auto p = probs[x].params(expect.back().data());
    p.threads = 2;
    gattn::fused_sdpa(p);
  }
  std::vector<int> mismatches(probs.size(), 0);
  std::vector<std::thread> pool;
  for (std::size_t x = 0; x < probs.size(); ++x)
    pool.emplace_back([&, x] {
      std::vector<float> out(probs[x].out_size());
      for (int rep = 0; rep < 6; ++rep) {
        const problem& pr = probs[(x + std::size_t(rep)) % probs.size()];
        const auto& ex = expect[(x + std::size_t(rep)) % probs.size()];
        out.assign(pr.out_size(), 0.0f);
        auto p = pr.params(out.data());
        p.threads = 2;
        gattn::fused_sdpa(p);
        if (std::memcmp(out.data(), ex.data(), ex.size() * sizeof(float)) != 0) ++mismatches[x];
      }
    });
  for (auto& t : pool) t.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(KernelValidation, ShapeErrorsNameTheField) {
  problem pr = make(4, 4, 6, 2, 8, 8);
  pr.fill(1);
  std::vector<float> out(pr.out_size());
  auto expect_error = [&](gattn::sdpa_params p, const std::string& field) {
    try {
      gattn::fused_sdpa(p);
      ADD_FAILURE() << "no error for " << field;
    } catch (const gattn::shape_error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  auto p = pr.params(out.data());
  { auto b = p; b.kv_heads = 4; expect_error(b, "kv_heads=4"); }
  { auto b = p; b.q_heads = 0; expect_error(b, "q_heads=0"); }
  { auto b = p; b.d_v = 0; expect_error(b, "d_v=0"); }
  { auto b = p; b.t_k = -1; expect_error(b, "t_k=-1"); }
  { auto b = p; b.q = nullptr; expect_error(b, "q is null"); }
  { auto b = p; b.out = nullptr; expect_error(b, "out is null"); }
  { auto b = p; b.k = nullptr; expect_error(b, "k or v is null"); }
  { auto b = p; b.k_token_stride = -3; expect_error(b, "k_token_stride=-3"); }
  { auto b = p; b.threads = -1; expect_error(b, "threads=-1"); }
  { auto b = p; b.scale = std::numeric_limits<float>::infinity(); expect_error(b, "scale="); }
  { auto b = p; b.t_q = 0; EXPECT_NO_THROW(gattn::fused_sdpa(b)); }
}

}  // namespace

}  // namespace test_fused_sdpa
