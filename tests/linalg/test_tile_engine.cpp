// The engines of the fast GEMM (linalg/tile_engine.hpp, packed_gemm_fast.hpp) on odd shapes: the
// emulated tiles, AMX, vdpbf16ps and the FMA engine each within the `fast` tolerance of a double
// product; AMX bit for bit the emulation where the CPU has AMX; the emulation's TDPBF16PS
// arithmetic on cases where the order of the sums shows; and the engine's name.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "gattn/core/cpu.hpp"
#include "gattn/linalg/packed_gemm_fast.hpp"
#include "gattn/linalg/tile_engine.hpp"
#include "gattn/simd/convert.hpp"
#include "support/kernel_sweep.hpp"
#include "support/linalg.hpp"

namespace gattn {
// Named, not anonymous: the test target is built as a few unity translation units.
namespace test_tile_engine {

using linalg_test::random_vector;
using linalg_test::reference_dot;
using linalg_test::stored_weight;

struct shape {
  index rows, count, in;
};

/// rows 1..70, 129 and 517, each with a (count, in) from the odd lists, cycling.
std::vector<shape> odd_shapes() {
  const index ins[] = {1, 2, 31, 33, 257, 300}, counts[] = {1, 15, 17, 300};
  std::vector<shape> out;
  index i = 0;
  for (index rows = 1; rows <= 70; ++rows, ++i) out.push_back({rows, counts[i % 4], ins[i % 6]});
  for (index c : counts) out.push_back({129, c, ins[std::size_t(c) % 6]});
  out.push_back({517, 17, 300});
  out.push_back({517, 300, 33});
  return out;
}

/// The weight dtypes to run: bf16, f32 and block-scaled E4M3 (rounded in the slot), bf16 alone in
/// a small sweep.
std::vector<storage_type> dtypes() {
  if (kernel_test::sweep() == kernel_test::sweep_size::small) return {storage_type::bf16};
  return {storage_type::f32, storage_type::bf16, storage_type::f8_e4m3};
}

/// The output of one engine for a shape and dtype (x row stride in + 1, y row stride count + 3).
struct run {
  std::vector<float> y;
  std::vector<double> want;
  double scale = 0.0;
};

template <class Gemm>
run run_engine(Gemm&& gemm, storage_type type, shape s, bool oracle) {
  const index x_stride = s.in + 1, y_stride = s.count + 3;
  const stored_weight w(type, s.count, s.in, 1, unsigned(3 * s.in + s.rows + s.count));
  const weight_view v = w.view();
  const auto x = random_vector(std::size_t(s.rows * x_stride), unsigned(s.rows + 11));
  run r;
  r.y.assign(std::size_t(s.rows * y_stride), -99.0f);
  gemm(type, v.data(), v.row_stride() * storage_bytes(type), s.count, x.data(), x_stride, s.rows, s.in, r.y.data(),
       y_stride, v.scales());
  if (!oracle) return r;
  for (index m = 0; m < s.rows; ++m)
    for (index n = 0; n < s.count; ++n) {
      const double d = reference_dot(s.in, [&](index k) { return v.at(n, k); }, x.data() + m * x_stride).sum;
      r.want.push_back(d);
      r.scale = std::max(r.scale, std::abs(d));
    }
  return r;
}

/// Checks one engine against double at the fast tolerance (1e-2 · max|y|) and that it wrote
/// nothing past `count`.
template <class Gemm>
void check_oracle(const char* engine, Gemm&& gemm) {
  for (storage_type type : dtypes())
    for (const shape& s : odd_shapes()) {
      const run r = run_engine(gemm, type, s, true);
      const index y_stride = s.count + 3;
      double worst = 0.0;
      for (index m = 0; m < s.rows; ++m) {
        for (index n = 0; n < s.count; ++n)
          worst = std::max(worst, std::abs(r.y[std::size_t(m * y_stride + n)] - r.want[std::size_t(m * s.count + n)]));
        ASSERT_EQ(r.y[std::size_t(m * y_stride + s.count)], -99.0f) << engine << ": wrote past count";
      }
      ASSERT_LE(worst, 1e-2 * r.scale) << engine << " " << to_string(type) << " rows " << s.rows << " count " << s.count
                                       << " in " << s.in;
    }
}

/// Checks two engines give the same bits on every odd shape.
template <class G1, class G2>
void check_same_bits(const char* what, G1&& g1, G2&& g2) {
  for (storage_type type : dtypes())
    for (const shape& s : odd_shapes()) {
      const run a = run_engine(g1, type, s, false), b = run_engine(g2, type, s, false);
      for (std::size_t i = 0; i < a.y.size(); ++i)
        ASSERT_EQ(a.y[i], b.y[i]) << what << " " << to_string(type) << " rows " << s.rows << " count " << s.count
                                  << " in " << s.in << " at " << i;
    }
}

auto emulated = [](auto... a) { detail::tile_gemm<detail::tile_emulator>(a...); };

TEST(LinalgTileEngine, EmulatedTilesMeetTheFastTolerance) { check_oracle("emulated tiles", emulated); }

TEST(LinalgTileEngine, AmxMatchesTheEmulationBitForBit) {
#if GATTN_AMX_COMPILED
  if (!amx_usable()) GTEST_SKIP() << "this CPU, OS or process has no AMX-BF16 tiles (cpuid leaf 7, XCR0, arch_prctl)";
  auto amx = [](auto... a) { detail::tile_gemm<detail::amx_tiles>(a...); };
  check_oracle("amx", amx);
  check_same_bits("amx vs emulated tiles", amx, emulated);
#else
  GTEST_SKIP() << "this build carries no AMX code (x86-64 with AVX-512 and GCC >= 11 or Clang >= 12 only)";
#endif
}

TEST(LinalgTileEngine, VectorEnginesMeetTheFastToleranceOnOddShapes) {
  kernel_test::for_each_arch([](auto arch) {
    using A = decltype(arch);
    check_oracle(A::name(), [](auto... a) { detail::packed_gemm_fast<A, false>(a...); });
  });
}

TEST(LinalgTileEngine, DotProductEngineMeetsTheFastToleranceOnOddShapes) {
  // vdpbf16ps also gives the FMA engine's bits; BFDOT rounds in its own way.
  if constexpr (detail::pgemm_native_bf16<default_arch>) {
    if (!detail::pgemm_native_bf16_runs<default_arch>()) GTEST_SKIP() << "this CPU has no BF16 extension (BFDOT)";
    auto dp = [](auto... a) { detail::packed_gemm_fast<default_arch, true>(a...); };
    check_oracle(default_arch::name(), dp);
    if (!std::is_same<default_arch, xsimd::neon64>::value)
      check_same_bits("vdpbf16ps vs fma", dp, [](auto... a) { detail::packed_gemm_fast<default_arch, false>(a...); });
  } else {
    GTEST_SKIP() << "this build's arch has no bf16 dot products (AVX512-BF16 vdpbf16ps, NEON BFDOT)";
  }
}

/// One TDPBF16PS on 1 × 1 of the emulated tiles over the given pairs (a: W side, b: x side).
float emulated_dp(float c, const std::vector<std::uint32_t>& a, const std::vector<std::uint32_t>& b) {
  std::uint32_t tc[16][16] = {}, ta[16][16] = {}, tb[16][16] = {};
  std::memcpy(&tc[0][0], &c, sizeof c);
  for (std::size_t q = 0; q < a.size(); ++q) ta[0][q] = a[q], tb[q][0] = b[q];
  detail::tile_emulator::dpbf16(tc, ta, tb, int(a.size()));
  std::memcpy(&c, &tc[0][0], sizeof c);
  return c;
}

std::uint32_t pair(float even, float odd) { return round_to_bf16(even) | std::uint32_t(round_to_bf16(odd)) << 16; }

TEST(LinalgTileEngine, EmulatedDotProductSumsEvenAndOddHalvesApart) {
  // Even halves: 2^24 then -2^24 (0 exactly); odd halves: 1 then 0. Separate partial sums give
  // 1; one chain over the pairs (as vdpbf16ps) would lose the 1 against 2^24.
  const float big = 4096.0f;  // 2^12, a bf16
  EXPECT_EQ(emulated_dp(0.0f, {pair(big, 1.0f), pair(-big, 0.0f)}, {pair(big, 1.0f), pair(big, 1.0f)}), 1.0f);
  // The two partial sums are added, then C.
  const float tiny = std::ldexp(1.0f, -15);
  EXPECT_EQ(emulated_dp(0.0f, {pair(tiny, tiny)}, {pair(tiny, tiny)}), std::ldexp(1.0f, -29));
  // Denormal inputs count as zero, a denormal result is flushed.
  const float denormal = std::ldexp(1.0f, -130);
  EXPECT_EQ(emulated_dp(2.0f, {pair(denormal, 0.0f)}, {pair(1.0f, 0.0f)}), 2.0f);
  EXPECT_EQ(emulated_dp(denormal, {pair(0.0f, 0.0f)}, {pair(0.0f, 0.0f)}), 0.0f);
  EXPECT_EQ(emulated_dp(0.0f, {pair(std::ldexp(1.0f, -70), 0.0f)}, {pair(std::ldexp(1.0f, -70), 0.0f)}), 0.0f);
}

TEST(LinalgTileEngine, EngineNameFollowsTheKernelChoices) {
  const std::string automatic = fast_gemm_engine_name<default_arch>();
  EXPECT_FALSE(automatic.empty());
  set_amx_tiles(kernel_choice::never);
  set_bf16_dot_products(kernel_choice::never);
  EXPECT_EQ(std::string(fast_gemm_engine_name<default_arch>()), "fma (portable)");
  set_amx_tiles(kernel_choice::automatic);
  set_bf16_dot_products(kernel_choice::automatic);
  EXPECT_EQ(std::string(fast_gemm_engine_name<default_arch>()), automatic);
}

}  // namespace test_tile_engine
}  // namespace gattn
