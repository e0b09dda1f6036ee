// A steady-state decode step allocates nothing, nor does a run of mixed batched steps after the
// workspace's reserve: this file replaces the global operator new/delete of the test binary and
// (outside sanitizer builds, whose runtimes own them) the C allocation functions malloc, calloc,
// realloc, aligned_alloc, posix_memalign and memalign with ones that count, but only while a test
// sets the flag (every other test of the binary allocates as usual).
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <new>
#include <thread>

#include "gattn/attention/any_layer.hpp"
#include "gattn/kernel/kernel.hpp"
#include "support/kernel_sweep.hpp"
#include "support/random_delta_layer.hpp"
#include "support/random_layer.hpp"

// The replacements below pair malloc with free, whatever GCC infers when it inlines them into a
// new-expression (it warns at -O1 about a "mismatched" free of operator new's memory).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GATTN_COUNT_C_ALLOCATIONS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define GATTN_COUNT_C_ALLOCATIONS 0
#endif
#endif
#if !defined(GATTN_COUNT_C_ALLOCATIONS) && defined(__GLIBC__)
#define GATTN_COUNT_C_ALLOCATIONS 1
#endif
#ifndef GATTN_COUNT_C_ALLOCATIONS
#define GATTN_COUNT_C_ALLOCATIONS 0
#endif

