// Test support for the fused SDPA kernel: random problems over strided buffers, the double oracle
// (gattn::reference::sdpa), a naive float32 baseline for e_base (docs/testing.md, tolerance rule), the
// list of archs to instantiate, and the sweep size (GATTN_SWEEP = full | reduced | small).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gattn/kernel/kernel.hpp"
#include "gattn/reference/sdpa.hpp"
#include "gattn/simd/convert.hpp"

namespace kernel_test {

using gattn::index;

enum class sweep_size { small, reduced, full };

/// Default: full on an AVX-512 build without sanitizers, reduced on AVX2/SSE/scalar builds,
/// small on NEON (qemu) and under sanitizers. GATTN_SWEEP overrides.
inline sweep_size sweep() {
  if (const char* s = std::getenv("GATTN_SWEEP")) {
    const std::string v(s);
    if (v == "full") return sweep_size::full;
    if (v == "reduced") return sweep_size::reduced;
    if (v == "small") return sweep_size::small;
  }
#if defined(__SANITIZE_ADDRESS__)
  return sweep_size::small;
#else
  const std::string arch = gattn::default_arch_name();
  if (arch.rfind("avx512", 0) == 0) return sweep_size::full;
  if (arch.rfind("neon", 0) == 0) return sweep_size::small;
  return sweep_size::reduced;
#endif
}
inline const char* to_string(sweep_size s) {
  return s == sweep_size::full ? "full" : s == sweep_size::reduced ? "reduced" : "small";
}

/// Calls f(Arch{}) for every arch this build can run: the default, every supported xsimd arch of
/// interest (AVX-512BW, FMA3+AVX2, SSE4.2, SSE2, NEON64) and gattn's scalar arch, without repeats.
template <class F>
void for_each_arch(F&& f) {
  f(gattn::default_arch{});
  auto maybe = [&](auto arch) {
    using A = decltype(arch);
    if constexpr (A::supported() && !std::is_same<A, gattn::default_arch>::value) f(arch);
  };
  maybe(xsimd::avx512bw{});
  maybe(xsimd::fma3<xsimd::avx2>{});
  maybe(xsimd::sse4_2{});
  maybe(xsimd::neon64{});
  maybe(gattn::scalar_arch{});
}

/// One attention problem in dense-or-strided buffers, with the views the kernel takes.
struct problem {
  index t_q = 1, t_k = 1, hq = 1, hkv = 1, dqk = 8, dv = 8;
  bool causal = true;
  float scale = 0;  // 0 = 1/sqrt(dqk)
  index q_pad = 0, k_pad = 0, v_pad = 0, out_pad = 0;  // extra floats per token (strided views)
  bool v_aliases_k = false;  // MLA latent cache: v = first dv channels of k (needs dv <= dqk)
  // K and V as [hkv][t_k + k_pad (v_pad)][d] (Hugging Face's layout; the pads become unused
  // capacity) instead of [t_k][hkv·d + pad].
  bool head_major_kv = false;
  std::vector<float> q, k, v;
  index qts = 0, kts = 0, vts = 0, ots = 0, khs = 0, vhs = 0;

  void fill(unsigned seed, float stddev = 1.0f) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> nd(0.0f, stddev);
    qts = hq * dqk + q_pad;
    ots = hq * dv + out_pad;
    if (head_major_kv) {
      kts = dqk; khs = (t_k + k_pad) * dqk;
      vts = dv; vhs = (t_k + v_pad) * dv;
    } else {
      kts = hkv * dqk + k_pad; khs = dqk;
      vts = hkv * dv + v_pad; vhs = dv;
    }
    q.assign(std::size_t(std::max<index>(t_q * qts, 1)), 0.0f);
    k.assign(std::size_t(std::max<index>(head_major_kv ? hkv * khs : t_k * kts, 1)), 0.0f);
    v.assign(std::size_t(std::max<index>(head_major_kv ? hkv * vhs : t_k * vts, 1)), 0.0f);
    for (auto& x : q) x = nd(gen);
    for (auto& x : k) x = nd(gen);
    for (auto& x : v) x = nd(gen);
  }
  float eff_scale() const { return scale != 0 ? scale : 1.0f / std::sqrt(float(dqk)); }

