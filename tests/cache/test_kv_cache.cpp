// bf16/f16 KV caches end to end (docs/spec.md §10): the cache rounds what it is given (nearest even, NaN
// stays NaN), an f16 cache refuses out-of-range values naming where they are and appends nothing
// of that call, and whole layers reproduce the vectors made with a rounding cache
// (kv_cache_dtype) to 5e-4·max|y_ref| (bf16) and 1e-4·max|y_ref| (f16), in prefill, chunked
// prefill and decode; MLA in both its absorbed (latent cache read by the kernel) and expanded forms.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gattn/attention/any_layer.hpp"
#include "gattn/attention/gqa_layer.hpp"
#include "gattn/attention/mla_layer.hpp"
#include "gattn/simd/convert.hpp"
#include "support/vectors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_kv_cache {

namespace {

using gattn::cache_error;
using gattn::index;
using gattn::kv_cache;
using gattn::matrix_view;
using gattn::storage_type;
namespace test = gattn::test;

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const cache_error& e) {
    return e.what();
  }
  return "(no cache_error)";
}

TEST(KvCacheDtype, TheCacheTakesTheConfigsElementType) {
  auto c = std::get<gattn::gqa_config>(test::load_vector_case("gqa_kv_bf16").config);  // 2 KV heads of 32
  for (storage_type s : {storage_type::f32, storage_type::bf16, storage_type::f16}) {
    c.kv_cache_type = s;
    const kv_cache cache(c, 3);
    EXPECT_EQ(cache.storage(), s);
    EXPECT_EQ(cache.key_width(), 64);
    if (s == storage_type::f32) EXPECT_THROW(cache.key_bits(0), cache_error);
    else EXPECT_THROW(cache.key(0), cache_error);
  }
}

TEST(KvCacheDtype, AppendRoundsToNearestEvenAndKeepsNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Two tokens of 20 values (wider than every vector, so both the vector body and the tail run).
  // 1 + 2^-8 is a bf16 tie (rounds to even: 1), 1 + 3·2^-8 rounds up; 1 + 2^-11 an f16 tie.
  const index w = 20;
  std::vector<float> k(std::size_t(2 * w)), v(std::size_t(2 * w));
  for (index i = 0; i < 2 * w; ++i) {
    k[std::size_t(i)] = 0.1f * float(i) - 1.7f;
    v[std::size_t(i)] = 1.3f - 0.07f * float(i);
  }
  const float specials_k[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-11f, nan, -0.0f, 3.1f};
  const float specials_v[] = {-2.5f, nan, 1e-3f, 7.0f, 0.1f, -1e4f};
  for (index i = 0; i < 6; ++i) {
    k[std::size_t(i * 7)] = specials_k[i];   // spread over the vector body and the tail
    v[std::size_t(i * 7 + 1)] = specials_v[i];
  }
  for (storage_type s : {storage_type::bf16, storage_type::f16}) {
    kv_cache cache(4, w, w, s);
    cache.append(k.data(), w, v.data(), w, 2);
    ASSERT_EQ(cache.size(), 2);
    for (index i = 0; i < 2 * w; ++i) {
      const float x = k[std::size_t(i)], y = v[std::size_t(i)];
      const std::uint16_t want_k = s == storage_type::bf16 ? gattn::round_to_bf16(x) : gattn::round_to_f16(x);
      const std::uint16_t want_v = s == storage_type::bf16 ? gattn::round_to_bf16(y) : gattn::round_to_f16(y);
      EXPECT_EQ(cache.key_bits(0)[i], want_k) << gattn::to_string(s) << " key " << i;
      EXPECT_EQ(cache.value_bits(0)[i], want_v) << gattn::to_string(s) << " value " << i;
    }
    std::vector<float> row(static_cast<std::size_t>(w));
    cache.widen_key(1, row.data());
    EXPECT_TRUE(std::isnan(row[21 - w])) << gattn::to_string(s);  // k[21]: NaN of token 1
    cache.widen_value(0, row.data());
    EXPECT_TRUE(std::isnan(row[8])) << gattn::to_string(s);
    EXPECT_EQ(row[1], -2.5f);
    if (s == storage_type::bf16) {
      EXPECT_EQ(gattn::bf16_to_float(cache.key_bits(0)[0]), 1.0f);                 // tie to even
      EXPECT_EQ(gattn::bf16_to_float(cache.key_bits(0)[7]), 1.0f + 4 * 0x1p-8f);   // nearest
    } else {
      EXPECT_EQ(gattn::f16_to_float(cache.key_bits(0)[14]), 1.0f);  // tie to even
    }
  }
  // The f32 cache stores exactly what it is given.
  kv_cache f(2, w, w);
  f.append(k.data(), w, v.data(), w, 2);
  for (index i = 0; i < 2 * w; ++i) {
    const float got = f.key(0)[i], want = k[std::size_t(i)];
    EXPECT_TRUE(got == want || (std::isnan(got) && std::isnan(want))) << i;
  }
}

