// What the layers share to run a batch of sequences (docs/spec.md §11): the checks of a batched call, the
// positions of its rows, the f16 range check of new cache rows, and running one SDPA problem per
// sequence on the caller's threads.
#pragma once

#include <algorithm>
#include <exception>
#include <functional>
#include <mutex>
#include <vector>

#include "gattn/attention/sdpa_function.hpp"
#include "gattn/cache/paged_kv_view.hpp"
#include "gattn/cache/sequence_cache.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/execution.hpp"
#include "gattn/core/scratch_span.hpp"
#include "gattn/core/types.hpp"
#include "gattn/core/validate.hpp"
#include "gattn/simd/vector_ops.hpp"

GATTN_NAMESPACE_BEGIN
namespace detail {

/// Checks x [N, d], y [N, d] and cu_seqlens (starts at 0, never decreases, ends at N); returns N.
inline index check_batch_rows(const char* who, matrix_view<const float> x, const index* cu_seqlens, index batch,
                              matrix_view<float> y, index d, index per_token) {
  require<shape_error>(x.cols == d && y.cols == d && y.rows == x.rows && x.row_stride >= d && y.row_stride >= d,
                       who, ": x is [", x.rows, ", ", x.cols, "] and y is [", y.rows, ", ", y.cols,
                       "]; both must be [N, hidden_size=", d, "]");
  check_call_rows(who, x.rows, 0, per_token);
  require<shape_error>(batch >= 1 && cu_seqlens != nullptr, who, ": batch=", batch, " must be >= 1 with cu_seqlens");
  require<shape_error>(cu_seqlens[0] == 0, who, ": cu_seqlens[0]=", cu_seqlens[0], " must be 0");
  for (index s = 0; s < batch; ++s)
    require<shape_error>(cu_seqlens[s + 1] >= cu_seqlens[s], who, ": cu_seqlens[", s + 1, "]=", cu_seqlens[s + 1],
                         " is below cu_seqlens[", s, "]=", cu_seqlens[s]);
  require<shape_error>(cu_seqlens[batch] == x.rows, who, ": cu_seqlens[", batch, "]=", cu_seqlens[batch],
                       " must equal the rows of x (", x.rows, ")");
  return x.rows;
}

/// Sequences of one paged pool must fit together, not only one at a time: the blocks they take are
/// summed per pool and compared with its free blocks before anything is appended.
inline void check_pool_room(const char* who, const sequence_cache* caches, const index* cu_seqlens, index batch) {
  for (index s = 0; s < batch; ++s) {
    const paged_kv_cache* pool = caches[s].paged_pool();
    bool first_of_pool = pool != nullptr;
    for (index o = 0; o < s && first_of_pool; ++o) first_of_pool = caches[o].paged_pool() != pool;
    if (!first_of_pool) continue;
    index need = 0;
    for (index o = s; o < batch; ++o)
      if (caches[o].paged_pool() == pool) need += caches[o].blocks_needed(cu_seqlens[o + 1] - cu_seqlens[o]);
    require<cache_error>(need <= pool->free_blocks(), who, ": the batch's sequences in one paged pool need ", need,
                         " free blocks of ", pool->block_size(), " tokens together, the pool has ", pool->free_blocks(),
                         " of ", pool->num_blocks());
  }
}

/// What a layer requires of the caches it is given: row widths (named for messages), element type,
/// and whether it may continue a sequence (causal).
struct cache_requirements {
  index key_width = 0, value_width = 0;
  const char* widths_named = "";
  storage_type type = storage_type::f32;
  bool causal = true;
};

/// Checks the caches of a batch before anything is appended: present, distinct, rows of the layer's
/// widths and element type, room for the sequence's new rows, and empty for a non-causal layer.
inline void check_batch_caches(const char* who, const sequence_cache* caches, const index* cu_seqlens, index batch,
                               const cache_requirements& need, index per_token) {
  for (index s = 0; s < batch; ++s) {
    const sequence_cache& c = caches[s];
    require<cache_error>(!c.empty(), who, ": caches[", s, "] holds no cache");
    for (index o = 0; o < s; ++o)
      require<cache_error>(!c.same_as(caches[o]), who, ": caches[", o, "] and caches[", s, "] are the same sequence");
    require<shape_error>(c.key_width() == need.key_width && c.value_width() == need.value_width, who, ": caches[", s,
                         "] rows are ", c.key_width(), "/", c.value_width(), " wide, the layer needs ", need.key_width,
                         "/", need.value_width, " ", need.widths_named);
    // A cache of another element type would be read as what it holds, but the layer's numerics
    // (docs/spec.md §10) and its tolerances are those of its configured type: never mix them silently.
    require<cache_error>(c.storage() == need.type, who, ": caches[", s, "] (",
                         c.paged_pool() ? "a paged_kv_cache" : "a kv_cache", ") holds ", to_string(c.storage()),
                         " rows, the layer's kv_cache_dtype is ", to_string(need.type),
                         " (make the cache from the layer's config)");
    const bool causal = need.causal;
    const index n = cu_seqlens[s + 1] - cu_seqlens[s];
    require<cache_error>(causal || c.size() == 0, who, ": a non-causal layer cannot continue a sequence from a cache (caches[",
                         s, "] holds ", c.size(), " tokens); run it on the whole sequence at once");
    c.check_room(n);
    check_call_rows(who, n, c.size(), per_token);
  }
  check_pool_room(who, caches, cu_seqlens, batch);
}

/// Calls f(pool) once for each paged pool of a batch, in address order (without allocating).
template <class F>
void for_each_pool(const sequence_cache* caches, index batch, F&& f) {
  const paged_kv_cache* last = nullptr;
  const std::less<const paged_kv_cache*> before;
  for (;;) {
    const paged_kv_cache* next = nullptr;
    for (index s = 0; s < batch; ++s) {
      const paged_kv_cache* p = caches[s].paged_pool();
      if (p != nullptr && (last == nullptr || before(last, p)) && (next == nullptr || before(p, next))) next = p;
    }
    if (next == nullptr) return;
    f(*next);
    last = next;
  }
}

/// Holds the locks of every paged pool of a batch while its rows are appended, so that the room
/// checked (again, under the locks: other threads may have taken blocks since the call's first
/// checks) is the room the appends use. Pools are locked in address order, so two batches over the
/// same pools cannot deadlock.
class batch_pool_lock {
 public:
  batch_pool_lock(const char* who, const sequence_cache* caches, const index* cu_seqlens, index batch)
      : caches_(caches), batch_(batch) {
    for_each_pool(caches_, batch_, [](const paged_kv_cache& p) { p.mutex().lock(); });
    try {
      check_pool_room(who, caches, cu_seqlens, batch);
    } catch (...) {
      unlock();
      throw;
    }
  }
  ~batch_pool_lock() { unlock(); }
  batch_pool_lock(const batch_pool_lock&) = delete;
  batch_pool_lock& operator=(const batch_pool_lock&) = delete;

