// The per-arch half of consumer_dispatched (dispatched_entry.hpp): one causal SDPA, 3 tokens, 1 head.
#include <algorithm>
#include <cmath>

#include <gattn/kernel/kernel.hpp>
#include <gattn/simd/dispatch.hpp>

#include "dispatched_entry.hpp"

template <class Arch>
double probe_entry::operator()(Arch, const char** arch) const {
  *arch = gattn::default_arch::name();
  const float q[3 * 4] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};
  const float k[3 * 4] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};
  const float v[3 * 4] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  float out[3 * 4] = {};
  gattn::sdpa_params p;
  p.t_q = p.t_k = 3;
  p.q_heads = p.kv_heads = 1;
  p.d_qk = p.d_v = 4;
  p.q = q;
  p.k = k;
  p.v = v;
  p.q_token_stride = p.k_token_stride = p.v_token_stride = p.out_token_stride = 4;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.out_head_stride = 4;
  p.out = out;
  p.scale = 1.0f;
  p.threads = 1;
  gattn::fused_sdpa<gattn::default_arch>(p);
  // Row i attends to keys 0..i; its score is 1 on key i and 0 on the others.
  double err = 0;
  for (int i = 0; i < 3; ++i)
    for (int c = 0; c < 4; ++c) {
      double num = 0, den = 0;
      for (int j = 0; j <= i; ++j) {
        const double w = std::exp(j == i ? 1.0 : 0.0);
        num += w * v[j * 4 + c];
        den += w;
      }
      err = std::max(err, std::fabs(num / den - double(out[i * 4 + c])));
    }
  return err;
}

template double probe_entry::operator()(gattn::dispatch_target, const char**) const;
