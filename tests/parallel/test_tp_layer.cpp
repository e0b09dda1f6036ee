// Tensor parallelism (docs/spec.md §12) with P ranks as threads (in_process_group): every GQA and MLA
// vector, sharded over every P its heads allow, reproduces the float64 output in prefill and decode;
// with block-FP8 weights every rank equals the unsharded FP8 layer.
#include <gtest/gtest.h>

#include <mutex>

#include "gattn/parallel/in_process_group.hpp"
#include "gattn/parallel/tp_layer.hpp"
#include "support/fp8_weights.hpp"
#include "support/vectors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_tp_layer {

namespace {

using gattn::index;
using gattn::matrix_view;
namespace test = gattn::test;

enum class feeding { forward, prefill, decode_from_4 };

std::vector<float> run_rank(const gattn::tp_layer& layer, const test::vector_case& c, feeding f) {
  const index T = c.tokens, d = c.hidden;
  std::vector<float> y(std::size_t(T * d), -1.0f);
  if (f == feeding::forward) {
    layer.forward({c.x.data(), T, d, d}, {y.data(), T, d, d});
    return y;
  }
  gattn::kv_cache cache = layer.make_cache(T);
  const index first = f == feeding::prefill ? T : std::min<index>(4, T);
  layer.prefill({c.x.data(), first, d, d}, cache, {y.data(), first, d, d});
  for (index t = first; t < T; ++t) layer.decode({c.x.data() + t * d, 1, d, d}, cache, {y.data() + t * d, 1, d, d});
  return y;
}

bool split_allowed(const gattn::layer_config& cfg, int P) {
  try {
    std::visit([&](const auto& c) { gattn::split_heads(c, 0, P); }, cfg);
    return true;
  } catch (const gattn::config_error&) {
    return false;
  }
}

/// Runs `c` on P ranks; returns every rank's output.
std::vector<std::vector<float>> run_sharded(const test::vector_case& c, int P, feeding f) {
  std::vector<std::vector<float>> ys(static_cast<std::size_t>(P));
  gattn::in_process_group group(P);
  group.run([&](gattn::communicator& comm) {
    gattn::tp_layer layer(c.config, c.weights, comm);
    ys[std::size_t(comm.rank())] = run_rank(layer, c, f);
  });
  return ys;
}

struct tp_case {
  std::string vector;
  int ranks;
};

void PrintTo(const tp_case& c, std::ostream* os) { *os << c.vector << " on " << c.ranks << " ranks"; }

std::vector<tp_case> all_cases() {
  std::vector<tp_case> out;
  std::vector<std::string> names = test::gqa_case_names();
  for (const std::string& n : test::mla_case_names()) names.push_back(n);
  for (const std::string& n : names) {
    const auto c = test::load_vector_case(n);
    for (int P : {1, 2, 3, 4, 6})
      if (split_allowed(c.config, P)) out.push_back({n, P});
  }
  return out;
}

class TensorParallelVectors : public ::testing::TestWithParam<tp_case> {};

TEST_P(TensorParallelVectors, EveryRankMatchesFloat64Output) {
  const tp_case& tc = GetParam();
  const auto c = test::load_vector_case(tc.vector);
  const bool causal = gattn::any_layer(c.config, c.weights).causal();
  const double tol = 1e-4 * test::max_abs(c.y);
  for (feeding f : {feeding::forward, feeding::prefill, feeding::decode_from_4}) {
    if (!causal && f == feeding::decode_from_4) continue;
    const auto ys = run_sharded(c, tc.ranks, f);
    for (int r = 0; r < tc.ranks; ++r)
      EXPECT_LE(test::max_abs_diff(ys[std::size_t(r)], c.y), tol) << "rank " << r << " feeding " << int(f);
  }
}

INSTANTIATE_TEST_SUITE_P(Vectors, TensorParallelVectors, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<tp_case>& i) {
                           return i.param.vector + "_p" + std::to_string(i.param.ranks);
                         });

