// paged_kv_view (docs/spec.md §11): step() over an engine's own paged memory (blocks handed out in a
// shuffled order, padded strides, token- and head-major blocks, NaN in every slot nobody wrote)
// reproduces the batch vectors exactly as gattn's paged_kv_cache does, for f32, bf16 and f16
// caches, GQA and MLA; a view with a missing block, a short table, another dtype or a null
// pointer is refused naming the field, with nothing written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <variant>

#include "gattn/attention/any_layer.hpp"
#include "support/random_layer.hpp"
#include "support/vectors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_paged_kv_view {

namespace {

using gattn::any_layer;
using gattn::execution_context;
using gattn::index;
using gattn::paged_kv_view;
using gattn::storage_type;
namespace test = gattn::test;

constexpr std::uint16_t nan_bits(storage_type t) { return t == storage_type::bf16 ? 0x7fc0 : 0x7e00; }

/// An engine's paged memory for one layer: blocks taken from a shuffled free list (so tables are
/// out of order and a sequence's blocks scattered), padded strides, gaps between blocks, a 2-D
/// block table padded with -1, and the lengths, which the engine advances after each call.
struct engine_kv {
  storage_type dtype;
  index block_size, num_blocks, max_blocks;
  index heads, head_dim, value_heads;  // GQA: H_kv, D, H_kv; MLA: 1, d_c + d_rope, 0
  paged_kv_view layout;                // strides only
  std::vector<float> kf, vf;
  std::vector<std::uint16_t> kb, vb;
  std::vector<std::int32_t> free;
  std::vector<std::vector<std::int32_t>> tables;
  std::vector<index> lens;

  engine_kv(const any_layer& layer, storage_type t, index sequences, index max_len, index bs, bool head_major,
            unsigned seed)
      : dtype(t), block_size(bs), max_blocks((max_len + bs - 1) / bs) {
    const auto cfg = layer.config();
    if (const auto* g = std::get_if<gattn::gqa_config>(&cfg)) {
      heads = value_heads = g->kv_heads;
      head_dim = g->head_dim;
    } else {
      const auto& m = std::get<gattn::mla_config>(cfg);
      heads = 1;
      head_dim = m.kv_lora_rank + m.qk_rope_head_dim;
      value_heads = 0;
    }
    const index pad = 4;
    if (head_major) {  // [blocks][heads][block_size][head_dim + pad]
      layout.key_token_stride = layout.value_token_stride = head_dim + pad;
      layout.key_head_stride = layout.value_head_stride = bs * (head_dim + pad);
      layout.key_block_stride = layout.value_block_stride = heads * bs * (head_dim + pad) + 16;
    } else {  // [blocks][block_size][heads · head_dim + pad]
      layout.key_token_stride = layout.value_token_stride = heads * head_dim + pad;
      layout.key_block_stride = layout.value_block_stride = bs * (heads * head_dim + pad) + 16;
    }
    num_blocks = sequences * max_blocks + 3;
    const std::size_t n = std::size_t(num_blocks * layout.key_block_stride);
    if (t == storage_type::f32) {
      kf.assign(n, std::numeric_limits<float>::quiet_NaN());
      if (value_heads > 0) vf = kf;
    } else {
      kb.assign(n, nan_bits(t));
      if (value_heads > 0) vb = kb;
    }
    for (index b = 0; b < num_blocks; ++b) free.push_back(std::int32_t(b));
    std::mt19937 gen(seed);
    std::shuffle(free.begin(), free.end(), gen);
    tables.assign(std::size_t(sequences), std::vector<std::int32_t>(std::size_t(max_blocks), -1));
    lens.assign(std::size_t(sequences), 0);
  }

  /// Blocks for n more tokens of sequence s (the engine's own block manager).
  void grow(index s, index n) {
    auto& table = tables[std::size_t(s)];
    for (index b = 0; b < (lens[std::size_t(s)] + n + block_size - 1) / block_size; ++b)
      if (table[std::size_t(b)] < 0) {
        table[std::size_t(b)] = free.back();
        free.pop_back();
      }
  }

