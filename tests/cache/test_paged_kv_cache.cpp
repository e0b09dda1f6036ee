// paged_kv_cache (docs/spec.md §11): append/size/bind round trips for f32/bf16/f16, GQA and MLA; fork
// shares blocks and copy-on-write isolates parent and child; release returns blocks; exhaustion
// and f16 range errors change nothing; bad ids; bind gives the kernel the contiguous cache's answer.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gattn/cache/kv_cache.hpp"
#include "gattn/cache/paged_kv_cache.hpp"
#include "gattn/kernel/kernel.hpp"
#include "gattn/simd/convert.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_paged_kv_cache {

namespace {

using gattn::index;
using gattn::paged_kv_cache;
using gattn::storage_type;

std::vector<float> random_rows(index n, index width, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(std::size_t(std::max<index>(n * width, 1)));
  for (auto& v : x) v = nd(gen);
  return x;
}

float stored(storage_type s, float x) {
  if (s == storage_type::bf16) return gattn::bf16_to_float(gattn::round_to_bf16(x));
  if (s == storage_type::f16) return gattn::f16_to_float(gattn::round_to_f16(x));
  return x;
}

// Token t of s holds row `row` of (k, v): compared through widen_key/widen_value.
void expect_token(const paged_kv_cache& c, paged_kv_cache::sequence_id s, index t, const std::vector<float>& k,
                  const std::vector<float>& v, index row) {
  std::vector<float> got(std::size_t(c.key_width()));
  c.widen_key(s, t, got.data());
  for (index i = 0; i < c.key_width(); ++i)
    ASSERT_EQ(got[std::size_t(i)], stored(c.storage(), k[std::size_t(row * c.key_width() + i)])) << "key t=" << t;
  if (c.value_width() == 0) return;
  got.resize(std::size_t(c.value_width()));
  c.widen_value(s, t, got.data());
  for (index i = 0; i < c.value_width(); ++i)
    ASSERT_EQ(got[std::size_t(i)], stored(c.storage(), v[std::size_t(row * c.value_width() + i)])) << "value t=" << t;
}

template <class F>
void expect_cache_error(F&& f, const std::string& needle) {
  try {
    f();
    FAIL() << "no cache_error (expected one mentioning '" << needle << "')";
  } catch (const gattn::cache_error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(PagedKvCache, AppendSizeAndWidenRoundTripInSeveralCalls) {
  for (storage_type s : {storage_type::f32, storage_type::bf16, storage_type::f16})
    for (index bs : {1, 3, 16}) {
      paged_kv_cache c(40, bs, 12, 8, s);
      const auto k = random_rows(40, 12, 1), v = random_rows(40, 8, 2);
      const auto a = c.create(), b = c.create();
      index done = 0;
      for (index n : {1, 5, 0, 2, 9}) {  // interleaved appends to two sequences
        c.append(a, k.data() + done * 12, 12, v.data() + done * 8, 8, n);
        c.append(b, k.data() + (39 - done) * 12, -12, v.data() + (39 - done) * 8, -8, n);
        done += n;
      }
      ASSERT_EQ(c.size(a), done);
      ASSERT_EQ(c.size(b), done);
      EXPECT_EQ(c.free_blocks(), 40 - 2 * ((done + bs - 1) / bs));
      for (index t = 0; t < done; ++t) {
        expect_token(c, a, t, k, v, t);
        expect_token(c, b, t, k, v, 39 - t);
      }
    }
}

TEST(PagedKvCache, ForkSharesBlocksAndCopiesOnWriteIntoASharedPartialBlock) {
  for (storage_type s : {storage_type::f32, storage_type::bf16}) {
    paged_kv_cache c(16, 4, 6, 6, s);
    const auto k = random_rows(40, 6, 3), v = random_rows(40, 6, 4);
    const auto parent = c.create();
    c.append(parent, k.data(), 6, v.data(), 6, 6);  // blocks: [4 full][2 of 4]
    EXPECT_EQ(c.free_blocks(), 14);
    const auto child = c.fork(parent);
    EXPECT_EQ(c.size(child), 6);
    EXPECT_EQ(c.free_blocks(), 14);  // nothing copied yet
    EXPECT_EQ(c.block_references(parent, 0), 2);
    EXPECT_EQ(c.block_references(child, 1), 2);
    c.check_room(child, 2);  // the copy of the shared last block fits
    c.append(child, k.data() + 20 * 6, 6, v.data() + 20 * 6, 6, 3);  // copy of block 1, then one new block
    EXPECT_EQ(c.free_blocks(), 12);
    EXPECT_EQ(c.block_references(parent, 0), 2);  // the full block stays shared
    EXPECT_EQ(c.block_references(parent, 1), 1);
    EXPECT_EQ(c.block_references(child, 1), 1);
    c.append(parent, k.data() + 30 * 6, 6, v.data() + 30 * 6, 6, 2);  // parent's block 1 is its own now: in place
    EXPECT_EQ(c.free_blocks(), 12);
    ASSERT_EQ(c.size(parent), 8);
    ASSERT_EQ(c.size(child), 9);
    for (index t = 0; t < 6; ++t) {
      expect_token(c, parent, t, k, v, t);
      expect_token(c, child, t, k, v, t);
    }
    for (index t = 6; t < 8; ++t) expect_token(c, parent, t, k, v, 30 + t - 6);
    for (index t = 6; t < 9; ++t) expect_token(c, child, t, k, v, 20 + t - 6);
    // The parent appends after forking a second child: the child keeps the parent's old tokens.
    const auto child2 = c.fork(parent);  // parent has 8 tokens: 2 full blocks, nothing partial
    c.append(parent, k.data(), 6, v.data(), 6, 1);
    EXPECT_EQ(c.size(child2), 8);
    for (index t = 0; t < 8; ++t) expect_token(c, child2, t, k, v, t < 6 ? t : 30 + t - 6);
    expect_token(c, parent, 8, k, v, 0);
  }
}

TEST(PagedKvCache, ReleaseReturnsBlocksOnlyWhenNoReferenceIsLeft) {
  paged_kv_cache c(8, 2, 4, 4);
  const auto k = random_rows(16, 4, 5);
  const auto a = c.create();
  c.append(a, k.data(), 4, k.data(), 4, 5);  // 3 blocks
  const auto b = c.fork(a);
  EXPECT_EQ(c.free_blocks(), 5);
  c.release(a);
  EXPECT_EQ(c.free_blocks(), 5);  // b still holds them
  for (index t = 0; t < 5; ++t) expect_token(c, b, t, k, k, t);
  c.release(b);
  EXPECT_EQ(c.free_blocks(), 8);
  const auto d = c.create();  // slots are reused, under a new generation
  EXPECT_TRUE((d & 0xffffffff) == (a & 0xffffffff) || (d & 0xffffffff) == (b & 0xffffffff));
  EXPECT_TRUE(d != a && d != b);
  EXPECT_EQ(c.size(d), 0);
}

TEST(PagedKvCache, ExhaustionIsAnErrorBeforeAnythingIsAppended) {
  paged_kv_cache c(4, 3, 4, 4);
  const auto k = random_rows(20, 4, 6);
  const auto a = c.create();
  c.append(a, k.data(), 4, k.data(), 4, 7);  // 3 blocks, last one partial (1 of 3)
  const auto b = c.fork(a);
  // b's 2 more tokens fit in its last block but that block is shared: the copy needs a block.
  c.check_room(b, 2);
  c.append(b, k.data(), 4, k.data(), 4, 2);  // takes the last free block (the copy)
  EXPECT_EQ(c.free_blocks(), 0);
  // a's last block is its own again (b copied): 2 tokens fit in place, a third needs a block.
  c.check_room(a, 2);
  expect_cache_error([&] { c.append(a, k.data(), 4, k.data(), 4, 3); }, "needs 1 free blocks");
  expect_cache_error([&] { c.append(b, k.data(), 4, k.data(), 4, 1); }, "the pool has 0 of 4");
  EXPECT_EQ(c.size(a), 7);
  EXPECT_EQ(c.size(b), 9);
  EXPECT_EQ(c.free_blocks(), 0);
  for (index t = 0; t < 7; ++t) expect_token(c, a, t, k, k, t);
  expect_cache_error([&] { c.check_room(a, -1); }, "n=-1");
}

TEST(PagedKvCache, F16OutOfRangeAppendsNothingAndTakesNoBlock) {
  paged_kv_cache c(6, 2, 4, 4, storage_type::f16);
  auto k = random_rows(5, 4, 7);
  const auto a = c.create();
  c.append(a, k.data(), 4, k.data(), 4, 1);
  const index free = c.free_blocks();
  k[3 * 4 + 2] = 70000.0f;  // token 3 of this call, channel 2 of the values
  std::vector<float> v = k;
  expect_cache_error([&] { c.append(a, k.data() + 4, 4, v.data() + 4, 4, 4); }, "outside the f16 range");
  EXPECT_EQ(c.size(a), 1);
  EXPECT_EQ(c.free_blocks(), free);
}

TEST(PagedKvCache, RefusesUnknownAndReleasedIds) {
  paged_kv_cache c(4, 2, 4, 4);
  const auto a = c.create();
  c.release(a);
  float row[4] = {};
  gattn::sdpa_params p;
  expect_cache_error([&] { (void)c.size(a); }, "sequence id 0 (slot 0, generation 0) was released");
  expect_cache_error([&] { (void)c.size(3); }, "sequence id 3 is unknown or released");
  expect_cache_error([&] { c.append(a, row, 4, row, 4, 1); }, "sequence id 0");
  expect_cache_error([&] { c.release(a); }, "sequence id 0");
  expect_cache_error([&] { (void)c.fork(7); }, "sequence id 7");
  expect_cache_error([&] { c.bind(-1, p); }, "sequence id -1");
  const auto b = c.create();
  expect_cache_error([&] { c.widen_key(b, 0, row); }, "token 0 of sequence");
  EXPECT_THROW(paged_kv_cache(0, 4, 4, 4), gattn::config_error);
  EXPECT_THROW(paged_kv_cache(4, 0, 4, 4), gattn::config_error);
}

// A GQA and an MLA-latent sequence, paged (after a fork and copy-on-write) and contiguous, bound
// into the kernel: the same attention output, to 1e-5 of its largest value.
TEST(PagedKvCache, BindGivesTheKernelTheContiguousCachesAnswer) {
  for (storage_type s : {storage_type::f32, storage_type::bf16, storage_type::f16})
    for (bool mla : {false, true}) {
      const index hkv = mla ? 1 : 2, d = 16, hq = 4, dv = mla ? 12 : d, n = 37;
      const index kw = hkv * d, vw = mla ? 0 : kw;
      paged_kv_cache pc(40, 3, kw, vw, s);
      gattn::kv_cache cc(n, kw, vw, s);
      const auto k = random_rows(n, kw, 8), v = random_rows(n, std::max<index>(vw, 1), 9), q = random_rows(2, hq * d, 10);
      const auto other = pc.create();
      pc.append(other, k.data(), kw, v.data(), vw, 10);
      const auto seq = pc.fork(other);
      pc.append(seq, k.data() + 10 * kw, kw, v.data() + 10 * vw, vw, n - 10);
      pc.append(other, k.data(), 0, v.data(), 0, 4);  // the parent diverges; seq must not see it
      cc.append(k.data(), kw, v.data(), vw, n);
      std::vector<float> out_p(std::size_t(2 * hq * dv)), out_c(out_p.size());
      auto params = [&](float* out) {
        gattn::sdpa_params p;
        p.t_q = 2; p.q_heads = hq; p.kv_heads = hkv; p.d_qk = d; p.d_v = dv;
        p.q = q.data(); p.q_token_stride = hq * d; p.q_head_stride = d;
        p.k_head_stride = p.v_head_stride = d;  // raw-width caches leave head strides alone
        p.out = out; p.out_token_stride = hq * dv; p.out_head_stride = dv;
        p.scale = 0.25f;
        return p;
      };
      auto pp = params(out_p.data());
      pc.bind(seq, pp);
      auto pcn = params(out_c.data());
      cc.bind(pcn);
      ASSERT_EQ(pp.t_k, n);
      ASSERT_EQ(pcn.t_k, n);
      if (mla) {
        ASSERT_EQ(pp.k_head_stride, 0);
      }
      gattn::fused_sdpa(pp);
      gattn::fused_sdpa(pcn);
      double ymax = 0, err = 0;
      for (std::size_t i = 0; i < out_c.size(); ++i) {
        ymax = std::max(ymax, std::fabs(double(out_c[i])));
        err = std::max(err, std::fabs(double(out_p[i]) - double(out_c[i])));
      }
      EXPECT_LE(err, 1e-5 * ymax) << gattn::to_string(s) << (mla ? " mla" : " gqa");
    }
}

}  // namespace

}  // namespace test_paged_kv_cache
