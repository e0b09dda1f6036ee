// A layer of any family chosen at run time from a config (the CLI and the loaders use it).
#pragma once

#include <type_traits>
#include <variant>

#include "gattn/attention/delta_layer.hpp"
#include "gattn/attention/gqa_layer.hpp"
#include "gattn/attention/mla_layer.hpp"
#include "gattn/gate/policy.hpp"

GATTN_NAMESPACE_BEGIN

/// gqa_layer, mla_layer or delta_layer behind one interface; the choice is made once, at
/// construction. The softmax layers keep a KV cache per sequence (kv_cache, paged_kv_cache); the
/// delta-rule layers a recurrent state (delta_state, delta_state_pool): a call with the other kind
/// is refused with a cache_error naming the layer.
class any_layer {
 public:
  any_layer(const layer_config& cfg, const weight_map& w) : impl_(make(cfg, w)) {}

  /// The config the layer was built from.
  layer_config config() const {
    return std::visit([](const auto& l) { return layer_config(l.config()); }, impl_);
  }
  index hidden() const {
    return std::visit([](const auto& l) { return l.config().hidden; }, impl_);
  }
  /// Delta-rule layers are causal by construction.
  bool causal() const {
    if (is_delta()) return true;
    return std::visit([](const auto& l) { return layer_causal(l); }, impl_);
  }
  bool is_mla() const { return std::holds_alternative<mla_layer>(impl_); }
  bool is_delta() const { return std::holds_alternative<delta_layer>(impl_); }
  /// "gqa", "mla", "gated_deltanet" or "kda".
  const char* kind() const {
    if (const auto* d = std::get_if<delta_layer>(&impl_)) return to_string(d->config().kind);
    return is_mla() ? "mla" : "gqa";
  }

  /// A cache of the right kind (GQA K/V rows or the MLA latent) for `capacity` tokens.
  kv_cache make_cache(index capacity) const {
    return std::visit([&](const auto* l) { return kv_cache(l->config(), capacity); }, softmax("make_cache"));
  }
  /// A paged pool of `num_blocks` blocks of `block_size` tokens for this layer's sequences.
  paged_kv_cache make_paged_cache(index num_blocks, index block_size) const {
    return std::visit([&](const auto* l) { return paged_kv_cache(l->config(), num_blocks, block_size); },
                      softmax("make_paged_cache"));
  }
  /// Delta-rule layers: one sequence's zero state, or a pool of `slots` states.
  delta_state make_state() const { return delta("make_state").make_state(); }
  delta_state_pool make_state_pool(index slots) const { return delta("make_state_pool").make_state_pool(slots); }

  void set_sdpa(sdpa_function f) {
    if (auto* g = std::get_if<gqa_layer>(&impl_)) g->set_sdpa(f);
    if (auto* m = std::get_if<mla_layer>(&impl_)) m->set_sdpa(f);
  }
  /// MLA only (ignored otherwise): force the absorbed or expanded form.
  void set_mla_form(mla_form f) {
    if (auto* m = std::get_if<mla_layer>(&impl_)) m->set_form(f);
  }
  /// Delta-rule layers only (ignored otherwise): force the kernel's prefill form.
  void set_delta_form(delta_form f) {
    if (auto* d = std::get_if<delta_layer>(&impl_)) d->set_form(f);
  }

