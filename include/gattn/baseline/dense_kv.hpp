// The K/V of any kernel view (paged or contiguous, f32/bf16/f16) as dense fp32 copies, so the
// baselines (oracle adapter, unfused Eigen SDPA) can run on every cache the kernel reads. The
// baselines may copy; the kernel never does.
#pragma once

#include <vector>

#include "gattn/core/config.hpp"
#include "gattn/core/types.hpp"
#include "gattn/kernel/sdpa_params.hpp"
#include "gattn/simd/convert.hpp"

GATTN_NAMESPACE_BEGIN
namespace detail {

/// Widens `width` stored elements of view p (element type p.kv_type) starting at `row` into dst.
inline void widen_stored(const sdpa_params& p, const void* row, index width, float* dst) {
  if (p.kv_type == storage_type::f32) std::copy_n(static_cast<const float*>(row), width, dst);
  else if (p.kv_type == storage_type::bf16) simd::widen_bf16(static_cast<const std::uint16_t*>(row), dst, width);
  else simd::widen_f16(static_cast<const std::uint16_t*>(row), dst, width);
}

/// p with K and V rewritten as dense fp32 [t_k][kv_heads][d] in k_out and v_out (contiguous,
/// no block table); everything else (q, out, epilogue, lse, threads) as in p.
inline sdpa_params dense_kv_view(const sdpa_params& p, std::vector<float>& k_out, std::vector<float>& v_out) {
  k_out.assign(std::size_t(std::max<index>(p.t_k * p.kv_heads * p.d_qk, 1)), 0.0f);
  v_out.assign(std::size_t(std::max<index>(p.t_k * p.kv_heads * p.d_v, 1)), 0.0f);
  const bool f32 = p.kv_type == storage_type::f32;
  for (index j = 0; j < p.t_k; ++j)
    for (index r = 0; r < p.kv_heads; ++r) {
      const void* krow = f32 ? static_cast<const void*>(key_row(p, p.k, j) + r * p.k_head_stride)
                             : static_cast<const void*>(key_row(p, p.k_bits, j) + r * p.k_head_stride);
      const void* vrow = f32 ? static_cast<const void*>(value_row(p, p.v, j) + r * p.v_head_stride)
                             : static_cast<const void*>(value_row(p, p.v_bits, j) + r * p.v_head_stride);
      widen_stored(p, krow, p.d_qk, k_out.data() + (j * p.kv_heads + r) * p.d_qk);
      widen_stored(p, vrow, p.d_v, v_out.data() + (j * p.kv_heads + r) * p.d_v);
    }
  sdpa_params d = p;
  d.kv_type = storage_type::f32;
  d.k = k_out.data();
  d.v = v_out.data();
  d.k_bits = d.v_bits = nullptr;
  d.k_token_stride = p.kv_heads * p.d_qk;
  d.k_head_stride = p.d_qk;
  d.v_token_stride = p.kv_heads * p.d_v;
  d.v_head_stride = p.d_v;
  d.block_table = nullptr;
  d.block_size = d.k_block_stride = d.v_block_stride = 0;
  return d;
}

/// True when p's K/V are plain contiguous fp32 (the baselines read them in place).
inline bool dense_f32_kv(const sdpa_params& p) { return p.kv_type == storage_type::f32 && p.block_table == nullptr; }

}  // namespace detail
GATTN_NAMESPACE_END  // namespace gattn
