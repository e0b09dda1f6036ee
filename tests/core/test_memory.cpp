// Streamed (cache) allocation: alignment, huge-page alignment from 2 MiB up, std::vector use,
// and the overflow guard.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <new>

#include "gattn/cache/kv_cache.hpp"
#include "gattn/core/memory.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_memory {

namespace {

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

TEST(StreamedMemory, SmallBuffersAre64ByteAligned) {
  for (std::size_t bytes : {std::size_t(0), std::size_t(1), std::size_t(100), std::size_t(4096), std::size_t(1) << 20}) {
    void* p = gattn::allocate_streamed(bytes);
    EXPECT_EQ(address(p) % 64, 0u) << bytes;
    std::free(p);
  }
}

TEST(StreamedMemory, LargeBuffersAreHugePageAligned) {
  for (std::size_t bytes : {gattn::huge_page_bytes, gattn::huge_page_bytes + 1, std::size_t(5) << 20}) {
    auto* p = static_cast<unsigned char*>(gattn::allocate_streamed(bytes));
    EXPECT_EQ(address(p) % gattn::huge_page_bytes, 0u) << bytes;
    p[0] = 1;
    p[bytes - 1] = 2;  // the whole requested range is usable (ASan checks the bounds)
    EXPECT_EQ(p[0] + p[bytes - 1], 3);
    std::free(p);
  }
}

TEST(StreamedMemory, VectorAndCacheUseIt) {
  gattn::streamed_vector<float> v(std::size_t(3) << 20, 1.5f);  // 12 MiB
  EXPECT_EQ(address(v.data()) % gattn::huge_page_bytes, 0u);
  EXPECT_EQ(v.back(), 1.5f);
  gattn::kv_cache cache(8192, 8 * 128, 8 * 128);  // 32 MiB of keys
  EXPECT_EQ(address(cache.key(0)) % gattn::huge_page_bytes, 0u);
  EXPECT_EQ(cache.key(8191)[8 * 128 - 1], 0.0f);  // value-initialised
}

TEST(StreamedMemory, OverflowingCountThrows) {
  gattn::streamed_allocator<float> a;
  EXPECT_THROW((void)a.allocate(std::numeric_limits<std::size_t>::max() / 2), std::bad_array_new_length);
}

// Rounding a size just below SIZE_MAX up to the alignment used to wrap around to 0, and a
// 2 MiB buffer came back for the request.
TEST(StreamedMemory, SizesThatWrapWhenRoundedThrow) {
  const std::size_t max = std::numeric_limits<std::size_t>::max();
  EXPECT_THROW((void)gattn::allocate_streamed(max - 5), std::bad_alloc);
  EXPECT_THROW((void)gattn::allocate_streamed(max - gattn::huge_page_bytes + 2), std::bad_alloc);
  gattn::streamed_allocator<float> a;
  EXPECT_THROW((void)a.allocate(max / sizeof(float)), std::bad_alloc);
}

}  // namespace

}  // namespace test_memory
