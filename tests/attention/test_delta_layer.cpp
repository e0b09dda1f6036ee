// Tests for include/gattn/attention/delta_layer.hpp: the Gated DeltaNet and KDA layers against the
// float64 vectors and the reference on every path (one call, calls split anywhere, token-by-token
// decode, both kernel forms, threads, batches), the Hugging Face folders (Qwen3.5's split input
// projections equal to the fused ones bit for bit), and their properties (causality of non-finite
// values, decays from vanishing to overwhelming, refused calls change nothing).
#include "gattn/attention/any_layer.hpp"
#include "gattn/io.hpp"
#include "gattn/reference/delta_layer.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "support/delta_vectors.hpp"
#include "support/random_delta_layer.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_delta_layer {
namespace {

using gattn::delta_config;
using gattn::delta_form;
using gattn::delta_kind;
using gattn::delta_layer;
using gattn::delta_state;
using gattn::index;

/// max|a − b| / max|b|.
template <class A, class B>
double relative(const A& a, const B& b) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return scale == 0 ? diff : diff / scale;
}

/// y for x [T, d] run through `state` in calls of the sizes `sizes` (repeated until T is covered).
std::vector<float> run_in_calls(const delta_layer& layer, const std::vector<float>& x, index T, delta_state& state,
                                const std::vector<index>& sizes, const gattn::execution_context& exec = {}) {
  const index d = layer.config().hidden;
  std::vector<float> y(std::size_t(T * d));
  for (index t = 0, i = 0; t < T; ++i) {
    const index n = std::min(sizes[std::size_t(i) % sizes.size()], T - t);
    layer.prefill({x.data() + t * d, n, d, d}, state, {y.data() + t * d, n, d, d}, nullptr, exec);
    t += n;
  }
  return y;
}

std::vector<float> random_input(index T, index d, unsigned seed) {
  std::mt19937 gen(seed);
  return gattn::test::random_values(gen, T * d, 1.0f);
}

const std::vector<std::vector<index>> call_patterns = {{1 << 30}, {37, 64, 1}, {63, 2}, {1}};

class DeltaVectors : public ::testing::TestWithParam<std::string> {};

