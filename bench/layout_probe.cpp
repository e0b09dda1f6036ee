// The probe behind the README's "Session 16: a tiled cache layout". Would the decode kernel read a
// cold cache faster if the cache were laid out so that the microkernels read it strictly in address
// order? BD's decode (1 query, 8 query rows per KV head, 2 KV heads, D 256, bf16 K and V, one
// thread) written out with the library's microkernels over three layouts of the same values:
//   rows:   gattn's layout today, [T, H, D] for K and for V; each microkernel call reads one head's
//           slice of several tokens side by side and prefetches the slices it will read `ahead`
//           later (cache_stream::prefetch_slices, as decode_range does);
//   tiled:  K as [T/4][H][D/16][4 keys][16 channels] and V as [T/4][H][D/64][4 keys][64 channels],
//           so a score call (4 keys × 16 channels per load step) and a P·V call (4 keys × 64
//           channels) each read one run of consecutive bytes, the calls in address order; the
//           prefetch runs the same number of bytes ahead, in address order;
//   stream: tiled, with each 32-key block's K tiles and then its V tiles back to back in one
//           buffer, so the whole call is one ascending stream.
// Each is timed cold (a cache not touched for 128 MiB of others) and again hot, alternating; prints
// medians in ns per key and KV head, and the largest difference of the outputs from `rows`.
//   build/bench/gattn_layout_probe [rounds] [prefetch distance in KiB] [0: no prefetch in tiled]
// Only the AVX-512 build measures (the tiles match its 16-lane loads and 6 × 4-vector P·V blocks).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gattn/core/memory.hpp"
#include "gattn/kernel/decode.hpp"

namespace {

using Arch = gattn::default_arch;
using gi = gattn::index;
using bits = std::uint16_t;
using B = gattn::simd::batch<float, Arch>;
using clock_type = std::chrono::steady_clock;
constexpr auto bf16 = gattn::storage_type::bf16;
constexpr gi W = gi(B::size);

constexpr gi T = 2304, H = 2, D = 256, R = 8, block = 32, caches = 30;
constexpr gi key_tile = 4, k_channels = 16, v_channels = 64;  // a tile: 4 keys × a channel block

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// decode_qk for RB rows × the 4 keys of one K tile: channel block c of key t at k + c·4 + t·16.
template <int RB>
void qk_tile(const float* q, gi ldq, const bits* k, float* s, gi lds) {
  constexpr int N = RB * int(key_tile);
  B acc[N];
  for (int n = 0; n < N; ++n) acc[n] = B(0.0f);
  for (gi c = 0; c < D; c += W) {
    B kv[key_tile];
    for (gi t = 0; t < key_tile; ++t) kv[t] = gattn::simd::load_widened<Arch, bf16>(k + c * key_tile + t * W);
    for (int r = 0; r < RB; ++r) {
      const B qv = gattn::simd::load_reg<Arch>(q + r * ldq + c);
      for (gi t = 0; t < key_tile; ++t) acc[r * key_tile + t] = gattn::simd::fma(qv, kv[t], acc[r * key_tile + t]);
    }
  }
  alignas(64) float sums[N];
  for (int g = 0; g < N / int(W); ++g) gattn::simd::store(sums + g * W, gattn::simd::haddp(acc + g * W));
  for (int r = 0; r < RB; ++r)
    for (gi t = 0; t < key_tile; ++t) s[r * lds + t] = sums[r * key_tile + t];
}

enum layout { rows, tiled, stream };
const char* const layout_name[] = {"rows", "tiled", "stream"};

struct caches_of_layout {
  std::vector<gattn::streamed_vector<bits>> k, v;  // stream: v unused, K and V interleaved in k
};

struct probe {
  caches_of_layout c[3];
  std::vector<float> q = std::vector<float>(std::size_t(H * R * D));
  alignas(64) float s[H * R * block], o[H * R * D], m[H * R], l[H * R], alpha[H * R];
  gi prefetch_bytes;
  bool tiled_prefetch;

