// Tests of gattn/kernel/online_softmax.hpp on every arch: the rescale / accumulate / end-tile steps
// against a direct softmax in double, their guards (a row that has seen no key, a max that does not
// move, masked scores), softmax_row's no-key answers, and the split-KV merge (split order, empty
// splits skipped, in place).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gattn/kernel/online_softmax.hpp"
#include "support/kernel_sweep.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_online_softmax {

namespace {

using gattn::index;
constexpr float ninf = -std::numeric_limits<float>::infinity();

/// Lane 0 of b (every test fills all lanes with the same value).
template <class B>
float lane0(const B& b) {
  alignas(64) float tmp[64];
  gattn::simd::store(tmp, b);
  return tmp[0];
}

TEST(OnlineSoftmax, RescaleGuardsOnEveryArch) {
  kernel_test::for_each_arch([](auto arch) {
    using B = gattn::simd::batch<float, decltype(arch)>;
    const std::string name = gattn::arch_name<decltype(arch)>();
    gattn::online_softmax_state<B> st;
    B m_use;
    // Guard 1: no key seen and a tile of masked scores: m stays -inf, m_use = 0 (not -inf), and
    // guard 2: the max did not move (-inf == -inf), so alpha is exactly 1.
    B alpha = st.rescale(B(ninf), m_use);
    EXPECT_EQ(lane0(st.m), ninf) << name;
    EXPECT_EQ(lane0(m_use), 0.0f) << name;
    EXPECT_EQ(lane0(alpha), 1.0f) << name;
    // The first visible key: the old max is -inf, so alpha = exp(-inf) = 0.
    alpha = st.rescale(B(2.5f), m_use);
    EXPECT_EQ(lane0(st.m), 2.5f) << name;
    EXPECT_EQ(lane0(m_use), 2.5f) << name;
    EXPECT_EQ(lane0(alpha), 0.0f) << name;
    // A tile whose max is lower: the max does not move, alpha is exactly 1.
    alpha = st.rescale(B(-3.0f), m_use);
    EXPECT_EQ(lane0(st.m), 2.5f) << name;
    EXPECT_EQ(lane0(alpha), 1.0f) << name;
    // A larger max: alpha = exp(m_old - m_new).
    alpha = st.rescale(B(4.0f), m_use);
    EXPECT_EQ(lane0(st.m), 4.0f) << name;
    EXPECT_NEAR(lane0(alpha), std::exp(-1.5), 1e-6) << name;
  });
}

TEST(OnlineSoftmax, AccumulateAndEndTileOnEveryArch) {
  kernel_test::for_each_arch([](auto arch) {
    using B = gattn::simd::batch<float, decltype(arch)>;
    const std::string name = gattn::arch_name<decltype(arch)>();
    B sum(0.0f);
    // A masked score (-inf) gives p = 0 exactly and leaves the sum alone.
    EXPECT_EQ(lane0(gattn::online_softmax_state<B>::accumulate(B(ninf), B(1.0f), sum)), 0.0f) << name;
    EXPECT_EQ(lane0(sum), 0.0f) << name;
    // The max itself gives p = 1 (within the fast exp's error); a very negative finite score
    // underflows to 0 without a NaN.
    EXPECT_NEAR(lane0(gattn::online_softmax_state<B>::accumulate(B(1.0f), B(1.0f), sum)), 1.0f, 1.2e-7) << name;
    EXPECT_EQ(lane0(gattn::online_softmax_state<B>::accumulate(B(-std::numeric_limits<float>::max()), B(1.0f), sum)),
              0.0f)
        << name;
    EXPECT_NEAR(lane0(sum), 1.0f, 1.2e-7) << name;
    gattn::online_softmax_state<B> st;
    st.l = B(3.0f);
    st.end_tile(B(0.5f), B(2.0f));  // l = l·alpha + tile_sum
    EXPECT_EQ(lane0(st.l), 3.5f) << name;
  });
}

TEST(OnlineSoftmax, TilesGiveTheSoftmaxOfTheWholeRowOnEveryArch) {
  std::mt19937 gen(11);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  std::vector<float> s(300);
  for (float& x : s) x = nd(gen);
  s[7] = ninf;  // a masked key
  double m = ninf, l = 0;
  for (float x : s) m = std::max(m, double(x));
  for (float x : s) l += std::exp(double(x) - m);
  kernel_test::for_each_arch([&](auto arch) {
    using B = gattn::simd::batch<float, decltype(arch)>;
    for (index tile : {index(1), index(16), index(64), index(300)}) {
      gattn::online_softmax_state<B> st;
      for (index j0 = 0; j0 < index(s.size()); j0 += tile) {
        const index n = std::min<index>(tile, index(s.size()) - j0);
        float tmax = ninf;
        for (index j = j0; j < j0 + n; ++j) tmax = std::max(tmax, s[std::size_t(j)]);
        B m_use;
        const B alpha = st.rescale(B(tmax), m_use);
        B sum(0.0f);
        for (index j = j0; j < j0 + n; ++j) st.accumulate(B(s[std::size_t(j)]), m_use, sum);
        st.end_tile(alpha, sum);
      }
      EXPECT_EQ(lane0(st.m), float(m)) << gattn::arch_name<decltype(arch)>() << " tile " << tile;
      EXPECT_NEAR(lane0(st.l), l, 1e-5 * l) << gattn::arch_name<decltype(arch)>() << " tile " << tile;
    }
  });
}

TEST(OnlineSoftmax, SoftmaxRowWithoutKeys) {
  const gattn::softmax_row none{ninf, 0.0f, false};
  EXPECT_EQ(none.lse(), ninf);
  EXPECT_EQ(none.inv_l(), 0.0f);  // the output of a row without keys is exactly 0
  const gattn::softmax_row row{1.5f, 4.0f, true};
  EXPECT_FLOAT_EQ(row.lse(), 1.5f + std::log(4.0f));
  EXPECT_EQ(row.inv_l(), 0.25f);
  // A row with keys whose sum is 0 (every score -inf after an overflow) is not finite: never a
  // finite wrong row.
  EXPECT_TRUE(std::isinf(gattn::softmax_row{ninf, 0.0f, true}.inv_l()));
  EXPECT_EQ(gattn::softmax_row::weight(ninf, 2.0f), 0.0f);  // an empty partial (no -inf - -inf)
  EXPECT_EQ(gattn::softmax_row::weight(ninf, ninf), 0.0f);
  EXPECT_FLOAT_EQ(gattn::softmax_row::weight(1.0f, 3.0f), std::exp(-2.0f));
}

// Split s of a row as merge_splits reads it: O (dv floats), m, l.
std::vector<float> split_block(const std::vector<float>& o, float m, float l) {
  std::vector<float> b(o);
  b.push_back(m);
  b.push_back(l);
  return b;
}

TEST(OnlineSoftmax, MergeSplitsInSplitOrderSkippingEmptySplits) {
  const index dv = 3, stride = dv + 2;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Split 1 saw none of the row's keys: m = -inf, its O holds garbage (a masked 0·NaN) that must
  // not reach the result.
  std::vector<float> part;
  for (const auto& b : {split_block({1.0f, 2.0f, 3.0f}, 1.0f, 2.0f), split_block({nan, nan, nan}, ninf, 0.0f),
                        split_block({4.0f, 5.0f, 6.0f}, 2.0f, 3.0f)})
    part.insert(part.end(), b.begin(), b.end());
  std::vector<float> o(dv);
  float m = 0, l = 0;
  gattn::merge_splits(part.data(), stride, 3, dv, o.data(), m, l);
  const float w0 = std::exp(1.0f - 2.0f);
  EXPECT_EQ(m, 2.0f);
  // (within float rounding: the compiler may contract w·O + O' into one FMA)
  EXPECT_FLOAT_EQ(l, w0 * 2.0f + 3.0f);
  for (index c = 0; c < dv; ++c)
    EXPECT_FLOAT_EQ(o[std::size_t(c)], w0 * part[std::size_t(c)] + part[std::size_t(2 * stride + c)]);
  // In place, into split 0's block: the same values.
  std::vector<float> in_place = part;
  float m2 = 0, l2 = 0;
  gattn::merge_splits(in_place.data(), stride, 3, dv, in_place.data(), m2, l2);
  EXPECT_EQ(m2, m);
  EXPECT_FLOAT_EQ(l2, l);
  for (index c = 0; c < dv; ++c) EXPECT_FLOAT_EQ(in_place[std::size_t(c)], o[std::size_t(c)]);
  // Every split empty: O = 0 (not NaN), m = -inf, l = 0.
  std::vector<float> empty;
  for (int s = 0; s < 2; ++s) {
    const auto b = split_block({nan, nan, nan}, ninf, 0.0f);
    empty.insert(empty.end(), b.begin(), b.end());
  }
  gattn::merge_splits(empty.data(), stride, 2, dv, o.data(), m, l);
  EXPECT_EQ(m, ninf);
  EXPECT_EQ(l, 0.0f);
  for (float x : o) EXPECT_EQ(x, 0.0f);
}

}  // namespace

}  // namespace test_online_softmax
