// A non-finite input token never changes the outputs of the tokens before it (causality holds for
// every value): GQA and MLA layers, every backend and MLA form, fed at once, in chunks and in
// decode steps, with x[t0, c] = NaN, +Inf or -Inf.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "gattn/attention/gqa_layer.hpp"
#include "gattn/attention/mla_layer.hpp"
#include "gattn/baseline/sdpa_backend.hpp"
#include "support/random_layer.hpp"
#include "support/vectors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_nonfinite_inputs {

namespace {

using gattn::index;
using gattn::kv_cache;
using gattn::mla_form;
using gattn::sdpa_backend;
namespace test = gattn::test;

constexpr index k_tokens = 80;  // two key tiles: the poisoned token inside the diagonal tile

/// Feeds x [T, d] through `layer` in chunks of `step` tokens (0: all at once); the first chunk
/// is a prefill, the others decode calls (several rows each when step > 1).
template <class Layer>
std::vector<float> feed(const Layer& layer, const std::vector<float>& x, index d, index step) {
  const index T = index(x.size()) / d;
  std::vector<float> y(x.size(), -1.0f);
  kv_cache cache(layer.config(), T);
  for (index done = 0; done < T;) {
    const index n = step ? std::min(step, T - done) : T;
    const gattn::matrix_view<const float> xv{x.data() + done * d, n, d, d};
    const gattn::matrix_view<float> yv{y.data() + done * d, n, d, d};
    if (done == 0) layer.prefill(xv, cache, yv);
    else layer.decode(xv, cache, yv);
    done += n;
  }
  return y;
}

/// For x[t0, 5] in {NaN, +Inf, -Inf} and each feeding (chunks of `steps` tokens, 0: at once): rows
/// < t0 are finite and equal the clean run to 1e-4·max|y|.
template <class Layer>
void check_layer(const Layer& layer, index d, const std::string& what, const std::vector<index>& steps) {
  std::mt19937 gen(5);
  const std::vector<float> clean_x = test::random_values(gen, k_tokens * d, 1.0f);
  const float values[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()};
  for (index step : steps) {
    const auto clean = feed(layer, clean_x, d, step);
    const double tol = 1e-4 * test::max_abs(clean);
    for (index t0 : {index(31), index(70)})
      for (float value : values) {
        std::vector<float> x = clean_x;
        x[std::size_t(t0 * d + 5)] = value;
        const auto y = feed(layer, x, d, step);
        index first_bad = -1;
        for (index i = 0; i < t0 && first_bad < 0; ++i)
          for (index c = 0; c < d; ++c) {
            const float o = y[std::size_t(i * d + c)];
            if (!std::isfinite(o) || std::fabs(double(o) - clean[std::size_t(i * d + c)]) > tol) {
              first_bad = i;
              break;
            }
          }
        EXPECT_EQ(first_bad, -1) << what << " step=" << step << " x[" << t0 << ", 5]=" << value
                                 << ": row " << first_bad << " changed";
      }
  }
}

TEST(NonfiniteInputs, GqaRowsBeforeThePoisonedTokenAreUnchanged) {
  gattn::gqa_config c = test::small_gqa(4, 2, 16, 48);
  c.gate.enabled = true;
  const auto w = test::random_gqa_weights(c, 3);
  for (sdpa_backend b : {sdpa_backend::kernel, sdpa_backend::unfused, sdpa_backend::reference}) {
    gattn::gqa_layer layer(c, w);
    layer.set_sdpa(gattn::sdpa_of(b));
    check_layer(layer, c.hidden, std::string("gqa backend=") + gattn::to_string(b), {0, 7, 3, 1});
  }
}

/// A small DeepSeek-like MLA layer (q-LoRA, decoupled interleaved RoPE, G1 gate), random weights.
std::pair<gattn::mla_config, gattn::weight_map> small_mla() {
  gattn::mla_config c;
  c.hidden = 64;
  c.heads = 3;
  c.qk_nope_head_dim = 16;
  c.qk_rope_head_dim = 8;
  c.v_head_dim = 16;
  c.kv_lora_rank = 32;
  c.q_lora_rank = 24;
  c.rope.style = gattn::rope_style::interleaved;
  c.rope.rotary_dim = 8;
  c.gate.enabled = true;
  std::mt19937 gen(9);
  gattn::weight_map w;
  auto lin = [&](const std::string& name, index out, index in) {
    w.set(name, {out, in}, test::random_values(gen, out * in, 1.0f / std::sqrt(float(in))));
  };
  auto ones = [&](const std::string& name, index n) { w.set(name, {n}, std::vector<float>(std::size_t(n), 1.0f)); };
  lin("q_a_proj.weight", 24, 64);
  ones("q_a_layernorm.weight", 24);
  lin("q_b_proj.weight", 3 * 24, 24);
  lin("kv_a_proj_with_mqa.weight", 32 + 8, 64);
  ones("kv_a_layernorm.weight", 32);
  lin("kv_b_proj.weight", 3 * 32, 32);
  lin("o_proj.weight", 64, 3 * 16);
  lin("g_proj.weight", 3 * 16, 64);
  return {c, w};
}

TEST(NonfiniteInputs, MlaRowsBeforeThePoisonedTokenAreUnchangedInEveryForm) {
  const auto [c, w] = small_mla();
  for (mla_form f : {mla_form::absorbed, mla_form::expanded, mla_form::automatic})
    for (sdpa_backend b : {sdpa_backend::kernel, sdpa_backend::unfused}) {
      gattn::mla_layer layer(c, w);
      layer.set_form(f);
      layer.set_sdpa(gattn::sdpa_of(b));
      // Decode steps of several rows (3, 7); one-row steps cannot see a later token at all.
      check_layer(layer, c.hidden, std::string("mla form=") + gattn::to_string(f) + " backend=" + gattn::to_string(b),
                  {0, 7, 3});
    }
}

}  // namespace

}  // namespace test_nonfinite_inputs
