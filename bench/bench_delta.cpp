// Benchmarks of the gated delta-rule kernel (docs/spec.md §13), the delta-rule shapes of the
// benchmark contract: delta/P1/{gdn,kda}/t:<n> (prefill of one sequence, T = 4096, chunked form),
// delta/P1/{gdn,kda}_recurrent/t:<n> (the same through the recurrent form), delta/D1/{gdn,kda}/t:<n>
// (one decode step of one sequence) and delta/BD32/{gdn,kda}/t:<n> (one decode step of 32
// sequences). GDN: H_k 16, H_v 32, D_k = D_v = 128 (Qwen3-Next); KDA: H 32, D 128 (Kimi Linear).
// Decode rotates through independent states totalling 96 MiB (beyond the 32 MiB L3). Counters:
// tokens_per_s; GFLOPS by the benchmark contract's per-token, per-value-head count 6·D_k·D_v + 3·C·D_k +
// 2·C·D_v + C²/3 with C = 64, whatever the form and chunk size that ran; GBps for decode (the state
// read and written once per token).
// delta/short/T<n>/{gdn,kda}/{recurrent,chunked}/t:1: short calls with the state hot (P1's heads),
// the evidence for delta_form::automatic's threshold.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gattn/core/execution.hpp"
#include "gattn/core/memory.hpp"
#include "gattn/kernel/delta_rule.hpp"

namespace bench_delta {

namespace {

using gattn::index;

struct delta_shape {
  const char* name;
  index hk, hv, d;
  bool per_channel;
};
const delta_shape k_gdn = {"gdn", 16, 32, 128, false};
const delta_shape k_kda = {"kda", 32, 32, 128, true};

/// FLOPs per token and value head as the benchmark contract counts them (chunk C = 64).
double flops_per_token_head(index dk, index dv) {
  const double C = 64, k = double(dk), v = double(dv);
  return 6 * k * v + 3 * C * k + 2 * C * v + C * C / 3;
}

/// Inputs of `tokens` tokens of one sequence (q, k unit rows; β in (0, 1); g in (−1, 0)), `states`
/// independent states, and the output.
struct inputs {
  delta_shape s;
  index tokens;
  gattn::streamed_vector<float> q, k, v, beta, g, out, state;  // huge pages, as a layer's buffers and state pool
  index states;

