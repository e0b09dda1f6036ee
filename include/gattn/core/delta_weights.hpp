// The weight contract of a gated delta-rule layer (docs/spec.md §13): the tensors a delta_config
// reads, their shapes, and the checks that the layer and the reference both apply to them.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "gattn/core/config.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/weights.hpp"

GATTN_NAMESPACE_BEGIN

/// One tensor of a delta-rule layer. `shapes` lists the accepted shapes, the checkpoints' own first
/// (KDA's A_log is stored [1, 1, H, 1] by Kimi's code and [H] by simpler exports). `bias` names the
/// optional nn.Linear bias of shape [out] (absent = zero); empty for a tensor that takes none.
struct delta_weight_spec {
  std::string name;
  std::vector<std::vector<index>> shapes;
  std::string bias;
};

/// Widths that a delta_config leaves to the weights' shapes (docs/spec.md §13).
struct delta_weight_ranks {
  index decay = 0;  ///< KDA: rows of f_a_proj, the decay projection's inner width
  index gate = 0;   ///< KDA low_rank gate: rows of g_a_proj (delta_config::gate_rank when set)
};

/// Every tensor one delta_config reads, with the ranks its shapes were derived from.
struct delta_weight_contract {
  delta_kind kind = delta_kind::gated_deltanet;
  gdn_layout layout = gdn_layout::fused;  ///< Gated DeltaNet: how the weights store the input projections
  delta_weight_ranks ranks;
  std::vector<delta_weight_spec> weights;

  /// The spec of tensor `name` ("q_proj.weight", "A_log"); weight_error when the layer has none.
  const delta_weight_spec& operator[](const std::string& name) const {
    for (const delta_weight_spec& s : weights)
      if (s.name == name) return s;
    throw weight_error(detail::concat("'", name, "' is not a weight of a ", to_string(kind), " layer"));
  }
};

