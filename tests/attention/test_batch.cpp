// Batched calls (docs/spec.md §11): B prefixes of each vector's x run together (one batched prefill, then
// batched decode steps, each sequence leaving when done) reproduce y[:L_s]; a refused batch appends
// nothing to any cache; results are deterministic.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "gattn/attention/any_layer.hpp"
#include "support/random_layer.hpp"
#include "support/vectors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_batch {

namespace {

using gattn::any_layer;
using gattn::execution_context;
using gattn::kv_cache;
using gattn::layer_workspace;
using gattn::matrix_view;
using gattn::sequence_cache;
using index = gattn::index;
namespace test = gattn::test;

/// Runs prefixes x[:L_s] of `x` [T, d] as one batch: all prefill ceil(L_s/2) rows in one call,
/// then one row each per call until done. Returns y_s [L_s, d] per sequence.
std::vector<std::vector<float>> run_batch(const any_layer& layer, const std::vector<float>& x, index d,
                                          const std::vector<index>& lengths, const execution_context& exec) {
  const index B = index(lengths.size());
  std::vector<kv_cache> caches;
  for (index L : lengths) caches.push_back(layer.make_cache(L));
  std::vector<std::vector<float>> y(lengths.size());
  for (index s = 0; s < B; ++s) y[std::size_t(s)].assign(std::size_t(lengths[std::size_t(s)] * d), -1.0f);
  std::vector<index> done(lengths.size(), 0);
  layer_workspace ws;
  std::vector<float> xb, yb;
  for (bool first = true;; first = false) {
    std::vector<index> cu{0}, members;
    std::vector<sequence_cache> handles;
    for (index s = 0; s < B; ++s) {
      const index L = lengths[std::size_t(s)], at = done[std::size_t(s)];
      const index n = first ? (L + 1) / 2 : std::min<index>(1, L - at);
      if (n == 0) continue;
      members.push_back(s);
      handles.emplace_back(caches[std::size_t(s)]);
      cu.push_back(cu.back() + n);
    }
    if (members.empty()) break;
    const index N = cu.back();
    xb.assign(std::size_t(N * d), 0.0f);
    yb.assign(std::size_t(N * d), 0.0f);
    for (std::size_t i = 0; i < members.size(); ++i) {
      const index s = members[i], n = cu[i + 1] - cu[i];
      std::memcpy(xb.data() + cu[i] * d, x.data() + done[std::size_t(s)] * d, sizeof(float) * std::size_t(n * d));
    }
    layer.step({xb.data(), N, d, d}, cu.data(), index(members.size()), handles.data(), {yb.data(), N, d, d}, ws, nullptr, exec);
    for (std::size_t i = 0; i < members.size(); ++i) {
      const index s = members[i], n = cu[i + 1] - cu[i];
      std::memcpy(y[std::size_t(s)].data() + done[std::size_t(s)] * d, yb.data() + cu[i] * d,
                  sizeof(float) * std::size_t(n * d));
      done[std::size_t(s)] += n;
    }
  }
  return y;
}

void expect_prefixes_match(const test::vector_case& c, const std::vector<index>& lengths,
                           const execution_context& exec) {
  any_layer layer(c.config, c.weights);
  const auto y = run_batch(layer, c.x, c.hidden, lengths, exec);
  for (std::size_t s = 0; s < lengths.size(); ++s) {
    const std::vector<double> ref(c.y.begin(), c.y.begin() + lengths[s] * c.hidden);
    EXPECT_LE(test::max_abs_diff(y[s], ref), 1e-4 * test::max_abs(ref)) << c.name << " sequence " << s
                                                                         << " of length " << lengths[s];
  }
}

std::vector<std::string> causal_cases() {
  std::vector<std::string> out;
  for (const auto& n : test::gqa_case_names())
    if (n != "gqa_noncausal") out.push_back(n);
  for (const auto& n : test::mla_case_names()) out.push_back(n);
  return out;
}

class BatchVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchVectors, EveryPrefixMatchesItsReference) {
  const auto c = test::load_vector_case(GetParam());
  const index T = c.tokens;
  expect_prefixes_match(c, {1, T, (T + 1) / 2, 3 < T ? 3 : 1, T - 1 > 0 ? T - 1 : 1}, execution_context::serial());
  expect_prefixes_match(c, {T, 1, 2 < T ? 2 : 1, T}, execution_context::with_threads(2));
}

INSTANTIATE_TEST_SUITE_P(Vectors, BatchVectors, ::testing::ValuesIn(causal_cases()),
                         [](const auto& info) { return info.param; });

TEST(Batch, DeterministicForAFixedBatchAndContext) {
  const auto c = test::load_vector_case("gqa_g1_elementwise_sigmoid");
  any_layer layer(c.config, c.weights);
  const std::vector<index> lengths{c.tokens, 1, 4, 2};
  for (const auto& exec : {execution_context::serial(), execution_context::with_threads(2)}) {
    const auto a = run_batch(layer, c.x, c.hidden, lengths, exec);
    const auto b = run_batch(layer, c.x, c.hidden, lengths, exec);
    for (std::size_t s = 0; s < lengths.size(); ++s)
      EXPECT_EQ(std::memcmp(a[s].data(), b[s].data(), a[s].size() * sizeof(float)), 0) << "sequence " << s;
  }
}

