// One arch's half of odr.two_arches, compiled once per arch; ODR_PROBE names its function (probe.hpp).
#include <cmath>

#include <gattn/kernel/kernel.hpp>
#include <gattn/linalg/linear_map.hpp>

#include "probe.hpp"

odr_two::report odr_two::ODR_PROBE(const inputs& in) {
  report r{gattn::arch_namespace_name(), gattn::default_arch::name(), {}, {}};
  gattn::sdpa_params p;
  p.t_q = p.t_k = t;
  p.q_heads = heads;
  p.kv_heads = kv_heads;
  p.d_qk = p.d_v = d;
  p.q = in.q;
  p.q_token_stride = heads * d;
  p.q_head_stride = d;
  p.k = in.k;
  p.v = in.v;
  p.k_token_stride = p.v_token_stride = kv_heads * d;
  p.k_head_stride = p.v_head_stride = d;
  p.out = r.sdpa;
  p.out_token_stride = heads * d;
  p.out_head_stride = d;
  p.scale = 1.0f / std::sqrt(float(d));
  p.causal = true;
  p.threads = 1;
  gattn::fused_sdpa<gattn::default_arch>(p);

  const gattn::weight_view w(gattn::storage_type::bf16, in.w, {out, odr_two::in});
  const gattn::linear_map map(w, nullptr);
  map.apply(in.x, rows, odr_two::in, r.linear, out, gattn::execution_context::serial());
  return r;
}
