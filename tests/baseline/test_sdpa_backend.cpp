// Tests of gattn/baseline/sdpa_backend.hpp: each backend name runs its implementation, and the
// oracle adapter (reference_sdpa) writes the float64 oracle rounded once to fp32, on dense,
// strided, paged and bf16 views alike.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gattn/baseline/sdpa_backend.hpp"
#include "support/kernel_sweep.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_sdpa_backend {

namespace {

using gattn::index;
using kernel_test::problem;

TEST(SdpaBackend, NamesAndImplementations) {
  EXPECT_EQ(std::string(gattn::to_string(gattn::sdpa_backend::kernel)), "kernel");
  EXPECT_EQ(std::string(gattn::to_string(gattn::sdpa_backend::reference)), "reference");
  EXPECT_EQ(std::string(gattn::to_string(gattn::sdpa_backend::unfused)), "unfused");
  EXPECT_EQ(gattn::sdpa_of(gattn::sdpa_backend::kernel), &gattn::kernel_sdpa);
  EXPECT_EQ(gattn::sdpa_of(gattn::sdpa_backend::reference), &gattn::reference_sdpa);
  EXPECT_EQ(gattn::sdpa_of(gattn::sdpa_backend::unfused), &gattn::unfused_sdpa);
}

problem strided_problem() {
  problem pr;
  pr.t_q = 6; pr.t_k = 21; pr.hq = 6; pr.hkv = 2; pr.dqk = 24; pr.dv = 16; pr.causal = true;
  pr.q_pad = 1; pr.k_pad = 3; pr.v_pad = 2; pr.out_pad = 5;
  pr.fill(3);
  return pr;
}

TEST(SdpaBackend, ReferenceIsTheOracleRoundedOnce) {
  const problem pr = strided_problem();
  const auto ref = pr.oracle();
  std::vector<float> out(pr.out_size(), -7.0f);
  gattn::reference_sdpa(pr.params(out.data()));
  for (index i = 0; i < pr.t_q; ++i)
    for (index h = 0; h < pr.hq; ++h)
      for (index c = 0; c < pr.dv; ++c)
        ASSERT_EQ(out[std::size_t(i * pr.ots + h * pr.dv + c)], float(ref[std::size_t((i * pr.hq + h) * pr.dv + c)]))
            << "i=" << i << " h=" << h << " c=" << c;
}

TEST(SdpaBackend, ReferenceReadsPagedAndBf16ViewsAsTheirValues) {
  problem pr = strided_problem();
  // The values a bf16 cache holds, in the contiguous view and in a paged copy of it.
  for (auto* kv : {&pr.k, &pr.v})
    for (float& x : *kv) x = gattn::bf16_to_float(gattn::round_to_bf16(x));
  std::vector<float> contiguous(pr.out_size()), paged(pr.out_size());
  gattn::reference_sdpa(pr.params(contiguous.data()));
  const kernel_test::paged_copy copy(pr, 4, 9, gattn::storage_type::bf16);
  gattn::sdpa_params p = pr.params(paged.data());
  copy.apply(pr, p);
  gattn::reference_sdpa(p);
  EXPECT_EQ(contiguous, paged);
}

}  // namespace

}  // namespace test_sdpa_backend