  inputs(const delta_shape& sh, index t, index n_states) : s(sh), tokens(t), states(n_states) {
    std::mt19937 gen(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> ud(0.0f, 1.0f);
    q.resize(std::size_t(t * s.hk * s.d));
    k.resize(q.size());
    for (auto* x : {&q, &k}) {
      for (auto& e : *x) e = nd(gen);
      for (std::size_t r = 0; r < x->size(); r += std::size_t(s.d)) {
        double n = 0;
        for (index c = 0; c < s.d; ++c) n += double((*x)[r + std::size_t(c)]) * (*x)[r + std::size_t(c)];
        for (index c = 0; c < s.d; ++c) (*x)[r + std::size_t(c)] = float((*x)[r + std::size_t(c)] / std::sqrt(n + 1e-6));
      }
    }
    v.resize(std::size_t(t * s.hv * s.d));
    for (auto& e : v) e = nd(gen);
    beta.resize(std::size_t(t * s.hv));
    for (auto& e : beta) e = 0.05f + 0.9f * ud(gen);
    g.resize(std::size_t(t * s.hv * (s.per_channel ? s.d : 1)));
    for (auto& e : g) e = -ud(gen);
    out.assign(std::size_t(t * s.hv * s.d), 0.0f);
    state.assign(std::size_t(n_states * state_floats()), 0.0f);
    for (auto& e : state) e = 0.1f * nd(gen);
  }
  index state_floats() const { return s.hv * s.d * s.d; }
  gattn::delta_params params(index state_index) {
    gattn::delta_params p;
    p.tokens = tokens; p.key_heads = s.hk; p.value_heads = s.hv; p.d_k = s.d; p.d_v = s.d;
    p.q = q.data(); p.q_stride = s.hk * s.d; p.k = k.data(); p.k_stride = s.hk * s.d;
    p.v = v.data(); p.v_stride = s.hv * s.d; p.beta = beta.data(); p.beta_stride = s.hv;
    p.g = g.data(); p.g_stride = s.hv * (s.per_channel ? s.d : 1); p.per_channel_decay = s.per_channel;
    p.scale = 1.0f / std::sqrt(float(s.d));
    p.state = state.data() + state_index * state_floats();
    p.out = out.data(); p.out_stride = s.hv * s.d;
    return p;
  }
};

/// `batch` sequences of `tokens` tokens per iteration (the same inputs, states rotating through
/// `states` copies), heads over `threads` threads.
/// The inputs of a configuration, built once per process (the largest take seconds to draw).
inputs& shared_inputs(const delta_shape& s, index tokens, index states) {
  static std::vector<std::unique_ptr<inputs>> all;
  for (auto& in : all)
    if (in->s.name == s.name && in->tokens == tokens && in->states == states) return *in;
  all.push_back(std::make_unique<inputs>(s, tokens, states));
  return *all.back();
}

void bm_delta(benchmark::State& st, delta_shape s, index tokens, index batch, index states, gattn::delta_form form,
              int threads) {
  inputs& in = shared_inputs(s, tokens, states);
  const auto ctx = gattn::execution_context::with_threads(threads);
  std::vector<float> scratch(std::size_t(threads * gattn::delta_scratch_floats(s.d, s.d)));
  index next = 0;
  for (auto _ : st) {
    for (index b = 0; b < batch; ++b) {
      gattn::delta_rule(in.params(next), form, ctx, scratch.data(), threads);
      next = (next + 1) % states;
    }
    benchmark::DoNotOptimize(in.out.data());
    benchmark::ClobberMemory();
  }
  const double toks = double(tokens * batch);
  st.counters["tokens_per_s"] = benchmark::Counter(toks, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GFLOPS"] = benchmark::Counter(toks * double(s.hv) * flops_per_token_head(s.d, s.d) / 1e9,
                                             benchmark::Counter::kIsIterationInvariantRate);
  if (tokens == 1)
    st.counters["GBps"] = benchmark::Counter(toks * 2.0 * 4.0 * double(in.state_floats()) / 1e9,
                                             benchmark::Counter::kIsIterationInvariantRate);
}

int register_all() {
  using gattn::delta_form;
  const index cold_states = 48;  // 48 × 2 MiB = 96 MiB of state
  for (const delta_shape& s : {k_gdn, k_kda}) {
    const std::string n = s.name;
    for (int t : {1, 2}) {
      const std::string th = "/t:" + std::to_string(t);
      benchmark::RegisterBenchmark(("delta/P1/" + n + th).c_str(), bm_delta, s, 4096, 1, 1, delta_form::chunked, t)
          ->UseRealTime()->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("delta/P1/" + n + "_recurrent" + th).c_str(), bm_delta, s, 4096, 1, 1,
                                   delta_form::recurrent, t)
          ->UseRealTime()->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("delta/D1/" + n + th).c_str(), bm_delta, s, 1, 1, cold_states,
                                   delta_form::automatic, t)
          ->UseRealTime()->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(("delta/BD32/" + n + th).c_str(), bm_delta, s, 1, 32, cold_states,
                                   delta_form::automatic, t)
          ->UseRealTime()->Unit(benchmark::kMillisecond);
    }
    for (index T : {1, 2, 3, 4, 6, 8, 12, 16, 32, 64})
      for (delta_form f : {delta_form::recurrent, delta_form::chunked}) {
        const std::string name = "delta/short/T" + std::to_string(T) + "/" + n + "/" +
                                 (f == delta_form::recurrent ? "recurrent" : "chunked") + "/t:1";
        benchmark::RegisterBenchmark(name.c_str(), bm_delta, s, T, 1, 1, f, 1)->UseRealTime()->Unit(benchmark::kMicrosecond);
      }
  }
  return 0;
}
const int registered = register_all();

}  // namespace

}  // namespace bench_delta
