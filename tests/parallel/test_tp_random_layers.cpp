// Tensor parallelism on random layers with shapes the vectors lack (docs/spec.md §12): 8 query heads over
// 4 KV heads, so P = 2 keeps two KV heads per rank and P = 8 replicates them; biases everywhere
// (o_proj's included), fused gates in both layouts, and G5 gates (mul and add) applied after the sum.
#include <gtest/gtest.h>

#include "gattn/attention/gqa_layer.hpp"
#include "gattn/parallel/in_process_group.hpp"
#include "gattn/parallel/tp_layer.hpp"
#include "support/random_layer.hpp"
#include "support/vectors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_tp_random_layers {

namespace {

using gattn::index;
namespace test = gattn::test;

struct gate_variant {
  const char* name;
  gattn::gate_config gate;
};

gattn::gate_config make_gate(gattn::gate_position pos, gattn::gate_source src, gattn::granularity gr, bool shared,
                             gattn::combine comb, gattn::fused_layout layout = gattn::fused_layout::per_head) {
  gattn::gate_config g;
  g.enabled = true;
  g.position = pos;
  g.source = src;
  g.granularity = gr;
  g.shared = shared;
  g.combine = comb;
  g.layout = layout;
  g.activation = comb == gattn::combine::add ? gattn::activation::silu : gattn::activation::sigmoid;
  if (src == gattn::gate_source::low_rank) g.rank = 8;
  return g;
}

std::vector<gate_variant> variants() {
  using gattn::combine;
  using gattn::fused_layout;
  using gattn::gate_position;
  using gattn::gate_source;
  using gattn::granularity;
  return {
      {"none", gattn::gate_config{}},
      {"g1_fused_per_head", make_gate(gate_position::g1, gate_source::fused_q, granularity::elementwise, false, combine::mul)},
      {"g1_fused_per_kv_group", make_gate(gate_position::g1, gate_source::fused_q, granularity::elementwise, false,
                                          combine::mul, fused_layout::per_kv_group)},
      {"g1_fused_per_kv_group_headwise", make_gate(gate_position::g1, gate_source::fused_q, granularity::headwise, false,
                                                   combine::mul, fused_layout::per_kv_group)},
      {"g1_low_rank_shared", make_gate(gate_position::g1, gate_source::low_rank, granularity::elementwise, true, combine::mul)},
      {"g2_shared", make_gate(gate_position::g2, gate_source::separate, granularity::elementwise, true, combine::mul)},
      {"g3_headwise_add", make_gate(gate_position::g3, gate_source::separate, granularity::headwise, false, combine::add)},
      {"g4_elementwise", make_gate(gate_position::g4, gate_source::separate, granularity::elementwise, false, combine::mul)},
      {"g5_mul", make_gate(gate_position::g5, gate_source::separate, granularity::elementwise, false, combine::mul)},
      {"g5_add_low_rank", make_gate(gate_position::g5, gate_source::low_rank, granularity::headwise, false, combine::add)},
  };
}

class TensorParallelRandomLayers : public ::testing::TestWithParam<gate_variant> {};

TEST_P(TensorParallelRandomLayers, MatchSingleProcessLayer) {
  gattn::gqa_config cfg = test::small_gqa(8, 4, 16, 48);
  cfg.gate = GetParam().gate;
  const gattn::weight_map w = test::random_gqa_weights(cfg, 11, /*biases=*/true);
  ASSERT_TRUE(w.contains("o_proj.bias"));
  const index T = 9, d = cfg.hidden;
  std::mt19937 gen(5);
  const std::vector<float> x = test::random_values(gen, T * d, 1.0f);
  // prefill 4 tokens, then decode one at a time
  auto feed = [&](const auto& layer, auto make) {
    std::vector<float> y(std::size_t(T * d));
    gattn::kv_cache cache = make();
    layer.prefill({x.data(), 4, d, d}, cache, {y.data(), 4, d, d});
    for (index t = 4; t < T; ++t) layer.decode({x.data() + t * d, 1, d, d}, cache, {y.data() + t * d, 1, d, d});
    return y;
  };
  const gattn::gqa_layer single(cfg, w);
  const std::vector<float> y_ref = feed(single, [&] { return gattn::kv_cache(cfg, T); });
  for (int P : {2, 4, 8}) {
    std::vector<std::vector<float>> ys(static_cast<std::size_t>(P));
    gattn::in_process_group group(P);
    group.run([&](gattn::communicator& comm) {
      const gattn::tp_layer layer(cfg, w, comm);
      EXPECT_EQ(layer.split().kv_count, P <= 4 ? 4 / P : 1);
      ys[std::size_t(comm.rank())] = feed(layer, [&] { return layer.make_cache(T); });
    });
    for (int r = 0; r < P; ++r)
      EXPECT_LE(test::max_abs_diff(ys[std::size_t(r)], y_ref), 1e-4 * test::max_abs(y_ref)) << "P=" << P << " rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Gates, TensorParallelRandomLayers, ::testing::ValuesIn(variants()),
                         [](const ::testing::TestParamInfo<gate_variant>& i) { return std::string(i.param.name); });

}  // namespace

}  // namespace test_tp_random_layers