  /// Kernel parameters writing to `out` (size out_size()).
  gattn::sdpa_params params(float* out) const {
    gattn::sdpa_params p;
    p.t_q = t_q; p.t_k = t_k; p.q_heads = hq; p.kv_heads = hkv; p.d_qk = dqk; p.d_v = dv;
    p.q = q.data(); p.q_token_stride = qts; p.q_head_stride = dqk;
    p.k = k.data(); p.k_token_stride = kts; p.k_head_stride = khs;
    if (v_aliases_k) {
      p.v = k.data(); p.v_token_stride = kts; p.v_head_stride = khs;
    } else {
      p.v = v.data(); p.v_token_stride = vts; p.v_head_stride = vhs;
    }
    p.out = out; p.out_token_stride = ots; p.out_head_stride = dv;
    p.scale = eff_scale();
    p.causal = causal;
    return p;
  }
  std::size_t out_size() const { return std::size_t(std::max<index>(t_q * ots, 1)); }

  /// Dense copies for the oracle (which takes dense row-major buffers).
  std::vector<float> dense_q() const { return dense(q, t_q, hq, dqk, qts, dqk); }
  std::vector<float> dense_k() const { return dense(k, t_k, hkv, dqk, kts, khs); }
  std::vector<float> dense_v() const {
    return v_aliases_k ? dense(k, t_k, hkv, dv, kts, khs) : dense(v, t_k, hkv, dv, vts, vhs);
  }
  static std::vector<float> dense(const std::vector<float>& src, index t, index h, index d, index ts, index hs) {
    std::vector<float> r(std::size_t(std::max<index>(t * h * d, 1)));
    for (index i = 0; i < t; ++i)
      for (index j = 0; j < h; ++j)
        for (index c = 0; c < d; ++c) r[std::size_t((i * h + j) * d + c)] = src[std::size_t(i * ts + j * hs + c)];
    return r;
  }

  /// Double oracle, dense [t_q][hq][dv].
  std::vector<double> oracle() const {
    gattn::reference::sdpa_shape s;
    s.t_q = t_q; s.t_k = t_k; s.q_heads = hq; s.kv_heads = hkv; s.d_qk = dqk; s.d_v = dv;
    s.scale = double(eff_scale()); s.causal = causal;
    std::vector<double> out(std::size_t(std::max<index>(t_q * hq * dv, 1)));
    const auto dq = dense_q(), dk = dense_k(), dvv = dense_v();
    gattn::reference::sdpa(s, dq.data(), dk.data(), dvv.data(), out.data());
    return out;
  }

  /// The same algorithm in float32, naively (scores materialised, max-subtracted, std::exp):
  /// max |naive32 - oracle| is e_base of the tolerance rule. The variants round where the kernel
  /// does: `prescale` multiplies q by the scale first (else the dot product), `late_divide`
  /// accumulates Σ p·v and divides by l at the end (else Σ (p/l)·v).
  std::vector<float> naive32(bool prescale = true, bool late_divide = true) const {
    auto dq = dense_q();
    const auto dk = dense_k(), dvv = dense_v();
    if (prescale)
      for (auto& x : dq) x *= eff_scale();
    const index g = hq / hkv;
    const float sc = prescale ? 1.0f : eff_scale();
    std::vector<float> out(std::size_t(std::max<index>(t_q * hq * dv, 1)), 0.0f), score(std::size_t(t_k + 1));
    for (index h = 0; h < hq; ++h)
      for (index i = 0; i < t_q; ++i) {
        const index r = h / g;
        const index vis = causal ? std::min(t_k, std::max<index>(0, i + t_k - t_q + 1)) : t_k;
        if (vis == 0) continue;
        float m = -std::numeric_limits<float>::infinity();
        for (index j = 0; j < vis; ++j) {
          float d = 0;
          for (index c = 0; c < dqk; ++c) d += dq[std::size_t((i * hq + h) * dqk + c)] * dk[std::size_t((j * hkv + r) * dqk + c)];
          score[std::size_t(j)] = sc * d;
          m = std::max(m, score[std::size_t(j)]);
        }
        float l = 0;
        for (index j = 0; j < vis; ++j) l += (score[std::size_t(j)] = std::exp(score[std::size_t(j)] - m));
        float* o = &out[std::size_t((i * hq + h) * dv)];
        for (index j = 0; j < vis; ++j) {
          const float pj = late_divide ? score[std::size_t(j)] : score[std::size_t(j)] / l;
          for (index c = 0; c < dv; ++c) o[c] += pj * dvv[std::size_t((j * hkv + r) * dv + c)];
        }
        if (late_divide)
          for (index c = 0; c < dv; ++c) o[c] /= l;
      }
    return out;
  }
};

