// Compile-time gate variants for code that knows its model: `gate<...>` fixes every gate choice in
// the type, invalid combinations fail to compile, and `gated_gqa<Gate>` / `gated_mla<Gate>` build
// the ordinary runtime layers with that gate (one mechanism: the types only produce a gate_config).
#pragma once

#include <type_traits>
#include <utility>

#include "gattn/core/config.hpp"
#include "gattn/core/error.hpp"

GATTN_NAMESPACE_BEGIN

/// A gate fixed at compile time. Example: Qwen3-Next's
/// `gate<gate_position::g1, granularity::elementwise, activation::sigmoid, combine::mul, gate_source::fused_q>`.
template <gate_position Position, granularity Granularity, activation Activation = activation::sigmoid,
          combine Combine = combine::mul, gate_source Source = gate_source::separate,
          fused_layout Layout = fused_layout::per_head, bool Shared = false>
struct gate {
  static_assert(Source != gate_source::fused_q || Position == gate_position::g1,
                "a gate fused into q_proj sits at G1 (docs/spec.md §4)");
  static_assert(Source != gate_source::fused_q || !Shared, "a head-shared gate cannot be fused into q_proj");

  static constexpr gate_position position = Position;

  /// The runtime description; `rank` (low_rank only) comes from the layer config or the weights.
  static gate_config config(index rank = 0) {
    gate_config g;
    g.enabled = true;
    g.position = Position;
    g.granularity = Granularity;
    g.shared = Shared;
    g.activation = Activation;
    g.combine = Combine;
    g.source = Source;
    g.layout = Layout;
    g.rank = rank;
    return g;
  }
};

/// No gate: the plain attention layer.
struct no_gate {
  static gate_config config(index = 0) { return {}; }
};

/// Qwen3-Next full attention: elementwise sigmoid G1 gate, per head [q_h | u_h] in q_proj.
using qwen3_next_gate = gate<gate_position::g1, granularity::elementwise, activation::sigmoid, combine::mul,
                             gate_source::fused_q, fused_layout::per_head>;
/// Kimi K3 / Bailing / Hunyuan MLA: elementwise sigmoid G1 gate from its own g_proj.
using separate_g1_gate = gate<gate_position::g1, granularity::elementwise>;
/// The paper's release (model_type qwen3): sigmoid G1 gate fused into q_proj per KV group.
using paper_headwise_gate = gate<gate_position::g1, granularity::headwise, activation::sigmoid, combine::mul,
                                 gate_source::fused_q, fused_layout::per_kv_group>;
using paper_elementwise_gate = gate<gate_position::g1, granularity::elementwise, activation::sigmoid, combine::mul,
                                    gate_source::fused_q, fused_layout::per_kv_group>;

/// Whether an MLA layer can carry `Gate`: MLA has the G1 gate only, never fused into q_proj (docs/spec.md §3).
template <class Gate>
struct fits_mla : std::false_type {};
template <>
struct fits_mla<no_gate> : std::true_type {};
template <gate_position P, granularity Gr, activation A, combine C, gate_source S, fused_layout L, bool Sh>
struct fits_mla<gate<P, Gr, A, C, S, L, Sh>>
    : std::integral_constant<bool, P == gate_position::g1 && S != gate_source::fused_q> {};

namespace detail {

/// `cfg` with the gate of `Gate`; a config that already names a different gate is refused rather
/// than silently overridden.
template <class Gate, class Config>
Config with_gate(Config cfg) {
  const gate_config want = Gate::config(cfg.gate.rank);
  if (cfg.gate.enabled) {
    const gate_config& g = cfg.gate;
    const bool same = g.position == want.position && g.granularity == want.granularity && g.shared == want.shared &&
                      g.activation == want.activation && g.combine == want.combine && g.source == want.source &&
                      (g.source != gate_source::fused_q || g.layout == want.layout);
    require<config_error>(same, "the config's gate (", to_string(g.position), " ", to_string(g.granularity), " ",
                          to_string(g.activation), " ", to_string(g.combine), " ", to_string(g.source),
                          ") differs from the layer type's gate (", to_string(want.position), " ",
                          to_string(want.granularity), " ", to_string(want.activation), " ",
                          to_string(want.combine), " ", to_string(want.source), ")");
  } else {
    require<config_error>(!want.enabled || want.source != gate_source::low_rank || want.rank > 0,
                          "a low_rank gate type needs gate.rank in the config");
  }
  cfg.gate = want;
  return cfg;
}

}  // namespace detail
GATTN_NAMESPACE_END  // namespace gattn
