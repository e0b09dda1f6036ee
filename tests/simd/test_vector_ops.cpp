// Tests of gattn/simd/vector_ops.hpp (RMSNorm) and simd.hpp's exp: every arch, every length
// 0..3W+1 and misaligned starts (the tails), against scalar double references.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "support/kernel_sweep.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_vector_ops {

namespace {

using gattn::index;

// u is drawn (and unused) so that z and w are the same draws as in the gate test of gate/test_apply.cpp.
TEST(KernelVectorOps, NormsEveryLengthAndOffset) {
  std::mt19937 gen(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  kernel_test::for_each_arch([&](auto arch) {
    using A = decltype(arch);
    const index W = index(gattn::simd::width<A>);
    for (index n = 0; n <= 3 * W + 1; ++n)
      for (index off = 0; off < 3; ++off) {
        std::vector<float> z(std::size_t(n + off + 1)), u(z.size()), w(z.size());
        for (auto& x : z) x = nd(gen);
        for (auto& x : u) x = nd(gen);
        for (auto& x : w) x = nd(gen);
        for (bool zc : {false, true}) {
          auto zz = z;
          gattn::rms_norm<A>(zz.data() + off, w.data() + off, n, 1e-6f, zc);
          double ss = 0;
          for (index i = 0; i < n; ++i) ss += double(z[std::size_t(i + off)]) * z[std::size_t(i + off)];
          const double inv = n ? 1.0 / std::sqrt(ss / double(n) + 1e-6) : 0;
          for (index i = 0; i < n; ++i) {
            const double want = z[std::size_t(i + off)] * inv * (w[std::size_t(i + off)] + (zc ? 1.0 : 0.0));
            ASSERT_NEAR(zz[std::size_t(i + off)], want, 2e-6 * (1 + std::fabs(want))) << gattn::arch_name<A>();
          }
          ASSERT_EQ(zz[std::size_t(n + off)], z[std::size_t(n + off)]);
        }
      }
    // A zero row stays exactly zero through the norm.
    std::vector<float> zero(37, 0.0f), w(37, 1.5f);
    gattn::rms_norm<A>(zero.data(), w.data(), 37, 1e-6f, gattn::norm_kind::rms);
    for (float x : zero) ASSERT_EQ(x, 0.0f);
  });
}

TEST(KernelSimd, FastExpAccuracyAndEdges) {
  kernel_test::for_each_arch([](auto arch) {
    using A = decltype(arch);
    using B = gattn::simd::batch<float, A>;
    constexpr std::size_t W = B::size;
    float buf[64];
    auto eval = [&](float x) {
      gattn::simd::store(buf, gattn::simd::exp_nonpositive(B(x)));
      return buf[W - 1];
    };
    double max_abs = 0, max_rel = 0;
    for (float x = -110.0f; x <= 0.0f; x += 0.00731f) {
      const float y = eval(x);
      const double want = std::exp(double(x));
      max_abs = std::max(max_abs, std::fabs(y - want));
      if (x > -30) max_rel = std::max(max_rel, std::fabs(y - want) / want);
      ASSERT_TRUE(y == 0.0f || y >= std::numeric_limits<float>::min()) << "denormal at " << x;
    }
    EXPECT_LT(max_abs, 1e-7) << gattn::arch_name<A>();
    EXPECT_LT(max_rel, 3e-6) << gattn::arch_name<A>();
    EXPECT_EQ(eval(-std::numeric_limits<float>::infinity()), 0.0f);
    EXPECT_EQ(eval(-std::numeric_limits<float>::max()), 0.0f);
    EXPECT_EQ(eval(-200.0f), 0.0f);
    EXPECT_TRUE(std::isnan(eval(std::numeric_limits<float>::quiet_NaN()))) << gattn::arch_name<A>();
    EXPECT_NEAR(eval(0.0f), 1.0f, 1.2e-7f);
  });
}

TEST(KernelArch, NamesAndWidths) {
  EXPECT_EQ(gattn::arch_name<gattn::scalar_arch>(), "scalar");
  EXPECT_EQ(gattn::simd::width<gattn::scalar_arch>, 1u);
  EXPECT_FALSE(gattn::default_arch_name().empty());
#if defined(GATTN_FORCE_SCALAR)
  EXPECT_EQ(gattn::default_arch_name(), "scalar");
#endif
}

}  // namespace

}  // namespace test_vector_ops
