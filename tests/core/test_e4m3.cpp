// Tests of gattn/core/e4m3.hpp: the E4M3 references against the format's definition (a table of the
// 127 magnitudes built from sign, exponent and mantissa in double), every code and the rounding of
// edge, tie and random values, independent of the references' bit tricks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gattn/core/e4m3.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_e4m3 {

namespace {

/// Magnitude of code c (0..126) by the definition: 2^(e−7)·(1 + m/8), subnormals 2^−6·m/8.
double magnitude(int c) {
  const int e = c >> 3, m = c & 7;
  return e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
}

std::uint32_t bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

TEST(E4m3, WidensEveryCodeByTheDefinition) {
  for (int c = 0; c < 256; ++c) {
    const float f = gattn::e4m3_to_float(std::uint8_t(c));
    if ((c & 0x7F) == 0x7F) {
      ASSERT_TRUE(std::isnan(f)) << c;
      ASSERT_EQ(bits(f) >> 31, unsigned(c >> 7)) << "NaN keeps its sign";
      continue;
    }
    const double want = (c & 0x80 ? -1.0 : 1.0) * magnitude(c & 0x7F);
    ASSERT_EQ(double(f), want) << c;
    ASSERT_EQ(bits(f) >> 31, unsigned(c >> 7)) << "zero keeps its sign";
  }
  EXPECT_EQ(gattn::e4m3_to_float(0x7E), gattn::e4m3_max);
  EXPECT_EQ(gattn::e4m3_to_float(0x01), std::ldexp(1.0f, -9));
}

/// The code nearest to |x| <= 448 by the definition, ties to the even code.
int nearest_code(double a) {
  int best = 0;
  for (int c = 1; c <= 126; ++c) {
    const double d = std::fabs(a - magnitude(c)), db = std::fabs(a - magnitude(best));
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  return best;
}

TEST(E4m3, RoundsToTheNearestCodeTiesToEven) {
  std::vector<float> xs;
  for (int c = 0; c < 127; ++c) {
    const double m = magnitude(c);
    xs.push_back(float(m));
    if (c < 126) {
      const double mid = (m + magnitude(c + 1)) / 2;  // every tie, and both sides of it
      xs.push_back(float(mid));
      xs.push_back(std::nextafter(float(mid), 0.0f));
      xs.push_back(std::nextafter(float(mid), 1e9f));
    }
  }
  std::mt19937 gen(20261207);
  std::uniform_real_distribution<float> exponent(-14.0f, 9.0f);
  for (int i = 0; i < 100000; ++i) xs.push_back(std::exp2(exponent(gen)));
  for (float x : xs) {
    if (!(x < gattn::e4m3_max)) continue;
    const int want = nearest_code(x);
    ASSERT_EQ(gattn::round_to_e4m3(x), want) << std::hexfloat << x;
    ASSERT_EQ(gattn::round_to_e4m3(-x), want | 0x80) << std::hexfloat << -x;
  }
}

TEST(E4m3, SaturatesKeepsNanAndSignedZero) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float x : {448.0f, 449.0f, 464.0f, 480.0f, 1e30f, inf}) {
    EXPECT_EQ(gattn::round_to_e4m3(x), 0x7E) << x;
    EXPECT_EQ(gattn::round_to_e4m3(-x), 0xFE) << x;
  }
  EXPECT_EQ(gattn::round_to_e4m3(nan), 0x7F);
  EXPECT_EQ(gattn::round_to_e4m3(-nan), 0xFF);
  EXPECT_EQ(gattn::round_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(gattn::round_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(gattn::round_to_e4m3(std::ldexp(1.0f, -10)), 0x00);                              // half the smallest: tie to 0
  EXPECT_EQ(gattn::round_to_e4m3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(gattn::round_to_e4m3(std::ldexp(1.0f, -6) - std::ldexp(1.0f, -10)), 0x08);      // tie into the normals
  EXPECT_EQ(gattn::round_to_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
}

TEST(E4m3, RoundTripsEveryCode) {
  for (int c = 0; c < 256; ++c) {
    const std::uint8_t code = std::uint8_t(c);
    ASSERT_EQ(gattn::round_to_e4m3(gattn::e4m3_to_float(code)), code) << c;
  }
}

}  // namespace

}  // namespace test_e4m3
