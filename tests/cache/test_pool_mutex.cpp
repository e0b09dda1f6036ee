// Pools shared by threads (cache/pool_mutex.hpp): two threads, each with its own sequences and
// workspace, run batched steps over one paged_kv_cache (one delta_state_pool) while creating,
// forking and releasing sequences; every output is the one a thread alone produces and every block
// (slot) is free at the end. Stale sequence handles are refused after their slot is reused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "gattn/attention/delta_state.hpp"
#include "gattn/cache/paged_kv_cache.hpp"
#include "support/shared_pool_scenario.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_pool_mutex {

namespace {

using gattn::index;

TEST(PoolMutex, TwoThreadsShareOnePagedPool) {
  const gattn::test::shared_pool_result r = gattn::test::shared_paged_pool_run(5000);
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.wrong, 0) << "of " << r.steps << " steps";
  EXPECT_EQ(r.free_after, r.capacity);
}

TEST(PoolMutex, TwoThreadsShareOneDeltaStatePool) {
  const gattn::test::shared_pool_result r = gattn::test::shared_state_pool_run(5000);
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.wrong, 0) << "of " << r.steps << " steps";
  EXPECT_EQ(r.free_after, r.capacity);
}

// The pool's lock is recursive and held by every operation: an engine may hold it over several.
TEST(PoolMutex, AnEngineMayHoldThePoolLockAcrossOperations) {
  gattn::paged_kv_cache pool(8, 4, 4, 4);
  const std::lock_guard<std::recursive_mutex> hold(pool.mutex());
  const auto a = pool.create();
  const float row[4] = {1, 2, 3, 4};
  pool.append(a, row, 4, row, 4, 1);
  EXPECT_EQ(pool.size(a), 1);
  pool.release(a);
  EXPECT_EQ(pool.free_blocks(), 8);
}

template <class F>
std::string cache_error_of(F&& f) {
  try {
    f();
  } catch (const gattn::cache_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no cache_error";
  return "";
}

// After release(a), create() reuses a's slot: a's handle must not reach the new sequence.
TEST(PoolMutex, AReleasedPagedSequenceHandleIsRefusedAfterItsSlotIsReused) {
  gattn::paged_kv_cache pool(8, 4, 4, 4);
  const float row[8] = {1, 2, 3, 4, 5, 6, 7, 8};  // two tokens of width 4
  const auto a = pool.create();
  pool.append(a, row, 4, row, 4, 2);
  pool.release(a);
  const auto b = pool.create();
  EXPECT_NE(b, a);
  EXPECT_EQ(b & 0xffffffff, a & 0xffffffff);  // the same slot, a new generation
  EXPECT_THAT(cache_error_of([&] { pool.append(a, row, 4, row, 4, 1); }), ::testing::HasSubstr("was released"));
  EXPECT_THAT(cache_error_of([&] { (void)pool.size(a); }), ::testing::HasSubstr("was released"));
  EXPECT_THAT(cache_error_of([&] { (void)pool.size(a + 7); }), ::testing::HasSubstr("unknown or released"));
  EXPECT_THROW(pool.release(a), gattn::cache_error);
  EXPECT_THROW((void)pool.fork(a), gattn::cache_error);
  gattn::sdpa_params p;
  EXPECT_THROW(pool.bind(a, p), gattn::cache_error);
  EXPECT_EQ(pool.size(b), 0);  // nothing reached b
  pool.release(b);
  const auto c = pool.create();
  EXPECT_THAT(cache_error_of([&] { (void)pool.size(b); }), ::testing::HasSubstr("was released"));
  EXPECT_EQ(pool.size(c), 0);
}

// The same through a layer: a batch holding a stale handle is refused before anything is appended.
TEST(PoolMutex, ALayerRefusesAStaleHandle) {
  const gattn::gqa_config c = gattn::test::small_gqa(4, 2, 8, 32);
  const gattn::gqa_layer layer(c, gattn::test::random_gqa_weights(c, 3));
  gattn::paged_kv_cache pool(c, 8, 4);
  const index d = c.hidden;
  std::vector<float> x(std::size_t(2 * d), 0.5f), y(x.size());
  const auto a = pool.create();
  gattn::sequence_cache stale(pool, a);
  pool.release(a);
  const auto b = pool.create();
  gattn::layer_workspace ws;
  const index cu[2] = {0, 2};
  EXPECT_THROW(layer.step({x.data(), 2, d, d}, cu, 1, &stale, {y.data(), 2, d, d}, ws), gattn::cache_error);
  EXPECT_EQ(pool.size(b), 0);
  EXPECT_EQ(pool.free_blocks(), 8);
}

}  // namespace

}  // namespace test_pool_mutex
