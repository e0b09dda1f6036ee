// Tests of the gated delta-rule kernel (gattn/kernel/delta_rule.hpp, docs/spec.md §13) against a
// float64 token loop of the recurrence, on every arch the build can run: both forms and the automatic
// choice, lengths around the chunk C (1, 2, C−1, C, C+1, 2C+1, 2C+3) and 64, head dims with tails
// (128/128, 32/48, 17/5, 1/1), grouped and ungrouped heads, per-head (GDN) and per-channel (KDA)
// decay from vanishing to strong (Σ g over a chunk below −1000) and mixed, 2000-token sequences,
// calls split anywhere, threads, and causality of non-finite values (a NaN/Inf in token t leaves
// every row before t bitwise unchanged).
// Tolerance: max |fast − oracle| ≤ 1e-4 · max |oracle| (+ 1e-6) for o and for the final state.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gattn/kernel/delta_rule.hpp"
#include "support/kernel_sweep.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_delta_rule {

namespace {

using gattn::delta_form;
using gattn::index;

enum class decay { vanishing, mild, strong, mixed, bounded, cliff };
const char* name(decay d) {
  switch (d) {
    case decay::vanishing: return "vanishing";
    case decay::mild: return "mild";
    case decay::strong: return "strong";
    case decay::mixed: return "mixed";
    case decay::bounded: return "bounded";
    default: return "cliff";
  }
}
const char* name(delta_form f) {
  return f == delta_form::recurrent ? "recurrent" : f == delta_form::chunked ? "chunked" : "automatic";
}

/// One problem: inputs with padded (strided) token rows, an initial state, and the shape.
struct problem {
  index T = 1, hk = 1, hv = 1, dk = 8, dv = 8;
  bool per_channel = false;
  decay dec = decay::mild;
  std::vector<float> q, k, v, beta, g, state0;
  index qs = 0, ks = 0, vs = 0, bs = 0, gs = 0, os = 0;