// Every form and every way of splitting the tokens into calls reproduces y, and leaves the state S
// the vector gives after the last token.
TEST_P(DeltaVectors, EveryPathMatchesTheVector) {
  const auto c = gattn::test::load_delta_case(GetParam());
  for (delta_form form : {delta_form::automatic, delta_form::recurrent, delta_form::chunked}) {
    delta_layer layer(c.config, c.weights);
    layer.set_form(form);
    for (const auto& pattern : call_patterns) {
      delta_state state = layer.make_state();
      const auto y = run_in_calls(layer, c.x, c.tokens, state, pattern);
      EXPECT_LE(relative(y, c.y), 1e-4) << c.name << " form " << int(form) << " calls of " << pattern.front();
      const std::vector<float> S(state.recurrent(), state.recurrent() + c.state.size());
      EXPECT_LE(relative(S, c.state), 1e-4) << c.name << " state, form " << int(form);
      EXPECT_EQ(state.tokens(), c.tokens);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, DeltaVectors, ::testing::ValuesIn(gattn::test::delta_case_names()));

/// The delta-rule layer of Hugging Face folder `dir`: its config.json at `layer_index`, its bf16
/// weights used in place under the layer's prefix.
gattn::any_layer hf_folder_layer(const std::string& dir, index layer_index) {
  const std::string path = gattn::test::delta_data_path(dir);
  const auto cfg = gattn::io::load_layer_config(path + "/config.json", layer_index);
  const auto ckpt = gattn::io::checkpoint::open(path + "/model.safetensors");
  std::ifstream in(path + "/config.json");
  const auto prefix = gattn::io::hf_layer_prefix(nlohmann::json::parse(in), layer_index);
  return gattn::any_layer(cfg, gattn::io::load_weights(ckpt, prefix));
}

/// The Hugging Face delta-rule folders and their layer: Qwen3-Next, Kimi Linear, Qwen3.5 (the
/// multimodal wrapper's split projections, a text-only config, H_v/H_k = 1, 2 and 4, D_k != D_v).
const std::vector<std::pair<std::string, index>> hf_delta_folders = {
    {"hf_qwen3_next_linear", 0}, {"hf_kimi_linear", 1}, {"hf_qwen3_5_linear", 0},
    {"extra_hf_qwen3_5_text_linear_r4", 2}, {"extra_hf_qwen3_5_moe_linear_mha", 1}};

// The Hugging Face folders: the config and layer index pick the layer, the bf16 weights are used in
// place under the layer's prefix; one prefill, calls of every size, token by token.
TEST(DeltaHfFolders, LoadedLayersMatchTheVectors) {
  for (const auto& [dir, layer_index] : hf_delta_folders) {
    const gattn::any_layer layer = hf_folder_layer(dir, layer_index);
    ASSERT_TRUE(layer.is_delta()) << dir;
    const auto c = gattn::test::load_hf_delta_case(dir);
    for (const auto& pattern : call_patterns) {
      delta_state state = layer.make_state();
      const index d = c.hidden;
      std::vector<float> y(c.y.size());
      for (index t = 0, i = 0; t < c.tokens; ++i) {
        const index n = std::min(pattern[std::size_t(i) % pattern.size()], c.tokens - t);
        layer.prefill({c.x.data() + t * d, n, d, d}, state, {y.data() + t * d, n, d, d});
        t += n;
      }
      EXPECT_LE(relative(y, c.y), 1e-4) << dir;
    }
  }
}

// One batched step per round over a pool, every sequence a prefix of the folder's x (prefill chunks
// and single decodes mixed): each row matches the vector's y.
TEST(DeltaHfFolders, BatchesOverAPoolMatchTheVectors) {
  for (const auto& [dir, layer_index] : hf_delta_folders) {
    const gattn::any_layer layer = hf_folder_layer(dir, layer_index);
    const auto c = gattn::test::load_hf_delta_case(dir);
    const index d = c.hidden, T = c.tokens;
    const std::vector<index> lengths = {T, (T + 1) / 2, 1};
    gattn::delta_state_pool pool = layer.make_state_pool(3);
    std::vector<gattn::delta_sequence> seqs;
    for (std::size_t s = 0; s < lengths.size(); ++s) seqs.emplace_back(pool, pool.create());
    std::vector<index> done(lengths.size(), 0);
    std::vector<std::vector<float>> y(lengths.size());
    for (std::size_t s = 0; s < lengths.size(); ++s) y[s].resize(std::size_t(lengths[s] * d));
    gattn::layer_workspace ws;
    for (int round = 0; done[0] < T; ++round) {
      std::vector<index> cu = {0};
      std::vector<float> xb;
      std::vector<gattn::delta_sequence> members;
      std::vector<std::size_t> who;
      for (std::size_t s = 0; s < lengths.size(); ++s) {
        const index n = std::min(round == 0 ? (lengths[s] + 2) / 3 : index(1), lengths[s] - done[s]);
        if (n == 0) continue;
        xb.insert(xb.end(), c.x.begin() + done[s] * d, c.x.begin() + (done[s] + n) * d);
        cu.push_back(cu.back() + n);
        members.push_back(seqs[s]);
        who.push_back(s);
      }
      std::vector<float> yb(xb.size());
      layer.step({xb.data(), cu.back(), d, d}, cu.data(), index(members.size()), members.data(),
                 {yb.data(), cu.back(), d, d}, ws);
      for (std::size_t m = 0; m < who.size(); ++m) {
        std::copy(yb.begin() + cu[m] * d, yb.begin() + cu[m + 1] * d, y[who[m]].begin() + done[who[m]] * d);
        done[who[m]] += cu[m + 1] - cu[m];
      }
    }
    for (std::size_t s = 0; s < lengths.size(); ++s) {
      const std::vector<double> prefix(c.y.begin(), c.y.begin() + lengths[s] * d);
      EXPECT_LE(relative(y[s], prefix), 1e-4) << dir << " sequence " << s;
    }
  }
}

// Qwen3.5's folder holds Qwen3-Next's folder's weights with the projections split: the same layer,
// bit for bit, on every path.
TEST(DeltaSplitLayout, Qwen3_5FolderEqualsTheQwen3NextFolderBitForBit) {
  const gattn::any_layer split = hf_folder_layer("hf_qwen3_5_linear", 0);
  const gattn::any_layer fused = hf_folder_layer("hf_qwen3_next_linear", 0);
  const auto c = gattn::test::load_hf_delta_case("hf_qwen3_5_linear");
  const index d = c.hidden;
  for (const auto& pattern : call_patterns) {
    delta_state a = split.make_state(), b = fused.make_state();
    std::vector<float> ya(c.y.size()), yb(c.y.size());
    for (index t = 0, i = 0; t < c.tokens; ++i) {
      const index n = std::min(pattern[std::size_t(i) % pattern.size()], c.tokens - t);
      split.prefill({c.x.data() + t * d, n, d, d}, a, {ya.data() + t * d, n, d, d});
      fused.prefill({c.x.data() + t * d, n, d, d}, b, {yb.data() + t * d, n, d, d});
      t += n;
    }
    EXPECT_EQ(ya, yb) << "calls of " << pattern.front();
    EXPECT_TRUE(std::equal(a.recurrent(), a.recurrent() + a.shape().total(), b.recurrent()));
  }
}

// Split weights and the fused weights built from them give the same bits: one projection map over
// row segments of either layout, the same P (biases included; prefills long enough for the
// cache-blocked GEMM; H_v/H_k = 1, 2, 4; D_k != D_v).
TEST(DeltaSplitLayout, SplitEqualsFusedBitForBit) {
  for (const auto& [Hk, Hv, Dk, Dv] : std::vector<std::array<index, 4>>{{2, 8, 16, 12}, {3, 3, 8, 16}, {2, 4, 16, 16}}) {
    delta_config c = gattn::test::small_delta(delta_kind::gated_deltanet, Dk, Dv);
    c.key_heads = Hk;
    c.value_heads = Hv;
    for (bool biases : {false, true}) {
      const auto split_w = gattn::test::random_delta_weights(c, 91, {}, biases, gattn::gdn_layout::split);
      const delta_layer split(c, split_w), fused(c, gattn::test::fused_from_split(c, split_w));
      const index T = 150;
      const auto x = random_input(T, c.hidden, 92);
      for (const auto& pattern : call_patterns) {
        delta_state a = split.make_state(), b = fused.make_state();
        const auto ya = run_in_calls(split, x, T, a, pattern);
        const auto yb = run_in_calls(fused, x, T, b, pattern);
        EXPECT_EQ(ya, yb) << "H_k " << Hk << " H_v " << Hv << " biases " << biases << " calls of " << pattern.front();
        EXPECT_TRUE(std::equal(a.recurrent(), a.recurrent() + a.shape().total(), b.recurrent()));
      }
    }
  }
}

// Both layouts in one map are refused when the layer is built, naming a tensor of each.
TEST(DeltaSplitLayout, BothLayoutsAreRefusedWhenTheLayerIsBuilt) {
  const delta_config c = gattn::test::small_delta(delta_kind::gated_deltanet);
  auto w = gattn::test::random_delta_weights(c, 93);
  const auto split = gattn::test::random_delta_weights(c, 93, {}, false, gattn::gdn_layout::split);
  w.set("in_proj_qkv.weight", split.all().at("in_proj_qkv.weight"));
  try {
    delta_layer l(c, w);
    FAIL() << "both layouts accepted";
  } catch (const gattn::weight_error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("'in_proj_qkvz.weight'"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("'in_proj_qkv.weight'"));
  }
}

// Work is spread over (sequence, value head); each task runs the same code whoever runs it, so
// every thread count and pool gives the same bits.
TEST(DeltaLayer, ThreadCountsGiveTheSameBits) {
  for (delta_kind kind : {delta_kind::gated_deltanet, delta_kind::kda}) {
    const delta_config c = gattn::test::small_delta(kind);
    const delta_layer layer(c, gattn::test::random_delta_weights(c, 11));
    const index T = 150;
    const auto x = random_input(T, c.hidden, 12);
    delta_state a = layer.make_state(), b = layer.make_state();
    const auto serial = run_in_calls(layer, x, T, a, {T}, gattn::execution_context::serial());
    const auto two = run_in_calls(layer, x, T, b, {T}, gattn::execution_context::with_threads(2));
    EXPECT_EQ(serial, two) << gattn::to_string(kind);
  }
}

// Decays from vanishing (g ≈ −1e-7 per token) to overwhelming (g ≈ −80 per token, a chunk's sum far
// below −1000) match the float64 recurrence; nothing becomes NaN.
TEST(DeltaLayer, VanishingAndStrongDecaysMatchTheReference) {
  const std::vector<gattn::test::delta_decay_init> decays = {{1e-6f, 1e-5f, -3.0f}, {1.0f, 16.0f, -3.0f},
                                                             {16.0f, 20.0f, 4.0f}};
  for (delta_kind kind : {delta_kind::gated_deltanet, delta_kind::kda}) {
    for (const auto& decay : decays) {
      const delta_config c = gattn::test::small_delta(kind);
      const auto w = gattn::test::random_delta_weights(c, 21, decay);
      const index T = 140;
      const auto x = random_input(T, c.hidden, 22);
      const auto ref = gattn::reference::delta_layer_forward(c, w, x.data(), T, c.hidden);
      for (delta_form form : {delta_form::recurrent, delta_form::chunked}) {
        delta_layer layer(c, w);
        layer.set_form(form);
        delta_state state = layer.make_state();
        const auto y = run_in_calls(layer, x, T, state, {T});
        EXPECT_LE(relative(y, ref.y), 1e-4) << gattn::to_string(kind) << " A >= " << decay.a_low;
        for (float v : y) ASSERT_TRUE(std::isfinite(v));
      }
    }
  }
}

// A NaN or Inf in token t changes no output row before t, in one call or token by token.
TEST(DeltaLayer, NonFiniteTokenChangesNoEarlierRow) {
  for (delta_kind kind : {delta_kind::gated_deltanet, delta_kind::kda}) {
    const delta_config c = gattn::test::small_delta(kind);
    const delta_layer layer(c, gattn::test::random_delta_weights(c, 31));
    const index T = 150, d = c.hidden;
    const auto clean = random_input(T, d, 32);
    delta_state s0 = layer.make_state();
    const auto y_clean = run_in_calls(layer, clean, T, s0, {T});
    for (index bad : {index(0), index(63), index(64), index(100)}) {
      for (float value : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
        auto x = clean;
        x[std::size_t(bad * d + 3)] = value;
        delta_state s = layer.make_state();
        const auto y = run_in_calls(layer, x, T, s, {T});
        for (index i = 0; i < bad * d; ++i)
          ASSERT_EQ(y[std::size_t(i)], y_clean[std::size_t(i)]) << gattn::to_string(kind) << " token " << bad << " row " << i / d;
      }
    }
  }
}

// Copying a state is a snapshot: restoring it (or forking a pool sequence) continues bit for bit.
TEST(DeltaLayer, SnapshotRestoreAndForkContinueIdentically) {
  const delta_config c = gattn::test::small_delta(delta_kind::kda);
  const delta_layer layer(c, gattn::test::random_delta_weights(c, 41));
  const index T = 90, d = c.hidden;
  const auto x = random_input(T, d, 42);
  delta_state state = layer.make_state();
  std::vector<float> y(std::size_t(T * d));
  layer.prefill({x.data(), 50, d, d}, state, {y.data(), 50, d, d});
  const delta_state snapshot = state;
  std::vector<float> first(std::size_t(40 * d)), again(first.size());
  layer.prefill({x.data() + 50 * d, 40, d, d}, state, {first.data(), 40, d, d});
  state = snapshot;
  EXPECT_EQ(state.tokens(), 50);
  layer.prefill({x.data() + 50 * d, 40, d, d}, state, {again.data(), 40, d, d});
  EXPECT_EQ(first, again);

  gattn::delta_state_pool pool = layer.make_state_pool(3);
  const auto a = pool.create();
  gattn::layer_workspace ws;
  const index cu[2] = {0, 50};
  gattn::delta_sequence ha(pool, a);
  layer.step({x.data(), 50, d, d}, cu, 1, &ha, {y.data(), 50, d, d}, ws);
  const auto b = pool.fork(a);
  const auto snap = pool.snapshot(a);
  const index cu40[2] = {0, 40};
  std::vector<float> from_a(first.size()), from_b(first.size()), restored(first.size());
  layer.step({x.data() + 50 * d, 40, d, d}, cu40, 1, &ha, {from_a.data(), 40, d, d}, ws);
  gattn::delta_sequence hb(pool, b);
  layer.step({x.data() + 50 * d, 40, d, d}, cu40, 1, &hb, {from_b.data(), 40, d, d}, ws);
  pool.restore(a, snap);
  layer.step({x.data() + 50 * d, 40, d, d}, cu40, 1, &ha, {restored.data(), 40, d, d}, ws);
  EXPECT_EQ(from_a, first);
  EXPECT_EQ(from_b, first);
  EXPECT_EQ(restored, first);
  EXPECT_EQ(pool.tokens(a), 90);
}

// Each row of a batched call (prefill chunks and single decodes mixed, sequences of a pool and a
// delta_state side by side) equals the row its sequence gives alone.
TEST(DeltaLayer, BatchRowsEqualEachSequenceAlone) {
  for (delta_kind kind : {delta_kind::gated_deltanet, delta_kind::kda}) {
    const delta_config c = gattn::test::small_delta(kind);
    const delta_layer layer(c, gattn::test::random_delta_weights(c, 51));
    const index d = c.hidden;
    const std::vector<index> lengths = {70, 9, 130};
    std::vector<std::vector<float>> x, alone;
    for (std::size_t s = 0; s < lengths.size(); ++s) {
      x.push_back(random_input(lengths[s], d, 52 + unsigned(s)));
      delta_state st = layer.make_state();
      alone.push_back(run_in_calls(layer, x[s], lengths[s], st, {lengths[s]}));
    }
    gattn::delta_state_pool pool = layer.make_state_pool(2);
    delta_state single = layer.make_state();
    const gattn::delta_sequence seqs[3] = {{pool, pool.create()}, single, {pool, pool.create()}};
    std::vector<index> done(3, 0);
    std::vector<std::vector<float>> got = {std::vector<float>(alone[0].size()), std::vector<float>(alone[1].size()),
                                           std::vector<float>(alone[2].size())};
    gattn::layer_workspace ws;
    for (const std::vector<index>& take : std::vector<std::vector<index>>{{30, 1, 65}, {1, 1, 1}, {39, 7, 64}}) {
      std::vector<index> cu = {0};
      std::vector<float> xb;
      for (std::size_t s = 0; s < 3; ++s) {
        xb.insert(xb.end(), x[s].begin() + done[s] * d, x[s].begin() + (done[s] + take[s]) * d);
        cu.push_back(cu.back() + take[s]);
      }
      std::vector<float> yb(xb.size());
      layer.step({xb.data(), cu.back(), d, d}, cu.data(), 3, seqs, {yb.data(), cu.back(), d, d}, ws);
      for (std::size_t s = 0; s < 3; ++s) {
        std::copy(yb.begin() + cu[s] * d, yb.begin() + cu[s + 1] * d, got[s].begin() + done[s] * d);
        done[s] += take[s];
      }
    }
    for (std::size_t s = 0; s < 3; ++s)
      EXPECT_LE(relative(got[s], alone[s]), 1e-5) << gattn::to_string(kind) << " sequence " << s;
  }
}

// Refused calls throw before any state changes: every state keeps its bits and token count.
TEST(DeltaLayer, RefusedCallsChangeNothing) {
  const delta_config c = gattn::test::small_delta(delta_kind::gated_deltanet);
  const delta_layer layer(c, gattn::test::random_delta_weights(c, 61));
  const index d = c.hidden;
  const auto x = random_input(8, d, 62);
  std::vector<float> y(x.size());
  gattn::delta_state_pool pool = layer.make_state_pool(2);
  const auto a = pool.create(), b = pool.create();
  gattn::layer_workspace ws;
  const index cu[3] = {0, 4, 8};
  gattn::delta_sequence two[2] = {{pool, a}, {pool, b}};
  layer.step({x.data(), 8, d, d}, cu, 2, two, {y.data(), 8, d, d}, ws);
  const delta_state before = pool.snapshot(a);
  pool.release(b);
  EXPECT_THROW(layer.step({x.data(), 8, d, d}, cu, 2, two, {y.data(), 8, d, d}, ws), gattn::cache_error);
  gattn::delta_sequence same[2] = {{pool, a}, {pool, a}};
  EXPECT_THROW(layer.step({x.data(), 8, d, d}, cu, 2, same, {y.data(), 8, d, d}, ws), gattn::cache_error);
  const delta_config other = gattn::test::small_delta(delta_kind::kda);
  delta_state foreign(other);
  gattn::delta_sequence mixed[2] = {{pool, a}, foreign};
  EXPECT_THROW(layer.step({x.data(), 8, d, d}, cu, 2, mixed, {y.data(), 8, d, d}, ws), gattn::cache_error);
  const index bad_cu[3] = {0, 5, 4};
  EXPECT_THROW(layer.step({x.data(), 8, d, d}, bad_cu, 2, two, {y.data(), 8, d, d}, ws), gattn::shape_error);
  const delta_state after = pool.snapshot(a);
  EXPECT_EQ(after.tokens(), before.tokens());
  EXPECT_TRUE(std::equal(before.recurrent(), before.recurrent() + before.shape().total(), after.recurrent()));
}

TEST(DeltaLayer, ConfigAndWeightErrorsNameTheKey) {
  delta_config c = gattn::test::small_delta(delta_kind::gated_deltanet);
  auto w = gattn::test::random_delta_weights(c, 71);
  auto message = [](auto f) -> std::string {
    try {
      f();
    } catch (const gattn::error& e) {
      return e.what();
    }
    return "no error";
  };
  auto bad = w;
  bad.set("A_log", {c.value_heads}, std::vector<float>(std::size_t(c.value_heads), std::nanf("")));
  EXPECT_THAT(message([&] { delta_layer l(c, bad); }), ::testing::HasSubstr("A_log"));
  bad = w;
  bad.set("A_log", {c.value_heads}, std::vector<float>(std::size_t(c.value_heads), 100.0f));
  EXPECT_THAT(message([&] { delta_layer l(c, bad); }), ::testing::HasSubstr("exp(A_log) overflows"));
  bad = w;
  bad.set("dt_bias", {c.value_heads}, std::vector<float>(std::size_t(c.value_heads), INFINITY));
  EXPECT_THAT(message([&] { delta_layer l(c, bad); }), ::testing::HasSubstr("dt_bias"));
  delta_config odd = c;
  odd.value_heads = 7;
  EXPECT_THAT(message([&] { delta_layer l(odd, w); }), ::testing::HasSubstr("num_value_heads=7"));
  odd = c;
  odd.conv_kernel = 0;
  EXPECT_THAT(message([&] { delta_layer l(odd, w); }), ::testing::HasSubstr("conv_kernel"));
  odd = gattn::test::small_delta(delta_kind::kda);
  odd.decay = gattn::decay_form::lower_bound;
  odd.decay_lower_bound = -6;
  EXPECT_THAT(message([&] { delta_layer l(odd, w); }), ::testing::HasSubstr("decay_lower_bound"));
}

TEST(DeltaStatePool, IdsOfReleasedSequencesAreRefused) {
  const delta_config c = gattn::test::small_delta(delta_kind::gated_deltanet);
  gattn::delta_state_pool pool(c, 2);
  const auto a = pool.create();
  const auto b = pool.create();
  EXPECT_EQ(pool.free_slots(), 0);
  EXPECT_THROW(pool.create(), gattn::cache_error);
  EXPECT_THROW(pool.fork(a), gattn::cache_error);
  pool.release(a);
  const auto c2 = pool.create();  // the slot of a, a new generation
  EXPECT_NE(c2, a);
  EXPECT_THROW(pool.release(a), gattn::cache_error);
  EXPECT_THROW(pool.snapshot(a), gattn::cache_error);
  EXPECT_NO_THROW(pool.check(c2));
  EXPECT_NO_THROW(pool.check(b));
  EXPECT_THROW(pool.check(-1), gattn::cache_error);
  const delta_config other = gattn::test::small_delta(delta_kind::kda);
  EXPECT_THROW(pool.restore(b, delta_state(other)), gattn::cache_error);
}

// Finite A_log and dt_bias whose decay overflows to −inf (exp(88) · softplus(30 + a); dt_bias 3e38)
// erase the state at every token: one prefill (chunked) and token-by-token decode agree and stay
// finite, as the recurrence does.
TEST(DeltaLayer, DecayOverflowingToMinusInfinityMatchesDecode) {
  const delta_config c = gattn::test::small_delta(delta_kind::gated_deltanet);
  for (const auto& [a_log, dt_bias] : std::vector<std::pair<float, float>>{{88.0f, 30.0f}, {0.0f, 3e38f}}) {
    gattn::weight_map w = gattn::test::random_delta_weights(c, 83);
    w.set("A_log", {c.value_heads}, std::vector<float>(std::size_t(c.value_heads), a_log));
    w.set("dt_bias", {c.value_heads}, std::vector<float>(std::size_t(c.value_heads), dt_bias));
    const delta_layer layer(c, w);
    const index T = 150;
    const auto x = random_input(T, c.hidden, 84);
    delta_state a = layer.make_state(), b = layer.make_state();
    const auto prefill = run_in_calls(layer, x, T, a, {T});
    const auto decode = run_in_calls(layer, x, T, b, {1});
    for (float v : prefill) ASSERT_TRUE(std::isfinite(v));
    EXPECT_LE(relative(prefill, std::vector<double>(decode.begin(), decode.end())), 1e-5) << a_log << " " << dt_bias;
  }
}

// A moved-from or default-constructed state holds no values: calls and restores refuse it (they
// dereferenced its buffer), and the state moved into works.
TEST(DeltaLayer, MovedFromStatesAreRefused) {
  const delta_config c = gattn::test::small_delta(delta_kind::gated_deltanet);
  const delta_layer layer(c, gattn::test::random_delta_weights(c, 85));
  const auto x = random_input(3, c.hidden, 86);
  std::vector<float> y(x.size());
  delta_state a = layer.make_state();
  delta_state b = std::move(a);
  delta_state empty;
  for (delta_state* s : {&a, &empty}) {
    EXPECT_FALSE(s->holds_values());
    EXPECT_THROW(layer.prefill({x.data(), 3, c.hidden, c.hidden}, *s, {y.data(), 3, c.hidden, c.hidden}), gattn::cache_error);
    gattn::delta_state_pool pool = layer.make_state_pool(1);
    const auto id = pool.create();
    EXPECT_THROW(pool.restore(id, *s), gattn::cache_error);
  }
  EXPECT_NO_THROW(layer.prefill({x.data(), 3, c.hidden, c.hidden}, b, {y.data(), 3, c.hidden, c.hidden}));
  a = std::move(b);
  EXPECT_TRUE(a.holds_values());
  EXPECT_FALSE(b.holds_values());
  EXPECT_EQ(a.tokens(), 3);
}

// A delta-rule layer keeps a state, a softmax layer a KV cache: any_layer refuses the other kind.
TEST(DeltaLayer, AnyLayerRefusesTheOtherKindOfMemory) {
  const delta_config c = gattn::test::small_delta(delta_kind::kda);
  const gattn::any_layer layer(c, gattn::test::random_delta_weights(c, 81));
  EXPECT_TRUE(layer.is_delta());
  EXPECT_STREQ(layer.kind(), "kda");
  EXPECT_THROW(layer.make_cache(16), gattn::cache_error);
  EXPECT_THROW(layer.make_paged_cache(4, 16), gattn::cache_error);
  EXPECT_TRUE(std::holds_alternative<delta_config>(layer.config()));
  const gattn::gqa_config g = gattn::test::small_gqa();
  const gattn::any_layer softmax(g, gattn::test::random_gqa_weights(g, 82));
  EXPECT_THROW(softmax.make_state(), gattn::cache_error);
}

}  // namespace
}  // namespace test_delta_layer