struct two_sequences {
  gattn::gqa_config cfg = test::small_gqa();
  std::unique_ptr<gattn::gqa_layer> layer;
  std::vector<kv_cache> caches;
  std::vector<float> x, y;
  layer_workspace ws;
  explicit two_sequences(gattn::storage_type type = gattn::storage_type::f32, index room1 = 8) {
    cfg.kv_cache_type = type;
    layer = std::make_unique<gattn::gqa_layer>(cfg, test::random_gqa_weights(cfg, 11));
    caches.emplace_back(cfg, 8);
    caches.emplace_back(cfg, room1);
    std::mt19937 gen(2);
    x = test::random_values(gen, 4 * cfg.hidden, 1.0f);
    y.assign(x.size(), 0.0f);
  }
  // x and y are always 4 rows: cu_seqlens must end there.
  void step(const index* cu, index batch = 2) {
    std::vector<sequence_cache> h{caches[0], caches[1]};
    const index d = cfg.hidden;
    layer->step({x.data(), 4, d, d}, cu, batch, h.data(), {y.data(), 4, d, d}, ws);
  }
};

template <class E, class F>
void expect_error(F f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning '" << needle << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Batch, NoRoomInOneCacheAppendsToNone) {
  two_sequences b(gattn::storage_type::f32, 1);
  const index cu[3] = {0, 2, 4};
  expect_error<gattn::cache_error>([&] { b.step(cu); }, "capacity of 1");
  EXPECT_EQ(b.caches[0].size(), 0);
  EXPECT_EQ(b.caches[1].size(), 0);
}

TEST(Batch, F16OverflowInOneSequenceAppendsToNone) {
  two_sequences b(gattn::storage_type::f16);
  for (index c = 0; c < b.cfg.hidden; ++c) b.x[std::size_t(3 * b.cfg.hidden + c)] = 1e30f;  // sequence 1's last row
  const index cu[3] = {0, 2, 4};
  expect_error<gattn::cache_error>([&] { b.step(cu); }, "of sequence 1");
  EXPECT_EQ(b.caches[0].size(), 0);
  EXPECT_EQ(b.caches[1].size(), 0);
}

TEST(Batch, BadOffsetsAndRepeatedCachesAreRefused) {
  two_sequences b;
  const index down[3] = {0, 3, 2}, short_end[3] = {0, 1, 3}, late_start[3] = {1, 2, 4};
  expect_error<gattn::shape_error>([&] { b.step(down); }, "cu_seqlens[2]=2");
  expect_error<gattn::shape_error>([&] { b.step(short_end); }, "must equal the rows of x");
  expect_error<gattn::shape_error>([&] { b.step(late_start); }, "cu_seqlens[0]=1");
  std::vector<sequence_cache> same{b.caches[0], b.caches[0]};
  const index cu[3] = {0, 2, 4};
  const index d = b.cfg.hidden;
  expect_error<gattn::cache_error>(
      [&] { b.layer->step({b.x.data(), 4, d, d}, cu, 2, same.data(), {b.y.data(), 4, d, d}, b.ws); },
      "same sequence");
  EXPECT_EQ(b.caches[0].size(), 0);
}

// A cache of another element type than the layer's kv_cache_dtype is refused, naming both, before
// anything is appended: a pool or a cache of f32 given to a bf16 layer, and the other way round.
TEST(Batch, ACacheOfAnotherDtypeIsRefused) {
  two_sequences b(gattn::storage_type::bf16);
  gattn::gqa_config f32 = b.cfg;
  f32.kv_cache_type = gattn::storage_type::f32;
  kv_cache plain(f32, 8);
  gattn::paged_kv_cache pool(f32, 8, 4);
  const auto id = pool.create();
  const index d = b.cfg.hidden, cu[3] = {0, 2, 4};
  for (const sequence_cache& wrong : {sequence_cache(plain), sequence_cache(pool, id)}) {
    std::vector<sequence_cache> h{b.caches[0], wrong};
    expect_error<gattn::cache_error>(
        [&] { b.layer->step({b.x.data(), 4, d, d}, cu, 2, h.data(), {b.y.data(), 4, d, d}, b.ws); },
        "holds f32 rows, the layer's kv_cache_dtype is bf16");
  }
  expect_error<gattn::cache_error>([&] { b.layer->prefill({b.x.data(), 2, d, d}, plain, {b.y.data(), 2, d, d}); },
                                   "(a kv_cache) holds f32 rows");
  EXPECT_EQ(b.caches[0].size(), 0);
  EXPECT_EQ(plain.size(), 0);
  EXPECT_EQ(pool.size(id), 0);
  EXPECT_EQ(pool.free_blocks(), 8);
  const gattn::gqa_layer f32_layer(f32, test::random_gqa_weights(f32, 11));
  expect_error<gattn::cache_error>([&] { f32_layer.prefill({b.x.data(), 2, d, d}, b.caches[0], {b.y.data(), 2, d, d}); },
                                   "holds bf16 rows, the layer's kv_cache_dtype is f32");
}

// Sequences never see each other: a NaN in one sequence's rows leaves the other's outputs as
// they are when it runs alone.
TEST(Batch, SequencesAreIsolated) {
  two_sequences b;
  const index d = b.cfg.hidden, cu[3] = {0, 2, 4};
  b.x[std::size_t(2 * d + 5)] = std::numeric_limits<float>::quiet_NaN();
  b.step(cu);
  kv_cache alone(b.cfg, 8);
  std::vector<float> y0(std::size_t(2 * d));
  b.layer->prefill({b.x.data(), 2, d, d}, alone, {y0.data(), 2, d, d});
  EXPECT_LE(test::max_abs_diff(y0, std::vector<float>(b.y.begin(), b.y.begin() + 2 * d)), 1e-5 * test::max_abs(y0));
  EXPECT_TRUE(std::isnan(b.y[std::size_t(2 * d)]));
}

}  // namespace

}  // namespace test_batch
