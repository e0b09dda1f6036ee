// A layer of either family chosen at run time from a config (the CLI and the loaders use it).
#pragma once

#include <type_traits>
#include <variant>

#include "gattn/attention/gqa_layer.hpp"
#include "gattn/attention/mla_layer.hpp"
#include "gattn/gate/policy.hpp"

namespace gattn {

/// gqa_layer or mla_layer behind one interface; the choice is made once, at construction.
class any_layer {
 public:
  any_layer(const layer_config& cfg, const weight_map& w) : impl_(make(cfg, w)) {}

  index hidden() const {
    return std::visit([](const auto& l) { return l.config().hidden; }, impl_);
  }
  bool causal() const {
    return std::visit([](const auto& l) { return l.config().causal; }, impl_);
  }
  bool is_mla() const { return std::holds_alternative<mla_layer>(impl_); }

  /// A cache of the right kind (GQA K/V rows or the MLA latent) for `capacity` tokens.
  kv_cache make_cache(index capacity) const {
    return std::visit([&](const auto& l) { return kv_cache(l.config(), capacity); }, impl_);
  }

  /// A paged pool of `num_blocks` blocks of `block_size` tokens for this layer's sequences.
  paged_kv_cache make_paged_cache(index num_blocks, index block_size) const {
    return std::visit([&](const auto& l) { return paged_kv_cache(l.config(), num_blocks, block_size); }, impl_);
  }

  void set_sdpa(sdpa_function f) {
    std::visit([&](auto& l) { l.set_sdpa(f); }, impl_);
  }
  /// MLA only (ignored for GQA): force the absorbed or expanded form.
  void set_mla_form(mla_form f) {
    if (auto* m = std::get_if<mla_layer>(&impl_)) m->set_form(f);
  }

  void forward(matrix_view<const float> x, matrix_view<float> y, statistics_observer* s = nullptr,
               const execution_context& exec = {}) const {
    std::visit([&](const auto& l) { l.forward(x, y, s, exec); }, impl_);
  }
  void prefill(matrix_view<const float> x, kv_cache& c, matrix_view<float> y, statistics_observer* s = nullptr,
               const execution_context& exec = {}) const {
    std::visit([&](const auto& l) { l.prefill(x, c, y, s, exec); }, impl_);
  }
  void decode(matrix_view<const float> x, kv_cache& c, matrix_view<float> y, statistics_observer* s = nullptr,
              const execution_context& exec = {}) const {
    std::visit([&](const auto& l) { l.decode(x, c, y, s, exec); }, impl_);
  }
  /// A batch of sequences (docs/spec.md §11; see gqa_layer::step).
  void step(matrix_view<const float> x, const index* cu_seqlens, index batch, sequence_cache* caches,
            matrix_view<float> y, layer_workspace& ws, const execution_context& exec = {},
            statistics_observer* s = nullptr) const {
    std::visit([&](const auto& l) { l.step(x, cu_seqlens, batch, caches, y, ws, exec, s); }, impl_);
  }
  /// Sizes `ws` for calls of up to max_tokens rows in max_batch sequences of at most max_context
  /// cached tokens (GQA's workspace does not depend on the context).
  void reserve(layer_workspace& ws, index max_tokens, index max_batch, index max_context) const {
    if (const auto* m = std::get_if<mla_layer>(&impl_)) m->reserve(ws, max_tokens, max_batch, max_context);
    else std::get<gqa_layer>(impl_).reserve(ws, max_tokens, max_batch);
  }

 private:
  using variant = std::variant<gqa_layer, mla_layer>;
  static variant make(const layer_config& cfg, const weight_map& w) {
    if (const auto* g = std::get_if<gqa_config>(&cfg)) return variant(std::in_place_type<gqa_layer>, *g, w);
    return variant(std::in_place_type<mla_layer>, std::get<mla_config>(cfg), w);
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

}  // namespace gattn
