// Tests of gattn/gate/rounding.hpp, the bit-exact bf16 gate (docs/spec.md §10): Kimi K3's vectors
// (PyTorch bf16 CPU ops) bit for bit on every arch; the fused kernel's epilogue (prefill and
// split-KV decode), every backend and the GQA and MLA layers apply the same rule to their own SDPA output;
// configurations other than G1 sigmoid mul are refused.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gattn/kernel/epilogue.hpp"
#include "gattn/attention/gqa_layer.hpp"
#include "gattn/attention/mla_layer.hpp"
#include "gattn/baseline/sdpa_backend.hpp"
#include "gattn/core/validate.hpp"
#include "gattn/gate/rounding.hpp"
#include "gattn/io/safetensors.hpp"
#include "support/kernel_sweep.hpp"
#include "support/random_layer.hpp"
#include "support/vectors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_rounding {

namespace {

using gattn::index;

std::uint32_t bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

struct k3_vectors {
  std::vector<std::uint16_t> o, u, gated;
};

std::vector<std::uint16_t> bf16_tensor(const gattn::io::safetensors_file& f, const std::string& name) {
  const auto& info = f.info(name);
  EXPECT_EQ(info.type, gattn::io::dtype::bf16) << name;
  std::vector<std::uint16_t> v(65536);
  std::memcpy(v.data(), f.raw(name), v.size() * sizeof(std::uint16_t));
  return v;
}

const k3_vectors& k3() {
  static const k3_vectors v = [] {
    const auto f = gattn::io::safetensors_file::open(gattn::test::data_path("gate_bf16_k3.safetensors"));
    return k3_vectors{bf16_tensor(f, "o"), bf16_tensor(f, "u"), bf16_tensor(f, "gated")};
  }();
  return v;
}

/// The rule on one element, written out from docs/spec.md §10 with the scalar conversions.
float rule(float o, float u) {
  const float s = gattn::bf16_to_float(gattn::round_to_bf16(gattn::pytorch_sigmoid_fp32(gattn::bf16_to_float(gattn::round_to_bf16(u)))));
  return gattn::bf16_to_float(gattn::round_to_bf16(gattn::bf16_to_float(gattn::round_to_bf16(o)) * s));
}

/// Bitwise equality, any NaN matching any NaN (a NaN's payload is not part of the contract).
::testing::AssertionResult same(float got, float want) {
  if (std::isnan(want) ? std::isnan(got) : bits(got) == bits(want)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << std::hexfloat << "got " << got << " want " << want;
}

TEST(GateRoundingBf16, ReproducesK3VectorsOnEveryArch) {
  const k3_vectors& v = k3();
  const index n = index(v.o.size());
  std::vector<float> o(v.o.size()), u(v.u.size());
  for (std::size_t i = 0; i < o.size(); ++i) {
    o[i] = gattn::bf16_to_float(v.o[i]);
    u[i] = gattn::bf16_to_float(v.u[i]);
  }
  kernel_test::for_each_arch([&](auto arch) {
    using A = decltype(arch);
    // in pieces of 37 (a tail on every arch), then headwise: one element per "head"
    std::vector<float> z = o;
    for (index i = 0; i < n; i += 37) gattn::apply_gate_bf16<A>(z.data() + i, u.data() + i, std::min<index>(37, n - i));
    for (index i = 0; i < n; ++i)
      ASSERT_EQ(gattn::round_to_bf16(z[std::size_t(i)]), v.gated[std::size_t(i)])
          << gattn::arch_name<A>() << " i=" << i << std::hexfloat << " o=" << o[std::size_t(i)] << " u=" << u[std::size_t(i)];
    z = o;
    for (index i = 0; i < n; ++i)
      gattn::apply_head_gate<A>(z.data() + i, u.data() + i, 1, true, gattn::activation::sigmoid, gattn::combine::mul,
                                gattn::gate_rounding::bf16);
    for (index i = 0; i < n; ++i)
      ASSERT_EQ(gattn::round_to_bf16(z[std::size_t(i)]), v.gated[std::size_t(i)]) << gattn::arch_name<A>() << " headwise i=" << i;
  });
}

TEST(GateRoundingBf16, Fp32InputsAreRoundedFirstOnEveryArch) {
  std::mt19937 gen(41);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> o(4099), u(o.size());
  for (auto& x : o) x = nd(gen);
  for (auto& x : u) x = nd(gen);
  const float sp[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity(), 1e30f, -1e30f, 89.0f, -89.0f, -88.5f, -0.0f, 3e38f};
  for (std::size_t i = 0; i < 10; ++i) u[7 * i] = sp[i];
  for (std::size_t i = 0; i < 10; ++i) o[11 * i + 3] = sp[i];
  kernel_test::for_each_arch([&](auto arch) {
    using A = decltype(arch);
    const index W = index(gattn::simd::width<A>);
    for (index n : {index(1), W - 1, W, 3 * W + 1, index(o.size())}) {
      if (n <= 0) continue;
      std::vector<float> z = o;
      gattn::apply_gate_bf16<A>(z.data(), u.data(), n);
      for (index i = 0; i < n; ++i)
        ASSERT_TRUE(same(z[std::size_t(i)], rule(o[std::size_t(i)], u[std::size_t(i)]))) << gattn::arch_name<A>() << " i=" << i;
      if (n < index(o.size())) {
        ASSERT_EQ(bits(z[std::size_t(n)]), bits(o[std::size_t(n)])) << "wrote past the end";
      }
      for (float us : sp) {
        z = o;
        gattn::apply_gate_scalar_bf16<A>(z.data(), n, us);
        for (index i = 0; i < n; ++i) ASSERT_TRUE(same(z[std::size_t(i)], rule(o[std::size_t(i)], us))) << gattn::arch_name<A>();
      }
    }
  });
}

TEST(GateRoundingBf16, SigmoidIsPyTorchsFp32Formula) {
  // 1/(1 + exp(-u)): exp(89) overflows fp32, so σ(-89) is exactly 0 (the exact σ is 2.2e-39, a bf16
  // subnormal); σ(-88.5) is still a subnormal.
  EXPECT_EQ(bits(gattn::sigmoid_bf16(-89.0f)), 0u);
  EXPECT_GT(gattn::sigmoid_bf16(-88.5f), 0.0f);
  EXPECT_EQ(gattn::sigmoid_bf16(0.0f), 0.5f);
  EXPECT_EQ(gattn::sigmoid_bf16(-0.0f), 0.5f);
  EXPECT_EQ(gattn::sigmoid_bf16(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(bits(gattn::sigmoid_bf16(-std::numeric_limits<float>::infinity())), 0u);
  EXPECT_TRUE(std::isnan(gattn::sigmoid_bf16(std::numeric_limits<float>::quiet_NaN())));
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float u = gattn::bf16_to_float(std::uint16_t(h));
    const float want = gattn::bf16_to_float(gattn::round_to_bf16(1.0f / (1.0f + float(std::exp(-double(u))))));
    ASSERT_TRUE(same(gattn::sigmoid_bf16(u), want)) << std::hex << h;
  }
}

/// The kernel with the rounded gate in its epilogue equals the rule applied to the same kernel's
/// ungated output (prefill tiles, split-KV decode, headwise and elementwise, 1 and 2 threads).
TEST(GateRoundingBf16, KernelEpilogueAppliesTheRuleToItsOwnOutput) {
  for (auto shape : {std::array<index, 4>{20, 13, 6, 2}, std::array<index, 4>{1, 2100, 8, 2}, std::array<index, 4>{3, 700, 4, 1}}) {
    kernel_test::problem pr;
    pr.t_q = shape[0]; pr.t_k = shape[1]; pr.hq = shape[2]; pr.hkv = shape[3]; pr.dqk = 40; pr.dv = 37;
    pr.fill(7);
    for (bool headwise : {false, true}) {
      const index width = headwise ? 1 : pr.dv;
      const index uts = pr.hq * width + 1;
      std::mt19937 gen(9);
      std::normal_distribution<float> nd(0.0f, 2.0f);
      std::vector<float> u(std::size_t(pr.t_q * uts));
      for (auto& x : u) x = nd(gen);
      kernel_test::for_each_arch([&](auto arch) {
        using A = decltype(arch);
        for (int th : {1, 2}) {
          std::vector<float> bare(pr.out_size()), gated(pr.out_size());
          auto p = pr.params(bare.data());
          p.threads = th;
          gattn::fused_sdpa<A>(p);
          p.out = gated.data();
          p.epilogue.gate_scores = u.data();
          p.epilogue.gate_token_stride = uts;
          p.epilogue.gate_head_stride = width;
          p.epilogue.gate_headwise = headwise;
          p.epilogue.gate_rounding = gattn::gate_rounding::bf16;
          gattn::fused_sdpa<A>(p);
          for (index i = 0; i < pr.t_q; ++i)
            for (index h = 0; h < pr.hq; ++h)
              for (index c = 0; c < pr.dv; ++c) {
                const std::size_t at = std::size_t(i * pr.ots + h * pr.dv + c);
                const float uc = u[std::size_t(i * uts + h * width + (headwise ? 0 : c))];
                ASSERT_TRUE(same(gated[at], rule(bare[at], uc)))
                    << gattn::arch_name<A>() << " t_q=" << pr.t_q << " t_k=" << pr.t_k << " headwise=" << headwise
                    << " threads=" << th << " i=" << i << " h=" << h << " c=" << c;
              }
        }
      });
    }
  }
}

TEST(GateRoundingBf16, KernelRefusesOtherActivationsAndCombines) {
  kernel_test::problem pr;
  pr.fill(3);
  std::vector<float> out(pr.out_size()), u(64, 0.5f);
  for (auto a : {gattn::activation::silu, gattn::activation::ns_sigmoid, gattn::activation::identity})
    for (auto c : {gattn::combine::mul, gattn::combine::add}) {
      auto p = pr.params(out.data());
      p.epilogue.gate_scores = u.data();
      p.epilogue.gate_activation = a;
      p.epilogue.gate_combine = c;
      p.epilogue.gate_rounding = gattn::gate_rounding::bf16;
      try {
        gattn::fused_sdpa(p);
        FAIL() << "accepted " << gattn::to_string(a) << " " << gattn::to_string(c);
      } catch (const gattn::config_error& e) {
        EXPECT_NE(std::string(e.what()).find("gate_rounding"), std::string::npos) << e.what();
      }
    }
  auto p = pr.params(out.data());
  p.epilogue.gate_scores = u.data();
  p.epilogue.gate_combine = gattn::combine::add;
  p.epilogue.gate_rounding = gattn::gate_rounding::bf16;
  EXPECT_THROW(gattn::fused_sdpa(p), gattn::config_error);
}

TEST(GateRoundingBf16, ConfigRefusesAnythingButG1SigmoidMul) {
  gattn::gqa_config c = gattn::test::small_gqa();
  c.gate.enabled = true;
  c.gate.rounding = gattn::gate_rounding::bf16;
  EXPECT_NO_THROW(gattn::validate(c));
  c.gate.granularity = gattn::granularity::headwise;
  EXPECT_NO_THROW(gattn::validate(c));
  auto refused = [](const gattn::gqa_config& bad) {
    try {
      gattn::validate(bad);
    } catch (const gattn::config_error& e) {
      return std::string(e.what()).find("gate_rounding") != std::string::npos;
    }
    return false;
  };
  for (auto pos : {gattn::gate_position::g2, gattn::gate_position::g3, gattn::gate_position::g4, gattn::gate_position::g5}) {
    auto bad = c;
    bad.gate.position = pos;
    EXPECT_TRUE(refused(bad)) << gattn::to_string(pos);
  }
  for (auto a : {gattn::activation::silu, gattn::activation::ns_sigmoid, gattn::activation::identity}) {
    auto bad = c;
    bad.gate.activation = a;
    EXPECT_TRUE(refused(bad)) << gattn::to_string(a);
  }
  auto bad = c;
  bad.gate.combine = gattn::combine::add;
  EXPECT_TRUE(refused(bad));
}

/// A GQA layer with a constant G1 gate (W_g = 0, bias b: u = b exactly) and o_proj = identity
/// outputs `gated` itself; the same layer without the gate outputs its SDPA output. So on every
/// backend, with and without the diagnostics path, gated must be the rule applied to the two.
TEST(GateRoundingBf16, GqaLayerAppliesTheRuleToItsSdpaOutput) {
  gattn::gqa_config plain = gattn::test::small_gqa(4, 2, 16, 64);
  const index n = plain.q_heads * plain.head_dim, T = 21;
  gattn::weight_map w = gattn::test::random_gqa_weights(plain, 17);
  std::vector<float> eye(std::size_t(n * n), 0.0f);
  for (index i = 0; i < n; ++i) eye[std::size_t(i * n + i)] = 1.0f;
  w.set("o_proj.weight", {n, n}, eye);
  std::mt19937 gen(8);
  const auto b = gattn::test::random_values(gen, n, 3.0f);
  const auto x = gattn::test::random_values(gen, T * n, 1.0f);
  for (bool headwise : {false, true}) {
    gattn::gqa_config c = plain;
    c.gate.enabled = true;
    c.gate.rounding = gattn::gate_rounding::bf16;
    if (headwise) c.gate.granularity = gattn::granularity::headwise;
    const index scores = gattn::shape_of_gate(c).scores();
    gattn::weight_map wg = w;
    wg.set("g_proj.weight", {scores, n}, std::vector<float>(std::size_t(scores * n), 0.0f));
    wg.set("g_proj.bias", {scores}, std::vector<float>(b.begin(), b.begin() + scores));
    for (auto backend : {gattn::sdpa_backend::kernel, gattn::sdpa_backend::reference, gattn::sdpa_backend::unfused})
      for (bool with_stats : {false, true}) {
        gattn::gqa_layer layer(c, wg), ungated(plain, w);
        layer.set_sdpa(gattn::sdpa_of(backend));
        ungated.set_sdpa(gattn::sdpa_of(backend));
        std::vector<float> y(std::size_t(T * n)), o(y.size());
        gattn::statistics_observer stats;
        layer.forward({x.data(), T, n, n}, {y.data(), T, n, n}, with_stats ? &stats : nullptr);
        ungated.forward({x.data(), T, n, n}, {o.data(), T, n, n});
        for (index t = 0; t < T; ++t)
          for (index k = 0; k < n; ++k) {
            const float u = b[std::size_t(headwise ? k / plain.head_dim : k)];
            const std::size_t at = std::size_t(t * n + k);
            ASSERT_EQ(y[at], rule(o[at], u)) << gattn::to_string(backend) << " stats=" << with_stats
                                             << " headwise=" << headwise << " t=" << t << " k=" << k;
          }
      }
  }
}

/// The same on a Kimi-K3-like MLA layer (constant gate, o_proj = identity), in both forms (gate in
/// the kernel epilogue, or after W_uv in the absorbed path), one prefill or prefill then decode.
TEST(GateRoundingBf16, MlaLayerAppliesTheRuleToItsSdpaOutput) {
  gattn::mla_config plain;
  plain.hidden = 96;
  plain.heads = 3;
  plain.qk_nope_head_dim = 32;
  plain.qk_rope_head_dim = 16;
  plain.v_head_dim = 32;
  plain.kv_lora_rank = 64;
  plain.q_lora_rank = 48;
  plain.rope.rotary_dim = 16;
  const index d = plain.hidden, T = 19;
  std::mt19937 gen(12);
  gattn::weight_map w;
  auto lin = [&](const std::string& name, index out, index in) {
    w.set(name, {out, in}, gattn::test::random_values(gen, out * in, 1.0f / std::sqrt(float(in))));
  };
  lin("q_a_proj.weight", 48, d);
  w.set("q_a_layernorm.weight", {48}, std::vector<float>(48, 1.0f));
  lin("q_b_proj.weight", 3 * 48, 48);
  lin("kv_a_proj_with_mqa.weight", 80, d);
  w.set("kv_a_layernorm.weight", {64}, std::vector<float>(64, 1.0f));
  lin("kv_b_proj.weight", 3 * 64, 64);
  std::vector<float> eye(std::size_t(d * d), 0.0f);
  for (index i = 0; i < d; ++i) eye[std::size_t(i * d + i)] = 1.0f;
  w.set("o_proj.weight", {d, d}, eye);
  const auto b = gattn::test::random_values(gen, d, 3.0f);
  const auto x = gattn::test::random_values(gen, T * d, 1.0f);
  auto run = [&](const gattn::mla_layer& layer, index first) {
    std::vector<float> y(std::size_t(T * d));
    gattn::kv_cache cache(layer.config(), T);
    for (index done = 0; done < T;) {
      const index n = done == 0 ? first : 1;
      layer.prefill({x.data() + done * d, n, d, d}, cache, {y.data() + done * d, n, d, d});
      done += n;
    }
    return y;
  };
  for (bool headwise : {false, true}) {
    gattn::mla_config c = plain;
    c.gate.enabled = true;
    c.gate.rounding = gattn::gate_rounding::bf16;
    if (headwise) c.gate.granularity = gattn::granularity::headwise;
    const index scores = gattn::shape_of_gate(c).scores();
    gattn::weight_map wg = w;
    wg.set("g_proj.weight", {scores, d}, std::vector<float>(std::size_t(scores * d), 0.0f));
    wg.set("g_proj.bias", {scores}, std::vector<float>(b.begin(), b.begin() + scores));
    for (auto form : {gattn::mla_form::absorbed, gattn::mla_form::expanded})
      for (auto backend : {gattn::sdpa_backend::kernel, gattn::sdpa_backend::reference})
        for (index first : {T, index(4)}) {
          gattn::mla_layer layer(c, wg), ungated(plain, w);
          layer.set_form(form);
          ungated.set_form(form);
          layer.set_sdpa(gattn::sdpa_of(backend));
          ungated.set_sdpa(gattn::sdpa_of(backend));
          const auto y = run(layer, first), o = run(ungated, first);
          for (index t = 0; t < T; ++t)
            for (index k = 0; k < d; ++k) {
              const float u = b[std::size_t(headwise ? k / plain.v_head_dim : k)];
              const std::size_t at = std::size_t(t * d + k);
              ASSERT_EQ(y[at], rule(o[at], u)) << gattn::to_string(form) << " " << gattn::to_string(backend)
                                               << " first=" << first << " headwise=" << headwise << " t=" << t << " k=" << k;
            }
        }
  }
}

}  // namespace

}  // namespace test_rounding