  probe(gi distance, bool tiled_pf) : prefetch_bytes(distance), tiled_prefetch(tiled_pf) {
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = float(int(i * 37 % 19) - 9) / 9.0f;
    const std::size_t n = std::size_t(T * H * D);
    for (gi x = 0; x < caches; ++x) {
      for (auto& l : c) {
        l.k.emplace_back(&l == &c[stream] ? 2 * n : n);
        if (&l != &c[stream]) l.v.emplace_back(n);
      }
      for (gi t = 0; t < T; ++t)
        for (gi h = 0; h < H; ++h)
          for (gi d = 0; d < D; ++d) {
            const bits kb = gattn::round_to_bf16(0.05f * float((t * 7 + h * 3 + d * 5 + x) % 61 - 30) / 30.0f);
            const bits vb = gattn::round_to_bf16(float((t * 11 + h * 5 + d * 3 + x) % 53 - 26) / 26.0f);
            const std::size_t row = std::size_t((t * H + h) * D + d);
            const std::size_t kt = std::size_t((((t / key_tile) * H + h) * (D / k_channels) + d / k_channels) *
                                                   key_tile * k_channels +
                                               (t % key_tile) * k_channels + d % k_channels);
            const std::size_t vt = std::size_t((((t / key_tile) * H + h) * (D / v_channels) + d / v_channels) *
                                                   key_tile * v_channels +
                                               (t % key_tile) * v_channels + d % v_channels);
            c[rows].k.back()[row] = kb;
            c[rows].v.back()[row] = vb;
            c[tiled].k.back()[kt] = kb;
            c[tiled].v.back()[vt] = vb;
            const std::size_t per_block = std::size_t(block * H * D), b = std::size_t(t / block);
            c[stream].k.back()[kt + b * per_block] = kb;                // block b's K tiles at 2b
            c[stream].k.back()[vt + (b + 1) * per_block] = vb;          // and its V tiles after them
          }
    }
  }

  /// Prefetches `lines` lines from p + prefetch_bytes, inside [.., end).
  void prefetch_ahead(const bits* p, int lines, const bits* end) const {
    const char* a = reinterpret_cast<const char*>(p) + prefetch_bytes;
    for (int i = 0; i < lines; ++i)
      if (a + 64 * i < reinterpret_cast<const char*>(end)) gattn::detail::prefetch_l2(a + 64 * i);
  }

  template <layout lay>
  void run(gi x) {
    const bits* k0 = c[lay].k[std::size_t(x)].data();
    const bits* v0 = lay == stream ? k0 + block * H * D : c[lay].v[std::size_t(x)].data();
    const bits* k_end = k0 + c[lay].k[std::size_t(x)].size();
    const bits* v_end = lay == stream ? k_end : v0 + c[lay].v[std::size_t(x)].size();
    const gattn::detail::cache_stream ks(k0, H * D, H, D, D, T, prefetch_bytes), vs(v0, H * D, H, D, D, T, prefetch_bytes);
    if constexpr (lay == rows) {
      ks.prefetch_range_start(0);
      vs.prefetch_range_start(0);
    }
    std::fill(o, o + H * R * D, 0.0f);
    std::fill(m, m + H * R, -1e30f);
    std::fill(l, l + H * R, 0.0f);
    const bool pf = lay == rows || tiled_prefetch;  // rows prefetches as decode_range does
    for (gi j0 = 0; j0 < T; j0 += block) {
      // stream: block b's tiles sit at 2b·(block·H·D); the tile indices below count from key j0.
      const gi shift = lay == stream ? j0 * H * D : 0;
      const bits* k = k0 + shift;
      const bits* v = v0 + shift;
      for (gi t0 = 0; t0 < block; t0 += key_tile)
        for (gi h = 0; h < H; ++h) {
          const bits* tile = k + (((j0 + t0) / key_tile) * H + h) * D * key_tile;
          const bits* kp[key_tile];  // rows: the 4 keys' slices
          for (gi t = 0; t < key_tile; ++t) kp[t] = k0 + ((j0 + t0 + t) * H + h) * D;
          for (gi r = 0; r < R; r += 4) {  // two calls of 4 rows, each prefetching half the bytes
            float* sr = s + (h * R + r) * block + t0;
            const float* qr = q.data() + (h * R + r) * D;
            if constexpr (lay == rows) {
              ks.prefetch_slices(j0 + t0 + r / 2, 2, h);
              gattn::detail::decode_qk<Arch, 4, int(key_tile), bf16>(qr, D, kp, D, sr, block);
            } else {
              if (pf) prefetch_ahead(tile + r / 4 * D * 2, int(D * key_tile * 2 / 64 / 2), k_end);
              qk_tile<4>(qr, D, tile, sr, block);
            }
          }
        }
      softmax();
      for (gi g0 = 0; g0 < block; g0 += (lay == rows ? 8 : key_tile))
        for (gi h = 0; h < H; ++h) {
          const gi keys = lay == rows ? 8 : key_tile;
          const bits* tile = v + (((j0 + g0) / key_tile) * H + h) * D * key_tile;
          if (pf && lay == rows) vs.prefetch_slices(j0 + g0, keys, h);
          if (pf && lay != rows) prefetch_ahead(tile, int(D * key_tile * 2 / 64), v_end);
          for (gi x0 = 0; x0 < D / W; x0 += 4)
            for (gi mm = 0; mm < R; mm += 6) {
              const int mr = int(std::min<gi>(6, R - mm));
              const bits* vp = lay == rows ? v0 + ((j0 + g0) * H + h) * D + x0 * W : tile + x0 / 4 * key_tile * v_channels;
              gattn::detail::pv_dispatch<Arch, false, bf16>(mr, 4, s + (h * R + mm) * block + g0, block, keys, vp,
                                                            lay == rows ? H * D : v_channels, o + (h * R + mm) * D + x0 * W,
                                                            D, g0 == 0 ? alpha + h * R + mm : nullptr, nullptr);
            }
        }
    }
  }

