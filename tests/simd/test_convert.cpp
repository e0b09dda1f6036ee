// Tests of gattn/simd/convert.hpp: the scalar references against the definition of round-to-nearest-
// even (independent of their bit tricks), then every arch of the binary bit for bit against them over
// every bf16/f16 pattern and a large set of f32 patterns (random, ties, NaNs, ±inf, ±0, subnormals,
// the f16 overflow edge), at lengths that are not multiples of the width; E4M3 codes likewise
// (core/e4m3.hpp's references are checked against the format's definition in tests/core/test_e4m3.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gattn/simd/convert.hpp"
#include "support/kernel_sweep.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_convert {

namespace {

using gattn::index;

std::uint32_t bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}
float from_bits(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

/// f32 patterns that exercise every branch of both roundings.
std::vector<float> edge_and_random_floats() {
  std::vector<std::uint32_t> b;
  for (std::uint32_t s : {0u, 0x80000000u}) {
    for (std::uint32_t v : {0x00000000u, 0x00000001u, 0x00008000u, 0x00018000u, 0x007FFFFFu, 0x00800000u,  // 0, subnormals
                            0x7F800000u, 0x7F7FFFFFu, 0x7F7F8000u, 0x7F7F7FFFu,                          // inf, bf16 overflow edge
                            0x7F800001u, 0x7FA00000u, 0x7FBFFFFFu, 0x7F80FFFFu, 0x7F810000u,             // signalling NaNs
                            0x7FC00000u, 0x7FC00001u, 0x7FFFFFFFu, 0x7FE00000u,                          // quiet NaNs
                            0x477FF000u, 0x477FEFFFu, 0x477FE000u, 0x477FE001u, 0x47800000u,             // 65520, 65504...
                            0x38800000u, 0x387FFFFFu, 0x387FF000u, 0x33000000u, 0x33000001u, 0x32FFFFFFu,
                            0x33C00000u, 0x34400000u, 0x3F800000u, 0x3F808000u, 0x3F818000u, 0x3F808001u})
      b.push_back(s | v);
  }
  std::mt19937 gen(20261201);
  std::uniform_int_distribution<std::uint32_t> any;
  for (int i = 0; i < 300000; ++i) b.push_back(any(gen));
  for (int i = 0; i < 50000; ++i) {
    const std::uint32_t r = any(gen);
    b.push_back((r & 0xFFFF0000u) | 0x8000u);                  // bf16 tie
    b.push_back((r & 0xFFFFE000u) | 0x1000u);                  // f16 tie (normal range when the exponent fits)
    const std::uint32_t e = 102 + r % 12;                      // f16 subnormal range, 2^-25 .. 2^-14
    b.push_back((r & 0x80000000u) | (e << 23) | (any(gen) & 0x7FFFFFu));
    const std::uint32_t sh = 126 - e;                          // f16 subnormal tie: half a unit of 2^-24 exactly
    const std::uint32_t tie = sh >= 24 ? 0u : ((any(gen) & 0x7FFFFFu) >> sh << sh) | (1u << (sh - 1));
    b.push_back((r & 0x80000000u) | (e << 23) | tie);
    b.push_back((r & 0x80000000u) | (r & 0x7FFFFFu) >> (r % 23));  // f32 subnormals
    b.push_back((r & 0x80000000u) | ((112u + r % 32) << 23) | (any(gen) & 0x7FFFFFu));  // near the f16 range
  }
  for (std::uint32_t h = 0; h < 65536; ++h) {
    b.push_back(h << 16);
    b.push_back(bits(gattn::f16_to_float(std::uint16_t(h))));
  }
  std::vector<float> out(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) out[i] = from_bits(b[i]);
  return out;
}

bool same_bits(float a, float b) { return bits(a) == bits(b); }

// ---- the references, checked against the definition --------------------------------------------

/// h is the nearest value of the format to f, ties to even (bit 0 of h clear); checked against the
/// neighbours h-1 and h+1 in double.
template <class Widen>
::testing::AssertionResult is_nearest_even(float f, std::uint16_t h, Widen widen, std::uint16_t inf_bits) {
  const double x = f;
  const double d = std::fabs(x - widen(h));
  for (int step : {-1, 1}) {
    const std::uint16_t mag = h & 0x7FFF;
    if ((mag == 0 && step == -1) || mag == inf_bits) continue;  // no neighbour across 0 or past inf
    const std::uint16_t n = std::uint16_t(h + step);
    const double dn = std::fabs(x - widen(n));
    if (dn < d || (dn == d && (h & 1)))
      return ::testing::AssertionFailure() << std::hexfloat << f << " -> 0x" << std::hex << h << " but 0x" << n << " is nearer or even";
  }
  return ::testing::AssertionSuccess();
}

TEST(SimdConvertReference, RoundsToNearestEven) {
  for (float f : edge_and_random_floats()) {
    if (std::isnan(f)) continue;
    const float a = std::fabs(f);
    const std::uint16_t b = gattn::round_to_bf16(f);
    if (a <= from_bits(0x7F7F7FFFu)) ASSERT_TRUE(is_nearest_even(f, b, gattn::bf16_to_float, 0x7F80));
    else ASSERT_EQ(b & 0x7FFF, 0x7F80) << std::hexfloat << f;  // at or past halfway to 2^128 (or inf)
    const std::uint16_t h = gattn::round_to_f16(f);
    if (a < 65520.0f) ASSERT_TRUE(is_nearest_even(f, h, gattn::f16_to_float, 0x7C00));
    else ASSERT_EQ(h & 0x7FFF, 0x7C00) << std::hexfloat << f;
    ASSERT_EQ(b >> 15, bits(f) >> 31);
    ASSERT_EQ(h >> 15, bits(f) >> 31);
  }
}

TEST(SimdConvertReference, KnownValues) {
  EXPECT_EQ(gattn::round_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(gattn::round_to_bf16(from_bits(0x3F808000u)), 0x3F80);  // tie, even below
  EXPECT_EQ(gattn::round_to_bf16(from_bits(0x3F818000u)), 0x3F82);  // tie, even above
  EXPECT_EQ(gattn::round_to_bf16(from_bits(0x00018000u)), 0x0002);  // subnormal tie
  EXPECT_EQ(gattn::round_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(gattn::round_to_bf16(from_bits(0x7F800001u)), 0x7FC0);  // signalling NaN made quiet
  EXPECT_EQ(gattn::round_to_bf16(from_bits(0xFFC00000u)), 0xFFC0);
  EXPECT_EQ(gattn::round_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(gattn::round_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(gattn::round_to_f16(from_bits(0x477FEFFFu)), 0x7BFF);  // just below 65520
  EXPECT_EQ(gattn::round_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(gattn::round_to_f16(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(gattn::round_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(gattn::round_to_f16(std::ldexp(1.0f, -25)), 0x0000);        // tie to even 0
  EXPECT_EQ(gattn::round_to_f16(std::ldexp(3.0f, -25)), 0x0002);        // 1.5 units: tie to even 2
  EXPECT_EQ(gattn::round_to_f16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)), 0x0400);  // tie into the normals
  EXPECT_EQ(gattn::round_to_f16(-std::ldexp(1.0f, -30)), 0x8000);
  EXPECT_EQ(gattn::round_to_f16(from_bits(0x7F800001u)), 0x7E00);
  EXPECT_EQ(gattn::round_to_f16(from_bits(0xFFFFE000u)), 0xFFFF);
  EXPECT_EQ(bits(gattn::f16_to_float(0x7C01)), 0x7FC02000u);  // widened NaN is quiet, payload kept
  EXPECT_EQ(gattn::f16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(gattn::f16_to_float(0xFBFF), -65504.0f);
}

TEST(SimdConvertReference, RoundTripsEveryPattern) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const std::uint16_t x = std::uint16_t(h);
    const float b = gattn::bf16_to_float(x), f = gattn::f16_to_float(x);
    if (std::isnan(b)) ASSERT_EQ(gattn::round_to_bf16(b), x | 0x0040);
    else ASSERT_EQ(gattn::round_to_bf16(b), x);
    if (std::isnan(f)) ASSERT_EQ(gattn::round_to_f16(f), x | 0x0200);
    else ASSERT_EQ(gattn::round_to_f16(f), x);
  }
}

TEST(SimdConvertReference, F16Range) {
  EXPECT_TRUE(gattn::f16_in_range(65504.0f));
  EXPECT_TRUE(gattn::f16_in_range(-65504.0f));
  EXPECT_FALSE(gattn::f16_in_range(std::nextafter(65504.0f, 1e9f)));
  EXPECT_FALSE(gattn::f16_in_range(-std::numeric_limits<float>::infinity()));
  EXPECT_TRUE(gattn::f16_in_range(std::numeric_limits<float>::quiet_NaN()));
}

// ---- every arch against the references ------------------------------------------------------

TEST(SimdConvert, WidensEveryPatternOnEveryArch) {
  std::vector<std::uint16_t> all(65536);
  for (std::uint32_t h = 0; h < 65536; ++h) all[h] = std::uint16_t(h);
  kernel_test::for_each_arch([&](auto arch) {
    using A = decltype(arch);
    const index W = index(gattn::simd::width<A>);
    std::vector<float> out(all.size());
    gattn::simd::widen_bf16<A>(all.data(), out.data(), index(all.size()));
    for (std::size_t i = 0; i < all.size(); ++i)
      ASSERT_TRUE(same_bits(out[i], gattn::bf16_to_float(all[i]))) << gattn::arch_name<A>() << " bf16 0x" << std::hex << all[i];
    gattn::simd::widen_f16<A>(all.data(), out.data(), index(all.size()));
    for (std::size_t i = 0; i < all.size(); ++i)
      ASSERT_TRUE(same_bits(out[i], gattn::f16_to_float(all[i]))) << gattn::arch_name<A>() << " f16 0x" << std::hex << all[i];
    // the batch loads themselves, from every offset (no alignment assumed)
    for (index off = 0; off < W; ++off) {
      alignas(64) float tmp[64];
      gattn::simd::store(tmp, gattn::simd::load_bf16<A>(all.data() + 0x7F70 + off));
      for (index l = 0; l < W; ++l) ASSERT_TRUE(same_bits(tmp[l], gattn::bf16_to_float(all[std::size_t(0x7F70 + off + l)])));
      gattn::simd::store(tmp, gattn::simd::load_f16<A>(all.data() + 0x7BF8 + off));
      for (index l = 0; l < W; ++l) ASSERT_TRUE(same_bits(tmp[l], gattn::f16_to_float(all[std::size_t(0x7BF8 + off + l)])));
    }
  });
}

TEST(SimdConvert, WidensEvenAndOddBf16OfEveryPatternOnEveryArch) {
  // load_bf16_even/odd (the small GEMM's shift/mask widening): lane i is p[2i] / p[2i + 1], bit for
  // bit the reference, over every pattern and from every offset (no alignment assumed).
  std::vector<std::uint16_t> all(65536 + 64);
  for (std::size_t h = 0; h < all.size(); ++h) all[h] = std::uint16_t(h * 40503u);  // odd multiplier: every pattern
  kernel_test::for_each_arch([&](auto arch) {
    using A = decltype(arch);
    const index W = index(gattn::simd::width<A>);
    alignas(64) float even[64], odd[64];
    for (index off = 0; off < 3; ++off)
      for (index p = off; p + 2 * W <= index(all.size()); p += 2 * W) {
        gattn::simd::store(even, gattn::simd::load_bf16_even<A>(all.data() + p));
        gattn::simd::store(odd, gattn::simd::load_bf16_odd<A>(all.data() + p));
        for (index l = 0; l < W; ++l) {
          ASSERT_TRUE(same_bits(even[l], gattn::bf16_to_float(all[std::size_t(p + 2 * l)]))) << gattn::arch_name<A>() << " at " << p;
          ASSERT_TRUE(same_bits(odd[l], gattn::bf16_to_float(all[std::size_t(p + 2 * l + 1)]))) << gattn::arch_name<A>() << " at " << p;
        }
      }
  });
}

TEST(SimdConvert, RoundsLikeTheReferenceOnEveryArch) {
  const std::vector<float> in = edge_and_random_floats();
  kernel_test::for_each_arch([&](auto arch) {
    using A = decltype(arch);
    std::vector<std::uint16_t> out(in.size());
    gattn::simd::narrow_bf16<A>(in.data(), out.data(), index(in.size()));
    for (std::size_t i = 0; i < in.size(); ++i)
      ASSERT_EQ(out[i], gattn::round_to_bf16(in[i])) << gattn::arch_name<A>() << " bf16 of 0x" << std::hex << bits(in[i]);
    gattn::simd::narrow_f16<A>(in.data(), out.data(), index(in.size()));
    for (std::size_t i = 0; i < in.size(); ++i)
      ASSERT_EQ(out[i], gattn::round_to_f16(in[i])) << gattn::arch_name<A>() << " f16 of 0x" << std::hex << bits(in[i]);
    // round_bf16: the value a bf16 tensor would hold, in a float batch
    for (std::size_t i = 0; i + gattn::simd::width<A> <= 4096; i += gattn::simd::width<A>) {
      alignas(64) float tmp[64];
      gattn::simd::store(tmp, gattn::simd::round_bf16<A>(gattn::simd::load<A>(in.data() + i)));
      for (std::size_t l = 0; l < gattn::simd::width<A>; ++l)
        ASSERT_TRUE(same_bits(tmp[l], gattn::bf16_to_float(gattn::round_to_bf16(in[i + l])))) << gattn::arch_name<A>();
    }
  });
}

TEST(SimdConvert, TailsAndOffsetsOnEveryArch) {
  const std::vector<float> in = edge_and_random_floats();
  kernel_test::for_each_arch([&](auto arch) {
    using A = decltype(arch);
    const index W = index(gattn::simd::width<A>);
    for (index n = 0; n <= 3 * W + 1; ++n)
      for (index off = 0; off < 3; ++off) {
        const float* src = in.data() + 7 * n + off;
        std::vector<std::uint16_t> h(std::size_t(n + off + 1), 0xABCD);
        gattn::simd::narrow_bf16<A>(src, h.data() + off, n);
        for (index i = 0; i < n; ++i) ASSERT_EQ(h[std::size_t(off + i)], gattn::round_to_bf16(src[i]));
        ASSERT_EQ(h[std::size_t(off + n)], 0xABCD) << "wrote past the end";
        ASSERT_TRUE(off == 0 || h[0] == 0xABCD) << "wrote before the start";
        std::vector<float> w(std::size_t(n + 1), -3.0f);
        gattn::simd::widen_bf16<A>(h.data() + off, w.data(), n);
        for (index i = 0; i < n; ++i) ASSERT_TRUE(same_bits(w[std::size_t(i)], gattn::bf16_to_float(h[std::size_t(off + i)])));
        ASSERT_EQ(w[std::size_t(n)], -3.0f);
        gattn::simd::narrow_f16<A>(src, h.data() + off, n);
        for (index i = 0; i < n; ++i) ASSERT_EQ(h[std::size_t(off + i)], gattn::round_to_f16(src[i]));
        ASSERT_EQ(h[std::size_t(off + n)], 0xABCD);
        gattn::simd::widen_f16<A>(h.data() + off, w.data(), n);
        for (index i = 0; i < n; ++i) ASSERT_TRUE(same_bits(w[std::size_t(i)], gattn::f16_to_float(h[std::size_t(off + i)])));
        ASSERT_EQ(w[std::size_t(n)], -3.0f);
      }
  });
}

TEST(SimdConvert, WidensEveryE4m3CodeOnEveryArch) {
  // load_e4m3 and load_e4m3_raw (times 1/256) bit for bit the reference, every code at every lane
  // and from every offset (no alignment assumed); widen_e4m3 with its tail.
  std::vector<std::uint8_t> all(256 + 64);
  for (std::size_t c = 0; c < all.size(); ++c) all[c] = std::uint8_t(c * 167u);  // odd multiplier: every code
  kernel_test::for_each_arch([&](auto arch) {
    using A = decltype(arch);
    const index W = index(gattn::simd::width<A>);
    alignas(64) float full[64], raw[64];
    for (index p = 0; p + W <= index(all.size()); ++p) {
      gattn::simd::store(full, gattn::simd::load_e4m3<A>(all.data() + p));
      gattn::simd::store(raw, gattn::simd::load_e4m3_raw<A>(all.data() + p));
      for (index l = 0; l < W; ++l) {
        const float want = gattn::e4m3_to_float(all[std::size_t(p + l)]);
        ASSERT_TRUE(same_bits(full[l], want) || (std::isnan(want) && std::isnan(full[l])))
            << gattn::arch_name<A>() << " code 0x" << std::hex << int(all[std::size_t(p + l)]);
        ASSERT_TRUE(same_bits(raw[l], want / gattn::simd::e4m3_raw_factor) || (std::isnan(want) && std::isnan(raw[l])))
            << gattn::arch_name<A>() << " raw code 0x" << std::hex << int(all[std::size_t(p + l)]);
      }
    }
    for (index n = 0; n <= 3 * W + 1; ++n) {
      std::vector<float> w(std::size_t(n + 1), -3.0f);
      gattn::simd::widen_e4m3<A>(all.data() + 5, w.data(), n);
      for (index i = 0; i < n; ++i) {
        const float want = gattn::e4m3_to_float(all[std::size_t(5 + i)]);
        ASSERT_TRUE(same_bits(w[std::size_t(i)], want) || (std::isnan(want) && std::isnan(w[std::size_t(i)])));
      }
      ASSERT_EQ(w[std::size_t(n)], -3.0f) << "wrote past the end";
    }
  });
}

TEST(SimdConvert, WidensE4m3CodesInQuadsWhereTheBuildHasVbmi) {
  // load_e4m3_quads (AVX-512 VBMI): vector j lane i holds code 4i + e4m3_quad_offset[j], exactly;
  // load_e4m3_raw2 (every arch): two vectors of codes in order, times 2^-8.
  std::vector<std::uint8_t> all(256 + 128);
  for (std::size_t c = 0; c < all.size(); ++c) all[c] = std::uint8_t(c * 167u + 3);
  const auto same = [](float got, float want) { return same_bits(got, want) || (std::isnan(got) && std::isnan(want)); };
  kernel_test::for_each_arch([&](auto arch) {
    using A = decltype(arch);
    const index W = index(gattn::simd::width<A>);
    alignas(64) float lo[64], hi[64];
    for (index p = 0; p + 2 * W <= index(all.size()); p += 3) {
      gattn::simd::batch<float, A> l, h;
      gattn::simd::load_e4m3_raw2<A>(all.data() + p, l, h);
      gattn::simd::store(lo, l);
      gattn::simd::store(hi, h);
      for (index i = 0; i < W; ++i) {
        ASSERT_TRUE(same(lo[i], gattn::e4m3_to_float(all[std::size_t(p + i)]) / 256)) << gattn::arch_name<A>() << " at " << p + i;
        ASSERT_TRUE(same(hi[i], gattn::e4m3_to_float(all[std::size_t(p + W + i)]) / 256)) << gattn::arch_name<A>();
      }
    }
    if constexpr (gattn::simd::e4m3_quads<A>) {
      for (index p = 0; p + 4 * W <= index(all.size()); p += 5) {
        gattn::simd::batch<float, A> q[4];
        gattn::simd::load_e4m3_quads<A>(all.data() + p, q);
        for (int j = 0; j < 4; ++j) {
          gattn::simd::store(lo, q[j]);
          for (index i = 0; i < W; ++i) {
            const std::uint8_t code = all[std::size_t(p + 4 * i + gattn::simd::e4m3_quad_offset[j])];
            ASSERT_TRUE(same(lo[i], gattn::e4m3_to_float(code))) << "quad " << j << " lane " << i << " code 0x" << std::hex << int(code);
          }
        }
      }
    }
  });
}

TEST(SimdConvert, RoundsToE4m3LikeTheReferenceOnEveryArch) {
  std::vector<float> in = edge_and_random_floats();
  for (int c = 0; c < 256; ++c) {  // every code, every tie between neighbours, and saturation
    const float v = gattn::e4m3_to_float(std::uint8_t(c)), next = gattn::e4m3_to_float(std::uint8_t(c + 1));
    in.push_back(v);
    if ((c & 0x7F) < 0x7E) in.push_back((v + next) / 2);
  }
  for (float v : {448.0f, 464.0f, 480.0f, 1e6f, -1e6f}) in.push_back(v);
  kernel_test::for_each_arch([&](auto arch) {
    using A = decltype(arch);
    std::vector<std::uint8_t> out(in.size() + 1, 0xAB);
    gattn::simd::narrow_e4m3<A>(in.data(), out.data(), index(in.size()));
    for (std::size_t i = 0; i < in.size(); ++i)
      ASSERT_EQ(out[i], gattn::round_to_e4m3(in[i])) << gattn::arch_name<A>() << " e4m3 of 0x" << std::hex << bits(in[i]);
    ASSERT_EQ(out[in.size()], 0xAB) << "wrote past the end";
  });
}

TEST(SimdConvert, FindsTheFirstValueOutsideTheF16Range) {
  kernel_test::for_each_arch([&](auto arch) {
    using A = decltype(arch);
    const index W = index(gattn::simd::width<A>);
    for (index n = 0; n <= 3 * W + 1; ++n) {
      std::vector<float> x(std::size_t(n), 65504.0f);
      for (index i = 0; i < n; i += 2) x[std::size_t(i)] = i % 4 ? std::numeric_limits<float>::quiet_NaN() : -1.5f;
      ASSERT_EQ(gattn::simd::find_f16_out_of_range<A>(x.data(), n), n) << gattn::arch_name<A>();
      for (index bad = 0; bad < n; ++bad)
        for (float v : {65505.0f, -70000.0f, std::numeric_limits<float>::infinity()}) {
          auto y = x;
          y[std::size_t(bad)] = v;
          if (bad + 1 < n) y[std::size_t(n - 1)] = -v;  // a later one must not be reported first
          ASSERT_EQ(gattn::simd::find_f16_out_of_range<A>(y.data(), n), bad) << gattn::arch_name<A>() << " n=" << n;
        }
    }
  });
}

}  // namespace

}  // namespace test_convert