  std::string describe() const {
    std::ostringstream s;
    s << "T=" << T << " hk=" << hk << " hv=" << hv << " dk=" << dk << " dv=" << dv
      << (per_channel ? " KDA" : " GDN") << " decay=" << name(dec);
    return s.str();
  }
  float draw_g(std::mt19937& gen, index t) const {
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    switch (dec) {
      case decay::vanishing: return 0.0f;
      case decay::mild: return -0.02f * u(gen);
      case decay::strong: return -15.0f - 10.0f * u(gen);
      case decay::mixed: return u(gen) < 0.1f ? -20.0f * u(gen) : -0.01f * u(gen);
      case decay::bounded: return -5.0f * u(gen);  // a lower-bounded decay: Σ over a sub-block near −80
      // a decay close to the anchoring's range at each sub-block start, then mild ones: the anchored
      // factors of later rows are near e⁻⁸⁰ while their ratios are near 1 (the least accurate case)
      default: return t % 16 == 0 ? -79.0f * u(gen) : -0.01f * u(gen);
    }
  }
  void fill(unsigned seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> ud(0.02f, 0.98f);
    qs = hk * dk + 3; ks = hk * dk + 1; vs = hv * dv + 2; bs = hv + 1; os = hv * dv + 5;
    gs = (per_channel ? hv * dk : hv) + 2;
    auto unit_rows = [&](std::vector<float>& x, index stride) {
      x.assign(std::size_t(std::max<index>(T * stride, 1)), 0.0f);
      for (index t = 0; t < T; ++t)
        for (index h = 0; h < hk; ++h) {
          float* r = x.data() + t * stride + h * dk;
          double n = 0;
          for (index c = 0; c < dk; ++c) {
            r[c] = nd(gen);
            n += double(r[c]) * r[c];
          }
          for (index c = 0; c < dk; ++c) r[c] = float(r[c] / std::sqrt(n + 1e-6));
        }
    };
    unit_rows(q, qs);
    unit_rows(k, ks);
    v.assign(std::size_t(std::max<index>(T * vs, 1)), 0.0f);
    for (auto& x : v) x = nd(gen);
    beta.assign(std::size_t(std::max<index>(T * bs, 1)), 0.0f);
    for (auto& x : beta) x = ud(gen);
    g.assign(std::size_t(std::max<index>(T * gs, 1)), 0.0f);
    for (index t = 0; t < T; ++t)
      for (index i = 0; i < gs; ++i) g[std::size_t(t * gs + i)] = draw_g(gen, t);
    state0.resize(std::size_t(hv * dk * dv));
    for (auto& x : state0) x = 0.3f * nd(gen);
  }
  gattn::delta_params params(float* out, float* state) const {
    gattn::delta_params p;
    p.tokens = T; p.key_heads = hk; p.value_heads = hv; p.d_k = dk; p.d_v = dv;
    p.q = q.data(); p.q_stride = qs; p.k = k.data(); p.k_stride = ks; p.v = v.data(); p.v_stride = vs;
    p.beta = beta.data(); p.beta_stride = bs; p.g = g.data(); p.g_stride = gs;
    p.per_channel_decay = per_channel;
    p.scale = 1.0f / std::sqrt(float(dk));
    p.state = state; p.out = out; p.out_stride = os;
    return p;
  }
};

/// The float64 token loop of docs/spec.md §13: o [T][hv][dv] and the final state.
struct oracle_result {
  std::vector<double> o, state;
};
oracle_result oracle(const problem& pr) {
  oracle_result r;
  r.o.assign(std::size_t(pr.T * pr.hv * pr.dv), 0.0);
  r.state.assign(pr.state0.begin(), pr.state0.end());
  const double scale = 1.0 / std::sqrt(double(float(pr.dk)));
  std::vector<double> pred(std::size_t(pr.dv));
  for (index h = 0; h < pr.hv; ++h) {
    const index kh = h / (pr.hv / pr.hk);
    double* S = r.state.data() + h * pr.dk * pr.dv;
    for (index t = 0; t < pr.T; ++t) {
      const float* q = pr.q.data() + t * pr.qs + kh * pr.dk;
      const float* k = pr.k.data() + t * pr.ks + kh * pr.dk;
      const float* v = pr.v.data() + t * pr.vs + h * pr.dv;
      const double beta = pr.beta[std::size_t(t * pr.bs + h)];
      const float* g = pr.g.data() + t * pr.gs + (pr.per_channel ? h * pr.dk : h);
      std::fill(pred.begin(), pred.end(), 0.0);
      for (index c = 0; c < pr.dk; ++c) {
        const double a = std::exp(double(pr.per_channel ? g[c] : g[0]));
        for (index j = 0; j < pr.dv; ++j) {
          S[c * pr.dv + j] *= a;
          pred[std::size_t(j)] += S[c * pr.dv + j] * k[c];
        }
      }
      for (index j = 0; j < pr.dv; ++j) pred[std::size_t(j)] = beta * (v[j] - pred[std::size_t(j)]);
      double* o = r.o.data() + (t * pr.hv + h) * pr.dv;
      for (index c = 0; c < pr.dk; ++c)
        for (index j = 0; j < pr.dv; ++j) {
          S[c * pr.dv + j] += double(k[c]) * pred[std::size_t(j)];
          o[j] += S[c * pr.dv + j] * scale * q[c];
        }
    }
  }
  return r;
}

/// A run of the kernel: strided outputs (unused pad filled with a marker) and the final state.
struct run_result {
  std::vector<float> out, state;
};

/// Runs tokens [0, T) of `pr` as calls of the given lengths (summing to T), head by head.
template <class A>
run_result run(const problem& pr, delta_form form, const std::vector<index>& calls) {
  run_result r;
  r.out.assign(std::size_t(std::max<index>(pr.T * pr.os, 1)), -7.0f);
  r.state = pr.state0;
  std::vector<float> scratch(std::size_t(gattn::delta_scratch_floats(pr.dk, pr.dv)), std::nanf(""));
  index t0 = 0;
  for (index n : calls) {
    gattn::delta_params p = pr.params(r.out.data(), r.state.data());
    p.tokens = n;
    p.q += t0 * p.q_stride; p.k += t0 * p.k_stride; p.v += t0 * p.v_stride;
    p.beta += t0 * p.beta_stride; p.g += t0 * p.g_stride; p.out += t0 * p.out_stride;
    for (index h = 0; h < pr.hv; ++h) gattn::delta_rule_head<A>(p, h, form, scratch.data());
    t0 += n;
  }
  return r;
}
template <class A>
run_result run(const problem& pr, delta_form form) {
  return run<A>(pr, form, {pr.T});
}

struct errors {
  double o_err = 0, o_ref = 0, s_err = 0, s_ref = 0;
  bool pad_intact = true;
};
errors compare(const problem& pr, const run_result& r, const oracle_result& ref) {
  errors e;
  auto err = [](double x, double y) { return std::isfinite(x) ? std::fabs(x - y) : std::numeric_limits<double>::infinity(); };
  for (index t = 0; t < pr.T; ++t) {
    for (index i = 0; i < pr.hv * pr.dv; ++i) {
      const double y = ref.o[std::size_t(t * pr.hv * pr.dv + i)];
      e.o_err = std::max(e.o_err, err(r.out[std::size_t(t * pr.os + i)], y));
      e.o_ref = std::max(e.o_ref, std::fabs(y));
    }
    for (index i = pr.hv * pr.dv; i < pr.os && t * pr.os + i < index(r.out.size()); ++i)
      e.pad_intact = e.pad_intact && r.out[std::size_t(t * pr.os + i)] == -7.0f;
  }
  for (std::size_t i = 0; i < ref.state.size(); ++i) {
    e.s_err = std::max(e.s_err, err(r.state[i], ref.state[i]));
    e.s_ref = std::max(e.s_ref, std::fabs(ref.state[i]));
  }
  return e;
}

void expect_close(const problem& pr, const run_result& r, const oracle_result& ref, const std::string& what) {
  const errors e = compare(pr, r, ref);
  EXPECT_LE(e.o_err, 1e-4 * e.o_ref + 1e-6) << what << " o (max |o_ref| " << e.o_ref << ")";
  EXPECT_LE(e.s_err, 1e-4 * e.s_ref + 1e-6) << what << " state (max |S_ref| " << e.s_ref << ")";
  EXPECT_TRUE(e.pad_intact) << what << ": wrote outside the output rows";
}

problem make(index T, index hk, index hv, index dk, index dv, bool per_channel, decay d, unsigned seed) {
  problem pr;
  pr.T = T; pr.hk = hk; pr.hv = hv; pr.dk = dk; pr.dv = dv; pr.per_channel = per_channel; pr.dec = d;
  pr.fill(seed);
  return pr;
}

/// The problem against the oracle in the given forms on every arch.
void check(const problem& pr, const std::vector<delta_form>& forms) {
  const oracle_result ref = oracle(pr);
  kernel_test::for_each_arch([&](auto arch) {
    using A = decltype(arch);
    for (delta_form f : forms)
      expect_close(pr, run<A>(pr, f), ref, pr.describe() + " form=" + name(f) + " arch=" + gattn::arch_name<A>());
  });
}

bool small_sweep() { return kernel_test::sweep() == kernel_test::sweep_size::small; }
bool full_sweep() { return kernel_test::sweep() == kernel_test::sweep_size::full; }

struct dims {
  index dk, dv;
};

constexpr index C = gattn::detail::delta_chunk_tokens;

/// Lengths around the chunk (1, 2, C−1, C, C+1, 2C+1, 2C+3) and around 64.
std::vector<index> lengths_around_chunk() {
  std::vector<index> l = {1, 2, C - 1, C, C + 1, 2 * C + 1, 2 * C + 3, 63, 64, 65, 129, 131};
  std::sort(l.begin(), l.end());
  l.erase(std::unique(l.begin(), l.end()), l.end());
  return l;
}

TEST(DeltaRule, ShapesAgainstOracle) {
  std::vector<index> lengths = lengths_around_chunk();
  std::vector<dims> ds = {{128, 128}, {32, 48}, {17, 5}, {1, 1}};
  if (small_sweep()) {
    lengths = {1, 65};
    ds = {{17, 5}, {32, 48}};
  }
  std::cout << "[ delta    ] archs:";
  kernel_test::for_each_arch([](auto arch) { std::cout << ' ' << gattn::arch_name<decltype(arch)>(); });
  std::cout << ", sweep " << kernel_test::to_string(kernel_test::sweep()) << '\n';
  unsigned seed = 1;
  for (const dims& d : ds)
    for (index T : lengths)
      for (bool kda : {false, true})
        for (int grouped = 0; grouped < 2; ++grouped) {
          if (!full_sweep() && d.dk == 128 && T > 65 && grouped) continue;
          const index hk = 2, hv = grouped ? 4 : 2;
          check(make(T, hk, hv, d.dk, d.dv, kda, kda ? decay::bounded : decay::mixed, seed++),
                {delta_form::recurrent, delta_form::chunked, delta_form::automatic});
        }
}

TEST(DeltaRule, DecaysFromVanishingToStrong) {
  std::vector<dims> ds = {{32, 48}, {128, 128}};
  if (!full_sweep()) ds = {{32, 48}};
  unsigned seed = 100;
  for (const dims& d : ds)
    for (decay dec : {decay::vanishing, decay::mild, decay::strong, decay::mixed, decay::bounded, decay::cliff})
      for (bool kda : {false, true}) {
        if (small_sweep() && dec != decay::strong && dec != decay::mixed) continue;
        check(make(131, 1, 2, d.dk, d.dv, kda, dec, seed++), {delta_form::recurrent, delta_form::chunked});
      }
}

/// Far beyond one chunk (docs/spec.md §13: the tolerance holds at any T).
TEST(DeltaRule, LongSequences) {
  const index T = small_sweep() ? 300 : 2000;
  for (bool kda : {false, true})
    for (decay dec : {decay::vanishing, decay::mild, decay::mixed})
      check(make(T, 1, 2, 16, 24, kda, dec, 61 + unsigned(dec)), {delta_form::recurrent, delta_form::chunked});
}

/// A strong decay gives the oracle's answer (decayed to nothing), never NaN/Inf.
TEST(DeltaRule, StrongDecayStaysFinite) {
  for (bool kda : {false, true}) {
    problem pr = make(200, 1, 1, 16, 16, kda, decay::strong, 7);
    for (auto& x : pr.g) x = -1000.0f;  // one token alone sums below −1000
    check(pr, {delta_form::recurrent, delta_form::chunked});
  }
}

/// A decay of −inf (an exp(A_log) · softplus overflow) erases the state at its token: every form gives
/// the recurrence's answer (no −inf − (−inf) = NaN in a chunk), for −inf tokens at a chunk's start,
/// inside it, at its end and twice in one chunk.
TEST(DeltaRule, MinusInfiniteDecayErasesTheState) {
  for (bool kda : {false, true}) {
    problem pr = make(2 * C + 7, 1, 2, 16, 16, kda, decay::mild, 17 + unsigned(kda));
    for (index t : {index(0), index(5), index(9), C - 1, C, index(2 * C + 3)})
      for (index i = 0; i < pr.gs; ++i) pr.g[std::size_t(t * pr.gs + i)] = -INFINITY;
    check(pr, {delta_form::recurrent, delta_form::chunked, delta_form::automatic});
  }
}

/// max |a − b| over the outputs and the state, and max |b|.
std::pair<double, double> max_diff(const run_result& a, const run_result& b) {
  double err = 0, ref = 0;
  for (const auto* v : {&a.out, &a.state}) {
    const auto& w = v == &a.out ? b.out : b.state;
    for (std::size_t i = 0; i < v->size(); ++i) {
      err = std::max(err, std::isfinite((*v)[i]) ? double(std::fabs((*v)[i] - w[i])) : 1e30);
      ref = std::max(ref, double(std::fabs(w[i])));
    }
  }
  return {err, ref};
}

/// Calls split anywhere (mid-chunk, empty calls) continue the state: the oracle's answer, the one-call
/// answer bitwise in the recurrent form (the same operations per token) and within the tolerance in
/// the others (their chunks start at each call).
TEST(DeltaRule, SplitCallsContinueTheState) {
  std::vector<std::vector<index>> splits = {{37, 64, 30}, {1, 1, 129}, {64, 67}, {5, 0, 126}};
  if (small_sweep()) splits.resize(1);
  for (bool kda : {false, true}) {
    const problem pr = make(131, 2, 4, 32, 24, kda, kda ? decay::bounded : decay::mixed, 11 + unsigned(kda));
    const oracle_result ref = oracle(pr);
    kernel_test::for_each_arch([&](auto arch) {
      using A = decltype(arch);
      for (delta_form f : {delta_form::recurrent, delta_form::chunked, delta_form::automatic}) {
        const run_result whole = run<A>(pr, f);
        for (const auto& calls : splits) {
          std::ostringstream what;
          what << pr.describe() << " form=" << name(f) << " arch=" << gattn::arch_name<A>() << " calls=";
          for (index n : calls) what << n << ' ';
          const run_result parts = run<A>(pr, f, calls);
          expect_close(pr, parts, ref, what.str());
          const auto [err, mag] = max_diff(parts, whole);
          if (f == delta_form::recurrent) EXPECT_EQ(err, 0.0) << what.str() << ": differs from one call";
          else EXPECT_LE(err, 1e-4 * mag) << what.str() << ": far from one call";
        }
      }
    });
  }
}

TEST(DeltaRule, ChunkedMatchesRecurrent) {
  for (bool kda : {false, true}) {
    const problem pr = make(129, 1, 2, 64, 64, kda, kda ? decay::bounded : decay::mild, 21 + unsigned(kda));
    kernel_test::for_each_arch([&](auto arch) {
      using A = decltype(arch);
      const run_result a = run<A>(pr, delta_form::recurrent), b = run<A>(pr, delta_form::chunked);
      double err = 0, ref = 0;
      for (std::size_t i = 0; i < a.out.size(); ++i) {
        err = std::max(err, double(std::fabs(a.out[i] - b.out[i])));
        ref = std::max(ref, double(std::fabs(a.out[i])));
      }
      EXPECT_LE(err, 1e-4 * ref) << pr.describe() << " arch=" << gattn::arch_name<A>();
    });
  }
}

/// A NaN/Inf in q, k, v, β or g of token t0 changes no output row before t0 (bitwise), in every
/// form; its own and later rows may change.
TEST(DeltaRule, NonFiniteTokenIsCausal) {
  std::vector<index> where = {0, 5, 37, C - 1, C, 63, 64, 100};
  std::sort(where.begin(), where.end());
  where.erase(std::unique(where.begin(), where.end()), where.end());
  if (small_sweep()) where = {37, 64};
  std::vector<float> values = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity()};
  if (small_sweep()) values.resize(1);
  for (bool kda : {false, true}) {
    const problem clean = make(131, 1, 2, 24, 20, kda, decay::mixed, 31 + unsigned(kda));
    kernel_test::for_each_arch([&](auto arch) {
      using A = decltype(arch);
      for (delta_form f : {delta_form::recurrent, delta_form::chunked, delta_form::automatic}) {
        const run_result base = run<A>(clean, f);
        for (index t0 : where)
          for (int field = 0; field < 5; ++field)
            for (float value : values) {
              problem pr = clean;
              std::vector<float>* buf[] = {&pr.q, &pr.k, &pr.v, &pr.beta, &pr.g};
              const index stride[] = {pr.qs, pr.ks, pr.vs, pr.bs, pr.gs};
              std::fill_n(buf[field]->begin() + t0 * stride[field], stride[field], value);
              const run_result r = run<A>(pr, f);
              const bool same = std::equal(base.out.begin(), base.out.begin() + t0 * pr.os, r.out.begin(),
                                           [](float x, float y) { return std::memcmp(&x, &y, sizeof x) == 0; });
              EXPECT_TRUE(same) << clean.describe() << " arch=" << gattn::arch_name<A>() << " form=" << name(f)
                                << " field=" << field << " value=" << value << " at token " << t0;
            }
      }
    });
  }
}

