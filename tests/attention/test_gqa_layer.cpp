// The fast GQA layer against the float64 vectors: one-shot, chunked prefill, token-by-token decode,
// on the fused kernel and on the reference backend; Qwen3.5's full-attention folders, batches included.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "gattn/attention/gqa_layer.hpp"
#include "gattn/baseline/sdpa_backend.hpp"
#include "gattn/io.hpp"
#include "support/vectors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_gqa_layer {

namespace {


using gattn::gqa_config;
using gattn::gqa_layer;
using gattn::kv_cache;
using gattn::matrix_view;
using gattn::sdpa_backend;
using index = gattn::index;
namespace test = gattn::test;
using test::load_vector_case;
using test::max_abs;
using test::max_abs_diff;

/// How a sequence is fed to the layer.
enum class feeding { forward, prefill, chunks_of_5, decode_from_4, decode_all };

std::vector<float> run_layer(const gqa_layer& layer, const test::vector_case& c, feeding f) {
  const index T = c.tokens, d = c.hidden;
  std::vector<float> y(std::size_t(T * d), -1.0f);
  matrix_view<const float> x{c.x.data(), T, d, d};
  auto rows = [&](index first, index n) {
    return std::pair<matrix_view<const float>, matrix_view<float>>{{c.x.data() + first * d, n, d, d},
                                                                   {y.data() + first * d, n, d, d}};
  };
  if (f == feeding::forward) {
    layer.forward(x, {y.data(), T, d, d});
    return y;
  }
  kv_cache cache(layer.config(), T);
  index first = 0;
  auto feed = [&](index n) {
    auto [xv, yv] = rows(first, n);
    if (first == 0) layer.prefill(xv, cache, yv); else layer.decode(xv, cache, yv);
    first += n;
  };
  switch (f) {
    case feeding::prefill: feed(T); break;
    case feeding::chunks_of_5: while (first < T) feed(std::min<index>(5, T - first)); break;
    case feeding::decode_from_4: feed(std::min<index>(4, T)); while (first < T) feed(1); break;
    case feeding::decode_all: while (first < T) feed(1); break;
    default: break;
  }
  EXPECT_EQ(cache.size(), T);
  return y;
}

struct layer_case {
  std::string vector;
  sdpa_backend backend;
  feeding how;
};

std::string name_of(const layer_case& lc) {
  static const char* f[] = {"forward", "prefill", "chunks5", "decode_from4", "decode_all"};
  return lc.vector + "_" + gattn::to_string(lc.backend) + "_" + f[int(lc.how)];
}

class GqaLayerVectors : public ::testing::TestWithParam<layer_case> {};

TEST_P(GqaLayerVectors, MatchesFloat64Output) {
  const layer_case& lc = GetParam();
  const auto c = load_vector_case(lc.vector);
  gqa_layer layer(std::get<gqa_config>(c.config), c.weights);
  layer.set_sdpa(gattn::sdpa_of(lc.backend));
  if (!layer.config().causal && lc.how != feeding::forward && lc.how != feeding::prefill) {
    kv_cache cache(layer.config(), c.tokens);
    std::vector<float> y(std::size_t(c.hidden));
    layer.prefill({c.x.data(), 1, c.hidden, c.hidden}, cache, {y.data(), 1, c.hidden, c.hidden});
    EXPECT_THROW(layer.decode({c.x.data(), 1, c.hidden, c.hidden}, cache, {y.data(), 1, c.hidden, c.hidden}),
                 gattn::cache_error);
    return;
  }
  const auto y = run_layer(layer, c, lc.how);
  // The acceptance rule of the issue, and a tighter fp32 bound that catches subtler slips.
  EXPECT_LE(max_abs_diff(y, c.y), 1e-4 * max_abs(c.y));
  EXPECT_LE(max_abs_diff(y, c.y), 1e-5 * std::max(1.0, max_abs(c.y)));
}

std::vector<layer_case> all_cases() {
  std::vector<layer_case> out;
  for (const auto& v : test::gqa_case_names())
    for (feeding f : {feeding::forward, feeding::prefill, feeding::chunks_of_5, feeding::decode_from_4, feeding::decode_all})
      for (sdpa_backend b : {sdpa_backend::kernel, sdpa_backend::reference, sdpa_backend::unfused})
        if (b == sdpa_backend::kernel || f == feeding::forward || f == feeding::decode_from_4) out.push_back({v, b, f});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Vectors, GqaLayerVectors, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return name_of(info.param); });

