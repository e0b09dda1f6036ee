// Layer configurations (docs/spec.md §2-§4, §9) as plain structs, with validation.
#pragma once

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <variant>

#include "gattn/core/error.hpp"
#include "gattn/core/types.hpp"

namespace gattn {

/// Size limits that validate(), the KV cache and every layer call enforce, so that no config or
/// call can ask for more memory than a machine has, and no size product can overflow. Published
/// models stay far below them (hidden 7168, 128 heads, head_dim 256, q_lora_rank 1536);
/// with every size <= 2^20, a product of two sizes is <= 2^40 and of three <= 2^60, so size
/// arithmetic in `index` is exact once a config has passed validate().
namespace limits {
/// Any one size field: a width (hidden_size, head_dim, qk_nope/qk_rope/v_head_dim, a LoRA or gate
/// rank) or a head count.
inline constexpr index max_size = index(1) << 20;
/// Values in any one weight or buffer: a projection, a KV cache, the workspace of a call.
/// 2^40 fp32 values are 4 TiB, more than any machine gattn runs on can allocate.
inline constexpr index max_values = index(1) << 40;
}  // namespace limits

}  // namespace gattn

GATTN_NAMESPACE_BEGIN namespace detail {

/// a * b as a count of values; throws E naming `what` and both factors when the product overflows
/// or exceeds limits::max_values (an allocation of that size cannot succeed).
template <class E, class... Parts>
index checked_values(index a, index b, Parts&&... what) {
  index n = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &n) || n > limits::max_values)
    throw E(concat(std::forward<Parts>(what)..., " = ", a, " * ", b, " values, more than the limit of ",
                   limits::max_values, " (2^40, limits::max_values)"));
  return n;
}

/// True when `v` converts to a finite fp32 value > 0 (the conversion of a larger double is UB).
inline bool is_positive_float(double v) {
  return v > 0 && v <= double(std::numeric_limits<float>::max()) && float(v) > 0;
}
/// True when `v` converts to a finite fp32 value >= 0.
inline bool is_nonnegative_float(double v) { return v >= 0 && v <= double(std::numeric_limits<float>::max()); }

}  // namespace detail
GATTN_NAMESPACE_END  // namespace gattn

// The configurations stay outside the arch namespace (core/arch_namespace.hpp): plain data that a
// program may parse in one translation unit and hand to another compiled for a different ISA.
namespace gattn {

/// Where the gate applies (docs/spec.md §4): G1 SDPA output, G2 value, G3 key, G4 query, G5 o_proj output.
enum class gate_position { g1, g2, g3, g4, g5 };
/// One gate score per channel, or one per head broadcast over its channels.
enum class granularity { elementwise, headwise };
/// sigmoid σ(u), silu u·σ(u), ns_sigmoid 0.5 + 0.5·σ(u), identity u.
enum class activation { sigmoid, silu, ns_sigmoid, identity };
/// mul: z ⊙ act(u); add: z + act(u).
enum class combine { mul, add };
/// Where the gate scores u come from.
enum class gate_source { separate, low_rank, fused_q };
/// Layout of fused_q gate scores inside q_proj's output.
enum class fused_layout { per_head, per_kv_group };
enum class norm_kind { none, rms, rms_zero_centered };
/// How an MLA layer forms attention (docs/spec.md §3): over per-head keys (expanded) or over the latent
/// cache with W_uk / W_uv absorbed (absorbed); `automatic` lets the layer choose per call.
enum class mla_form { automatic, absorbed, expanded };
enum class rope_style { neox, interleaved, none };
/// Element type of stored values (docs/spec.md §10, §15): KV caches, and weights used in place.
/// `f8_e4m3` is OCP E4M3 ("fn"), one byte: weights carry a block scale beside it (core/weights.hpp),
/// a cache a scale per layer for K and for V.
enum class storage_type { f32, bf16, f16, f8_e4m3 };
/// docs/spec.md §10: `exact` widens stored K/V to fp32 for every product; `fast` may also round scale·q and
/// the probabilities to the cache type to use dot-product instructions (fp32 accumulation still).
enum class kv_numerics { exact, fast };
/// docs/spec.md §10: a layer's `numerics`. `exact` computes from the stored operands (fp32 accumulation);
/// `fast` lets the projection GEMMs round x and the weights to bf16 (fp32 accumulation, within
/// 1e-2·max|y|). The same enum chooses a linear_map's arithmetic (gemm_numerics).
enum class numerics { exact, fast };
/// docs/spec.md §10: `bf16` reproduces an unfused bf16 `o * sigmoid(u)` bit for bit (Kimi K3 serving).
enum class gate_rounding { none, bf16 };

/// Gate description; `enabled == false` means no gate at all.
struct gate_config {
  bool enabled = false;
  gate_position position = gate_position::g1;
  gattn::granularity granularity = granularity::elementwise;
  bool shared = false;  ///< head-shared: scores averaged over heads before the activation
  gattn::activation activation = activation::sigmoid;
  gattn::combine combine = combine::mul;
  gate_source source = gate_source::separate;
  fused_layout layout = fused_layout::per_head;
  index rank = 0;  ///< low_rank only: inner width of g_a_proj -> g_b_proj
  gattn::gate_rounding rounding = gate_rounding::none;
};

/// YaRN context extension (docs/spec.md §2.4). `factor <= 0` (the default) means no scaling.
struct rope_scaling_config {
  bool yarn = false;
  double factor = 1.0;
  double original_max_position_embeddings = 0;
  double beta_fast = 32;
  double beta_slow = 1;
  double mscale = 0;          ///< 0 = absent
  double mscale_all_dim = 0;  ///< 0 = absent
  double attention_factor = 0;  ///< 0 = absent: derived from mscale / mscale_all_dim
  bool truncate = true;
};

struct rope_config {
  rope_style style = rope_style::neox;
  double theta = 10000.0;
  index rotary_dim = 0;  ///< R: rotated channels at the start of each head (0 = NoPE)
  rope_scaling_config scaling;
};

/// GQA layer (MHA: kv_heads == q_heads, MQA: kv_heads == 1). docs/spec.md §2.
struct gqa_config {
  index hidden = 0;
  index q_heads = 0;
  index kv_heads = 0;
  index head_dim = 0;
  norm_kind qk_norm = norm_kind::none;
  norm_kind output_norm = norm_kind::none;
  double rms_norm_eps = 1e-6;
  double partial_rotary_factor = 1.0;
  rope_config rope;  ///< rope.rotary_dim must equal rotary_width(head_dim, partial_rotary_factor) (validate() checks)
  bool causal = true;
  double attention_scale = 0;  ///< 0 = 1/sqrt(head_dim)
  gate_config gate;
  storage_type kv_cache_type = storage_type::f32;  ///< config key kv_cache_dtype (docs/spec.md §9, §10)
  gattn::kv_numerics kv_numerics = gattn::kv_numerics::exact;  ///< config key kv_numerics: fast may round q and p to bf16 (docs/spec.md §10)
  /// config key numerics: `fast` runs the projections in bf16 operands (fp32 accumulation) in calls of
  /// more than 64 rows and, for bf16 weights, of 3–64 rows (batched decode), and the prefill attention's
  /// Q·Kᵀ and P·V; decode attention and the KV cache stay as exact as kv_numerics says (docs/spec.md §10).
  gattn::numerics numerics = gattn::numerics::exact;

