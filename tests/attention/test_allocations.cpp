// A steady-state decode step allocates nothing: this file replaces the global operator
// new/delete of the test binary with ones that count, but only while a test sets the flag (every
// other test of the binary allocates as usual, through malloc).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "gattn/attention/any_layer.hpp"
#include "support/random_delta_layer.hpp"
#include "support/random_layer.hpp"

// The replacements below pair malloc with free, whatever GCC infers when it inlines them into a
// new-expression (it warns at -O1 about a "mismatched" free of operator new's memory).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace {
std::atomic<bool> counting{false};
std::atomic<long> allocations{0};

void* counted_alloc(std::size_t n, std::size_t align) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p = align <= alignof(std::max_align_t) ? std::malloc(n) : std::aligned_alloc(align, (n + align - 1) / align * align);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t n) { return counted_alloc(n, 0); }
void* operator new[](std::size_t n) { return counted_alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return counted_alloc(n, std::size_t(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_alloc(n, std::size_t(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace {

using gattn::execution_context;
using gattn::kv_cache;
using index = gattn::index;
namespace test = gattn::test;

/// Allocations made by f() on any thread.
template <class F>
long allocations_of(F f) {
  allocations = 0;
  counting = true;
  f();
  counting = false;
  return allocations.load();
}

constexpr index prompt = 40, steps = 8;

/// Warm-up grows the cache's workspace and the kernel's thread-local scratch for every length the
/// measured steps reach; the cache is then cut back to the prompt and decoding resumes.
template <class Layer>
void expect_allocation_free_decode(const Layer& layer, kv_cache& cache, const execution_context& exec) {
  const index d = layer.config().hidden;
  std::mt19937 gen(3);
  const auto x = test::random_values(gen, (prompt + steps) * d, 1.0f);
  std::vector<float> y(x.size());
  layer.prefill({x.data(), prompt, d, d}, cache, {y.data(), prompt, d, d}, nullptr, exec);
  for (index t = 0; t < steps; ++t)
    layer.decode({x.data() + (prompt + t) * d, 1, d, d}, cache, {y.data(), 1, d, d}, nullptr, exec);
  cache.truncate(prompt);
  for (index t = 0; t < steps; ++t) {
    const long n = allocations_of([&] {
      layer.decode({x.data() + (prompt + t) * d, 1, d, d}, cache, {y.data(), 1, d, d}, nullptr, exec);
    });
    EXPECT_EQ(n, 0) << "decode step " << t << " at " << exec.concurrency() << " threads";
  }
}

TEST(Allocations, CounterCountsOnlyWhileSet) {
  // Direct calls of the allocation functions: a new-expression paired with its delete may be elided.
  EXPECT_EQ(allocations_of([] { ::operator delete(::operator new(sizeof(int))); }), 1);
  counting = false;
  ::operator delete(::operator new(sizeof(int)));
  EXPECT_EQ(allocations.load(), 1);
}

TEST(Allocations, GqaDecodeStepAllocatesNothing) {
  gattn::gqa_config c = test::small_gqa(8, 2, 64, 256);
  c.gate.enabled = true;  // G1 elementwise from g_proj
  c.gate.source = gattn::gate_source::separate;
  gattn::gqa_layer layer(c, test::random_gqa_weights(c, 7));
  for (const auto& exec : {execution_context::serial(), execution_context::with_threads(2)}) {
    kv_cache cache(c, prompt + steps);
    expect_allocation_free_decode(layer, cache, exec);
  }
}

gattn::mla_config small_mla() {
  gattn::mla_config c;
  c.hidden = 128;
  c.heads = 4;
  c.q_lora_rank = 48;
  c.qk_nope_head_dim = 32;
  c.qk_rope_head_dim = 16;
  c.v_head_dim = 32;
  c.kv_lora_rank = 64;
  c.rope.rotary_dim = 16;
  c.gate.enabled = true;
  return c;
}

gattn::weight_map mla_weights(const gattn::mla_config& c) {
  std::mt19937 gen(5);
  gattn::weight_map w;
  auto lin = [&](const std::string& name, index out, index in) {
    w.set(name, {out, in}, test::random_values(gen, out * in, 1.0f / std::sqrt(float(in))));
  };
  const index H = c.heads, Q = c.qk_head_dim();
  lin("q_a_proj.weight", c.q_lora_rank, c.hidden);
  w.set("q_a_layernorm.weight", {c.q_lora_rank}, std::vector<float>(std::size_t(c.q_lora_rank), 1.0f));
  lin("q_b_proj.weight", H * Q, c.q_lora_rank);
  lin("kv_a_proj_with_mqa.weight", c.kv_lora_rank + c.qk_rope_head_dim, c.hidden);
  w.set("kv_a_layernorm.weight", {c.kv_lora_rank}, std::vector<float>(std::size_t(c.kv_lora_rank), 1.0f));
  lin("kv_b_proj.weight", H * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
  lin("g_proj.weight", H * c.v_head_dim, c.hidden);
  lin("o_proj.weight", c.hidden, H * c.v_head_dim);
  return w;
}

TEST(Allocations, MlaDecodeStepAllocatesNothingInEitherForm) {
  const gattn::mla_config c = small_mla();
  for (gattn::mla_form form : {gattn::mla_form::absorbed, gattn::mla_form::expanded}) {
    gattn::mla_layer layer(c, mla_weights(c));
    layer.set_form(form);
    for (const auto& exec : {execution_context::serial(), execution_context::with_threads(2)}) {
      SCOPED_TRACE(gattn::to_string(form));
      kv_cache cache(c, prompt + steps);
      expect_allocation_free_decode(layer, cache, exec);
    }
  }
}

// A batched decode step of one token per sequence, after the same warm-up.
TEST(Allocations, GqaBatchedDecodeStepAllocatesNothing) {
  const gattn::gqa_config c = test::small_gqa(8, 2, 64, 256);
  gattn::gqa_layer layer(c, test::random_gqa_weights(c, 9));
  constexpr index B = 4;
  const index d = c.hidden;
  std::vector<kv_cache> caches;
  for (index s = 0; s < B; ++s) caches.emplace_back(c, prompt + steps);
  std::vector<gattn::sequence_cache> handles(caches.begin(), caches.end());
  std::mt19937 gen(4);
  const auto x = test::random_values(gen, prompt * d, 1.0f);
  std::vector<float> y(x.size());
  gattn::layer_workspace ws;
  layer.reserve(ws, prompt * B, B);
  for (auto& cache : caches) layer.prefill({x.data(), prompt, d, d}, cache, {y.data(), prompt, d, d});
  const index cu[B + 1] = {0, 1, 2, 3, 4};
  const auto step = [&] {
    layer.step({x.data(), B, d, d}, cu, B, handles.data(), {y.data(), B, d, d}, ws, nullptr, execution_context::serial());
  };
  for (index t = 0; t < steps; ++t) step();
  for (auto& cache : caches) cache.truncate(prompt);
  for (index t = 0; t < steps; ++t) EXPECT_EQ(allocations_of(step), 0) << "batched step " << t;
}

// A delta-rule decode step, one sequence (its state's workspace) and a batch over a state pool (a
// reserved workspace): after a warm-up, nothing is allocated on any thread count.
TEST(Allocations, DeltaDecodeStepsAllocateNothing) {
  for (gattn::delta_kind kind : {gattn::delta_kind::gated_deltanet, gattn::delta_kind::kda}) {
    const gattn::delta_config c = test::small_delta(kind);
    const gattn::delta_layer layer(c, test::random_delta_weights(c, 13));
    const index d = c.hidden;
    std::mt19937 gen(6);
    const auto x = test::random_values(gen, prompt * d, 1.0f);
    std::vector<float> y(x.size());
    for (const auto& exec : {execution_context::serial(), execution_context::with_threads(2)}) {
      gattn::delta_state state = layer.make_state();
      layer.prefill({x.data(), prompt, d, d}, state, {y.data(), prompt, d, d}, nullptr, exec);
      const auto one = [&] { layer.decode({x.data(), 1, d, d}, state, {y.data(), 1, d, d}, nullptr, exec); };
      one();
      for (index t = 0; t < steps; ++t) EXPECT_EQ(allocations_of(one), 0) << gattn::to_string(kind) << " step " << t;
      constexpr index B = 4;
      gattn::delta_state_pool pool = layer.make_state_pool(B);
      std::vector<gattn::delta_sequence> seqs;
      for (index s = 0; s < B; ++s) seqs.emplace_back(pool, pool.create());
      gattn::layer_workspace ws;
      layer.reserve(ws, B, B, exec);
      const index cu[B + 1] = {0, 1, 2, 3, 4};
      const auto batch = [&] { layer.step({x.data(), B, d, d}, cu, B, seqs.data(), {y.data(), B, d, d}, ws, nullptr, exec); };
      batch();
      for (index t = 0; t < steps; ++t) EXPECT_EQ(allocations_of(batch), 0) << gattn::to_string(kind) << " batch " << t;
    }
  }
}

}  // namespace