namespace detail {

/// Rows r of the rank-2 weight `name` of shape [r, cols]; weight_error naming it otherwise.
inline index delta_inner_rank(const weight_map& w, const std::string& name, index cols, const char* what) {
  const auto it = w.all().find(name);
  require<weight_error>(it != w.all().end(), "missing weight '", name, "' (expected shape [r, ", cols, "], r the ",
                        what, ")");
  const std::vector<index>& s = it->second.shape();
  require<weight_error>(s.size() == 2 && s[0] >= 1 && s[0] <= limits::max_size && s[1] == cols, "weight '", name,
                        "' has shape ", shape_string(s), ", expected [r, ", cols, "] with r in [1, ",
                        limits::max_size, "] (r the ", what, ")");
  return s[0];
}

inline delta_weight_ranks delta_ranks(const delta_config& c, const weight_map& w) {
  delta_weight_ranks r;
  if (c.kind != delta_kind::kda) return r;
  r.decay = delta_inner_rank(w, "f_a_proj.weight", c.hidden, "decay rank");
  if (c.gate == gate_source::low_rank)
    r.gate = c.gate_rank > 0 ? c.gate_rank : delta_inner_rank(w, "g_a_proj.weight", c.hidden, "gate rank");
  return r;
}

/// nn.Linear `name`: weight [out, in] and an optional bias [out].
inline delta_weight_spec delta_linear(const std::string& name, index out, index in) {
  return {name + ".weight", {{out, in}}, name + ".bias"};
}

/// The nn.Linear names of Gated DeltaNet's input projections in layout `l` (docs/spec.md §13, §14).
inline std::vector<std::string> gdn_projection_names(gdn_layout l) {
  if (l == gdn_layout::fused) return {"in_proj_qkvz", "in_proj_ba"};
  return {"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"};
}

/// The first tensor (weight or bias) of layout `l`'s input projections present in `w`, or "".
inline std::string gdn_tensor_present(const weight_map& w, gdn_layout l) {
  for (const std::string& name : gdn_projection_names(l))
    for (const char* part : {".weight", ".bias"})
      if (w.contains(name + part)) return name + part;
  return "";
}

inline std::vector<delta_weight_spec> gdn_weight_specs(const delta_config& c, gdn_layout layout) {
  const index d = c.hidden, Hk = c.key_heads, Hv = c.value_heads, Dk = c.key_head_dim, Dv = c.value_head_dim;
  std::vector<delta_weight_spec> s;
  if (layout == gdn_layout::fused) {
    // in_proj_qkvz: per key-head group [q (D_k) | k (D_k) | v (r·D_v) | z (r·D_v)], r = H_v / H_k
    s = {delta_linear("in_proj_qkvz", 2 * Hk * Dk + 2 * Hv * Dv, d),
         delta_linear("in_proj_ba", 2 * Hv, d)};  // per group [b (r) | a (r)]
  } else {
    // in_proj_qkv: [q of every key head | k of every key head | v of every value head]
    s = {delta_linear("in_proj_qkv", c.conv_channels(), d), delta_linear("in_proj_z", Hv * Dv, d),
         delta_linear("in_proj_b", Hv, d), delta_linear("in_proj_a", Hv, d)};
  }
  s.push_back({"conv1d.weight", {{c.conv_channels(), 1, c.conv_kernel}}, ""});
  s.push_back({"A_log", {{Hv}}, ""});
  s.push_back({"dt_bias", {{Hv}}, ""});
  s.push_back({"norm.weight", {{Dv}}, ""});
  s.push_back(delta_linear("out_proj", d, Hv * Dv));
  return s;
}

inline std::vector<delta_weight_spec> kda_weight_specs(const delta_config& c, const delta_weight_ranks& r) {
  const index d = c.hidden, H = c.value_heads, Dk = c.key_head_dim, Dv = c.value_head_dim, K = c.conv_kernel;
  std::vector<delta_weight_spec> s = {delta_linear("q_proj", H * Dk, d),
                                      delta_linear("k_proj", H * Dk, d),
                                      delta_linear("v_proj", H * Dv, d),
                                      {"q_conv1d.weight", {{H * Dk, 1, K}}, ""},
                                      {"k_conv1d.weight", {{H * Dk, 1, K}}, ""},
                                      {"v_conv1d.weight", {{H * Dv, 1, K}}, ""},
                                      delta_linear("f_a_proj", r.decay, d),
                                      delta_linear("f_b_proj", H * Dk, r.decay),
                                      {"A_log", {{1, 1, H, 1}, {H}}, ""},
                                      {"dt_bias", {{H * Dk}}, ""},
                                      delta_linear("b_proj", H, d)};
  if (c.gate == gate_source::low_rank) {
    s.push_back(delta_linear("g_a_proj", r.gate, d));
    s.push_back(delta_linear("g_b_proj", H * Dv, r.gate));
  } else {
    s.push_back(delta_linear("g_proj", H * Dv, d));
  }
  s.push_back({"o_norm.weight", {{Dv}}, ""});
  s.push_back(delta_linear("o_proj", d, H * Dv));
  return s;
}

}  // namespace detail

/// How `w` stores a Gated DeltaNet layer's input projections (docs/spec.md §14): `split` when it holds
/// any of in_proj_qkv, in_proj_z, in_proj_b, in_proj_a (weight or bias), else `fused`. Throws
/// weight_error naming a tensor of each when both layouts are present: the layer would read one and
/// silently ignore the other.
inline gdn_layout detect_gdn_layout(const weight_map& w) {
  const std::string fused = detail::gdn_tensor_present(w, gdn_layout::fused);
  const std::string split = detail::gdn_tensor_present(w, gdn_layout::split);
  detail::require<weight_error>(fused.empty() || split.empty(), "weights '", fused, "' and '", split,
                                "' are both present: a Gated DeltaNet layer stores its input projections either fused "
                                "(in_proj_qkvz, in_proj_ba) or split (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a), "
                                "not both (docs/spec.md §14)");
  return split.empty() ? gdn_layout::fused : gdn_layout::split;
}