  index group_size() const { return q_heads / kv_heads; }
  double scale() const { return attention_scale > 0 ? attention_scale : 1.0 / std::sqrt(double(head_dim)); }
};

/// MLA layer (DeepSeek-V2/V3 naming). docs/spec.md §3.
struct mla_config {
  index hidden = 0;
  index heads = 0;
  index qk_nope_head_dim = 0;
  index qk_rope_head_dim = 0;
  index v_head_dim = 0;
  index kv_lora_rank = 0;
  index q_lora_rank = 0;  ///< 0: plain q_proj
  double rms_norm_eps = 1e-6;
  rope_config rope;  ///< style defaults to interleaved; rotary_dim = qk_rope_head_dim
  bool causal = true;
  double attention_scale = 0;  ///< 0 = 1/sqrt(d_nope + d_rope)
  gate_config gate;
  storage_type kv_cache_type = storage_type::f32;  ///< config key kv_cache_dtype (docs/spec.md §9, §10)
  gattn::kv_numerics kv_numerics = gattn::kv_numerics::exact;  ///< config key kv_numerics: fast may round q and p to bf16 (docs/spec.md §10)
  /// config key numerics: `fast` runs the projections in bf16 operands (fp32 accumulation) in calls of
  /// more than 64 rows and, for bf16 weights, of 3–64 rows (batched decode), and the prefill attention's
  /// Q·Kᵀ and P·V; decode attention and the KV cache stay as exact as kv_numerics says (docs/spec.md §10).
  gattn::numerics numerics = gattn::numerics::exact;

