// Caller-owned scratch lent to one call (a layer lends its workspace's), and the aligned carving
// of per-worker slots out of it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "gattn/core/execution.hpp"
#include "gattn/core/types.hpp"

GATTN_NAMESPACE_BEGIN

/// `size` floats at `data`, owned by the caller and lent to one call: the call writes them and
/// leaves nothing meaningful behind. A call given less than it needs (or nothing) allocates for
/// itself instead, so only calls whose scratch was sized ahead (a layer's reserve) are
/// allocation-free. Two calls running at once need two spans.
struct scratch_span {
  float* data = nullptr;
  index size = 0;
};

namespace detail {

/// Floats an array of n takes in carved scratch: rounded up to 16 (64 bytes), so that every array
/// carved after it stays 64-byte aligned.
inline index scratch_round(index n) { return (n + 15) / 16 * 16; }

/// Slack a scratch size adds for aligning its start to 64 bytes.
constexpr index scratch_align_slack = 16;

/// The 64-byte aligned start of `need` floats of scratch (need includes scratch_align_slack): the
/// caller's span when it holds that many, else `own` grown to them (the call's own allocation).
inline float* aligned_scratch(scratch_span given, index need, std::vector<float>& own) {
  float* base = given.data;
  if (base == nullptr || given.size < need) {
    own.resize(std::size_t(need));
    base = own.data();
  }
  const auto addr = reinterpret_cast<std::uintptr_t>(base);
  return base + ((64 - addr % 64) % 64) / sizeof(float);
}

/// A call's scratch: `shared` floats for the calling thread (e.g. partial results the workers fill
/// and the caller merges), then `workers` slots of `slot` floats, one per worker index.
struct worker_scratch_layout {
  index shared = 0, slot = 0, workers = 1;
  /// Floats the call needs, the alignment slack included.
  index floats() const { return scratch_round(shared) + workers * scratch_round(slot) + scratch_align_slack; }
};

/// The carved regions of a worker_scratch_layout.
struct worker_scratch {
  float* shared = nullptr;
  float* slots = nullptr;
  index slot_stride = 0;
  float* slot(index worker) const { return slots + worker * slot_stride; }
};

/// Carves `layout` out of the caller's span (or out of `own`, grown for the call, when the span is
/// too small).
inline worker_scratch carve_workers(scratch_span given, const worker_scratch_layout& layout, std::vector<float>& own) {
  float* base = aligned_scratch(given, layout.floats(), own);
  return {base, base + scratch_round(layout.shared), scratch_round(layout.slot)};
}

/// Workers a loop of n tasks keeps busy on `concurrency` threads (>= 1).
inline index workers_for(index n, int concurrency) {
  return std::max<index>(1, std::min<index>(n, index(std::max(1, concurrency))));
}

/// Calls body(task, worker) for every task in [0, n): `workers` workers run on exec's threads (each
/// worker index once) and take tasks in order from a shared counter, so each task finds its
/// worker's scratch slot to itself, whichever thread runs it, and results do not depend on the
/// schedule. body must not throw.
template <class F>
void for_each_task(const execution_context& exec, index n, index workers, F&& body) {
  if (n <= 0) return;
  if (workers <= 1) {
    for (index i = 0; i < n; ++i) body(i, index(0));
    return;
  }
  std::atomic<index> next{0};
  exec.parallel_for(workers, [&](index w) {
    for (index i = next.fetch_add(1, std::memory_order_relaxed); i < n; i = next.fetch_add(1, std::memory_order_relaxed))
      body(i, w);
  });
}

}  // namespace detail
GATTN_NAMESPACE_END  // namespace gattn