TEST(KvCacheDtype, AnF16CacheRefusesOutOfRangeAndAppendsNothingOfTheCall) {
  auto c = std::get<gattn::gqa_config>(test::load_vector_case("gqa_kv_f16").config);  // 2 KV heads of 32
  c.kv_cache_type = storage_type::f16;
  kv_cache cache(c, 8);
  const index w = 64;
  std::vector<float> k(3 * w, 0.5f), v(3 * w, 0.25f);
  cache.append(k.data(), w, v.data(), w, 1);
  const std::uint16_t first = cache.key_bits(0)[0];
  v[2 * w + 32 + 3] = 65520.0f;  // token 2 of the call, value head 1 channel 3
  std::string msg = message_of([&] { cache.append(k.data(), w, v.data(), w, 3); });
  EXPECT_NE(msg.find("value head 1 channel 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("token 3"), std::string::npos) << msg;  // position 1 + 2
  EXPECT_NE(msg.find("65520"), std::string::npos) << msg;
  EXPECT_EQ(cache.size(), 1);
  EXPECT_EQ(cache.key_bits(0)[0], first);
  v[2 * w + 32 + 3] = 65504.0f;  // the largest f16 is accepted
  k[5] = -std::numeric_limits<float>::infinity();  // token 0, key head 0 channel 5
  msg = message_of([&] { cache.append(k.data(), w, v.data(), w, 3); });
  EXPECT_NE(msg.find("key head 0 channel 5 of token 1"), std::string::npos) << msg;
  EXPECT_EQ(cache.size(), 1);
  k[5] = std::numeric_limits<float>::quiet_NaN();  // NaN is stored, not refused
  cache.append(k.data(), w, v.data(), w, 3);
  EXPECT_EQ(cache.size(), 4);

  auto m = std::get<gattn::mla_config>(test::load_vector_case("mla_kv_bf16").config);  // d_c 32, d_rope 8
  m.kv_cache_type = storage_type::f16;
  kv_cache latent(m, 2);
  const index L = 40;
  std::vector<float> rows(2 * L, 1.0f);
  rows[L + 32 + 2] = 1e5f;
  msg = message_of([&] { latent.append(rows.data(), L, nullptr, 0, 2); });
  EXPECT_NE(msg.find("latent k_rope channel 2 of token 1"), std::string::npos) << msg;
  rows[L + 32 + 2] = 1.0f;
  rows[7] = -1e5f;
  msg = message_of([&] { latent.append(rows.data(), L, nullptr, 0, 2); });
  EXPECT_NE(msg.find("latent c channel 7 of token 0"), std::string::npos) << msg;
  EXPECT_EQ(latent.size(), 0);
}

/// How a sequence is fed to the layer.
enum class feeding { forward, prefill, chunks_of_5, decode_from_4, decode_all };
const char* to_string(feeding f) {
  static const char* n[] = {"forward", "prefill", "chunks5", "decode_from4", "decode_all"};
  return n[int(f)];
}

template <class Layer>
std::vector<float> run_layer(const Layer& layer, const test::vector_case& c, feeding f) {
  const index T = c.tokens, d = c.hidden;
  std::vector<float> y(std::size_t(T * d), -1.0f);
  if (f == feeding::forward) {
    layer.forward({c.x.data(), T, d, d}, {y.data(), T, d, d});
    return y;
  }
  kv_cache cache(layer.config(), T);
  EXPECT_EQ(cache.storage(), layer.config().kv_cache_type);
  index first = 0;
  auto feed = [&](index n) {
    matrix_view<const float> xv{c.x.data() + first * d, n, d, d};
    matrix_view<float> yv{y.data() + first * d, n, d, d};
    if (first == 0) layer.prefill(xv, cache, yv); else layer.decode(xv, cache, yv);
    first += n;
  };
  switch (f) {
    case feeding::prefill: feed(T); break;
    case feeding::chunks_of_5: while (first < T) feed(std::min<index>(5, T - first)); break;
    case feeding::decode_from_4: feed(4); while (first < T) feed(1); break;
    case feeding::decode_all: while (first < T) feed(1); break;
    default: break;
  }
  EXPECT_EQ(cache.size(), T);
  return y;
}

double tolerance(storage_type s) { return s == storage_type::bf16 ? 5e-4 : 1e-4; }

TEST(KvCacheDtype, GqaLayerReproducesTheRoundingVectors) {
  for (const char* name : {"gqa_kv_bf16", "gqa_kv_f16"}) {
    const auto c = test::load_vector_case(name);
    const auto& cfg = std::get<gattn::gqa_config>(c.config);
    ASSERT_NE(cfg.kv_cache_type, storage_type::f32) << name;
    const gattn::gqa_layer layer(cfg, c.weights);
    const double tol = tolerance(cfg.kv_cache_type) * test::max_abs(c.y);
    for (feeding f : {feeding::forward, feeding::prefill, feeding::chunks_of_5, feeding::decode_from_4, feeding::decode_all}) {
      const auto y = run_layer(layer, c, f);
      EXPECT_LE(test::max_abs_diff(y, c.y), tol) << name << " " << to_string(f);
    }
  }
}

TEST(KvCacheDtype, MlaLayerReproducesTheRoundingVectorInBothForms) {
  const auto c = test::load_vector_case("mla_kv_bf16");
  const auto& cfg = std::get<gattn::mla_config>(c.config);
  ASSERT_EQ(cfg.kv_cache_type, storage_type::bf16);
  const double tol = tolerance(cfg.kv_cache_type) * test::max_abs(c.y);
  for (gattn::mla_form form : {gattn::mla_form::absorbed, gattn::mla_form::expanded}) {
    gattn::mla_layer layer(cfg, c.weights);
    layer.set_form(form);
    for (feeding f : {feeding::forward, feeding::prefill, feeding::chunks_of_5, feeding::decode_from_4, feeding::decode_all}) {
      const auto y = run_layer(layer, c, f);
      EXPECT_LE(test::max_abs_diff(y, c.y), tol) << gattn::to_string(form) << " " << to_string(f);
    }
  }
}

// any_layer::make_cache gives the config's element type, and the diagnostics path (which reads
// key 0 of the cache for the first-token attention) reads it widened.
TEST(KvCacheDtype, AnyLayerCacheAndStatisticsReadTheStoredKeys) {
  for (const char* name : {"gqa_kv_bf16", "mla_kv_bf16"}) {
    const auto c = test::load_vector_case(name);
    const gattn::any_layer layer(c.config, c.weights);
    kv_cache cache = layer.make_cache(c.tokens);
    EXPECT_EQ(cache.storage(), storage_type::bf16) << name;
    std::vector<float> y(std::size_t(c.tokens * c.hidden)), y_stats(y.size());
    layer.prefill({c.x.data(), c.tokens, c.hidden, c.hidden}, cache, {y.data(), c.tokens, c.hidden, c.hidden});
    kv_cache cache2 = layer.make_cache(c.tokens);
    gattn::statistics_observer stats;
    layer.prefill({c.x.data(), c.tokens, c.hidden, c.hidden}, cache2, {y_stats.data(), c.tokens, c.hidden, c.hidden},
                  &stats);
    EXPECT_LE(test::max_abs_diff(y, y_stats), 1e-5 * test::max_abs(c.y)) << name;
    EXPECT_LE(test::max_abs_diff(y, c.y), 5e-4 * test::max_abs(c.y)) << name;
  }
}

// A call whose K/V leave the f16 range appends nothing: the cache keeps its earlier tokens only.
TEST(KvCacheDtype, F16LayersRefuseOutOfRangeCallsWhole) {
  for (const char* name : {"gqa_kv_f16", "mla_kv_bf16"}) {
    auto c = test::load_vector_case(name);
    if (auto* g = std::get_if<gattn::gqa_config>(&c.config)) g->kv_cache_type = storage_type::f16;
    if (auto* m = std::get_if<gattn::mla_config>(&c.config)) m->kv_cache_type = storage_type::f16;
    const gattn::any_layer layer(c.config, c.weights);
    kv_cache cache = layer.make_cache(c.tokens);
    const index d = c.hidden;
    std::vector<float> y(std::size_t(c.tokens * d));
    layer.prefill({c.x.data(), 3, d, d}, cache, {y.data(), 3, d, d});
    std::vector<float> big(c.x.begin() + 3 * d, c.x.begin() + 8 * d);
    for (float& v : big) v *= 1e7f;  // V (GQA) and k_rope (MLA) are unnormalised projections
    const std::string msg = message_of([&] { layer.prefill({big.data(), 5, d, d}, cache, {y.data(), 5, d, d}); });
    EXPECT_NE(msg.find("f16 range"), std::string::npos) << name << ": " << msg;
    EXPECT_NE(msg.find("of token 3"), std::string::npos) << name << ": " << msg;
    EXPECT_EQ(cache.size(), 3) << name;
  }
}

}  // namespace

}  // namespace test_kv_cache