namespace detail {

/// The contract of `c`, its ranks read from `w` (which must hold f_a_proj, and g_a_proj for a
/// low_rank gate without gate_rank) and, for Gated DeltaNet, its layout (detect_gdn_layout). Checks
/// nothing else: see check_delta_weights.
inline delta_weight_contract delta_weights(const delta_config& c, const weight_map& w) {
  delta_weight_contract k;
  k.kind = c.kind;
  k.ranks = delta_ranks(c, w);
  if (c.kind == delta_kind::kda) {
    k.weights = kda_weight_specs(c, k.ranks);
  } else {
    k.layout = detect_gdn_layout(w);
    k.weights = gdn_weight_specs(c, k.layout);
  }
  return k;
}

inline std::string delta_shapes_string(const delta_weight_spec& s) {
  std::string out;
  for (std::size_t i = 0; i < s.shapes.size(); ++i) out += (i ? " or " : "") + shape_string(s.shapes[i]);
  return out;
}

/// The tensor of `s` in `w`, present with one of its shapes; weight_error naming it and the shapes
/// otherwise.
inline const weight_view& delta_weight(const weight_map& w, const delta_weight_spec& s) {
  const auto it = w.all().find(s.name);
  require<weight_error>(it != w.all().end(), "missing weight '", s.name, "' (expected shape ", delta_shapes_string(s),
                        ")");
  for (const std::vector<index>& shape : s.shapes)
    if (it->second.shape() == shape) return it->second;
  throw weight_error(concat("weight '", s.name, "' has shape ", shape_string(it->second.shape()), ", expected ",
                            delta_shapes_string(s)));
}

/// The bias of nn.Linear `s` when `w` has one (shape-checked), else nullptr.
inline const weight_view* delta_bias(const weight_map& w, const delta_weight_spec& s) {
  return s.bias.empty() ? nullptr : w.find(s.bias, {s.shapes.front().front()});
}

/// Refuses (config_error naming the tensor) a non-finite A_log or dt_bias: every decay g would be
/// NaN or ±inf, and the state with it, silently and for every token.
inline void check_decay_parameters(const delta_config& c, const weight_map& w) {
  const delta_weight_contract k = delta_weights(c, w);
  for (const char* name : {"A_log", "dt_bias"}) {
    const std::vector<float> v = delta_weight(w, k[name]).widened();
    for (std::size_t i = 0; i < v.size(); ++i)
      require<config_error>(std::isfinite(v[i]), "weight '", name, "' holds a non-finite value (", v[i],
                            " at index ", i, "): every decay computed from it would be undefined");
  }
}

/// Checks `w` against the contract of `c` and returns the contract: every tensor present with its
/// shape, each nn.Linear bias [out] when present, no bias beside a convolution or norm weight (the
/// layer has none there, so it would be dropped silently), finite A_log and dt_bias.
inline delta_weight_contract check_delta_weights(const delta_config& c, const weight_map& w) {
  delta_weight_contract k = delta_weights(c, w);
  // Neither layout present: name both, so a Qwen3.5 checkpoint is not told only of Qwen3-Next's tensors.
  require<weight_error>(c.kind == delta_kind::kda || w.contains(k.weights.front().name) ||
                            !gdn_tensor_present(w, k.layout).empty(),
                        "missing weight '", k.weights.front().name, "' (expected shape ",
                        delta_shapes_string(k.weights.front()), "), or the split input projections 'in_proj_qkv.weight', "
                        "'in_proj_z.weight', 'in_proj_b.weight', 'in_proj_a.weight' (docs/spec.md §14)");
  const std::string suffix = ".weight";
  for (const delta_weight_spec& s : k.weights) {
    (void)delta_weight(w, s);
    (void)delta_bias(w, s);
    const std::size_t n = s.name.size();
    if (!s.bias.empty() || n <= suffix.size() || s.name.compare(n - suffix.size(), suffix.size(), suffix) != 0) continue;
    const std::string stray = s.name.substr(0, n - suffix.size()) + ".bias";
    require<weight_error>(!w.contains(stray), "weight '", stray, "' is present, but a ", to_string(c.kind),
                          " layer has no bias there (docs/spec.md §13)");
  }
  check_decay_parameters(c, w);
  return k;
}

}  // namespace detail
GATTN_NAMESPACE_END  // namespace gattn