  /// The view of a batch of `members` (their tables copied into `rows`, their lengths into `ctx`).
  paged_kv_view view(const std::vector<index>& members, std::vector<std::int32_t>& rows, std::vector<index>& ctx) {
    rows.clear();
    ctx.clear();
    for (index s : members) {
      rows.insert(rows.end(), tables[std::size_t(s)].begin(), tables[std::size_t(s)].end());
      ctx.push_back(lens[std::size_t(s)]);
    }
    paged_kv_view v = layout;
    v.dtype = dtype;
    v.keys = dtype == storage_type::f32 ? static_cast<void*>(kf.data()) : static_cast<void*>(kb.data());
    if (value_heads > 0)
      v.values = dtype == storage_type::f32 ? static_cast<void*>(vf.data()) : static_cast<void*>(vb.data());
    v.num_blocks = num_blocks;
    v.block_size = block_size;
    v.block_tables = rows.data();
    v.block_table_stride = max_blocks;
    v.context_lens = ctx.data();
    return v;
  }
};

/// Runs prefixes x[:L_s] as one batch (all prefill ceil(L_s/2) rows in one call, then one row each
/// per call until done), calling step(members, cu, xb, yb) for each call. Returns y_s per sequence.
template <class Step>
std::vector<std::vector<float>> run_schedule(const std::vector<float>& x, index d, const std::vector<index>& lengths,
                                             Step&& step) {
  std::vector<std::vector<float>> y(lengths.size());
  std::vector<index> done(lengths.size(), 0);
  for (bool first = true;; first = false) {
    std::vector<index> cu{0}, members;
    for (std::size_t s = 0; s < lengths.size(); ++s) {
      const index L = lengths[s], n = first ? (L + 1) / 2 : std::min<index>(1, L - done[s]);
      if (n == 0) continue;
      members.push_back(index(s));
      cu.push_back(cu.back() + n);
    }
    if (members.empty()) break;
    std::vector<float> xb(std::size_t(cu.back() * d)), yb(xb.size());
    for (std::size_t i = 0; i < members.size(); ++i)
      std::memcpy(xb.data() + cu[i] * d, x.data() + done[std::size_t(members[i])] * d,
                  sizeof(float) * std::size_t((cu[i + 1] - cu[i]) * d));
    step(members, cu, xb, yb);
    for (std::size_t i = 0; i < members.size(); ++i) {
      const std::size_t s = std::size_t(members[i]);
      y[s].insert(y[s].end(), yb.begin() + cu[i] * d, yb.begin() + cu[i + 1] * d);
      done[s] += cu[i + 1] - cu[i];
    }
  }
  return y;
}

/// The batch through gattn's paged_kv_cache.
std::vector<std::vector<float>> run_pool(const any_layer& layer, const std::vector<float>& x, index d,
                                         const std::vector<index>& lengths, const execution_context& exec) {
  index blocks = 0;
  for (index L : lengths) blocks += (L + 2) / 3;
  gattn::paged_kv_cache pool = layer.make_paged_cache(blocks, 3);
  std::vector<gattn::paged_kv_cache::sequence_id> ids;
  for (std::size_t s = 0; s < lengths.size(); ++s) ids.push_back(pool.create());
  gattn::layer_workspace ws;
  return run_schedule(x, d, lengths, [&](const std::vector<index>& members, const std::vector<index>& cu,
                                         const std::vector<float>& xb, std::vector<float>& yb) {
    std::vector<gattn::sequence_cache> handles;
    for (index s : members) handles.emplace_back(pool, ids[std::size_t(s)]);
    const index N = cu.back();
    layer.step({xb.data(), N, d, d}, cu.data(), index(members.size()), handles.data(), {yb.data(), N, d, d}, ws, nullptr,
               exec);
  });
}

/// The batch through an engine's memory and paged_kv_views.
std::vector<std::vector<float>> run_view(const any_layer& layer, storage_type t, const std::vector<float>& x, index d,
                                         const std::vector<index>& lengths, bool head_major,
                                         const execution_context& exec) {
  engine_kv kv(layer, t, index(lengths.size()), *std::max_element(lengths.begin(), lengths.end()), 3, head_major, 7);
  gattn::layer_workspace ws;
  std::vector<std::int32_t> rows;
  std::vector<index> ctx;
  return run_schedule(x, d, lengths, [&](const std::vector<index>& members, const std::vector<index>& cu,
                                         const std::vector<float>& xb, std::vector<float>& yb) {
    for (std::size_t i = 0; i < members.size(); ++i) kv.grow(members[i], cu[i + 1] - cu[i]);
    const paged_kv_view v = kv.view(members, rows, ctx);
    const index N = cu.back();
    layer.step({xb.data(), N, d, d}, cu.data(), index(members.size()), v, {yb.data(), N, d, d}, ws, nullptr, exec);
    for (std::size_t i = 0; i < members.size(); ++i) kv.lens[std::size_t(members[i])] += cu[i + 1] - cu[i];
  });
}

/// The case's config with its KV cache element type set to t.
gattn::layer_config with_dtype(gattn::layer_config c, storage_type t) {
  std::visit([t](auto& cfg) {
    if constexpr (!std::is_same_v<std::decay_t<decltype(cfg)>, gattn::delta_config>) cfg.kv_cache_type = t;
  }, c);
  return c;
}

storage_type dtype_of(const gattn::layer_config& c) {
  return std::visit([](const auto& cfg) {
    if constexpr (std::is_same_v<std::decay_t<decltype(cfg)>, gattn::delta_config>) return storage_type::f32;
    else return cfg.kv_cache_type;
  }, c);
}

void expect_view_matches_pool(const test::vector_case& c, const gattn::layer_config& cfg, double rel_tolerance) {
  const any_layer layer(cfg, c.weights);
  const storage_type t = dtype_of(cfg);
  const index T = c.tokens;
  const std::vector<index> lengths{T, 1, (T + 1) / 2, T - 1 > 0 ? T - 1 : 1};
  for (const auto& exec : {execution_context::serial(), execution_context::with_threads(2)}) {
    const auto pooled = run_pool(layer, c.x, c.hidden, lengths, exec);
    for (bool head_major : {false, true}) {
      if (head_major && layer.is_mla()) continue;  // one latent row per token: no heads to lay out
      const auto viewed = run_view(layer, t, c.x, c.hidden, lengths, head_major, exec);
      for (std::size_t s = 0; s < lengths.size(); ++s) {
        SCOPED_TRACE(c.name + " " + gattn::to_string(t) + " sequence " + std::to_string(s) +
                     (head_major ? " head-major" : " token-major") + " threads " +
                     std::to_string(exec.concurrency()));
        ASSERT_EQ(viewed[s].size(), pooled[s].size());
        EXPECT_EQ(std::memcmp(viewed[s].data(), pooled[s].data(), viewed[s].size() * sizeof(float)), 0);
        if (rel_tolerance > 0) {
          const std::vector<double> ref(c.y.begin(), c.y.begin() + lengths[s] * c.hidden);
          EXPECT_LE(test::max_abs_diff(viewed[s], ref), rel_tolerance * test::max_abs(ref));
        }
      }
    }
  }
}

std::vector<std::string> causal_cases() {
  std::vector<std::string> out;
  for (const auto& n : test::gqa_case_names())
    if (n != "gqa_noncausal") out.push_back(n);
  for (const auto& n : test::mla_case_names()) out.push_back(n);
  return out;
}

class PagedKvViewVectors : public ::testing::TestWithParam<std::string> {};

// f32: the reference vectors, exactly the paged pool's answer; bf16 and f16: the pool's answer bit
// for bit (the vectors assume f32 rows).
TEST_P(PagedKvViewVectors, StepOverEngineMemoryIsThePagedPoolsAnswer) {
  const auto c = test::load_vector_case(GetParam());
  expect_view_matches_pool(c, with_dtype(c.config, storage_type::f32), 1e-4);
  expect_view_matches_pool(c, with_dtype(c.config, storage_type::bf16), 0);
  expect_view_matches_pool(c, with_dtype(c.config, storage_type::f16), 0);
}

INSTANTIATE_TEST_SUITE_P(Vectors, PagedKvViewVectors, ::testing::ValuesIn(causal_cases()),
                         [](const auto& info) { return info.param; });

// The rounding vectors (caches of bf16/f16 rows) through views.
TEST(PagedKvView, ReproducesTheRoundingVectors) {
  for (const char* name : {"gqa_kv_bf16", "gqa_kv_f16", "mla_kv_bf16"}) {
    const auto c = test::load_vector_case(name);
    expect_view_matches_pool(c, c.config, dtype_of(c.config) == storage_type::bf16 ? 5e-4 : 1e-4);
  }
}

// ---- Refusals: each names the field, and nothing of the call is written. --------------------------

struct refusal_setup {
  gattn::gqa_config cfg = test::small_gqa();
  std::unique_ptr<any_layer> layer;
  std::unique_ptr<engine_kv> kv;
  std::vector<float> x, y;
  std::vector<std::int32_t> rows;
  std::vector<index> ctx;
  gattn::layer_workspace ws;
  index cu[3] = {0, 2, 3};

