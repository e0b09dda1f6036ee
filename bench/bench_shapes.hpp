// Shapes and inputs of the kernel benchmarks (docs/performance.md), shared by bench_kernel.cpp (kernel/...)
// and bench_ab.cpp (ab/...), so an A/B runs on exactly the inputs of the kernel benchmark it
// resolves.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gattn/core/memory.hpp"
#include "gattn/kernel/kernel.hpp"
#include "gattn/simd/convert.hpp"

namespace gattn_bench {

using gattn::index;

/// Extra GQA decode variant: g1_elementwise with a head-major cache view.
inline const std::string head_major = "g1_elementwise_head_major";

struct shape {
  const char* name;
  index t_q, t_k, hq, hkv, d;
  bool decode;
  index d_v = 0;      // 0 = d
  bool mla = false;   // latent cache: v aliases the first d_v channels of k
  bool hot = false;   // decode: one cache, reused by every call (it stays in L2)
  index dv() const { return d_v ? d_v : d; }
  /// Bytes of one cache stored with `bytes_per_value`-byte elements (4 fp32, 2 bf16/f16).
  double cache_bytes(double bytes_per_value = 4.0) const {
    return double(t_k) * double(hkv) * bytes_per_value * (mla ? double(d) : double(d + dv()));
  }
};

inline const shape k_shapes[] = {
    {"P1", 2048, 2048, 16, 4, 128, false},   {"P2", 8192, 8192, 16, 4, 128, false},
    {"D1", 1, 8192, 32, 8, 128, true},       {"M1", 1, 8192, 16, 1, 576, true, 512, true},
    {"S512", 512, 512, 16, 4, 128, false},
    {"S1024", 1024, 1024, 16, 4, 128, false}, {"S2048", 2048, 2048, 16, 4, 128, false},
    {"S4096", 4096, 4096, 16, 4, 128, false}, {"S8192", 8192, 8192, 16, 4, 128, false},
};

/// D1's heads over 256 keys with one cache that every call reuses (1 MiB in bf16: hot in L2). Its
/// time per key and head is the decode kernel's work without DRAM; D1's cold time per key and head
/// is about this plus the memory's share (measured: cutting the hot time cut the cold by as much).
inline const shape k_d1_hot = {"D1hot", 1, 256, 32, 8, 128, true, 0, false, true};

/// The shape of k_shapes called `name` (nullptr if none).
inline const shape* find_shape(const char* name) {
  for (const shape& s : k_shapes)
    if (std::strcmp(s.name, name) == 0) return &s;
  if (std::strcmp(k_d1_hot.name, name) == 0) return &k_d1_hot;
  return nullptr;
}

/// Bytes per cache value of a storage type.
inline double value_bytes(gattn::storage_type t) { return t == gattn::storage_type::f32 ? 4.0 : 2.0; }

inline bool ends_with(const std::string& s, const char* suffix) {
  const std::size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

/// docs/spec.md §10 numerics of a kernel variant: `<variant>_fast` (e.g. g1_elementwise_bf16_fast), else exact.
inline gattn::kv_numerics variant_numerics(const std::string& variant) {
  return ends_with(variant, "_fast") ? gattn::kv_numerics::fast : gattn::kv_numerics::exact;
}

/// The variant without its numerics suffix.
inline std::string without_numerics(const std::string& variant) {
  return ends_with(variant, "_fast") ? variant.substr(0, variant.size() - 5) : variant;
}

/// The storage type a kernel variant reads its caches as: `<variant>_bf16`, `<variant>_f16` (then
/// an optional `_fast`), else f32.
inline gattn::storage_type variant_storage(const std::string& full_variant) {
  const std::string variant = without_numerics(full_variant);
  return ends_with(variant, "_bf16") ? gattn::storage_type::bf16
         : ends_with(variant, "_f16") ? gattn::storage_type::f16 : gattn::storage_type::f32;
}

/// The variant without its storage and numerics suffixes (`g1_elementwise_bf16_fast` -> `g1_elementwise`).
inline std::string variant_base(const std::string& full_variant) {
  const std::string variant = without_numerics(full_variant);
  const gattn::storage_type t = variant_storage(variant);
  return t == gattn::storage_type::f32 ? variant : variant.substr(0, variant.size() - (t == gattn::storage_type::bf16 ? 5 : 4));
}

template <class Vec>
void fill(Vec& v, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& x : v) x = nd(g);
}

/// Inputs of one shape; decode shapes hold enough independent caches (at least two) that their total
/// reaches 128 MiB (4x the 32 MiB L3; docs/performance.md asks for more than 64 MiB), so every call streams its K/V
/// from memory (a `hot` shape holds one, reused).
/// With a bf16/f16 `kv` the caches hold the fp32 caches' values (same seeds) rounded to that type,
/// in k_bits/v_bits, and twice as many of them reach the same 128 MiB (both read cold memory).
struct inputs {
  shape s;
  gattn::storage_type kv = gattn::storage_type::f32;
  index caches = 1;
  // Activations allocated as gattn::layer_workspace holds them, caches as gattn::kv_cache does
  // (huge-page backed, core/memory.hpp): on 4 KiB pages the epilogue's row-by-row gate reads and
  // output writes pay a TLB walk per row, which is not what a layer's call sees.
  gattn::streamed_vector<float> q, u_elem, u_head, out;
  std::vector<gattn::streamed_vector<float>> k, v;
  std::vector<gattn::streamed_vector<std::uint16_t>> k_bits, v_bits;  // kv = bf16 / f16
  explicit inputs(const shape& sh, gattn::storage_type kv_type = gattn::storage_type::f32) : s(sh), kv(kv_type) {
    const bool rotate = s.decode && !s.hot;
    caches = rotate ? std::max<index>(2, index(std::ceil(2.0 * 64.0 * 1024 * 1024 / s.cache_bytes(value_bytes(kv))))) : 1;
    q.resize(std::size_t(s.t_q * s.hq * s.d));
    fill(q, 1);
    u_elem.resize(std::size_t(s.t_q * s.hq * s.dv()));
    fill(u_elem, 2);
    u_head.resize(std::size_t(s.t_q * s.hq));
    fill(u_head, 3);
    out.resize(std::size_t(s.t_q * s.hq * s.dv()));
    for (index c = 0; c < caches; ++c) {
      if (kv == gattn::storage_type::f32) {
        k.emplace_back(std::size_t(s.t_k * s.hkv * s.d));
        fill(k.back(), unsigned(10 + 2 * c));
        if (!s.mla) {
          v.emplace_back(std::size_t(s.t_k * s.hkv * s.dv()));
          fill(v.back(), unsigned(11 + 2 * c));
        }
      } else {
        k_bits.push_back(rounded(std::size_t(s.t_k * s.hkv * s.d), unsigned(10 + 2 * c)));
        if (!s.mla) v_bits.push_back(rounded(std::size_t(s.t_k * s.hkv * s.dv()), unsigned(11 + 2 * c)));
      }
    }
  }
  /// n random values (seed as the fp32 cache's) rounded to kv.
  gattn::streamed_vector<std::uint16_t> rounded(std::size_t n, unsigned seed) const {
    std::vector<float> x(n);
    fill(x, seed);
    gattn::streamed_vector<std::uint16_t> out(n);
    if (kv == gattn::storage_type::bf16) gattn::simd::narrow_bf16(x.data(), out.data(), gattn::index(n));
    else gattn::simd::narrow_f16(x.data(), out.data(), gattn::index(n));
    return out;
  }
  /// Parameters of `variant` (its storage suffix, if any, must match kv) on cache c.
  gattn::sdpa_params params(index c, const std::string& full_variant, int threads) {
    const std::string variant = variant_base(full_variant);
    gattn::sdpa_params p;
    const index dv = s.dv();
    p.t_q = s.t_q; p.t_k = s.t_k; p.q_heads = s.hq; p.kv_heads = s.hkv; p.d_qk = s.d; p.d_v = dv;
    p.q = q.data(); p.q_token_stride = s.hq * s.d; p.q_head_stride = s.d;
    p.k = k.empty() ? nullptr : k[std::size_t(c)].data(); p.k_token_stride = s.hkv * s.d; p.k_head_stride = s.mla ? 0 : s.d;
    if (s.mla) {
      p.v = p.k; p.v_token_stride = p.k_token_stride; p.v_head_stride = 0;
    } else {
      p.v = v.empty() ? nullptr : v[std::size_t(c)].data(); p.v_token_stride = s.hkv * dv; p.v_head_stride = dv;
    }
    if (kv != gattn::storage_type::f32) {  // strides in elements, as for fp32; k and v stay null
      p.kv_type = kv;
      p.k_bits = k_bits[std::size_t(c)].data();
      p.v_bits = s.mla ? p.k_bits : v_bits[std::size_t(c)].data();
      p.numerics = variant_numerics(full_variant);
    }
    if (variant == head_major) {  // the same buffers read as [H_kv, T, D] (Hugging Face's layout)
      p.k_token_stride = s.d; p.k_head_stride = s.t_k * s.d;
      p.v_token_stride = dv; p.v_head_stride = s.t_k * dv;
    }
    p.out = out.data(); p.out_token_stride = s.hq * dv; p.out_head_stride = dv;
    p.scale = 1.0f / std::sqrt(float(s.d));
    p.causal = true;
    p.threads = threads;
    if (variant == "g1_elementwise" || variant == head_major) {
      p.epilogue.gate_scores = u_elem.data();
      p.epilogue.gate_token_stride = s.hq * dv;
      p.epilogue.gate_head_stride = dv;
    } else if (variant == "g1_headwise") {
      p.epilogue.gate_scores = u_head.data();
      p.epilogue.gate_token_stride = s.hq;
      p.epilogue.gate_head_stride = 1;
      p.epilogue.gate_headwise = true;
    }
    return p;
  }
};

/// The inputs of shape `s` with caches of type `kv`, built once and kept. Decode inputs (about
/// 128 MiB each) are kept per (shape, type), so an interleaved run of D1/M1 in fp32, bf16 and f16
/// does not rebuild them on every switch; one prefill input is kept at a time (P2's are large).
inline inputs& shared_inputs(const shape& s, gattn::storage_type kv = gattn::storage_type::f32) {
  static std::unique_ptr<inputs> prefill;
  static std::vector<std::unique_ptr<inputs>> decode;
  if (s.decode) {
    for (auto& in : decode)
      if (std::strcmp(in->s.name, s.name) == 0 && in->kv == kv) return *in;
    decode.push_back(std::make_unique<inputs>(s, kv));
    return *decode.back();
  }
  if (!prefill || std::strcmp(prefill->s.name, s.name) != 0 || prefill->kv != kv) {
    prefill.reset();
    prefill = std::make_unique<inputs>(s, kv);
  }
  return *prefill;
}

}  // namespace gattn_bench