/// A paged copy of a token-major problem's K and V (docs/spec.md §11): blocks of `block_size` token rows
/// (each row as the problem lays it out, pads included) placed in a random permutation of a pool
/// with spare blocks, every unused element NaN (a read outside the table shows in the output).
/// Low precision: `type` bf16/f16 stores the bits of the (already rounded, see store_as) values.
struct paged_copy {
  index block_size = 1, k_block = 0, v_block = 0;
  gattn::storage_type type = gattn::storage_type::f32;
  std::vector<std::int32_t> table;
  std::vector<float> k, v;
  std::vector<std::uint16_t> k_bits, v_bits;

  paged_copy(const problem& pr, index bs, unsigned seed, gattn::storage_type t = gattn::storage_type::f32)
      : block_size(bs), type(t) {
    const index used = (pr.t_k + bs - 1) / bs, pool = used + 2;
    std::vector<std::int32_t> order(static_cast<std::size_t>(pool));
    for (index b = 0; b < pool; ++b) order[std::size_t(b)] = std::int32_t(b);
    std::shuffle(order.begin(), order.end(), std::mt19937(seed));
    table.assign(order.begin(), order.begin() + used);
    k_block = bs * pr.kts;
    v_block = bs * pr.vts;
    k = scatter(pr.k, pr.kts, k_block, pool, pr.t_k);
    v = scatter(pr.v, pr.vts, v_block, pool, pr.t_k);
    if (type != gattn::storage_type::f32) {
      k_bits = bits_of(k);
      v_bits = bits_of(v);
    }
  }
  /// Turns pr.params(out) into the paged view (keeps MLA's V-aliases-K).
  void apply(const problem& pr, gattn::sdpa_params& p) const {
    const bool alias = pr.v_aliases_k;
    p.kv_type = type;
    p.k = k.data();
    p.v = alias ? k.data() : v.data();
    if (type != gattn::storage_type::f32) {
      p.k = p.v = nullptr;
      p.k_bits = k_bits.data();
      p.v_bits = alias ? k_bits.data() : v_bits.data();
    }
    p.block_table = table.data();
    p.block_size = block_size;
    p.k_block_stride = k_block;
    p.v_block_stride = alias ? k_block : v_block;
  }

 private:
  std::vector<float> scatter(const std::vector<float>& src, index ts, index block_floats, index pool, index t_k) const {
    std::vector<float> dst(std::size_t(std::max<index>(pool * block_floats, 1)), std::numeric_limits<float>::quiet_NaN());
    for (index j = 0; j < t_k; ++j)
      std::copy_n(src.begin() + j * ts, ts, dst.begin() + table[std::size_t(j / block_size)] * block_floats + (j % block_size) * ts);
    return dst;
  }
  std::vector<std::uint16_t> bits_of(const std::vector<float>& x) const {
    std::vector<std::uint16_t> b(x.size());
    for (std::size_t i = 0; i < x.size(); ++i)
      b[i] = type == gattn::storage_type::bf16 ? gattn::round_to_bf16(x[i]) : gattn::round_to_f16(x[i]);
    return b;
  }
};

inline double ulp32(double x) {
  const float f = float(std::fabs(x));
  return double(std::nextafter(f, std::numeric_limits<float>::infinity()) - f);
}

/// Result of comparing a kernel output (strided, `ots` per token) with the oracle (dense).
struct compare_result {
  double max_err = 0, max_ref = 0, worst_rel = 0;
};
inline compare_result compare(const std::vector<float>& out, index ots, const std::vector<double>& ref, index t_q,
                              index hq, index dv) {
  compare_result r;
  for (index i = 0; i < t_q; ++i)
    for (index h = 0; h < hq; ++h)
      for (index c = 0; c < dv; ++c) {
        const double o = out[std::size_t(i * ots + h * dv + c)], e = ref[std::size_t((i * hq + h) * dv + c)];
        const double err = std::isnan(o) ? std::numeric_limits<double>::infinity() : std::fabs(o - e);
        r.max_err = std::max(r.max_err, err);
        r.max_ref = std::max(r.max_ref, std::fabs(e));
        r.worst_rel = std::max(r.worst_rel, err / (1e-5 + 1e-5 * std::fabs(e)));  // <= 1: atol = rtol = 1e-5
      }
  return r;
}
inline double max_abs_diff(const std::vector<float>& a, const std::vector<double>& ref) {
  double e = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) e = std::max(e, std::fabs(double(a[i]) - ref[i]));
  return e;
}

}  // namespace kernel_test
