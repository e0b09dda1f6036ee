// Batched decode in docs/spec.md §10 `fast` numerics: bf16 weights, a bf16 cache, numerics = fast and
// kv_numerics = fast (bf16-operand small GEMMs, bf16 dot products over the cache where the CPU takes
// them). B prefixes of each causal vector run together as in test_batch.cpp (one batched prefill, then
// one row per sequence per step) and each stays within 1e-2·max|y_ref| of its reference.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "gattn/attention/any_layer.hpp"
#include "gattn/simd/convert.hpp"
#include "support/vectors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_fast_decode {

namespace {

using gattn::any_layer;
using gattn::execution_context;
using gattn::kv_cache;
using gattn::layer_workspace;
using gattn::sequence_cache;
using index = gattn::index;
namespace test = gattn::test;

/// The fast tolerance of docs/spec.md §10.
constexpr double fast_tolerance = 1e-2;

gattn::layer_config all_fast(gattn::layer_config cfg) {
  std::visit(
      [](auto& c) {
        c.numerics = gattn::numerics::fast;
        if constexpr (!std::is_same<std::decay_t<decltype(c)>, gattn::delta_config>::value) {
          c.kv_cache_type = gattn::storage_type::bf16;
          c.kv_numerics = gattn::kv_numerics::fast;
        }
      },
      cfg);
  return cfg;
}

/// The matrices of `w` stored as bf16 (used in place by the layer); vectors (norms, biases) stay.
gattn::weight_map bf16_matrices(const gattn::weight_map& w) {
  gattn::weight_map out;
  for (const auto& [name, v] : w.all()) {
    if (v.shape().size() != 2) {
      out.set(name, v);
      continue;
    }
    const std::vector<float> wide = v.widened();
    auto bits = std::make_shared<std::vector<std::uint16_t>>(wide.size());
    for (std::size_t i = 0; i < wide.size(); ++i) (*bits)[i] = gattn::round_to_bf16(wide[i]);
    out.set(name, gattn::weight_view(gattn::storage_type::bf16, bits->data(), v.shape(), -1, bits));
  }
  return out;
}

/// One layer step over the sequences that still have rows: `first` takes ceil(L/2) rows of each,
/// later steps one row. Advances done; false when no sequence had rows left.
bool batch_step(const any_layer& layer, const std::vector<float>& x, index d, const std::vector<index>& lengths,
                std::vector<index>& done, std::vector<kv_cache>& caches, std::vector<std::vector<float>>& y, bool first,
                layer_workspace& ws, const execution_context& exec) {
  std::vector<index> cu{0}, members;
  std::vector<sequence_cache> handles;
  for (std::size_t s = 0; s < lengths.size(); ++s) {
    const index L = lengths[s], n = first ? (L + 1) / 2 : std::min<index>(1, L - done[s]);
    if (n == 0) continue;
    members.push_back(index(s));
    handles.emplace_back(caches[s]);
    cu.push_back(cu.back() + n);
  }
  if (members.empty()) return false;
  const index N = cu.back();
  std::vector<float> xb(std::size_t(N * d)), yb(std::size_t(N * d));
  for (std::size_t i = 0; i < members.size(); ++i) {
    const auto s = std::size_t(members[i]);
    std::memcpy(xb.data() + cu[i] * d, x.data() + done[s] * d, sizeof(float) * std::size_t((cu[i + 1] - cu[i]) * d));
  }
  layer.step({xb.data(), N, d, d}, cu.data(), index(members.size()), handles.data(), {yb.data(), N, d, d}, ws, nullptr, exec);
  for (std::size_t i = 0; i < members.size(); ++i) {
    const auto s = std::size_t(members[i]);
    const index n = cu[i + 1] - cu[i];
    std::memcpy(y[s].data() + done[s] * d, yb.data() + cu[i] * d, sizeof(float) * std::size_t(n * d));
    done[s] += n;
  }
  return true;
}

void expect_prefixes_within_fast(const test::vector_case& c, const any_layer& layer, const std::vector<index>& lengths,
                                 const execution_context& exec) {
  const index d = c.hidden;
  std::vector<kv_cache> caches;
  std::vector<std::vector<float>> y;
  for (index L : lengths) {
    caches.push_back(layer.make_cache(L));
    y.emplace_back(std::size_t(L * d), -1.0f);
  }
  std::vector<index> done(lengths.size(), 0);
  layer_workspace ws;
  for (bool first = true; batch_step(layer, c.x, d, lengths, done, caches, y, first, ws, exec); first = false) {
  }
  for (std::size_t s = 0; s < lengths.size(); ++s) {
    const std::vector<double> ref(c.y.begin(), c.y.begin() + lengths[s] * d);
    const double e = test::max_abs_diff(y[s], ref) / test::max_abs(ref);
    std::printf("[ fast     ] %-40s L=%-3lld max|dy|/max|y| = %.3e\n", c.name.c_str(), static_cast<long long>(lengths[s]), e);
    EXPECT_LE(e, fast_tolerance) << c.name << " sequence " << s << " of length " << lengths[s];
  }
}

std::vector<std::string> causal_cases() {
  std::vector<std::string> out;
  for (const auto& n : test::gqa_case_names())
    if (n != "gqa_noncausal") out.push_back(n);
  for (const auto& n : test::mla_case_names()) out.push_back(n);
  return out;
}

class FastDecodeVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(FastDecodeVectors, BatchedDecodeStaysWithinTheFastTolerance) {
  const auto c = test::load_vector_case(GetParam());
  const any_layer layer(all_fast(c.config), bf16_matrices(c.weights));
  const index T = c.tokens;
  expect_prefixes_within_fast(c, layer, {1, T, (T + 1) / 2, 3 < T ? 3 : 1, T - 1 > 0 ? T - 1 : 1},
                              execution_context::serial());
  expect_prefixes_within_fast(c, layer, {T, 1, 2 < T ? 2 : 1, T}, execution_context::with_threads(2));
}

INSTANTIATE_TEST_SUITE_P(Vectors, FastDecodeVectors, ::testing::ValuesIn(causal_cases()),
                         [](const auto& info) { return info.param; });

}  // namespace

}  // namespace test_fast_decode