/// delta_rule over threads and scratch slots gives the single-threaded result bitwise.
TEST(DeltaRule, ThreadsAndSlots) {
  const problem pr = make(100, 2, 6, 32, 32, true, decay::bounded, 41);
  const run_result one = run<gattn::default_arch>(pr, delta_form::automatic);
  for (int threads : {1, 2, 3})
    for (index slots : {1, 2, 8}) {
      run_result r;
      r.out.assign(one.out.size(), -7.0f);
      r.state = pr.state0;
      std::vector<float> scratch(std::size_t(slots * gattn::delta_scratch_floats(pr.dk, pr.dv)));
      gattn::delta_rule(pr.params(r.out.data(), r.state.data()), delta_form::automatic,
                        gattn::execution_context::with_threads(threads), scratch.data(), slots);
      EXPECT_EQ(r.out, one.out) << "threads=" << threads << " slots=" << slots;
      EXPECT_EQ(r.state, one.state) << "threads=" << threads << " slots=" << slots;
    }
}

TEST(DeltaRule, ZeroTokensAndErrors) {
  problem pr = make(0, 1, 2, 8, 8, false, decay::mild, 51);
  run_result r = run<gattn::default_arch>(pr, delta_form::automatic);
  EXPECT_EQ(r.state, pr.state0);
  std::vector<float> scratch(std::size_t(gattn::delta_scratch_floats(8, 8)));
  gattn::delta_params p = pr.params(r.out.data(), r.state.data());
  const auto ctx = gattn::execution_context::serial();
  EXPECT_NO_THROW(gattn::delta_rule(p, delta_form::chunked, ctx, scratch.data(), 1));
  p.key_heads = 2;
  p.value_heads = 3;
  EXPECT_THROW(gattn::delta_rule(p, delta_form::chunked, ctx, scratch.data(), 1), gattn::shape_error);
  p.key_heads = 1;
  p.value_heads = 2;
  EXPECT_THROW(gattn::delta_rule(p, delta_form::chunked, ctx, scratch.data(), 0), gattn::shape_error);
  p.d_k = 0;
  EXPECT_THROW(gattn::delta_rule(p, delta_form::chunked, ctx, scratch.data(), 1), gattn::shape_error);
}

}  // namespace

}  // namespace test_delta_rule
