// Tensor parallelism of the gated delta-rule layers (docs/spec.md §12, §13) with P ranks as threads:
// every delta vector, over every P its heads allow (key heads split or replicated), reproduces the
// float64 output in one prefill, token by token and in a batch, in both layouts of Gated DeltaNet's
// input projections; a split the heads refuse is refused on every rank alike.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <random>

#include "gattn/parallel/in_process_group.hpp"
#include "gattn/parallel/tp_layer.hpp"
#include "support/delta_vectors.hpp"
#include "support/random_delta_layer.hpp"
#include "support/fp8_weights.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_tp_delta {
namespace {

using gattn::index;

double relative(const std::vector<float>& y, const std::vector<double>& ref) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::fabs(double(y[i]) - ref[i]));
    scale = std::max(scale, std::fabs(ref[i]));
  }
  return diff / scale;
}

/// One rank's output of the whole sequence: one prefill (decode_from < 0) or a prefill of
/// decode_from tokens, then one token per call; `batched` runs the same through step() over a pool.
std::vector<float> run_rank(const gattn::tp_layer& layer, const gattn::test::delta_case& c, index decode_from,
                            bool batched) {
  const index T = c.tokens, d = c.hidden;
  std::vector<float> y(std::size_t(T * d), -1.0f);
  gattn::delta_state_pool pool = layer.make_state_pool(1);
  gattn::delta_state state = layer.make_state();
  gattn::delta_sequence handle(pool, pool.create());
  gattn::layer_workspace ws;
  const index first = decode_from < 0 ? T : std::min(decode_from, T);
  for (index t = 0; t < T;) {
    const index n = t == 0 ? first : 1;
    const index cu[2] = {0, n};
    if (batched) layer.step({c.x.data() + t * d, n, d, d}, cu, 1, &handle, {y.data() + t * d, n, d, d}, ws);
    else layer.prefill({c.x.data() + t * d, n, d, d}, state, {y.data() + t * d, n, d, d});
    t += n;
  }
  return y;
}

bool split_allowed(const gattn::delta_config& c, int P) {
  try {
    gattn::split_heads(c, 0, P);
    return true;
  } catch (const gattn::config_error&) {
    return false;
  }
}

TEST(TensorParallelDelta, EveryRankMatchesTheVector) {
  int runs = 0;
  for (const std::string& name : gattn::test::delta_case_names()) {
    const auto c = gattn::test::load_delta_case(name);
    for (int P : {2, 3, 4}) {
      if (!split_allowed(c.config, P)) continue;
      for (const auto& [decode_from, batched] : std::vector<std::pair<index, bool>>{{-1, false}, {5, false}, {3, true}}) {
        std::vector<std::vector<float>> ys(static_cast<std::size_t>(P));
        gattn::in_process_group group(P);
        group.run([&](gattn::communicator& comm) {
          const gattn::tp_layer layer(c.config, c.weights, comm);
          ys[std::size_t(comm.rank())] = run_rank(layer, c, decode_from, batched);
        });
        for (int r = 0; r < P; ++r)
          EXPECT_LE(relative(ys[std::size_t(r)], c.y), 1e-4) << name << " P=" << P << " rank " << r
                                                             << " decode_from " << decode_from;
        ++runs;
      }
    }
  }
  EXPECT_GE(runs, 20);
}

/// Every rank's output of `c` (weights `w`, input x) over P ranks, in one prefill, a prefill then
/// decode, or a batch.
std::vector<std::vector<float>> run_ranks(const gattn::test::delta_case& c, int P, index decode_from, bool batched) {
  std::vector<std::vector<float>> ys(static_cast<std::size_t>(P));
  gattn::in_process_group group(P);
  group.run([&](gattn::communicator& comm) {
    const gattn::tp_layer layer(c.config, c.weights, comm);
    ys[std::size_t(comm.rank())] = run_rank(layer, c, decode_from, batched);
  });
  return ys;
}

const std::vector<std::pair<index, bool>> feeds = {{-1, false}, {5, false}, {3, true}};