namespace {
std::atomic<bool> counting{false};
std::atomic<long> allocations{0};

void count_one() {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

#if GATTN_COUNT_C_ALLOCATIONS
// glibc's own entry points, which the replacements forward to.
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void __libc_free(void*);

void* malloc(std::size_t n) {
  count_one();
  return __libc_malloc(n);
}
void* calloc(std::size_t n, std::size_t size) {
  count_one();
  return __libc_calloc(n, size);
}
void* realloc(void* p, std::size_t n) {
  count_one();
  return __libc_realloc(p, n);
}
void* aligned_alloc(std::size_t align, std::size_t n) {
  count_one();
  return __libc_memalign(align, n);
}
void* memalign(std::size_t align, std::size_t n) {
  count_one();
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, std::size_t align, std::size_t n) {
  count_one();
  if (align % sizeof(void*) != 0 || (align & (align - 1)) != 0) return EINVAL;
  void* p = __libc_memalign(align, n);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
void free(void* p) { __libc_free(p); }
}

namespace {
void* raw_alloc(std::size_t n, std::size_t align) {
  return align <= alignof(std::max_align_t) ? __libc_malloc(n) : __libc_memalign(align, (n + align - 1) / align * align);
}
void raw_free(void* p) { __libc_free(p); }
}  // namespace
#else
namespace {
void* raw_alloc(std::size_t n, std::size_t align) {
  return align <= alignof(std::max_align_t) ? std::malloc(n) : std::aligned_alloc(align, (n + align - 1) / align * align);
}
void raw_free(void* p) { std::free(p); }
}  // namespace
#endif

namespace {
void* counted_alloc(std::size_t n, std::size_t align) {
  count_one();
  if (n == 0) n = 1;
  void* p = raw_alloc(n, align);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t n) { return counted_alloc(n, 0); }
void* operator new[](std::size_t n) { return counted_alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return counted_alloc(n, std::size_t(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_alloc(n, std::size_t(a)); }
void operator delete(void* p) noexcept { raw_free(p); }
void operator delete[](void* p) noexcept { raw_free(p); }
void operator delete(void* p, std::size_t) noexcept { raw_free(p); }
void operator delete[](void* p, std::size_t) noexcept { raw_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { raw_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { raw_free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { raw_free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { raw_free(p); }

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

#if GATTN_COUNT_C_ALLOCATIONS
// Through volatile pointers, so that the compiler cannot pair and elide the calls.
TEST(Allocations, CounterCountsTheCAllocationFunctions) {
  using alloc_fn = void* (*)(std::size_t);
  volatile alloc_fn m = &std::malloc;
  volatile auto c = &std::calloc;
  volatile auto r = &std::realloc;
  volatile auto a = &std::aligned_alloc;
  volatile auto pm = &posix_memalign;
  EXPECT_EQ(allocations_of([&] {
              void* p = m(16);
              p = r(p, 64);
              std::free(p);
              std::free(c(4, 4));
              std::free(a(64, 128));
              void* q = nullptr;
              if (pm(&q, 64, 64) == 0) std::free(q);
            }),
            5);
}
#endif

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

// ---- After reserve, without a warm-up ------------------------------------------------------------

/// A caller's pool: one persistent helper thread (started before anything is counted) and the
/// calling thread take the chunks of each parallel_for; concurrency 3, more than the helpers.
class helper_pool {
 public:
  helper_pool() : helper_([this] { loop(); }) {}
  ~helper_pool() {
    {
      const std::lock_guard<std::mutex> hold(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    helper_.join();
  }
  helper_pool(const helper_pool&) = delete;
  helper_pool& operator=(const helper_pool&) = delete;

  static void run(void* user, index n, void* body, execution_context::range_fn fn) {
    auto& p = *static_cast<helper_pool*>(user);
    {
      const std::lock_guard<std::mutex> hold(p.mutex_);
      p.body_ = body;
      p.fn_ = fn;
      p.n_ = n;
      p.chunks_ = std::min<index>(n, 3);
      p.next_ = 0;
      p.pending_ = 1;
      ++p.generation_;
    }
    p.wake_.notify_all();
    p.work();
    std::unique_lock<std::mutex> hold(p.mutex_);
    p.done_.wait(hold, [&] { return p.pending_ == 0; });
  }

 private:
  void work() {
    for (index c = next_.fetch_add(1); c < chunks_; c = next_.fetch_add(1)) fn_(body_, c * n_ / chunks_, (c + 1) * n_ / chunks_);
  }
  void loop() {
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> hold(mutex_);
    for (;;) {
      wake_.wait(hold, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      hold.unlock();
      work();
      hold.lock();
      if (--pending_ == 0) done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  void* body_ = nullptr;
  execution_context::range_fn fn_ = nullptr;
  index n_ = 0, chunks_ = 0;
  std::atomic<index> next_{0};
  int pending_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  std::thread helper_;
};

/// An engine's paged memory (f32 rows, dense strides): `blocks` blocks handed out from the top
/// down, a table of `max_blocks` entries per sequence.
struct engine_memory {
  index block_size = 4, max_blocks = 16;
  std::vector<float> keys, values;
  std::vector<std::int32_t> tables;
  std::vector<index> lens;
  std::int32_t next_block;

  engine_memory(index sequences, index key_width, index value_width)
      : keys(std::size_t(sequences * max_blocks * block_size * key_width)),
        values(std::size_t(sequences * max_blocks * block_size * value_width)),
        tables(std::size_t(sequences * max_blocks), -1),
        lens(std::size_t(sequences), 0),
        next_block(std::int32_t(sequences * max_blocks - 1)) {}

  /// Allocates the blocks n more tokens of sequence s take (the engine's block manager).
  void grow(index s, index n) {
    for (index b = lens[std::size_t(s)] / block_size; b < (lens[std::size_t(s)] + n + block_size - 1) / block_size; ++b)
      if (tables[std::size_t(s * max_blocks + b)] < 0) tables[std::size_t(s * max_blocks + b)] = next_block--;
  }
  gattn::paged_kv_view view(bool keys_only) {
    gattn::paged_kv_view v;
    v.keys = keys.data();
    v.values = keys_only ? nullptr : values.data();
    v.num_blocks = index(lens.size()) * max_blocks;
    v.block_size = block_size;
    v.block_tables = tables.data();
    v.block_table_stride = max_blocks;
    v.context_lens = lens.data();
    return v;
  }
};

constexpr index mixed_batch = 4, mixed_rows = 16, mixed_context = 48;

/// Mixed calls over 4 sequences: prefill chunks of 5 and 3 rows next to single decode tokens, then
/// decodes only, each call at most mixed_rows rows; `step(cu, N)` runs one call and advances the
/// lengths.
template <class Step>
void mixed_steps(Step&& step) {
  const index schedule[][mixed_batch] = {{5, 3, 1, 1}, {5, 3, 1, 1}, {1, 3, 5, 1}, {1, 1, 1, 1}, {1, 1, 1, 1}};
  for (const auto& rows : schedule) {
    index cu[mixed_batch + 1] = {0};
    for (index s = 0; s < mixed_batch; ++s) cu[s + 1] = cu[s] + rows[s];
    step(cu, cu[mixed_batch]);
  }
}

/// After reserve(ws, mixed_rows, mixed_batch, mixed_context, exec) and nothing else, mixed batched
/// steps over caller-owned blocks (a paged_kv_view) and over a paged_kv_cache allocate nothing.
template <class Layer>
void expect_allocation_free_mixed_steps(const Layer& layer, index key_width, index value_width,
                                        const execution_context& exec) {
  const index d = layer.config().hidden;
  std::mt19937 gen(8);
  const auto x = test::random_values(gen, mixed_rows * d, 1.0f);
  std::vector<float> y(x.size());
  engine_memory mem(mixed_batch, key_width, value_width);
  gattn::paged_kv_cache pool(mixed_batch * 16, 4, key_width, value_width);
  std::vector<gattn::sequence_cache> handles;
  for (index s = 0; s < mixed_batch; ++s) handles.emplace_back(pool, pool.create());
  gattn::layer_workspace ws_view, ws_pool;
  layer.reserve(ws_view, mixed_rows, mixed_batch, mixed_context, exec);
  layer.reserve(ws_pool, mixed_rows, mixed_batch, mixed_context, exec);
  exec.parallel_for(4, [](index) {});  // the OpenMP runtime's own team, outside the count
  const long n = allocations_of([&] {
    mixed_steps([&](const index* cu, index N) {
      for (index s = 0; s < mixed_batch; ++s) mem.grow(s, cu[s + 1] - cu[s]);
      layer.step({x.data(), N, d, d}, cu, mixed_batch, mem.view(value_width == 0), {y.data(), N, d, d}, ws_view,
                 nullptr, exec);
      for (index s = 0; s < mixed_batch; ++s) mem.lens[std::size_t(s)] += cu[s + 1] - cu[s];
      layer.step({x.data(), N, d, d}, cu, mixed_batch, handles.data(), {y.data(), N, d, d}, ws_pool, nullptr, exec);
    });
  });
  EXPECT_EQ(n, 0) << "mixed batched steps at concurrency " << exec.concurrency();
}

/// After reserve on the cache's own workspace, one-sequence decode steps (no warm-up decode).
template <class Layer>
void expect_allocation_free_reserved_decode(const Layer& layer, const execution_context& exec) {
  const index d = layer.config().hidden;
  std::mt19937 gen(9);
  const auto x = test::random_values(gen, (prompt + steps) * d, 1.0f);
  std::vector<float> y(x.size());
  kv_cache cache(layer.config(), prompt + steps);
  layer.reserve(cache.workspace(), prompt, 1, prompt + steps, exec);
  layer.prefill({x.data(), prompt, d, d}, cache, {y.data(), prompt, d, d}, nullptr, exec);
  exec.parallel_for(4, [](index) {});
  for (index t = 0; t < steps; ++t) {
    const long n = allocations_of([&] {
      layer.decode({x.data() + (prompt + t) * d, 1, d, d}, cache, {y.data(), 1, d, d}, nullptr, exec);
    });
    EXPECT_EQ(n, 0) << "decode step " << t << " at concurrency " << exec.concurrency();
  }
}

TEST(Allocations, ReservedMixedBatchedStepsAllocateNothing) {
  gattn::gqa_config c = test::small_gqa(8, 2, 64, 256);
  c.gate.enabled = true;
  c.gate.source = gattn::gate_source::separate;
  const gattn::gqa_layer gqa(c, test::random_gqa_weights(c, 7));
  const gattn::mla_config m = small_mla();
  gattn::mla_layer absorbed(m, mla_weights(m)), expanded(m, mla_weights(m));
  absorbed.set_form(gattn::mla_form::absorbed);
  expanded.set_form(gattn::mla_form::expanded);
  helper_pool pool;
  const index L = m.kv_lora_rank + m.qk_rope_head_dim;
  for (const auto& exec : {execution_context::with_threads(2), execution_context::custom(&helper_pool::run, &pool, 3),
                           execution_context::serial()}) {
    expect_allocation_free_mixed_steps(gqa, c.kv_heads * c.head_dim, c.kv_heads * c.head_dim, exec);
    expect_allocation_free_mixed_steps(absorbed, L, 0, exec);
    expect_allocation_free_mixed_steps(expanded, L, 0, exec);
  }
}

TEST(Allocations, ReservedOneSequenceDecodeAllocatesNothing) {
  gattn::gqa_config c = test::small_gqa(8, 2, 64, 256);
  c.gate.enabled = true;
  c.gate.source = gattn::gate_source::separate;
  const gattn::gqa_layer gqa(c, test::random_gqa_weights(c, 7));
  const gattn::mla_config m = small_mla();
  gattn::mla_layer mla(m, mla_weights(m));
  helper_pool pool;
  for (const auto& exec : {execution_context::with_threads(2), execution_context::custom(&helper_pool::run, &pool, 3)}) {
    expect_allocation_free_reserved_decode(gqa, exec);
    expect_allocation_free_reserved_decode(mla, exec);
  }
}

// The kernel alone: given sdpa_scratch_floats(p, concurrency) floats it allocates nothing on any of
// its paths (decode with key splits, interleaved units, prefill units with splits), whatever t_k,
// and gives the bits it gives with scratch of its own.
TEST(Allocations, KernelWithTheCallersScratchAllocatesNothing) {
  struct shape {
    index t_q, t_k, hq, hkv, d;
  };
  const shape shapes[] = {{1, 3000, 8, 2, 64}, {1, 40, 8, 2, 64}, {3, 900, 8, 8, 32}, {96, 300, 4, 2, 48},
                          {7, 2000, 2, 2, 40}};
  helper_pool pool;
  for (const shape& sh : shapes) {
    kernel_test::problem pr;
    pr.t_q = sh.t_q;
    pr.t_k = sh.t_k;
    pr.hq = sh.hq;
    pr.hkv = sh.hkv;
    pr.dqk = pr.dv = sh.d;
    pr.fill(3);
    for (const auto& exec : {execution_context::with_threads(2), execution_context::custom(&helper_pool::run, &pool, 3)}) {
      std::vector<float> mine(pr.out_size()), theirs(pr.out_size());
      gattn::sdpa_params p = pr.params(theirs.data());
      p.exec = &exec;
      gattn::fused_sdpa(p);
      std::vector<float> scratch(std::size_t(gattn::sdpa_scratch_floats(p, exec.concurrency())));
      p.out = mine.data();
      p.scratch = {scratch.data(), index(scratch.size())};
      exec.parallel_for(4, [](index) {});
      EXPECT_EQ(allocations_of([&] { gattn::fused_sdpa(p); }), 0) << "t_q=" << sh.t_q << " t_k=" << sh.t_k;
      EXPECT_EQ(mine, theirs) << "t_q=" << sh.t_q << " t_k=" << sh.t_k;
    }
  }
}

}  // namespace