/// Hugging Face folder `dir`'s full-attention layer `layer` (config.json, bf16 weights in place under
/// the layer's prefix), with x and y from its io.safetensors.
struct hf_gqa_folder {
  gattn::weight_map weights;
  test::vector_case io;
};

hf_gqa_folder load_hf_gqa_folder(const std::string& dir, index layer) {
  const std::string path = test::data_path(dir);
  hf_gqa_folder f;
  f.io.name = dir;
  f.io.config = gattn::io::load_layer_config(path + "/config.json", layer);
  f.weights = gattn::io::load_weights(gattn::io::checkpoint::open(path + "/model.safetensors"),
                                      gattn::io::hf_layer_prefix(gattn::io::read_config_json(path + "/config.json"), layer));
  const auto io = gattn::io::safetensors_file::open(path + "/io.safetensors");
  f.io.x = io.read_f32("x");
  f.io.y = io.read_f64("y");
  f.io.tokens = io.info("x").shape[0];
  f.io.hidden = io.info("x").shape[1];
  return f;
}

// Qwen3.5's full-attention layers (docs/spec.md §14: Qwen3-Next's gated layer, or without the gate
// when attn_output_gate is false), from the wrapper's and the text-only configs: every feeding,
// and prefixes of x batched over a paged cache, match the vectors.
TEST(GqaHfFolders, Qwen3_5LayersMatchTheVectors) {
  for (const auto& [dir, layer] : std::vector<std::pair<std::string, index>>{
           {"hf_qwen3_5", 3}, {"extra_hf_qwen3_5_moe_full_7", 7}, {"extra_hf_qwen3_5_text_ungated", 3}}) {
    const hf_gqa_folder f = load_hf_gqa_folder(dir, layer);
    const gqa_layer l(std::get<gqa_config>(f.io.config), f.weights);
    EXPECT_EQ(l.config().gate.enabled, dir != "extra_hf_qwen3_5_text_ungated") << dir;
    const double tol = 1e-4 * max_abs(f.io.y);
    for (feeding how : {feeding::forward, feeding::prefill, feeding::chunks_of_5, feeding::decode_from_4, feeding::decode_all})
      EXPECT_LE(max_abs_diff(run_layer(l, f.io, how), f.io.y), tol) << dir << " feeding " << int(how);
    const index T = f.io.tokens, d = f.io.hidden;
    gattn::paged_kv_cache pool(l.config(), 32, 4);
    const std::vector<index> lengths = {T, 1, (T + 1) / 2};
    std::vector<gattn::sequence_cache> seqs;
    for (std::size_t s = 0; s < lengths.size(); ++s) seqs.emplace_back(pool, pool.create());
    std::vector<std::vector<float>> y(lengths.size());
    std::vector<index> done(lengths.size(), 0);
    gattn::layer_workspace ws;
    for (bool first = true; done[0] < T; first = false) {
      std::vector<index> cu = {0};
      std::vector<float> xb;
      std::vector<gattn::sequence_cache> members;
      std::vector<std::size_t> who;
      for (std::size_t s = 0; s < lengths.size(); ++s) {
        const index n = std::min(first ? (lengths[s] + 1) / 2 : index(1), lengths[s] - done[s]);
        if (n == 0) continue;
        xb.insert(xb.end(), f.io.x.begin() + done[s] * d, f.io.x.begin() + (done[s] + n) * d);
        cu.push_back(cu.back() + n);
        members.push_back(seqs[s]);
        who.push_back(s);
      }
      std::vector<float> yb(xb.size());
      l.step({xb.data(), cu.back(), d, d}, cu.data(), index(members.size()), members.data(), {yb.data(), cu.back(), d, d}, ws);
      for (std::size_t m = 0; m < who.size(); ++m) {
        y[who[m]].insert(y[who[m]].end(), yb.begin() + cu[m] * d, yb.begin() + cu[m + 1] * d);
        done[who[m]] += cu[m + 1] - cu[m];
      }
    }
    for (std::size_t s = 0; s < lengths.size(); ++s) {
      const std::vector<double> prefix(f.io.y.begin(), f.io.y.begin() + lengths[s] * d);
      EXPECT_LE(max_abs_diff(y[s], prefix), tol) << dir << " batch sequence " << s;
    }
  }
}

}  // namespace

}  // namespace test_gqa_layer