// Block-FP8 weights sharded: a rank's rows, columns and (for per_kv_group fused q_proj) copied runs
// of rows cut the blocks (7 × 13 here); each slice keeps its values' scales, so every rank equals
// the one-process layer over the same FP8 weights.
TEST(TensorParallel, Fp8WeightsShardAcrossTheirBlocks) {
  int runs = 0;
  for (const tp_case& tc : all_cases()) {
    if (tc.ranks == 1 || tc.ranks == 6) continue;
    test::vector_case c = test::load_vector_case(tc.vector);
    c.weights = test::fp8_weights(c.weights, 7, 13, tc.ranks == 4);
    c.y.clear();
    const std::vector<float> whole = [&] {
      gattn::in_process_group one(1);
      std::vector<float> y;
      one.run([&](gattn::communicator& comm) { y = run_rank(gattn::tp_layer(c.config, c.weights, comm), c, feeding::prefill); });
      return y;
    }();
    const auto ys = run_sharded(c, tc.ranks, feeding::prefill);
    for (int r = 0; r < tc.ranks; ++r)
      EXPECT_LE(test::max_abs_diff(ys[std::size_t(r)], whole), 1e-5 * test::max_abs(whole))
          << tc.vector << " rank " << r << " of " << tc.ranks;
    ++runs;
  }
  EXPECT_GE(runs, 40);
}

TEST(TensorParallel, EveryVectorRunsOnTwoRanks) {
  // the heads of the vectors allow P = 2 except for the odd-headed ones
  int two = 0;
  for (const tp_case& tc : all_cases()) two += tc.ranks == 2;
  EXPECT_GE(two, 40);
}

