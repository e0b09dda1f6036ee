// Causality for every value and overflow that is never read as a mask (docs/spec.md §2.6), at kernel level:
// a NaN or ±Inf in the K, V or Q of a token never reaches the rows that cannot see that token, on
// every arch and path (prefill tiles, interleaved units, split-KV, decode rows, chunked prefill,
// head-major and MLA-aliased views); scores beyond the fp32 range give a non-finite row or the
// right one, never a finite wrong one; finite very negative scores are keys like any other.
#include <gtest/gtest.h>

#include <array>
#include <cfloat>
#include <sstream>

#include "support/kernel_sweep.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_nonfinite_causality {

namespace {

using gattn::index;
using kernel_test::problem;

problem make(index tq, index tk, index hq, index hkv, index dqk, index dv) {
  problem p;
  p.t_q = tq; p.t_k = tk; p.hq = hq; p.hkv = hkv; p.dqk = dqk; p.dv = dv;
  return p;
}

template <class A>
std::vector<float> run(const problem& pr, int threads) {
  std::vector<float> out(pr.out_size(), -7.0f);
  auto p = pr.params(out.data());
  p.threads = threads;
  gattn::fused_sdpa<A>(p);
  return out;
}

enum class where { k, v, q };
const char* name(where w) { return w == where::k ? "K" : w == where::v ? "V" : "Q"; }

/// Writes `value` into every channel of token `t` of K, V (all KV heads) or Q (all heads).
void poison(problem& pr, where w, index t, float value) {
  auto fill_rows = [&](std::vector<float>& buf, index ts, index hs, index heads, index d) {
    for (index h = 0; h < heads; ++h)
      for (index c = 0; c < d; ++c) buf[std::size_t(t * ts + h * hs + c)] = value;
  };
  if (w == where::q) fill_rows(pr.q, pr.qts, pr.dqk, pr.hq, pr.dqk);
  else if (w == where::k || pr.v_aliases_k) fill_rows(pr.k, pr.kts, pr.khs, pr.hkv, pr.dqk);
  else fill_rows(pr.v, pr.vts, pr.vhs, pr.hkv, pr.dv);
}

/// For each poison (K, V, Q × NaN, +Inf, -Inf) at key `t0` (Q: at the query of that token, when
/// there is one): every query that cannot see key t0 gives bitwise the clean run's output (the
/// path is the same; a masked key contributes nothing, not 0·x).
void check_causal(const problem& clean_pr, index t0, const std::vector<int>& thread_counts, const std::string& what) {
  const index offset = clean_pr.t_k - clean_pr.t_q;
  const index blind = std::clamp<index>(t0 - offset, 0, clean_pr.t_q);  // queries [0, blind) do not see t0
  const float values[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()};
  kernel_test::for_each_arch([&](auto arch) {
    using A = decltype(arch);
    for (int th : thread_counts) {
      const auto clean = run<A>(clean_pr, th);
      for (where w : {where::k, where::v, where::q}) {
        if (w == where::q && (t0 - offset < 0 || t0 - offset >= clean_pr.t_q)) continue;
        if (w == where::v && clean_pr.v_aliases_k) continue;  // V is K's first channels: covered by K
        for (float value : values) {
          problem pr = clean_pr;
          poison(pr, w, w == where::q ? t0 - offset : t0, value);
          const auto out = run<A>(pr, th);
          index bad = 0, first_bad = -1;
          for (index i = 0; i < blind; ++i)
            for (index c = 0; c < pr.hq * pr.dv; ++c) {
              const float o = out[std::size_t(i * pr.ots + c)], e = clean[std::size_t(i * pr.ots + c)];
              if (!(std::isfinite(o) && o == e)) {
                if (bad++ == 0) first_bad = i;
              }
            }
          EXPECT_EQ(bad, 0) << what << " arch=" << gattn::arch_name<A>() << " threads=" << th << " poison "
                            << name(w) << "[" << t0 << "]=" << value << ": first changed row " << first_bad
                            << " of " << blind << " blind rows";
        }
      }
    }
  });
}

std::string describe(const problem& pr, index t0) {
  std::ostringstream s;
  s << "t_q=" << pr.t_q << " t_k=" << pr.t_k << " hq=" << pr.hq << " hkv=" << pr.hkv << " dqk=" << pr.dqk
    << " dv=" << pr.dv << " head_major=" << pr.head_major_kv << " v_aliases_k=" << pr.v_aliases_k << " t0=" << t0;
  return s.str();
}

// Prefill (t_q = t_k) around the tile sizes: the poisoned key in the middle of a diagonal tile, at
// its start and at its end; G = 1 (interleaved units for few rows), G = 3, G = 8.
TEST(KernelCausality, PrefillTilesAndInterleavedUnits) {
  for (index T : {3, 11, 64, 65, 300})
    for (auto [hq, hkv] : std::vector<std::pair<index, index>>{{1, 1}, {6, 2}, {8, 1}})
      for (index t0 : {T / 2, T - 1, std::max<index>(0, T - 65)}) {
        problem pr = make(T, T, hq, hkv, 24, 20);  // d_v % W != 0: the packed-V path
        pr.fill(unsigned(100 + T + hq));
        check_causal(pr, t0, {1}, describe(pr, t0));
      }
}

// Key splits (flash-decoding over the prefill units, interleaved or not) with two threads.
TEST(KernelCausality, SplitKv) {
  for (auto [tq, tk, hq, hkv] : std::vector<std::array<index, 4>>{{600, 600, 2, 1}, {12, 1100, 2, 2}, {40, 900, 4, 2}}) {
    problem pr = make(tq, tk, hq, hkv, 16, 16);
    pr.fill(unsigned(200 + tq));
    for (index t0 : {tk - tq / 2, tk - 1}) check_causal(pr, t0, {1, 2}, describe(pr, t0));
  }
}

// Decode of several rows (t_q <= 4): a later row's own K/V/Q poisoned; also across splits.
TEST(KernelCausality, DecodeRows) {
  for (index tq : {2, 3, 4})
    for (index tk : {tq, index(40), index(700)})
      for (auto [hq, hkv] : std::vector<std::pair<index, index>>{{1, 1}, {8, 2}, {16, 1}}) {
        problem pr = make(tq, tk, hq, hkv, 40, 24);
        pr.fill(unsigned(300 + tq * 7 + tk));
        check_causal(pr, tk - 1, {1, 2}, describe(pr, tk - 1));
        check_causal(pr, tk - tq + 1, {1}, describe(pr, tk - tq + 1));
      }
}

// Chunked prefill (t_q < t_k), head-major K/V views with spare capacity, and the MLA latent cache
// (V inside K).
TEST(KernelCausality, ChunksHeadMajorAndMlaViews) {
  for (bool head_major : {false, true})
    for (auto [tq, tk] : std::vector<std::pair<index, index>>{{70, 200}, {3, 9}, {65, 65}}) {
      problem pr = make(tq, tk, 4, 2, 32, 32);
      pr.head_major_kv = head_major;
      pr.k_pad = 5;
      pr.v_pad = 3;
      pr.fill(unsigned(400 + tq));
      check_causal(pr, tk - tq / 2, {1, 2}, describe(pr, tk - tq / 2));
    }
  for (auto [tq, tk] : std::vector<std::pair<index, index>>{{70, 70}, {4, 50}, {2, 800}}) {
    problem pr = make(tq, tk, 8, 1, 48, 32);  // latent [c | k_rope]: V = the first 32 channels of K
    pr.v_aliases_k = true;
    pr.fill(unsigned(500 + tq));
    check_causal(pr, tk - 1, {1, 2}, describe(pr, tk - 1));
  }
}

/// Runs `pr` on every arch and path-relevant thread count; `check(out, arch name)` judges it.
template <class F>
void for_each_run(const problem& pr, F&& check) {
  kernel_test::for_each_arch([&](auto arch) {
    using A = decltype(arch);
    for (int th : {1, 2}) check(run<A>(pr, th), gattn::arch_name<A>() + " threads=" + std::to_string(th));
  });
}

/// Shapes that take each path: decode, interleaved units, prefill tiles, split-KV.
const std::vector<std::array<index, 4>> k_path_shapes = {{1, 1, 2, 1}, {4, 40, 2, 1}, {11, 11, 1, 1},
                                                         {70, 70, 4, 2}, {2, 700, 2, 1}, {600, 600, 1, 1}};

// Scores beyond the fp32 range (±1e40 and more): each row is either the float64 answer or not
// finite, never a finite wrong row (an overflowed score is not a masked key).
TEST(KernelOverflow, OverflowedScoresNeverGiveAFiniteWrongRow) {
  for (auto [tq, tk, hq, hkv] : k_path_shapes)
    for (float qscale : {1e20f, -1e20f, 3e19f}) {
      problem pr = make(tq, tk, hq, hkv, 8, 8);
      pr.scale = 1.0f;
      pr.fill(unsigned(600 + tq));
      for (auto& x : pr.k) x = std::fabs(x) * 1e20f;  // scores = q·k: most beyond FLT_MAX in magnitude
      for (auto& x : pr.q) x = std::fabs(x) * qscale;
      const auto ref = pr.oracle();
      for_each_run(pr, [&](const std::vector<float>& out, const std::string& who) {
        for (index i = 0; i < pr.t_q; ++i)
          for (index h = 0; h < pr.hq; ++h) {
            bool finite = true;
            double err = 0;
            for (index c = 0; c < pr.dv; ++c) {
              const double o = out[std::size_t(i * pr.ots + h * pr.dv + c)];
              finite = finite && std::isfinite(o);
              err = std::max(err, std::fabs(o - ref[std::size_t((i * pr.hq + h) * pr.dv + c)]));
            }
            if (finite) {
              ASSERT_LE(err, 1e-4) << who << " t_q=" << tq << " t_k=" << tk << " q scale " << qscale << ": row " << i
                                   << " head " << h << " is finite and wrong";
            }
          }
      });
    }
}

// Finite very negative scores (-1e30, -FLT_MAX) everywhere: a uniform softmax, on every path; a
// real row without keys (t_q > t_k) stays exactly 0 beside them.
TEST(KernelOverflow, VeryNegativeFiniteScoresAreKeys) {
  for (auto [tq, tk, hq, hkv] : k_path_shapes)
    for (float s : {-1e30f, -FLT_MAX}) {
      problem pr = make(tq, tk, hq, hkv, 2, 8);
      pr.scale = 1.0f;
      pr.fill(unsigned(700 + tq));
      for (auto& x : pr.q) x = s / 2;
      for (auto& x : pr.k) x = 1.0f;
      for_each_run(pr, [&](const std::vector<float>& out, const std::string& who) {
        for (index i = 0; i < pr.t_q; ++i) {
          const index vis = i + pr.t_k - pr.t_q + 1;
          for (index h = 0; h < pr.hq; ++h)
            for (index c = 0; c < pr.dv; ++c) {
              double mean = 0;
              for (index j = 0; j < vis; ++j) mean += pr.v[std::size_t(j * pr.vts + (h / (hq / hkv)) * pr.dv + c)];
              mean /= double(vis);
              ASSERT_NEAR(out[std::size_t(i * pr.ots + h * pr.dv + c)], mean, 1e-5)
                  << who << " t_q=" << tq << " t_k=" << tk << " score " << s << " row " << i;
            }
        }
      });
    }
  problem none = make(70, 30, 2, 1, 2, 8);  // rows 0..39 see no key
  none.scale = 1.0f;
  none.fill(701);
  for (auto& x : none.q) x = -FLT_MAX / 2;
  for (auto& x : none.k) x = 1.0f;
  for_each_run(none, [&](const std::vector<float>& out, const std::string& who) {
    for (index i = 0; i < 40; ++i)
      for (index c = 0; c < none.hq * none.dv; ++c) ASSERT_EQ(out[std::size_t(i * none.ots + c)], 0.0f) << who;
    for (index i = 40; i < 70; ++i)
      for (index c = 0; c < none.hq * none.dv; ++c) ASSERT_NE(out[std::size_t(i * none.ots + c)], 0.0f) << who;
  });
}

}  // namespace

}  // namespace test_nonfinite_causality
