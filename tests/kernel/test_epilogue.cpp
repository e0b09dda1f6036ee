// Tests of the fused kernel's epilogue (output RMSNorm and the G1 gate) against a scalar double
// reference written here: every norm × granularity × head-shared × combine × activation, on every
// arch, on the prefill, no-key and split-KV decode paths; NaN/±inf gate inputs.
#include <gtest/gtest.h>

#include <sstream>

#include "support/kernel_sweep.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_epilogue {

namespace {

using gattn::index;
using kernel_test::problem;

double act_ref(gattn::activation a, double u) {
  switch (a) {
    case gattn::activation::sigmoid: return 1.0 / (1.0 + std::exp(-u));
    case gattn::activation::silu: return std::isinf(u) && u < 0 ? 0.0 : u / (1.0 + std::exp(-u));
    case gattn::activation::ns_sigmoid: return 0.5 + 0.5 / (1.0 + std::exp(-u));
    case gattn::activation::identity: return u;
  }
  return 0;
}

struct epi_case {
  gattn::norm_kind norm = gattn::norm_kind::none;
  bool gate = false, headwise = false, shared = false;
  gattn::activation act = gattn::activation::sigmoid;
  gattn::combine comb = gattn::combine::mul;
};

/// Reference epilogue over the oracle's dense SDPA output (double).
std::vector<double> reference_epilogue(const problem& pr, const std::vector<double>& sdpa, const epi_case& ec,
                                       const std::vector<float>& w, const std::vector<float>& u, index uts, index uhs,
                                       float eps) {
  std::vector<double> out(sdpa);
  for (index i = 0; i < pr.t_q; ++i)
    for (index h = 0; h < pr.hq; ++h) {
      double* z = &out[std::size_t((i * pr.hq + h) * pr.dv)];
      if (ec.norm != gattn::norm_kind::none) {
        double ss = 0;
        for (index c = 0; c < pr.dv; ++c) ss += z[c] * z[c];
        const double inv = 1.0 / std::sqrt(ss / double(pr.dv) + double(eps));
        for (index c = 0; c < pr.dv; ++c)
          z[c] = z[c] * inv * (double(w[std::size_t(c)]) + (ec.norm == gattn::norm_kind::rms_zero_centered ? 1.0 : 0.0));
      }
      if (ec.gate) {
        for (index c = 0; c < pr.dv; ++c) {
          const double g = act_ref(ec.act, double(u[std::size_t(i * uts + h * uhs + (ec.headwise ? 0 : c))]));
          z[c] = ec.comb == gattn::combine::mul ? z[c] * g : z[c] + g;
        }
      }
    }
  return out;
}

void run_epilogue(problem pr, const epi_case& ec, unsigned seed, bool special_u = false) {
  pr.fill(seed);
  std::mt19937 gen(seed + 1000);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> w(std::size_t(pr.dv));
  for (auto& x : w) x = nd(gen);
  const index width = ec.headwise ? 1 : pr.dv;
  const index uhs = ec.shared ? 0 : width + 1;  // padded head stride: a strided view
  const index uts = ec.shared ? width + 3 : pr.hq * (width + 1) + 2;
  std::vector<float> u(std::size_t(pr.t_q * uts + 8));
  for (auto& x : u) x = nd(gen);
  if (special_u) {
    const float sp[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity(), 1e30f, -1e30f, 89.0f, -89.0f, -0.0f};
    for (std::size_t x = 0; x < u.size(); x += 3) u[x] = sp[(x / 3) % 8];
  }
  const float eps = 1e-6f;
  const auto sdpa = pr.oracle();
  const auto ref = reference_epilogue(pr, sdpa, ec, w, u, uts, uhs, eps);
  std::ostringstream what;
  what << "t_q=" << pr.t_q << " t_k=" << pr.t_k << " dv=" << pr.dv << " norm=" << gattn::to_string(ec.norm)
       << " gate=" << ec.gate << " headwise=" << ec.headwise << " shared=" << ec.shared
       << " act=" << gattn::to_string(ec.act) << " comb=" << gattn::to_string(ec.comb) << " special=" << special_u;
  kernel_test::for_each_arch([&](auto arch) {
    for (int th : {1, 2}) {
      std::vector<float> out(pr.out_size());
      auto p = pr.params(out.data());
      p.threads = th;
      p.epilogue.out_norm = ec.norm;
      p.epilogue.out_norm_weight = w.data();
      p.epilogue.out_norm_eps = eps;
      if (ec.gate) {
        p.epilogue.gate_scores = u.data();
        p.epilogue.gate_token_stride = uts;
        p.epilogue.gate_head_stride = uhs;
        p.epilogue.gate_headwise = ec.headwise;
        p.epilogue.gate_activation = ec.act;
        p.epilogue.gate_combine = ec.comb;
      }
      gattn::fused_sdpa<decltype(arch)>(p);
      for (index i = 0; i < pr.t_q; ++i)
        for (index h = 0; h < pr.hq; ++h)
          for (index c = 0; c < pr.dv; ++c) {
            const double o = out[std::size_t(i * pr.ots + h * pr.dv + c)];
            const double e = ref[std::size_t((i * pr.hq + h) * pr.dv + c)];
            if (std::isnan(e) || std::isinf(e)) {
              if (std::isnan(e)) ASSERT_TRUE(std::isnan(o)) << what.str() << " got " << o;
              else ASSERT_EQ(o, e) << what.str();
              continue;
            }
            ASSERT_FALSE(std::isnan(o)) << what.str() << " i=" << i << " h=" << h << " c=" << c;
            ASSERT_NEAR(o, e, 3e-5 * (1.0 + std::fabs(e)))
                << what.str() << " arch=" << gattn::arch_name<decltype(arch)>() << " i=" << i << " h=" << h
                << " c=" << c;
          }
    }
  });
}

problem make_problem(index tq, index tk, index hq, index hkv, index dqk, index dv) {
  problem p;
  p.t_q = tq; p.t_k = tk; p.hq = hq; p.hkv = hkv; p.dqk = dqk; p.dv = dv;
  return p;
}

/// Rotates through the kernel's paths: rows without keys, split-KV decode, odd widths, MLA-like.
problem make_problem_for(unsigned seed) {
  switch (seed % 4) {
    case 0: return make_problem(20, 13, 6, 2, 24, 24);
    case 1: return make_problem(1, 2100, 8, 2, 40, 40);
    case 2: return make_problem(33, 33, 6, 3, 59, 59);
    default: return make_problem(3, 700, 16, 1, 72, 64);
  }
}

const gattn::activation k_acts[] = {gattn::activation::sigmoid, gattn::activation::silu,
                                    gattn::activation::ns_sigmoid, gattn::activation::identity};

TEST(KernelEpilogue, EveryVariant) {
  unsigned seed = 1;
  for (auto norm : {gattn::norm_kind::none, gattn::norm_kind::rms, gattn::norm_kind::rms_zero_centered})
    for (int gate_kind = 0; gate_kind < 4; ++gate_kind)  // none, elementwise, headwise, head-shared
      for (auto comb : {gattn::combine::mul, gattn::combine::add})
        for (auto act : k_acts) {
          if (gate_kind == 0 && (comb != gattn::combine::mul || act != gattn::activation::sigmoid)) continue;
          epi_case ec;
          ec.norm = norm;
          ec.gate = gate_kind > 0;
          ec.headwise = gate_kind == 2;
          ec.shared = gate_kind == 3;
          ec.act = act;
          ec.comb = comb;
          run_epilogue(make_problem_for(seed), ec, seed);
          ++seed;
        }
}

// NaN, ±inf, ±1e30, ±89 and -0 gate scores: NaN/inf positions match the reference.
TEST(KernelEpilogue, SpecialGateInputs) {
  unsigned seed = 500;
  for (auto act : k_acts)
    for (auto comb : {gattn::combine::mul, gattn::combine::add})
      for (bool headwise : {false, true}) {
        epi_case ec;
        ec.gate = true;
        ec.headwise = headwise;
        ec.act = act;
        ec.comb = comb;
        run_epilogue(make_problem(9, 6, 4, 2, 16, 16), ec, seed++, true);
      }
}

}  // namespace

}  // namespace test_epilogue
