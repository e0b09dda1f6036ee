// The fused kernel's interface: one attention problem over strided views, its epilogue, validation.
#pragma once

#include <algorithm>
#include <cstdint>

#include "gattn/core/config.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/execution.hpp"
#include "gattn/core/scratch_span.hpp"
#include "gattn/core/types.hpp"

GATTN_NAMESPACE_BEGIN
/// Per-output-row epilogue, applied after O /= l and before the single store.
struct sdpa_epilogue {
  norm_kind out_norm = norm_kind::none;  ///< per-head RMSNorm over d_v (weight size d_v; nullptr = 1)
  const float* out_norm_weight = nullptr;
  float out_norm_eps = 1e-6f;
  const float* gate_scores = nullptr;  ///< nullptr = no gate; else pre-activation scores u
  index gate_token_stride = 0;         ///< u(t, h, c) = gate_scores[t*ts + h*hs + (headwise ? 0 : c)]
  index gate_head_stride = 0;          ///< 0 = head-shared gate
  bool gate_headwise = false;
  activation gate_activation = activation::sigmoid;
  combine gate_combine = combine::mul;
  gattn::gate_rounding gate_rounding = gattn::gate_rounding::none;  ///< bf16: sigmoid and mul only (docs/spec.md §10)
};

/// One attention problem over strided views (see the file comment and docs/spec.md §2.5-§2.8).
struct sdpa_params {
  index t_q = 0, t_k = 0, q_heads = 0, kv_heads = 0, d_qk = 0, d_v = 0;
  const float* q = nullptr;
  index q_token_stride = 0, q_head_stride = 0;  ///< q[t*ts + h*hs + c]
  const float* k = nullptr;
  index k_token_stride = 0, k_head_stride = 0;  ///< k[j*ts + r*hs + c]
  const float* v = nullptr;
  index v_token_stride = 0, v_head_stride = 0;  ///< may alias k (MLA latent cache)
  /// Element type of the stored K and V (docs/spec.md §10, exact numerics: widened on load, fp32 math).
  /// bf16/f16: K and V are read from k_bits and v_bits (k and v unused; strides in elements) on
  /// every path of the fused kernel, each tile widened as it is read (never the whole cache).
  storage_type kv_type = storage_type::f32;
  const std::uint16_t* k_bits = nullptr;
  const std::uint16_t* v_bits = nullptr;
  /// Paged K/V (docs/spec.md §11): key j lives in block block_table[j / block_size] at row j % block_size;
  /// block b's row t starts at k + b·k_block_stride + t·k_token_stride (v, k_bits, v_bits alike).
  /// nullptr = contiguous (row j at k + j·k_token_stride). Read only through detail::key_row/value_row.
  const std::int32_t* block_table = nullptr;
  index block_size = 0;
  index k_block_stride = 0, v_block_stride = 0;
  /// docs/spec.md §10: fast lets a bf16 cache's decode round scale·q and P to bf16 for vdpbf16ps (AVX512-BF16); elsewhere exact.
  kv_numerics numerics = kv_numerics::exact;
  /// docs/spec.md §10: fast runs the prefill (unit path) Q·Kᵀ and P·V on bf16 operands with fp32
  /// accumulation (kernel/prefill_bf16.hpp); the decode path ignores it.
  gattn::numerics products = gattn::numerics::exact;
  float* out = nullptr;
  index out_token_stride = 0, out_head_stride = 0;
  float scale = 1.0f;
  bool causal = true;  ///< bottom-right: key j visible to query i iff j <= i + (t_k - t_q)
  sdpa_epilogue epilogue;
  float* lse = nullptr;  ///< optional [q_heads * t_q] at h*t_q + i: log-sum-exp of scaled scores (-inf: no key)
  int threads = 0;       ///< 0 = OpenMP default, 1 = serial (used when exec is nullptr)
  /// Where the kernel's parallel loops run; nullptr = an OpenMP team of `threads`. The plan (key
  /// splits) follows its concurrency(), so results are deterministic per concurrency.
  const execution_context* exec = nullptr;
  /// The call's scratch, at least sdpa_scratch_floats(p, concurrency) floats (fused_sdpa.hpp): the
  /// split partials, then one slot per worker of the context. Empty or smaller: the kernel
  /// allocates for the call.
  scratch_span scratch;
};

