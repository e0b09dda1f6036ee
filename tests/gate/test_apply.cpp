// Tests of gattn/gate/apply.hpp's fp32 gates (elementwise and headwise, every activation, mul and
// add): every arch, every length 0..3W+1 and misaligned starts (the tails), against scalar double
// references.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "gattn/gate/apply.hpp"
#include "support/kernel_sweep.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_apply {

namespace {

using gattn::index;

double act_d(gattn::activation a, double u) {
  const double s = 1.0 / (1.0 + std::exp(-u));
  switch (a) {
    case gattn::activation::sigmoid: return s;
    case gattn::activation::silu: return u * s;
    case gattn::activation::ns_sigmoid: return 0.5 + 0.5 * s;
    case gattn::activation::identity: return u;
  }
  return 0;
}

// w is drawn (and unused) so that z and u are the same draws as in the norm test of
// simd/test_vector_ops.cpp.
TEST(GateApply, EveryLengthAndOffset) {
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
        for (auto a : {gattn::activation::sigmoid, gattn::activation::silu, gattn::activation::ns_sigmoid, gattn::activation::identity})
          for (auto c : {gattn::combine::mul, gattn::combine::add}) {
            auto zz = z;
            gattn::apply_gate<A>(zz.data() + off, u.data() + off, n, a, c);
            for (index i = 0; i < n; ++i) {
              const double g = act_d(a, u[std::size_t(i + off)]);
              const double want = c == gattn::combine::mul ? z[std::size_t(i + off)] * g : z[std::size_t(i + off)] + g;
              ASSERT_NEAR(zz[std::size_t(i + off)], want, 1e-6 * (1 + std::fabs(want))) << gattn::arch_name<A>() << " n=" << n;
            }
            ASSERT_EQ(zz[std::size_t(n + off)], z[std::size_t(n + off)]) << "wrote past the end";
            auto zs = z;
            gattn::apply_gate_scalar<A>(zs.data() + off, n, u[0], a, c);
            for (index i = 0; i < n; ++i) {
              const double g = act_d(a, u[0]);
              const double want = c == gattn::combine::mul ? z[std::size_t(i + off)] * g : z[std::size_t(i + off)] + g;
              ASSERT_NEAR(zs[std::size_t(i + off)], want, 1e-6 * (1 + std::fabs(want)));
            }
          }
      }
  });
}

}  // namespace

}  // namespace test_apply