  refusal_setup() {
    cfg.kv_cache_type = storage_type::bf16;
    layer = std::make_unique<any_layer>(cfg, test::random_gqa_weights(cfg, 5));
    kv = std::make_unique<engine_kv>(*layer, storage_type::bf16, 2, 8, 2, false, 3);
    kv->grow(0, 2);
    kv->grow(1, 1);
    std::mt19937 gen(1);
    x = test::random_values(gen, 3 * cfg.hidden, 1.0f);
    y.assign(x.size(), 0.0f);
  }
  paged_kv_view view() { return kv->view({0, 1}, rows, ctx); }
  void step(const paged_kv_view& v) {
    const index d = cfg.hidden;
    layer->step({x.data(), 3, d, d}, cu, 2, v, {y.data(), 3, d, d}, ws);
  }
  bool untouched() const {
    return std::all_of(kv->kb.begin(), kv->kb.end(), [](std::uint16_t b) { return b == 0x7fc0; }) &&
           std::all_of(kv->vb.begin(), kv->vb.end(), [](std::uint16_t b) { return b == 0x7fc0; });
  }
};

template <class E, class Mutate>
void expect_refused(Mutate&& mutate, const std::string& needle) {
  refusal_setup r;
  paged_kv_view v = r.view();
  mutate(r, v);
  try {
    r.step(v);
    ADD_FAILURE() << "no exception; expected one mentioning '" << needle << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_TRUE(r.untouched()) << needle;
}

TEST(PagedKvView, RefusesAMissingBlockNamingTheEntry) {
  expect_refused<gattn::cache_error>([](refusal_setup& r, paged_kv_view&) { r.rows[1 * r.kv->max_blocks] = -1; },
                                     "paged_kv_view.block_tables[1][0]=-1");
  expect_refused<gattn::cache_error>(
      [](refusal_setup& r, paged_kv_view&) { r.rows[0] = std::int32_t(r.kv->num_blocks); }, "block_tables[0][0]=");
  // A block the call would write into, past the blocks the engine gave the sequence.
  expect_refused<gattn::cache_error>([](refusal_setup&, paged_kv_view& v) { v.block_size = 1; },
                                     "paged_kv_view.block_tables[0][");
}

TEST(PagedKvView, RefusesATooShortBlockTable) {
  expect_refused<gattn::shape_error>([](refusal_setup&, paged_kv_view& v) { v.block_table_stride = 0; },
                                     "paged_kv_view.block_table_stride=0");
  expect_refused<gattn::cache_error>(
      [](refusal_setup& r, paged_kv_view& v) {
        r.ctx[0] = 2 * r.kv->max_blocks;  // more tokens than the table can name
        (void)v;
      },
      "paged_kv_view.block_table_stride=");
}

TEST(PagedKvView, RefusesAnotherDtypeAndNullPointers) {
  expect_refused<gattn::cache_error>([](refusal_setup&, paged_kv_view& v) { v.dtype = storage_type::f32; },
                                     "paged_kv_view.dtype is f32, the layer's kv_cache_dtype is bf16");
  expect_refused<gattn::shape_error>([](refusal_setup&, paged_kv_view& v) { v.keys = nullptr; },
                                     "paged_kv_view.keys is null");
  expect_refused<gattn::shape_error>([](refusal_setup&, paged_kv_view& v) { v.values = nullptr; },
                                     "paged_kv_view.values is null");
  expect_refused<gattn::shape_error>([](refusal_setup&, paged_kv_view& v) { v.block_tables = nullptr; },
                                     "paged_kv_view.block_tables is null");
  expect_refused<gattn::shape_error>([](refusal_setup&, paged_kv_view& v) { v.context_lens = nullptr; },
                                     "paged_kv_view.context_lens is null");
  expect_refused<gattn::cache_error>([](refusal_setup& r, paged_kv_view&) { r.ctx[1] = -1; },
                                     "paged_kv_view.context_lens[1]=-1");
}

// The lengths are before the call: the rows land at context_lens[s] ..., and the call reads the
// context_lens[s] tokens already there (the engine's, written by an earlier call).
TEST(PagedKvView, ContextLensAreTheLengthsBeforeTheCall) {
  refusal_setup r;
  r.step(r.view());
  const index d = r.cfg.hidden;
  EXPECT_FALSE(r.untouched());
  // Continue sequence 0 by one token through the view and through a kv_cache holding the same two.
  r.kv->lens = {2, 1};
  r.kv->grow(0, 1);
  std::vector<std::int32_t> rows;
  std::vector<index> ctx;
  const paged_kv_view v = r.kv->view({0}, rows, ctx);
  const index cu[2] = {0, 1};
  std::vector<float> y1(static_cast<std::size_t>(d)), y2(static_cast<std::size_t>(d));
  r.layer->step({r.x.data() + 2 * d, 1, d, d}, cu, 1, v, {y1.data(), 1, d, d}, r.ws);
  gattn::kv_cache cache = r.layer->make_cache(3);
  std::vector<float> y0(std::size_t(2 * d));
  r.layer->prefill({r.x.data(), 2, d, d}, cache, {y0.data(), 2, d, d});
  r.layer->decode({r.x.data() + 2 * d, 1, d, d}, cache, {y2.data(), 1, d, d});
  EXPECT_LE(test::max_abs_diff(y1, y2), 1e-5 * test::max_abs(y2));
}

}  // namespace

}  // namespace test_paged_kv_view