namespace detail {

/// Number of keys query i sees: all t_k, or the bottom-right causal limit i + (t_k - t_q) + 1
/// clamped to [0, t_k]. Whether a row has a key at all is decided here, from positions only:
/// never from its scores (an overflowed or -inf score is still a key; docs/spec.md §2.6).
inline index visible_keys(const sdpa_params& p, index i) {
  return p.causal ? std::clamp<index>(i + (p.t_k - p.t_q) + 1, 0, p.t_k) : p.t_k;
}

/// Start of stored key row j (all heads) of a K view with elements T based at `base`: the one
/// place the kernel turns a key index into an address (contiguous or through the block table).
template <class T>
inline const T* key_row(const sdpa_params& p, const T* base, index j) {
  if (p.block_table == nullptr) return base + j * p.k_token_stride;
  return base + index(p.block_table[j / p.block_size]) * p.k_block_stride + (j % p.block_size) * p.k_token_stride;
}
/// Start of stored value row j (all heads), like key_row.
template <class T>
inline const T* value_row(const sdpa_params& p, const T* base, index j) {
  if (p.block_table == nullptr) return base + j * p.v_token_stride;
  return base + index(p.block_table[j / p.block_size]) * p.v_block_stride + (j % p.block_size) * p.v_token_stride;
}
/// How many of the n keys from j0 lie in j0's block (all n when contiguous): a tile read in place
/// with one row stride must not cross a block boundary.
inline index keys_in_block(const sdpa_params& p, index j0, index n) {
  if (p.block_table == nullptr) return n;
  return std::min(n, p.block_size - j0 % p.block_size);
}

/// Throws shape_error naming the field when the parameters cannot describe a valid problem.
inline void validate(const sdpa_params& p) {
  require<shape_error>(p.t_q >= 0 && p.t_k >= 0, "fused_sdpa: t_q=", p.t_q, " t_k=", p.t_k, " must be >= 0");
  require<shape_error>(p.q_heads > 0 && p.kv_heads > 0, "fused_sdpa: q_heads=", p.q_heads,
                       " kv_heads=", p.kv_heads, " must be > 0");
  require<shape_error>(p.q_heads % p.kv_heads == 0, "fused_sdpa: q_heads=", p.q_heads,
                       " is not a multiple of kv_heads=", p.kv_heads);
  require<shape_error>(p.d_qk > 0 && p.d_v > 0, "fused_sdpa: d_qk=", p.d_qk, " d_v=", p.d_v, " must be > 0");
  require<shape_error>(p.q_token_stride >= 0 && p.q_head_stride >= 0 && p.k_token_stride >= 0 &&
                           p.k_head_stride >= 0 && p.v_token_stride >= 0 && p.v_head_stride >= 0 &&
                           p.out_token_stride >= 0 && p.out_head_stride >= 0,
                       "fused_sdpa: strides must be >= 0 (q_token_stride=", p.q_token_stride,
                       " q_head_stride=", p.q_head_stride, " k_token_stride=", p.k_token_stride,
                       " k_head_stride=", p.k_head_stride, " v_token_stride=", p.v_token_stride,
                       " v_head_stride=", p.v_head_stride, " out_token_stride=", p.out_token_stride,
                       " out_head_stride=", p.out_head_stride, ")");
  if (p.t_q > 0) {
    require<shape_error>(p.q != nullptr, "fused_sdpa: q is null with t_q=", p.t_q);
    require<shape_error>(p.out != nullptr, "fused_sdpa: out is null with t_q=", p.t_q);
  }
  require<config_error>(p.kv_type != storage_type::f8_e4m3, "fused_sdpa: kv_type=f8_e4m3 is not a cache type the kernel reads");
  if (p.t_k > 0 && p.kv_type == storage_type::f32)
    require<shape_error>(p.k != nullptr && p.v != nullptr, "fused_sdpa: k or v is null with t_k=", p.t_k);
  if (p.t_k > 0 && p.kv_type != storage_type::f32)
    require<shape_error>(p.k_bits != nullptr && p.v_bits != nullptr, "fused_sdpa: k_bits or v_bits is null with kv_type=",
                         to_string(p.kv_type), " and t_k=", p.t_k);
  require<shape_error>(std::isfinite(p.scale), "fused_sdpa: scale=", p.scale, " must be finite");
  if (p.block_table != nullptr)
    require<shape_error>(p.block_size > 0 && p.k_block_stride >= 0 && p.v_block_stride >= 0,
                         "fused_sdpa: paged view with block_size=", p.block_size, " k_block_stride=", p.k_block_stride,
                         " v_block_stride=", p.v_block_stride, " (block_size must be > 0, strides >= 0)");
  require<shape_error>(p.threads >= 0, "fused_sdpa: threads=", p.threads, " must be >= 0");
  const sdpa_epilogue& e = p.epilogue;
  if (e.gate_scores) {
    require<shape_error>(e.gate_token_stride >= 0 && e.gate_head_stride >= 0,
                         "fused_sdpa: gate_token_stride=", e.gate_token_stride,
                         " gate_head_stride=", e.gate_head_stride, " must be >= 0");
    require<config_error>(e.gate_rounding == gate_rounding::none ||
                              (e.gate_activation == activation::sigmoid && e.gate_combine == combine::mul),
                          "fused_sdpa: gate_rounding=", to_string(e.gate_rounding), " needs gate_activation=sigmoid and gate_combine=mul (got ",
                          to_string(e.gate_activation), ", ", to_string(e.gate_combine), ")");
  }
  require<shape_error>(e.out_norm == norm_kind::none || e.out_norm_eps >= 0.0f,
                       "fused_sdpa: out_norm_eps=", e.out_norm_eps, " must be >= 0");
}

}  // namespace detail
GATTN_NAMESPACE_END  // namespace gattn