  void forward(matrix_view<const float> x, matrix_view<float> y, statistics_observer* s = nullptr,
               const execution_context& exec = {}) const {
    std::visit([&](const auto& l) { l.forward(x, y, s, exec); }, impl_);
  }
  void prefill(matrix_view<const float> x, kv_cache& c, matrix_view<float> y, statistics_observer* s = nullptr,
               const execution_context& exec = {}) const {
    std::visit([&](const auto* l) { l->prefill(x, c, y, s, exec); }, softmax("prefill with a kv_cache"));
  }
  void decode(matrix_view<const float> x, kv_cache& c, matrix_view<float> y, statistics_observer* s = nullptr,
              const execution_context& exec = {}) const {
    std::visit([&](const auto* l) { l->decode(x, c, y, s, exec); }, softmax("decode with a kv_cache"));
  }
  void prefill(matrix_view<const float> x, delta_state& st, matrix_view<float> y, statistics_observer* s = nullptr,
               const execution_context& exec = {}) const {
    delta("prefill with a delta_state").prefill(x, st, y, s, exec);
  }
  void decode(matrix_view<const float> x, delta_state& st, matrix_view<float> y, statistics_observer* s = nullptr,
              const execution_context& exec = {}) const {
    delta("decode with a delta_state").decode(x, st, y, s, exec);
  }
  /// A batch of sequences (docs/spec.md §11; see gqa_layer::step) over KV caches.
  void step(matrix_view<const float> x, const index* cu_seqlens, index batch, sequence_cache* caches,
            matrix_view<float> y, layer_workspace& ws, statistics_observer* s = nullptr,
            const execution_context& exec = {}) const {
    std::visit([&](const auto* l) { l->step(x, cu_seqlens, batch, caches, y, ws, s, exec); },
               softmax("step over KV caches"));
  }
  /// A batch of sequences over caller-owned paged K/V memory (cache/paged_kv_view.hpp; see
  /// gqa_layer::step).
  void step(matrix_view<const float> x, const index* cu_seqlens, index batch, const paged_kv_view& view,
            matrix_view<float> y, layer_workspace& ws, statistics_observer* s = nullptr,
            const execution_context& exec = {}) const {
    std::visit([&](const auto* l) { l->step(x, cu_seqlens, batch, view, y, ws, s, exec); },
               softmax("step over a paged_kv_view"));
  }
  /// A batch of sequences over delta-rule states (see delta_layer::step).
  void step(matrix_view<const float> x, const index* cu_seqlens, index batch, const delta_sequence* states,
            matrix_view<float> y, layer_workspace& ws, statistics_observer* s = nullptr,
            const execution_context& exec = {}) const {
    delta("step over delta-rule states").step(x, cu_seqlens, batch, states, y, ws, s, exec);
  }
  /// Sizes `ws` for calls of up to max_tokens rows in max_batch sequences of at most max_context
  /// cached tokens (only MLA's workspace depends on the context), on `exec`'s threads.
  void reserve(layer_workspace& ws, index max_tokens, index max_batch, index max_context,
               const execution_context& exec = {}) const {
    std::visit([&](const auto& l) { l.reserve(ws, max_tokens, max_batch, max_context, exec); }, impl_);
  }

 private:
  using variant = std::variant<gqa_layer, mla_layer, delta_layer>;

  static bool layer_causal(const delta_layer&) { return true; }
  template <class L>
  static bool layer_causal(const L& l) {
    return l.config().causal;
  }
  static variant make(const layer_config& cfg, const weight_map& w) {
    if (const auto* g = std::get_if<gqa_config>(&cfg)) return variant(std::in_place_type<gqa_layer>, *g, w);
    if (const auto* d = std::get_if<delta_config>(&cfg)) return variant(std::in_place_type<delta_layer>, *d, w);
    return variant(std::in_place_type<mla_layer>, std::get<mla_config>(cfg), w);
  }
  /// The softmax layer, or cache_error for a delta-rule layer asked for a KV-cache call.
  std::variant<const gqa_layer*, const mla_layer*> softmax(const char* what) const {
    if (const auto* g = std::get_if<gqa_layer>(&impl_)) return g;
    if (const auto* m = std::get_if<mla_layer>(&impl_)) return m;
    throw cache_error(detail::concat("any_layer: ", what, " on a ", kind(),
                                     " layer, which keeps a recurrent state (delta_state), not a KV cache"));
  }
  const delta_layer& delta(const char* what) const {
    const auto* d = std::get_if<delta_layer>(&impl_);
    if (d == nullptr)
      throw cache_error(detail::concat("any_layer: ", what, " on a ", kind(),
                                       " layer, which keeps a KV cache (kv_cache, paged_kv_cache), not a delta_state"));
    return *d;
  }
  variant impl_;
};

/// A GQA layer whose gate is fixed by the type `Gate` (gate<...> or no_gate).
template <class Gate = no_gate>
class gated_gqa : public gqa_layer {
 public:
  using gate_type = Gate;
  gated_gqa(const gqa_config& cfg, const weight_map& w) : gqa_layer(detail::with_gate<Gate>(cfg), w) {}
};

/// An MLA layer whose gate is fixed by the type `Gate` (a G1 gate or no_gate).
template <class Gate = no_gate>
class gated_mla : public mla_layer {
  static_assert(fits_mla<Gate>::value, "an MLA layer has the G1 gate only, from g_proj or a low-rank source (docs/spec.md §3)");

 public:
  using gate_type = Gate;
  gated_mla(const mla_config& cfg, const weight_map& w) : mla_layer(detail::with_gate<Gate>(cfg), w) {}
};

GATTN_NAMESPACE_END  // namespace gattn
