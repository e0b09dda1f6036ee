// The cache stream's prefetch schedules: for every layout the shares of one token group (prefill)
// cover exactly the lines of the slices the kernel reads `ahead` tokens later, in address order,
// and one head's slice lines (decode) exactly that head's slices; neither reaches past the view.
// (A head-major view once made every call walk the whole cache.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "gattn/kernel/cache_stream.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_cache_stream {

namespace {

using gattn::index;
using gattn::detail::cache_stream;

struct layout {
  const char* name;
  index heads, d, token_stride, head_stride;  // in elements
};

// Lines of head h's slices of tokens [t0, t0 + n).
template <class T>
std::set<std::uintptr_t> head_lines(const T* base, const layout& l, index h, index t0, index n) {
  std::set<std::uintptr_t> lines;
  for (index t = t0; t < t0 + n; ++t) {
    const T* slice = base + t * l.token_stride + h * l.head_stride;
    for (index c = 0; c < l.d; ++c) lines.insert(reinterpret_cast<std::uintptr_t>(slice + c) & ~std::uintptr_t(63));
  }
  return lines;
}

// Lines of the slices of tokens [t0, t0 + n) that a kernel reads (every head's).
template <class T>
std::set<std::uintptr_t> expected_lines(const T* base, const layout& l, index t0, index n) {
  std::set<std::uintptr_t> lines;
  for (index h = 0; h < (l.head_stride == 0 ? 1 : l.heads); ++h) {
    const std::set<std::uintptr_t> one = head_lines(base, l, h, t0, n);
    lines.insert(one.begin(), one.end());
  }
  return lines;
}

// A cache of 50 tokens in layout l, its first slice off a line boundary (slices need not start on
// one); T = float, or std::uint16_t for a bf16/f16 cache: strides count elements, lines count bytes.
template <class T>
struct flat_cache {
  static constexpr index t_k = 50;
  std::vector<T> cache;
  const T* base;
  std::uintptr_t lo, hi;  // the view's lines
  explicit flat_cache(const layout& l) {
    const index elements = (t_k - 1) * l.token_stride + (l.heads - 1) * l.head_stride + l.d;
    cache.resize(std::size_t(elements) + 16);
    base = cache.data() + 3;
    lo = reinterpret_cast<std::uintptr_t>(base) & ~std::uintptr_t(63);
    hi = reinterpret_cast<std::uintptr_t>(base + elements);
  }
  /// Calls f(stream, t, n) for every prefetch distance, first token and token count tested.
  template <class F>
  void each_case(const layout& l, F&& f) const {
    for (index ahead_bytes : {index(0), index(4096), index(1) << 17}) {
      const cache_stream s(base, l.token_stride, l.heads, l.head_stride, l.d, t_k, ahead_bytes);
      ASSERT_GE(s.ahead, 1);
      for (index t : {index(0), index(7), index(44), index(49)})
        for (index n : {index(1), index(4), index(8)}) f(s, t, n);
    }
  }
};

class CacheStream : public ::testing::TestWithParam<layout> {};

// The lines the `parts` shares of one token group prefetch, each checked to be a whole line inside
// [lo, hi); also passed to on_line(address) in the order they come.
template <class OnLine>
std::set<std::uintptr_t> share_lines(const cache_stream& s, index t, index n, index parts, std::uintptr_t lo,
                                     std::uintptr_t hi, OnLine&& on_line) {
  std::set<std::uintptr_t> got;
  for (index part = 0; part < parts; ++part)
    s.for_each_line(t, n, part, parts, [&](const char* line) {
      const auto a = reinterpret_cast<std::uintptr_t>(line);
      EXPECT_EQ(a % 64, 0u);
      EXPECT_GE(a, lo);
      EXPECT_LT(a, hi);
      got.insert(a);
      on_line(a);
    });
  return got;
}

// (A stream that counted floats would prefetch twice the bytes of a 2-byte cache and fail `hi`.)
template <class T>
void check_shares(const layout& l) {
  const flat_cache<T> fc(l);
  fc.each_case(l, [&](const cache_stream& s, index t, index n) {
    for (index parts : {index(1), index(3), l.heads}) {
      std::uintptr_t previous = 0;
      std::size_t visits = 0;
      const std::set<std::uintptr_t> got = share_lines(s, t, n, parts, fc.lo, fc.hi, [&](std::uintptr_t a) {
        // Address order across the shares (a run may revisit the line it starts in).
        EXPECT_GE(a + 64, previous) << l.name;
        previous = std::max(previous, a);
        ++visits;
      });
      const index t0 = t + s.ahead, in_view = std::max<index>(0, std::min(n, fc.t_k - t0));
      const std::set<std::uintptr_t> want = expected_lines(fc.base, l, t0, in_view);
      EXPECT_EQ(got, want) << l.name << " t=" << t << " n=" << n << " parts=" << parts;
      // Bounded by the bytes read: at most one extra line per slice (a slice that straddles lines).
      const index slices = in_view * (l.head_stride == 0 ? 1 : l.heads);
      EXPECT_LE(visits, want.size() + std::size_t(slices)) << l.name;
    }
  });
}

// The decode path's prefetch (for_each_slice_line): head h's slices of the n tokens `ahead` later,
// no other line, none past the view, token by token.
template <class T>
void check_slice_lines(const layout& l) {
  const flat_cache<T> fc(l);
  fc.each_case(l, [&](const cache_stream& s, index t, index n) {
    for (index h = 0; h < (l.head_stride == 0 ? 1 : l.heads); ++h) {
      std::set<std::uintptr_t> got;
      std::uintptr_t previous = 0;
      std::size_t visits = 0;
      s.for_each_slice_line(t, n, h, [&](const char* line) {
        const auto a = reinterpret_cast<std::uintptr_t>(line);
        EXPECT_EQ(a % 64, 0u);
        EXPECT_GE(a, fc.lo);
        EXPECT_LT(a, fc.hi);
        EXPECT_GE(a + 64, previous) << l.name;  // one head's slices ascend with the token
        previous = std::max(previous, a);
        got.insert(a);
        ++visits;
      });
      const index t0 = t + s.ahead, in_view = std::max<index>(0, std::min(n, fc.t_k - t0));
      const std::set<std::uintptr_t> want = head_lines(fc.base, l, h, t0, in_view);
      EXPECT_EQ(got, want) << l.name << " t=" << t << " n=" << n << " h=" << h;
      EXPECT_LE(visits, want.size() + std::size_t(in_view)) << l.name;
    }
  });
}

// A decode range from token t: its start (the `ahead` tokens no call of the range prefetches) in
// address order, and with the calls' own slices `ahead` later, every line of the range exactly.
template <class T>
void check_range_start(const layout& l) {
  const flat_cache<T> fc(l);
  fc.each_case(l, [&](const cache_stream& s, index t, index) {
    std::set<std::uintptr_t> got;
    std::uintptr_t previous = 0;
    s.for_each_range_start_line(t, [&](const char* line) {
      const auto a = reinterpret_cast<std::uintptr_t>(line);
      EXPECT_EQ(a % 64, 0u);
      EXPECT_GE(a, fc.lo);
      EXPECT_LT(a, fc.hi);
      EXPECT_GE(a + 64, previous) << l.name;
      previous = std::max(previous, a);
      got.insert(a);
    });
    const index in_view = std::min(s.ahead, fc.t_k - t);
    EXPECT_EQ(got, expected_lines(fc.base, l, t, in_view)) << l.name << " t=" << t << " ahead=" << s.ahead;
    for (index u = t; u < fc.t_k; ++u)  // calls of one key each, every head
      for (index h = 0; h < (l.head_stride == 0 ? 1 : l.heads); ++h)
        s.for_each_slice_line(u, 1, h, [&](const char* line) { got.insert(reinterpret_cast<std::uintptr_t>(line)); });
    EXPECT_EQ(got, expected_lines(fc.base, l, t, fc.t_k - t)) << l.name << " t=" << t;
  });
}

TEST_P(CacheStream, RangeStartAndSliceLinesCoverTheRange) {
  check_range_start<float>(GetParam());
  check_range_start<std::uint16_t>(GetParam());
}

TEST_P(CacheStream, SharesCoverExactlyTheSlicesAheadInAddressOrder) { check_shares<float>(GetParam()); }

TEST_P(CacheStream, SliceLinesAreOneHeadsSlicesAhead) {
  check_slice_lines<float>(GetParam());
  check_slice_lines<std::uint16_t>(GetParam());
}

TEST_P(CacheStream, TwoByteElementsCoverTheirOwnBytes) { check_shares<std::uint16_t>(GetParam()); }

// A paged pool of token-major blocks (heads 4, d 24, 45 tokens) in a shuffled order: block b of the
// sequence is block (7b + 3) mod (blocks + 2) of a pool of blocks + 2, no two the same (7 is prime
// to every pool size below).
template <class T>
struct paged_pool {
  static constexpr index heads = 4, d = 24, token_stride = heads * d, t_k = 45;
  index block_size, blocks, block_stride;
  std::vector<std::int32_t> table;
  std::vector<T> pool;
  const T* base;
  std::uintptr_t lo, hi;  // the pool's lines
  explicit paged_pool(index bs)
      : block_size(bs), blocks((t_k + bs - 1) / bs), block_stride(bs * token_stride), table(std::size_t(blocks)) {
    for (index b = 0; b < blocks; ++b) table[std::size_t(b)] = std::int32_t((b * 7 + 3) % (blocks + 2));
    pool.resize(std::size_t((blocks + 2) * block_stride) + 16);
    base = pool.data() + 5;
    lo = reinterpret_cast<std::uintptr_t>(base) & ~std::uintptr_t(63);
    hi = reinterpret_cast<std::uintptr_t>(base + (blocks + 2) * block_stride);
  }
  cache_stream stream(index ahead_bytes) const {
    return cache_stream(base, token_stride, heads, d, d, t_k, ahead_bytes).with_blocks(table.data(), block_size, block_stride);
  }
  /// Calls f(stream, t, n) for every prefetch distance, first token and token count tested.
  template <class F>
  void each_case(F&& f) const {
    for (index ahead_bytes : {index(0), index(1000), index(1) << 17})
      for (index t : {index(0), index(5), index(30), index(44)})
        for (index n : {index(1), index(4), index(8)}) f(stream(ahead_bytes), t, n);
  }
  /// Adds the lines of head h's slice of token tok, found through the table.
  void add_slice_lines(index tok, index h, std::set<std::uintptr_t>& lines) const {
    const T* slice = base + index(table[std::size_t(tok / block_size)]) * block_stride + (tok % block_size) * token_stride + h * d;
    for (index c = 0; c < d; ++c) lines.insert(reinterpret_cast<std::uintptr_t>(slice + c) & ~std::uintptr_t(63));
  }
};

// The shares of a token group cover exactly the lines of its slices, found through the block
// table, whatever the block size (1 token, a share inside one block, shares that cross blocks).
template <class T>
void check_paged_shares(index block_size) {
  const paged_pool<T> pp(block_size);
  pp.each_case([&](const cache_stream& s, index t, index n) {
    for (index parts : {index(1), index(3), pp.heads}) {
      const std::set<std::uintptr_t> got = share_lines(s, t, n, parts, pp.lo, pp.hi, [](std::uintptr_t) {});
      std::set<std::uintptr_t> want;
      for (index tok = t + s.ahead; tok < std::min(t + s.ahead + n, pp.t_k); ++tok)
        for (index h = 0; h < pp.heads; ++h) pp.add_slice_lines(tok, h, want);
      EXPECT_EQ(got, want) << "block_size=" << block_size << " t=" << t << " n=" << n << " parts=" << parts;
    }
  });
}

// The decode path's prefetch through the block table: head h's slices of the tokens ahead.
template <class T>
void check_paged_slice_lines(index block_size) {
  const paged_pool<T> pp(block_size);
  pp.each_case([&](const cache_stream& s, index t, index n) {
    for (index h = 0; h < pp.heads; ++h) {
      std::set<std::uintptr_t> got, want;
      s.for_each_slice_line(t, n, h, [&](const char* line) {
        const auto a = reinterpret_cast<std::uintptr_t>(line);
        EXPECT_GE(a, pp.lo);
        EXPECT_LT(a, pp.hi);
        got.insert(a);
      });
      for (index tok = t + s.ahead; tok < std::min(t + s.ahead + n, pp.t_k); ++tok) pp.add_slice_lines(tok, h, want);
      EXPECT_EQ(got, want) << "block_size=" << block_size << " t=" << t << " n=" << n << " h=" << h;
    }
  });
}

TEST(CacheStreamPaged, SliceLinesFollowTheBlockTable) {
  for (index block_size : {index(1), index(3), index(16), index(64)}) {
    check_paged_slice_lines<float>(block_size);
    check_paged_slice_lines<std::uint16_t>(block_size);
  }
}

// A range's start through the block table: the slices of its first `ahead` tokens, in the pool.
template <class T>
void check_paged_range_start(index block_size) {
  const paged_pool<T> pp(block_size);
  pp.each_case([&](const cache_stream& s, index t, index) {
    std::set<std::uintptr_t> got, want;
    s.for_each_range_start_line(t, [&](const char* line) {
      const auto a = reinterpret_cast<std::uintptr_t>(line);
      EXPECT_GE(a, pp.lo);
      EXPECT_LT(a, pp.hi);
      got.insert(a);
    });
    for (index tok = t; tok < std::min(t + s.ahead, pp.t_k); ++tok)
      for (index h = 0; h < pp.heads; ++h) pp.add_slice_lines(tok, h, want);
    EXPECT_EQ(got, want) << "block_size=" << block_size << " t=" << t;
  });
}

TEST(CacheStreamPaged, RangeStartFollowsTheBlockTable) {
  for (index block_size : {index(1), index(3), index(16), index(64)}) {
    check_paged_range_start<float>(block_size);
    check_paged_range_start<std::uint16_t>(block_size);
  }
}

TEST(CacheStreamPaged, SharesCoverExactlyTheSlicesOfTheBlocks) {
  for (index block_size : {index(1), index(3), index(16), index(64)}) {
    check_paged_shares<float>(block_size);
    check_paged_shares<std::uint16_t>(block_size);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, CacheStream,
    ::testing::Values(layout{"token_major", 8, 16, 8 * 16, 16}, layout{"token_major_padded", 4, 20, 4 * 20 + 12, 20},
                      layout{"head_major", 4, 16, 16, 50 * 16}, layout{"head_major_capacity", 3, 24, 24, 64 * 24 + 8},
                      layout{"mla_shared_row", 16, 36, 36, 0}, layout{"single_head", 1, 64, 64, 0}),
    [](const ::testing::TestParamInfo<layout>& info) { return std::string(info.param.name); });

}  // namespace

}  // namespace test_cache_stream