TEST(TensorParallel, RefusesSplitsThatDoNotDivideTheHeads) {
  auto c = test::load_vector_case("gqa_plain");  // H_q = 4, H_kv = 2
  const auto& cfg = std::get<gattn::gqa_config>(c.config);
  try {
    gattn::split_heads(cfg, 0, 3);
    FAIL() << "P = 3 over 4 heads was accepted";
  } catch (const gattn::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("num_attention_heads=4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("3 ranks"), std::string::npos) << e.what();
  }
  gattn::gqa_config odd = cfg;  // H_q = 12 over H_kv = 3 on 2 ranks: neither divides the other
  odd.q_heads = 12;
  odd.kv_heads = 3;
  try {
    gattn::split_heads(odd, 1, 2);
    FAIL() << "H_kv = 3 on 2 ranks was accepted";
  } catch (const gattn::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("num_key_value_heads=3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("2 ranks"), std::string::npos) << e.what();
  }
  auto m = test::load_vector_case("mla_gated");  // 4 heads
  gattn::in_process_group group(3);
  EXPECT_THROW(group.run([&](gattn::communicator& comm) { gattn::tp_layer layer(m.config, m.weights, comm); }),
               gattn::config_error);
}

TEST(TensorParallel, SplitsHeadsAndReplicatesKvHeads) {
  const gattn::head_split s = gattn::split_heads(8, 2, 3, 4);  // G = 4, two ranks per KV head
  EXPECT_EQ(s.q_first, 6);
  EXPECT_EQ(s.q_count, 2);
  EXPECT_EQ(s.kv_first, 1);
  EXPECT_EQ(s.kv_count, 1);
  const gattn::head_split t = gattn::split_heads(8, 4, 1, 2);
  EXPECT_EQ(t.q_first, 4);
  EXPECT_EQ(t.kv_first, 2);
  EXPECT_EQ(t.kv_count, 2);
}

/// `c`'s weights with an o_proj bias added (no vector has one): it must be added once, before G5.
gattn::weight_map with_output_bias(const test::vector_case& c) {
  gattn::weight_map w = c.weights;
  std::vector<float> b(std::size_t(c.hidden));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = 0.25f * float(int(i % 7) - 3);
  w.set("o_proj.bias", {c.hidden}, b);
  return w;
}

TEST(TensorParallel, OutputBiasOnRankZeroOnlyAndOnceInTheSum) {
  for (const char* name : {"gqa_g1_bias", "gqa_g5_elementwise", "gqa_g5_headwise", "extra_gqa_g5_shared", "mla_gated"}) {
    const auto c = test::load_vector_case(name);
    const gattn::weight_map w = with_output_bias(c);
    const index T = c.tokens, d = c.hidden;
    std::vector<float> y_single(std::size_t(T * d));
    gattn::any_layer(c.config, w).forward({c.x.data(), T, d, d}, {y_single.data(), T, d, d});
    for (int P : {2, 4}) {
      gattn::in_process_group group(P);
      std::vector<float> y0(std::size_t(T * d));
      group.run([&](gattn::communicator& comm) {
        gattn::tp_layer layer(c.config, w, comm);
        std::vector<float> y(std::size_t(T * d));
        layer.forward({c.x.data(), T, d, d}, {y.data(), T, d, d});
        if (comm.rank() == 0) y0 = y;
        const auto local = std::visit(
            [&](const auto& cfg) { return gattn::shard_weights(cfg, w, gattn::split_heads(cfg, comm.rank(), P)); },
            c.config);
        if (comm.rank() == 0) EXPECT_TRUE(local.contains("o_proj.bias")) << name;
        else EXPECT_FALSE(local.contains("o_proj.bias")) << name << " rank " << comm.rank();
      });
      EXPECT_LE(test::max_abs_diff(y0, y_single), 1e-4 * test::max_abs(y_single)) << name << " P=" << P;
    }
  }
}

TEST(TensorParallel, OutputProjectionColumnsPartitionOProj) {
  const auto c = test::load_vector_case("gqa_plain");
  const auto& cfg = std::get<gattn::gqa_config>(c.config);
  const auto w0 = gattn::shard_weights(cfg, c.weights, gattn::split_heads(cfg, 0, 2));
  const auto w1 = gattn::shard_weights(cfg, c.weights, gattn::split_heads(cfg, 1, 2));
  const auto& full = c.weights.get("o_proj.weight", {cfg.hidden, cfg.q_heads * cfg.head_dim});
  const index half = cfg.q_heads * cfg.head_dim / 2;
  const auto& a = w0.get("o_proj.weight", {cfg.hidden, half});
  const auto& b = w1.get("o_proj.weight", {cfg.hidden, half});
  for (index r = 0; r < cfg.hidden; ++r)
    for (index k = 0; k < half; ++k) {
      ASSERT_EQ(a.at(r, k), full.at(r, k));
      ASSERT_EQ(b.at(r, k), full.at(r, half + k));
    }
}

TEST(InProcessGroup, AllReduceSumsAndBroadcastCopiesRankZero) {
  gattn::in_process_group group(3);
  std::mutex m;
  std::vector<std::vector<float>> sums(3);
  std::vector<int> got(3);
  group.run([&](gattn::communicator& comm) {
    std::vector<float> v = {float(comm.rank()), 1.0f, 10.0f * float(comm.rank())};
    comm.all_reduce_sum(v.data(), 3);
    int value = comm.rank() == 0 ? 42 : -1;
    comm.broadcast(&value, sizeof value);
    comm.barrier();
    std::lock_guard<std::mutex> lock(m);
    sums[std::size_t(comm.rank())] = v;
    got[std::size_t(comm.rank())] = value;
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(sums[std::size_t(r)], (std::vector<float>{3.0f, 3.0f, 30.0f}));
    EXPECT_EQ(got[std::size_t(r)], 42);
  }
}

TEST(InProcessGroup, AFailingRankReleasesTheOthers) {
  gattn::in_process_group group(3);
  try {
    group.run([&](gattn::communicator& comm) {
      if (comm.rank() == 1) throw gattn::shape_error("rank 1 failed");
      std::vector<float> v(4, 1.0f);
      comm.all_reduce_sum(v.data(), 4);  // would wait forever for rank 1
    });
    FAIL() << "no exception";
  } catch (const gattn::shape_error& e) {
    EXPECT_STREQ(e.what(), "rank 1 failed");
  }
}

TEST(Slice, RowsAndColumns) {
  const std::vector<float> data = {0, 1, 2, 3, 4, 5};
  const gattn::weight_view t(gattn::storage_type::f32, data.data(), {3, 2});
  EXPECT_EQ(gattn::slice_rows(t, {{2, 1}, {0, 1}}).widened(), (std::vector<float>{4, 5, 0, 1}));
  EXPECT_EQ(gattn::slice_cols(t, 1, 1).widened(), (std::vector<float>{1, 3, 5}));
  // One run and a column range are views of the caller's memory: nothing is copied.
  EXPECT_EQ(gattn::slice_rows(t, {{1, 2}}).data(), static_cast<const void*>(data.data() + 2));
  EXPECT_EQ(gattn::slice_cols(t, 1, 1).data(), static_cast<const void*>(data.data() + 1));
  EXPECT_THROW(gattn::slice_rows(t, {{2, 2}}), gattn::weight_error);
  EXPECT_THROW(gattn::slice_cols(t, 1, 2), gattn::weight_error);
}

}  // namespace

}  // namespace test_tp_layer