// The split layout (docs/spec.md §14) shards as the fused one does: a rank keeps the rows of its conv
// channels of in_proj_qkv and of its value heads of in_proj_z, in_proj_b, in_proj_a, for whole
// key-head groups (2 of 2 key heads at P = 2, 4 key heads at P = 2 and 4) and for part of a group
// (2 key heads at P = 4). Every rank equals the fused layout's rank bit for bit, and the
// single-process layer.
TEST(TensorParallelDelta, SplitLayoutShardsAtTwoAndFourRanks) {
  int runs = 0;
  for (const auto& [Hk, Hv, Dk, Dv] : std::vector<std::array<index, 4>>{{2, 8, 16, 12}, {4, 8, 8, 16}, {4, 4, 16, 8}}) {
    gattn::test::delta_case split;
    split.config = gattn::test::small_delta(gattn::delta_kind::gated_deltanet, Dk, Dv);
    split.config.key_heads = Hk;
    split.config.value_heads = Hv;
    split.weights = gattn::test::random_delta_weights(split.config, 61, {}, true, gattn::gdn_layout::split);
    split.tokens = 70;
    split.hidden = split.config.hidden;
    std::mt19937 gen(62);
    split.x = gattn::test::random_values(gen, split.tokens * split.hidden, 1.0f);
    gattn::test::delta_case fused = split;
    fused.weights = gattn::test::fused_from_split(split.config, split.weights);
    std::vector<float> y_one(split.x.size());
    const gattn::delta_layer one(split.config, split.weights);
    one.forward({split.x.data(), split.tokens, split.hidden, split.hidden}, {y_one.data(), split.tokens, split.hidden, split.hidden});
    const std::vector<double> y_ref(y_one.begin(), y_one.end());
    for (int P : {2, 4}) {
      if (!split_allowed(split.config, P)) continue;
      for (const auto& [decode_from, batched] : feeds) {
        const auto ys = run_ranks(split, P, decode_from, batched), yf = run_ranks(fused, P, decode_from, batched);
        for (int r = 0; r < P; ++r) {
          EXPECT_EQ(ys[std::size_t(r)], yf[std::size_t(r)]) << "H_k " << Hk << " P=" << P << " rank " << r;
          EXPECT_LE(relative(ys[std::size_t(r)], y_ref), 1e-4) << "H_k " << Hk << " P=" << P << " rank " << r;
        }
        ++runs;
      }
    }
  }
  EXPECT_EQ(runs, 18);
}

// The Qwen3.5 folders' bf16 split weights, sliced per rank, reproduce their vectors.
TEST(TensorParallelDelta, Qwen3_5FoldersMatchTheirVectors) {
  int runs = 0;
  for (const char* dir : {"hf_qwen3_5_linear", "extra_hf_qwen3_5_text_linear_r4", "extra_hf_qwen3_5_moe_linear_mha"}) {
    const auto c = gattn::test::load_hf_delta_case(dir);
    for (int P : {2, 4}) {
      if (!split_allowed(c.config, P)) continue;
      for (const auto& [decode_from, batched] : feeds) {
        const auto ys = run_ranks(c, P, decode_from, batched);
        for (int r = 0; r < P; ++r)
          EXPECT_LE(relative(ys[std::size_t(r)], c.y), 1e-4) << dir << " P=" << P << " rank " << r;
        ++runs;
      }
    }
  }
  EXPECT_EQ(runs, 18);
}

// The delta vectors with block-FP8 projections (blocks of 5 × 11 that the ranks' rows, copied runs
// of a split group and out_proj's columns all cut): every rank equals the unsharded FP8 layer.
TEST(TensorParallelDelta, Fp8ProjectionsShardAcrossTheirBlocks) {
  int runs = 0;
  for (const std::string& name : gattn::test::delta_case_names()) {
    auto c = gattn::test::load_delta_case(name);
    c.weights = gattn::test::fp8_weights(c.weights, 5, 11, name.size() % 2 == 0);
    std::vector<double> whole;
    gattn::in_process_group one(1);
    one.run([&](gattn::communicator& comm) {
      for (float v : run_rank(gattn::tp_layer(c.config, c.weights, comm), c, 5, false)) whole.push_back(v);
    });
    for (int P : {2, 4}) {
      if (!split_allowed(c.config, P)) continue;
      std::vector<std::vector<float>> ys(static_cast<std::size_t>(P));
      gattn::in_process_group group(P);
      group.run([&](gattn::communicator& comm) {
        ys[std::size_t(comm.rank())] = run_rank(gattn::tp_layer(c.config, c.weights, comm), c, 5, false);
      });
      for (int r = 0; r < P; ++r) EXPECT_LE(relative(ys[std::size_t(r)], whole), 1e-5) << name << " P=" << P << " rank " << r;
      ++runs;
    }
  }
  EXPECT_GE(runs, 8);
}

// GDN with 2 key heads over 4 ranks replicates each key head on two ranks, each with half of its
// value heads: the sliced in_proj_qkvz/in_proj_ba rows and conv channels still give the layer.
TEST(TensorParallelDelta, ReplicatedKeyHeadsSplitTheirValueHeads) {
  const auto c = gattn::test::load_delta_case("delta_gdn");  // H_k 2, H_v 4
  const auto s = gattn::split_heads(c.config, 3, 4);
  EXPECT_EQ(s.kv_count, 1);
  EXPECT_EQ(s.kv_first, 1);
  EXPECT_EQ(s.q_count, 1);
  EXPECT_EQ(gattn::shard_config(c.config, s).value_heads, 1);
}

TEST(TensorParallelDelta, SplitsTheHeadsRefuseAreNamed) {
  const auto c = gattn::test::load_delta_case("delta_gdn");  // H_v 4
  try {
    gattn::split_heads(c.config, 0, 3);
    FAIL() << "3 ranks accepted for 4 value heads";
  } catch (const gattn::config_error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("num_value_heads=4"));
  }
}

}  // namespace
}  // namespace test_tp_delta
