// The oracle's own edge cases: rows that see no key, bottom-right alignment, group mapping.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gattn/reference/sdpa.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_reference_sdpa {

namespace {

using gattn::reference::sdpa;
using gattn::reference::sdpa_shape;

TEST(ReferenceSdpa, RowsThatSeeNoKeyAreExactlyZero) {
  // T_q = 5 > T_k = 3, causal bottom-right: query i sees keys j <= i - 2, so rows 0 and 1 see none.
  const sdpa_shape s{5, 3, 2, 1, 4, 4, 0.5, true};
  std::vector<double> q(5 * 2 * 4, 1.0), k(3 * 4, 0.5), v(3 * 4, 2.0), out(5 * 2 * 4, 9.0), pf(2 * 5), lse(2 * 5);
  sdpa(s, q.data(), k.data(), v.data(), out.data(), pf.data(), lse.data());
  for (int i = 0; i < 2; ++i)
    for (int c = 0; c < 2 * 4; ++c) {
      EXPECT_EQ(out[std::size_t(i * 8 + c)], 0.0);
      EXPECT_FALSE(std::isnan(out[std::size_t(i * 8 + c)]));
    }
  EXPECT_TRUE(std::isinf(lse[0]) && lse[0] < 0);
  EXPECT_EQ(pf[0], 0.0);
  EXPECT_DOUBLE_EQ(pf[2], 1.0);  // query 2 sees only key 0
  EXPECT_DOUBLE_EQ(out[2 * 8], 2.0);
}

TEST(ReferenceSdpa, GroupMappingIsConsecutive) {
  // V of KV head r holds the value r: query head h must read floor(h / G).
  const sdpa_shape s{1, 2, 6, 2, 2, 1, 1.0, false};
  std::vector<double> q(6 * 2, 0.0), k(2 * 2 * 2, 0.0), v{0.0, 1.0, 0.0, 1.0}, out(6);
  sdpa(s, q.data(), k.data(), v.data(), out.data());
  for (int h = 0; h < 6; ++h) EXPECT_DOUBLE_EQ(out[std::size_t(h)], h / 3);
}

TEST(ReferenceSdpa, LargeLogitsDoNotOverflow) {
  const sdpa_shape s{1, 2, 1, 1, 1, 1, 1.0, false};
  std::vector<double> q{1e4}, k{1.0, 0.999}, v{1.0, 3.0}, out(1);
  sdpa(s, q.data(), k.data(), v.data(), out.data());
  EXPECT_NEAR(out[0], 1.0 + 2.0 * std::exp(-10.0) / (1.0 + std::exp(-10.0)), 1e-12);
}

}  // namespace

}  // namespace test_reference_sdpa