 private:
  void unlock() {
    for_each_pool(caches_, batch_, [](const paged_kv_cache& p) { p.mutex().unlock(); });
    batch_ = 0;
  }
  const sequence_cache* caches_;
  index batch_;
};

/// An f16 cache cannot hold |v| > 65504: refuse the whole call, naming the sequence, before any
/// sequence's rows are appended (a cache's own append checks only its own rows).
template <class Cache>  // sequence_cache or view_sequence
void check_f16_rows(const Cache& c, index seq, const float* rows, index stride, index n, index width,
                    const char* what) {
  if (c.storage() != storage_type::f16) return;
  for (index t = 0; t < n; ++t) {
    const index col = simd::find_f16_out_of_range(rows + t * stride, width);
    require<cache_error>(col == width, "kv_cache_dtype=f16: ", what, " channel ", col, " of token ", c.size() + t,
                         " of sequence ", seq, " is ", col < width ? rows[t * stride + col] : 0.0f,
                         ", outside the f16 range (|v| <= 65504); nothing of the call was appended");
  }
}

/// Appends every sequence's new rows to its cache (sequence s's rows start at k + cu[s]·k_stride
/// and v + cu[s]·v_stride; v null: keys only) after every check has passed: gattn's caches under
/// their pools' locks (batch_pool_lock, which checks the pools' room again).
inline void append_batch(const char* who, sequence_cache* caches, const index* cu, index batch, const float* k,
                         index k_stride, const float* v, index v_stride) {
  const batch_pool_lock hold(who, caches, cu, batch);
  for (index s = 0; s < batch; ++s)
    caches[s].append(k + cu[s] * k_stride, k_stride, v ? v + cu[s] * v_stride : nullptr, v_stride, cu[s + 1] - cu[s]);
}
/// The same into caller-owned blocks (the view was checked whole before the call computed anything).
inline void append_batch(const char*, const view_batch& caches, const index* cu, index batch, const float* k,
                         index k_stride, const float* v, index v_stride) {
  for (index s = 0; s < batch; ++s)
    caches[s].append(k + cu[s] * k_stride, k_stride, v ? v + cu[s] * v_stride : nullptr, v_stride, cu[s + 1] - cu[s]);
  caches.mark_appended();
}

}  // namespace detail