  /// The online softmax of a block (every key visible).
  void run(layout lay, gi x) {
    if (lay == rows) run<rows>(x);
    else if (lay == tiled) run<tiled>(x);
    else run<stream>(x);
  }

  void softmax() {
    for (gi r = 0; r < H * R; ++r) {
      float* row = s + r * block;
      B top(-1e30f);
      for (gi j = 0; j < block; j += W) top = gattn::simd::max(top, gattn::simd::load<Arch>(row + j));
      const float m_new = std::max(m[r], gattn::simd::hmax(top));
      alpha[r] = gattn::simd::exp_nonpositive(gattn::simd::scalar_batch<float>(m[r] - m_new)).v;
      B sum(0.0f);
      for (gi j = 0; j < block; j += W) {
        const B e = gattn::simd::exp_nonpositive(gattn::simd::load<Arch>(row + j) - B(m_new));
        sum += e;
        gattn::simd::store(row + j, e);
      }
      m[r] = m_new;
      l[r] = l[r] * alpha[r] + gattn::simd::hadd(sum);
    }
  }
};

double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

}  // namespace

int main(int argc, char** argv) {
  if (W != 16 || gattn::kernel_traits<Arch>::pv_mr < 6) {
    std::printf("gattn_layout_probe measures the AVX-512 build only\n");
    return 0;
  }
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 30;
  const gi distance = (argc > 2 ? std::max(1, std::atoi(argv[2])) : 128) * 1024;
  const bool tiled_prefetch = argc > 3 ? std::atoi(argv[3]) != 0 : true;
  static probe p(distance, tiled_prefetch);
  std::vector<float> reference(std::size_t(H * R * D));
  double differs = 0;
  for (int lay = 0; lay < 3; ++lay) {
    p.run(layout(lay), 0);
    for (std::size_t i = 0; i < reference.size(); ++i) {
      if (lay == 0) reference[i] = p.o[i];
      differs = std::max(differs, double(std::abs(p.o[i] - reference[i])));
    }
  }
  std::vector<double> cold[3], hot[3];
  gi next = 0;
  for (int r = 0; r < rounds; ++r)
    for (int lay = 0; lay < 3; ++lay) {
      next = (next + 1) % caches;
      auto t0 = clock_type::now();
      p.run(layout(lay), next);
      cold[lay].push_back(since(t0) * 1e9 / double(T * H));
      t0 = clock_type::now();
      p.run(layout(lay), next);
      hot[lay].push_back(since(t0) * 1e9 / double(T * H));
    }
  std::printf("BD's decode, bf16, one thread; prefetch %lld KiB ahead%s; largest output difference %.3g\n",
              static_cast<long long>(distance / 1024), tiled_prefetch ? "" : " (rows only)", differs);
  std::printf("ns per key and KV head, median of %d:\n", rounds);
  for (int lay = 0; lay < 3; ++lay)
    std::printf("  %-7s cold %6.1f  hot %6.1f\n", layout_name[lay], median(cold[lay]), median(hot[lay]));
  return 0;
}