  index qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  double scale() const {
    return attention_scale > 0 ? attention_scale : 1.0 / std::sqrt(double(qk_head_dim()));
  }
};

/// Which gated delta-rule layer (docs/spec.md §13): Qwen3-Next's Gated DeltaNet (one decay per value head,
/// fused in_proj_qkvz / in_proj_ba, SiLU output gate) or Kimi's KDA (one decay per key channel,
/// separate projections and convolutions, sigmoid output gate).
enum class delta_kind { gated_deltanet, kda };
/// How a Gated DeltaNet checkpoint stores its input projections; the arithmetic is the same:
/// `fused` (Qwen3-Next, docs/spec.md §13): in_proj_qkvz and in_proj_ba, per key-head group;
/// `split` (Qwen3.5, §14): in_proj_qkv [q | k | v], in_proj_z, in_proj_b, in_proj_a.
/// The weights say which (detect_gdn_layout in core/delta_weights.hpp), not the config.
enum class gdn_layout { fused, split };
/// KDA's decay from f = f_b_proj(f_a_proj(x)): `softplus` g = −exp(A_log)·softplus(f + dt_bias)
/// (Kimi Linear); `lower_bound` g = L·σ(exp(A_log)·(f + dt_bias)) with L in [−5, 0) (Kimi K3).
enum class decay_form { softplus, lower_bound };

/// A gated delta-rule layer (docs/spec.md §13). The recurrent state is fp32 [value_heads, key_head_dim,
/// value_head_dim] per sequence; value head h reads key head h / (value_heads / key_heads).
struct delta_config {
  delta_kind kind = delta_kind::gated_deltanet;
  index hidden = 0;
  index key_heads = 0;       ///< num_key_heads (H_k)
  index value_heads = 0;     ///< num_value_heads (H_v), a multiple of H_k; KDA: equal to H_k
  index key_head_dim = 0;    ///< D_k
  index value_head_dim = 0;  ///< D_v
  index conv_kernel = 4;     ///< K: taps of the causal depthwise convolution
  double rms_norm_eps = 1e-6;
  decay_form decay = decay_form::softplus;  ///< KDA only
  double decay_lower_bound = 0;             ///< KDA `lower_bound`: L in [−5, 0)
  /// KDA's output-gate scores: `separate` (g_proj, full rank) or `low_rank` (g_a_proj → g_b_proj).
  gate_source gate = gate_source::separate;
  index gate_rank = 0;  ///< low_rank: inner width; 0 = read from g_a_proj's shape
  /// config key numerics: `fast` runs the output projection (o_proj / out_proj) and KDA's g_b_proj in bf16
  /// operands (fp32 accumulation) in calls of more than 64 rows and, for bf16 weights, of 3–64 rows. The
  /// input projections (q, k, v, gate input, β, decay), the convolution, the delta rule and the state
  /// stay exact: a bf16 k or v passes through the rule's erase term v − Sᵀk, and on the strong-decay
  /// vectors that missed docs/spec.md §10's 1e-2·max|y| by 3-5x (§13).
  gattn::numerics numerics = gattn::numerics::exact;

  index group_size() const { return value_heads / key_heads; }
  /// q is read as q / sqrt(D_k).
  double scale() const { return 1.0 / std::sqrt(double(key_head_dim)); }
  /// Channels of the short convolution: [q (H_k·D_k) | k (H_k·D_k) | v (H_v·D_v)].
  index conv_channels() const { return 2 * key_heads * key_head_dim + value_heads * value_head_dim; }
  /// fp32 values of one sequence's recurrent state S.
  index state_values() const { return value_heads * key_head_dim * value_head_dim; }
};

/// A layer of any family, as a config file describes it (docs/spec.md §8, §9, §13).
using layer_config = std::variant<gqa_config, mla_config, delta_config>;

inline const char* to_string(gate_position p) {
  switch (p) {
    case gate_position::g1: return "G1";
    case gate_position::g2: return "G2";
    case gate_position::g3: return "G3";
    case gate_position::g4: return "G4";
    case gate_position::g5: return "G5";
  }
  return "?";
}
inline const char* to_string(granularity g) { return g == granularity::elementwise ? "elementwise" : "headwise"; }
inline const char* to_string(activation a) {
  switch (a) {
    case activation::sigmoid: return "sigmoid";
    case activation::silu: return "silu";
    case activation::ns_sigmoid: return "ns_sigmoid";
    case activation::identity: return "identity";
  }
  return "?";
}
inline const char* to_string(mla_form f) {
  return f == mla_form::absorbed ? "absorbed" : f == mla_form::expanded ? "expanded" : "automatic";
}
inline const char* to_string(combine c) { return c == combine::mul ? "mul" : "add"; }
inline const char* to_string(gate_source s) {
  switch (s) {
    case gate_source::separate: return "separate";
    case gate_source::low_rank: return "low_rank";
    case gate_source::fused_q: return "fused_q";
  }
  return "?";
}
inline const char* to_string(norm_kind n) {
  switch (n) {
    case norm_kind::none: return "none";
    case norm_kind::rms: return "rms";
    case norm_kind::rms_zero_centered: return "rms_zero_centered";
  }
  return "?";
}
inline const char* to_string(storage_type t) {
  switch (t) {
    case storage_type::f32: return "f32";
    case storage_type::bf16: return "bf16";
    case storage_type::f16: return "f16";
    case storage_type::f8_e4m3: return "f8_e4m3";
  }
  return "?";
}
inline const char* to_string(kv_numerics n) { return n == kv_numerics::exact ? "exact" : "fast"; }
inline const char* to_string(numerics n) { return n == numerics::exact ? "exact" : "fast"; }
inline const char* to_string(gate_rounding r) { return r == gate_rounding::none ? "none" : "bf16"; }
inline const char* to_string(delta_kind k) { return k == delta_kind::gated_deltanet ? "gated_deltanet" : "kda"; }
inline const char* to_string(gdn_layout l) { return l == gdn_layout::fused ? "fused" : "split"; }
inline const char* to_string(decay_form d) { return d == decay_form::softplus ? "softplus" : "lower_bound"; }
inline const char* to_string(rope_style r) {
  switch (r) {
    case rope_style::neox: return "neox";
    case rope_style::interleaved: return "interleaved";
    case rope_style::none: return "none";
  }
  return "?";
}

}  // namespace gattn