namespace detail {

/// How run_sdpa_problems runs `count` problems on `threads`: one after another with every thread,
/// or (as many problems as threads) one per worker, each serial.
inline bool problems_share_threads(index count, int threads) { return count < threads || count == 1; }

/// The scratch of run_sdpa_problems when the problems run one per worker: a slot per worker, each
/// large enough for the largest problem run serially.
template <class ShapeAt>
worker_scratch_layout serial_problems_layout(index count, int threads, ShapeAt&& shape_at) {
  worker_scratch_layout l;
  for (index i = 0; i < count; ++i) l.slot = std::max(l.slot, sdpa_scratch_floats(shape_at(i), 1));
  l.workers = workers_for(count, threads);
  return l;
}

/// Floats of scratch run_sdpa_problems needs for problems of one shape (`shape`, t_q set per
/// problem), one per sequence s < batch with rows_of(s) > 0 rows.
template <class RowsOf>
index sdpa_batch_scratch_floats(const sdpa_params& shape, index batch, RowsOf&& rows_of, int threads) {
  index count = 0, need = 0;
  for (index s = 0; s < batch; ++s) count += rows_of(s) > 0 ? 1 : 0;
  sdpa_params p = shape;
  if (problems_share_threads(count, threads)) {
    for (index s = 0; s < batch; ++s) {
      p.t_q = rows_of(s);
      need = std::max(need, sdpa_scratch_floats(p, threads));
    }
    return need;
  }
  index s = 0;
  return serial_problems_layout(count, threads, [&](index) {
           while (rows_of(s) == 0) ++s;
           p.t_q = rows_of(s++);
           return p;
         }).floats();
}

/// An upper bound of sdpa_batch_scratch_floats over every batch of at most max_tokens rows in at most
/// max_batch sequences (whatever their cache lengths: the kernel's scratch does not depend on them).
inline index sdpa_reserve_floats(const sdpa_params& shape, index max_tokens, index max_batch, int threads) {
  sdpa_params p = shape;
  index shared = 0, serial = 0;
  for (index t = 1; t <= max_tokens; ++t) {
    p.t_q = t;
    shared = std::max(shared, sdpa_scratch_floats(p, threads));
    if (max_batch > 1) serial = std::max(serial, sdpa_scratch_floats(p, 1));
  }
  worker_scratch_layout l;
  l.slot = serial;
  l.workers = workers_for(max_batch, threads);
  return std::max(shared, max_batch > 1 ? l.floats() : index(0));
}

}  // namespace detail

/// Runs `count` independent SDPA problems on `exec`'s threads: when there are at least as many
/// problems as threads, one problem per worker, each serial (a batch of decodes fills the
/// threads); otherwise one after another, each with all the threads. Deterministic for a fixed
/// batch and context. `scratch` (detail::sdpa_batch_scratch_floats) is the kernel's: each problem
/// sharing the threads uses all of it, each serial problem its worker's slot. The one place a
/// batched kernel entry would replace.
inline void run_sdpa_problems(sdpa_function sdpa, sdpa_params* problems, index count, const execution_context& exec,
                              scratch_span scratch = {}) {
  const int threads = exec.concurrency();
  if (detail::problems_share_threads(count, threads)) {
    for (index i = 0; i < count; ++i) {
      problems[i].threads = threads;
      problems[i].exec = &exec;  // the kernel's work units run on the caller's context
      problems[i].scratch = scratch;
      sdpa(problems[i]);
    }
    return;
  }
  for (index i = 0; i < count; ++i) {
    problems[i].threads = 1;
    problems[i].exec = nullptr;  // serial inside: the context's threads are spread over the problems
    detail::validate(problems[i]);  // before the threads start: an exception cannot cross them
  }
  const detail::worker_scratch_layout layout =
      detail::serial_problems_layout(count, threads, [&](index i) -> const sdpa_params& { return problems[i]; });
  std::vector<float> own;  // stays empty when `scratch` is large enough
  const detail::worker_scratch slots = detail::carve_workers(scratch, layout, own);
  std::exception_ptr error;
  std::mutex error_lock;
  detail::for_each_task(exec, count, layout.workers, [&](index i, index w) {
    try {
      problems[i].scratch = {slots.slot(w), layout.slot};
      sdpa(problems[i]);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(error_lock);
      if (!error) error = std::current_exception();
    }
  });
  if (error) std::rethrow_exception(error);
}

GATTN_NAMESPACE_END  // namespace gattn
