// Tests of gattn/baseline/dense_kv.hpp: any kernel view's K and V (contiguous or paged, f32, bf16
// or f16, strided) as dense fp32 copies holding exactly the stored values, the rest of the view
// unchanged.
#include <gtest/gtest.h>

#include <vector>

#include "gattn/baseline/dense_kv.hpp"
#include "support/kernel_sweep.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_dense_kv {

namespace {

using gattn::index;
using gattn::storage_type;

TEST(DenseKv, PagedAndLowPrecisionViewsAsDenseFp32) {
  kernel_test::problem pr;
  pr.t_q = 3; pr.t_k = 13; pr.hq = 4; pr.hkv = 2; pr.dqk = 8; pr.dv = 6; pr.k_pad = 2; pr.v_pad = 1;
  pr.fill(5);
  for (storage_type type : {storage_type::f32, storage_type::bf16, storage_type::f16}) {
    for (auto* kv : {&pr.k, &pr.v})  // values the cache can hold exactly
      for (float& x : *kv)
        x = type == storage_type::f16 ? gattn::f16_to_float(gattn::round_to_f16(x))
                                      : gattn::bf16_to_float(gattn::round_to_bf16(x));
    std::vector<float> out(pr.out_size());
    const kernel_test::paged_copy copy(pr, 3, 4, type);
    gattn::sdpa_params p = pr.params(out.data());
    copy.apply(pr, p);
    EXPECT_FALSE(gattn::detail::dense_f32_kv(p));
    std::vector<float> k, v;
    const gattn::sdpa_params d = gattn::detail::dense_kv_view(p, k, v);
    EXPECT_TRUE(gattn::detail::dense_f32_kv(d));
    EXPECT_EQ(d.k_token_stride, pr.hkv * pr.dqk);
    EXPECT_EQ(d.v_head_stride, pr.dv);
    EXPECT_EQ(d.q, p.q);
    EXPECT_EQ(d.out, p.out);
    EXPECT_EQ(pr.dense_k(), std::vector<float>(d.k, d.k + pr.t_k * pr.hkv * pr.dqk)) << gattn::to_string(type);
    EXPECT_EQ(pr.dense_v(), std::vector<float>(d.v, d.v + pr.t_k * pr.hkv * pr.dv)) << gattn::to_string(type);
  }
  kernel_test::problem plain = pr;
  std::vector<float> out(plain.out_size());
  EXPECT_TRUE(gattn::detail::dense_f32_kv(plain.params(out.data())));
}

}  // namespace

}  // namespace test_dense_kv
