// Two threads sharing one pool of sequences (a paged_kv_cache, or a delta_state_pool), each
// running its own sequences through batched steps while it creates, forks and releases others:
// every step's output must be the one the same script gives on a pool of its own, and the pool
// must end with every block (slot) free. Used by tests/cache/test_pool_mutex.cpp and, built with
// ThreadSanitizer, by tests/threads/shared_pools_tsan.cpp.
#pragma once

#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gattn/attention/delta_layer.hpp"
#include "gattn/attention/gqa_layer.hpp"
#include "gattn/cache/paged_kv_cache.hpp"
#include "support/random_delta_layer.hpp"
#include "support/random_layer.hpp"

namespace gattn::test {

/// What a shared-pool run found.
struct shared_pool_result {
  index steps = 0;       ///< batched steps run, over both threads
  index wrong = 0;       ///< steps whose output differs from the one-thread run's
  index free_after = 0;  ///< blocks (slots) free once every sequence is released
  index capacity = 0;    ///< blocks (slots) of the pool
  std::string error;     ///< what a thread threw, if anything
};

namespace shared_pool_detail {

/// Step `it` of thread `t`: a new sequence's prefill of 1..11 rows, then (after the first step) one
/// decode row of the previous step's sequence; the rows, from a seed of their own.
inline std::vector<float> rows_of(int t, index it, index n, index d) {
  std::mt19937 gen(unsigned(1000003 * t + it));
  return random_values(gen, n * d, 1.0f);
}
inline index prompt_of(int t, index it) { return 1 + (it * 7 + t * 3) % 11; }

/// Runs thread t's script on `pool`: per step, create a sequence, run {its prompt, the previous
/// sequence's next token} as one batch, four times fork the new sequence and create a throwaway
/// one (both released at once), then release the previous sequence. Returns every step's output rows.
template <class Layer, class Pool, class Handle>
std::vector<std::vector<float>> run_script(const Layer& layer, Pool& pool, int t, index steps, index d) {
  std::vector<std::vector<float>> outputs;
  layer_workspace ws;
  const execution_context serial = execution_context::serial();
  typename Pool::sequence_id previous = -1;
  for (index it = 0; it < steps; ++it) {
    const auto fresh = pool.create();
    const index n = prompt_of(t, it), rows = n + (previous >= 0 ? 1 : 0);
    const std::vector<float> x = rows_of(t, it, rows, d);
    std::vector<float> y(x.size());
    std::vector<Handle> batch = {Handle(pool, fresh)};
    if (previous >= 0) batch.emplace_back(pool, previous);
    const index cu[3] = {0, n, rows};
    layer.step({x.data(), rows, d, d}, cu, index(batch.size()), batch.data(), {y.data(), rows, d, d}, ws, nullptr, serial);
    outputs.push_back(std::move(y));
    for (int churn = 0; churn < 4; ++churn) {  // the other thread's calls run meanwhile
      pool.release(pool.fork(fresh));
      pool.release(pool.create());
    }
    if (previous >= 0) pool.release(previous);
    previous = fresh;
  }
  if (previous >= 0) pool.release(previous);
  return outputs;
}

/// Outputs that differ by more than rounding (a race reads rows of another sequence or garbage).
inline bool same_rows(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  float scale = 0;
  for (float v : b) scale = std::max(scale, std::fabs(v));
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(std::fabs(a[i] - b[i]) <= 1e-6f * scale)) return false;
  return true;
}

/// Both threads' scripts alone (each on a pool of its own), then at once on `shared`.
template <class Layer, class Pool, class Handle, class MakePool>
shared_pool_result run_shared(const Layer& layer, Pool& shared, MakePool make_pool, index steps, index d) {
  shared_pool_result r;
  std::vector<std::vector<float>> alone[2], together[2];
  for (int t = 0; t < 2; ++t) {
    Pool own = make_pool();
    alone[t] = run_script<Layer, Pool, Handle>(layer, own, t, steps, d);
  }
  std::mutex error_lock;
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < 2) std::this_thread::yield();  // start together: the calls must overlap
      try {
        together[t] = run_script<Layer, Pool, Handle>(layer, shared, t, steps, d);
      } catch (const std::exception& e) {
        const std::lock_guard<std::mutex> hold(error_lock);
        r.error += std::string(r.error.empty() ? "" : "; ") + "thread " + std::to_string(t) + ": " + e.what();
      }
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 2; ++t) {
    r.steps += steps;
    for (index it = 0; it < steps; ++it)
      if (std::size_t(it) >= together[t].size() || !same_rows(together[t][std::size_t(it)], alone[t][std::size_t(it)]))
        ++r.wrong;
  }
  return r;
}

}  // namespace shared_pool_detail

/// A GQA layer's batches over one paged pool of 24 blocks of 4 tokens, shared by two threads.
inline shared_pool_result shared_paged_pool_run(index steps) {
  const gqa_config c = small_gqa(4, 2, 8, 32);
  const gqa_layer layer(c, random_gqa_weights(c, 21));
  const auto make = [&] { return paged_kv_cache(c, 24, 4); };
  paged_kv_cache shared = make();
  shared_pool_result r =
      shared_pool_detail::run_shared<gqa_layer, paged_kv_cache, sequence_cache>(layer, shared, make, steps, c.hidden);
  r.free_after = shared.free_blocks();
  r.capacity = shared.num_blocks();
  return r;
}

/// A Gated DeltaNet layer's batches over one state pool of 10 slots, shared by two threads.
inline shared_pool_result shared_state_pool_run(index steps) {
  const delta_config c = small_delta(delta_kind::gated_deltanet, 8, 8, 32);
  const delta_layer layer(c, random_delta_weights(c, 22));
  const auto make = [&] { return delta_state_pool(c, 10); };
  delta_state_pool shared = make();
  shared_pool_result r =
      shared_pool_detail::run_shared<delta_layer, delta_state_pool, delta_sequence>(layer, shared, make, steps, c.hidden);
  r.free_after = shared.free_slots();
  r.capacity = shared.slots();
  return r;
}

}  // namespace gattn::test
