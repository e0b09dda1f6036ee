// The probe behind the README's "Session 16: a tiled cache layout". Would the decode kernel read a
// cold cache faster if the cache were laid out so that the microkernels read it strictly in address
// order? BD's decode (1 query, 8 query rows per KV head, 2 KV heads, D 256, bf16 K and V, one
// thread; or D1's: 8192 keys, 4 rows per KV head, 8 KV heads, D 128, bf16 or fp32) written out of
// the library's pieces (P·V calls, prefetch) and one score kernel, over three layouts of the same
// values:
//   rows:   gattn's layout today, [T, H, D] for K and for V; each microkernel call reads one head's
//           slice of several tokens side by side and prefetches the slices it will read `ahead`
//           later (cache_stream::prefetch_slices, as decode_range does);
//   tiled:  K as [T/4][H][D/16][4 keys][16 channels] and V as [T/4][H][D/64][4 keys][64 channels],
//           so a score call (4 keys × 16 channels per load step) and a P·V call (4 keys × 64
//           channels) each read one run of consecutive bytes, the calls in address order; the
//           prefetch runs the same number of bytes ahead, in address order;
//   stream: tiled, with each 32-key block's K tiles and then its V tiles back to back in one
//           buffer, so the whole call is one ascending stream.
// Each is timed cold (a cache not touched while 256 MiB of others were read) and again hot,
// alternating; prints medians in ns per key and KV head, and the largest difference of the outputs
// from `rows`.
//   build/bench/gattn_layout_probe [rounds] [prefetch distance in KiB] [0: no prefetch in tiled]
//                                  [bd | d1 | d1_fp32] [layouts to run, e.g. rows,stream]
// The layouts' buffers are allocated together, so where each lands depends on which others run:
// to compare them unaffected by that (it moved the hot times by up to 20%), run one per process.
// Only the AVX-512 build measures (the tiles match its 16-lane loads and 6 × 4-vector P·V blocks).
// Caution (README, "Session 16"): the tiled forms' lead here is a property of this build. GCC inlines
// the 6-row P·V microkernel into the tiled loop with its key count a constant 4, and the key loop
// unrolls; rows calls it out of line. Built differently, the lead is gone. The same layout read by
// the library's own decode path (branch wip/tiled-kv) was no faster than rows.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "gattn/core/memory.hpp"
#include "gattn/kernel/decode.hpp"
#include "probe_timing.hpp"

namespace {

using Arch = gattn::default_arch;
using gi = gattn::index;
using B = gattn::simd::batch<float, Arch>;
using clock_type = gattn_bench::probe_clock;
using gattn_bench::median;
using gattn_bench::seconds_since;
constexpr gi W = gi(B::size);

constexpr gi block = 32;                                       // keys per softmax block
constexpr gi key_tile = 4, k_channels = 16, v_channels = 64;  // a tile: 4 keys × a channel block

template <gattn::storage_type S>
B load_key(const gattn::storage_element_t<S>* p) {
  if constexpr (S == gattn::storage_type::f32) return gattn::simd::load_reg<Arch>(p);
  else return gattn::simd::load_widened<Arch, S>(p);
}

/// decode_qk for RB rows × 4 keys, the head size a constant: key t's channels c..c+W at
/// key_at(t, c). Both layouts take this same code, so that they differ only in the addresses
/// (session 16's first form of this probe gave the tiled layout this constant-D kernel and rows the
/// library's runtime-d decode_qk, which credited the tiled layout with about 20 ns of compute).
template <gattn::storage_type S, gi D, int RB, class KeyAt>
void qk_4keys(const float* q, gi ldq, KeyAt&& key_at, float* s, gi lds) {
  constexpr int N = RB * int(key_tile);
  B acc[N];
  for (int n = 0; n < N; ++n) acc[n] = B(0.0f);
  for (gi c = 0; c < D; c += W) {
    B kv[key_tile];
    for (gi t = 0; t < key_tile; ++t) kv[t] = load_key<S>(key_at(t, c));
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

/// The decode of one query over T keys of H KV heads (R query rows each, head size D), K and V
/// stored as S, in the three layouts.
template <gattn::storage_type S, gi T, gi H, gi D, gi R>
struct probe {
  static_assert(R % 4 == 0 && D % v_channels == 0 && T % block == 0, "the probe's tiles");
  using bits = gattn::storage_element_t<S>;
  struct caches_of_layout {
    std::vector<gattn::streamed_vector<bits>> k, v;  // stream: v unused, K and V interleaved in k
  };
  static constexpr gi keys = T, heads = H;
  static constexpr gi caches = std::max<gi>(4, gi(256 << 20) / (2 * T * H * D * gi(sizeof(bits))));
  caches_of_layout c[3];
  alignas(64) float q[H * R * D];  // scale·q as the kernel packs it: rows on line boundaries
  alignas(64) float s[H * R * block], o[H * R * D], m[H * R], l[H * R], alpha[H * R];
  gi prefetch_bytes;
  bool tiled_prefetch;

  bool wanted[3];

  probe(gi distance, bool tiled_pf, const bool (&want)[3])
      : prefetch_bytes(distance), tiled_prefetch(tiled_pf), wanted{want[0], want[1], want[2]} {
    for (std::size_t i = 0; i < std::size(q); ++i) q[i] = float(int(i * 37 % 19) - 9) / 9.0f;
    const std::size_t n = std::size_t(T * H * D);
    for (gi x = 0; x < caches; ++x) {
      for (int lay = 0; lay < 3; ++lay) {
        if (!wanted[lay]) continue;
        c[lay].k.emplace_back(lay == stream ? 2 * n : n);
        if (lay != stream) c[lay].v.emplace_back(n);
      }
      for (gi t = 0; t < T; ++t)
        for (gi h = 0; h < H; ++h)
          for (gi d = 0; d < D; ++d) {
            const bits kb = stored(0.05f * float((t * 7 + h * 3 + d * 5 + x) % 61 - 30) / 30.0f);
            const bits vb = stored(float((t * 11 + h * 5 + d * 3 + x) % 53 - 26) / 26.0f);
            const std::size_t row = std::size_t((t * H + h) * D + d);
            const std::size_t kt = std::size_t((((t / key_tile) * H + h) * (D / k_channels) + d / k_channels) *
                                                   key_tile * k_channels +
                                               (t % key_tile) * k_channels + d % k_channels);
            const std::size_t vt = std::size_t((((t / key_tile) * H + h) * (D / v_channels) + d / v_channels) *
                                                   key_tile * v_channels +
                                               (t % key_tile) * v_channels + d % v_channels);
            if (wanted[rows]) {
              c[rows].k.back()[row] = kb;
              c[rows].v.back()[row] = vb;
            }
            if (wanted[tiled]) {
              c[tiled].k.back()[kt] = kb;
              c[tiled].v.back()[vt] = vb;
            }
            const std::size_t per_block = std::size_t(block * H * D), b = std::size_t(t / block);
            if (wanted[stream]) {
              c[stream].k.back()[kt + b * per_block] = kb;        // block b's K tiles at 2b
              c[stream].k.back()[vt + (b + 1) * per_block] = vb;  // and its V tiles after them
            }
          }
    }
  }

  static bits stored(float x) {
    if constexpr (S == gattn::storage_type::f32) return x;
    else if constexpr (S == gattn::storage_type::bf16) return gattn::round_to_bf16(x);
    else return gattn::round_to_f16(x);
  }

  /// Prefetches `lines` lines from p + prefetch_bytes, inside [.., end).
  void prefetch_ahead(const bits* p, int lines, const bits* end) const {
    const char* a = reinterpret_cast<const char*>(p) + prefetch_bytes;
    for (int i = 0; i < lines; ++i)
      if (a + 64 * i < reinterpret_cast<const char*>(end)) gattn::detail::prefetch_l2(a + 64 * i);
  }

  template <layout lay>
  __attribute__((noinline)) void run(gi x) {
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
          constexpr gi calls = R / 4, tile_lines = key_tile * D * gi(sizeof(bits)) / 64;
          for (gi r = 0, call = 0; r < R; r += 4, ++call) {  // calls of 4 rows, each prefetching its share
            float* sr = s + (h * R + r) * block + t0;
            const float* qr = q + (h * R + r) * D;
            if constexpr (lay == rows) {
              const gi first = call * key_tile / calls;
              ks.prefetch_slices(j0 + t0 + first, (call + 1) * key_tile / calls - first, h);
              qk_4keys<S, D, 4>(qr, D, [&](gi t, gi ch) { return kp[t] + ch; }, sr, block);
            } else {
              const gi first = call * tile_lines / calls;
              if (pf) prefetch_ahead(tile + first * 64 / gi(sizeof(bits)), int((call + 1) * tile_lines / calls - first), k_end);
              qk_4keys<S, D, 4>(qr, D, [&](gi t, gi ch) { return tile + ch * key_tile + t * W; }, sr, block);
            }
          }
        }
      softmax();
      for (gi g0 = 0; g0 < block; g0 += (lay == rows ? 8 : key_tile))
        for (gi h = 0; h < H; ++h) {
          const gi keys = lay == rows ? 8 : key_tile;
          const bits* tile = v + (((j0 + g0) / key_tile) * H + h) * D * key_tile;
          if (pf && lay == rows) vs.prefetch_slices(j0 + g0, keys, h);
          if (pf && lay != rows) prefetch_ahead(tile, int(D * key_tile * gi(sizeof(bits)) / 64), v_end);
          for (gi x0 = 0; x0 < D / W; x0 += 4)
            for (gi mm = 0; mm < R; mm += 6) {
              const int mr = int(std::min<gi>(6, R - mm));
              const bits* vp = lay == rows ? v0 + ((j0 + g0) * H + h) * D + x0 * W : tile + x0 / 4 * key_tile * v_channels;
              gattn::detail::pv_dispatch<Arch, false, S>(mr, 4, s + (h * R + mm) * block + g0, block, keys, vp,
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

template <class Probe>
void measure(const char* name, int rounds, gi distance, bool tiled_prefetch, const bool (&wanted)[3]) {
  constexpr gi T = Probe::keys, H = Probe::heads, caches = Probe::caches;
  auto owner = std::make_unique<Probe>(distance, tiled_prefetch, wanted);
  Probe& p = *owner;
  std::vector<float> reference;
  double differs = 0;
  for (int lay = 0; lay < 3; ++lay) {
    if (!wanted[lay]) continue;
    p.run(layout(lay), 0);
    if (reference.empty()) reference.assign(std::begin(p.o), std::end(p.o));
    for (std::size_t i = 0; i < reference.size(); ++i)
      differs = std::max(differs, double(std::abs(p.o[i] - reference[i])));
  }
  std::vector<double> cold[3], hot[3];
  gi next = 0;
  for (int r = 0; r < rounds; ++r)
    for (int lay = 0; lay < 3; ++lay) {
      if (!wanted[lay]) continue;
      next = (next + 1) % caches;
      auto t0 = clock_type::now();
      p.run(layout(lay), next);
      cold[lay].push_back(seconds_since(t0) * 1e9 / double(T * H));
      t0 = clock_type::now();
      p.run(layout(lay), next);
      hot[lay].push_back(seconds_since(t0) * 1e9 / double(T * H));
    }
  std::printf("%s, one thread; prefetch %lld KiB ahead%s; largest output difference %.3g\n", name,
              static_cast<long long>(distance / 1024), tiled_prefetch ? "" : " (rows only)", differs);
  std::printf("ns per key and KV head, median of %d:\n", rounds);
  for (int lay = 0; lay < 3; ++lay)
    if (wanted[lay]) std::printf("  %-7s cold %6.1f  hot %6.1f\n", layout_name[lay], median(cold[lay]), median(hot[lay]));
}

}  // namespace

int main(int argc, char** argv) {
  if (W != 16 || gattn::kernel_traits<Arch>::pv_mr < 6) {
    std::printf("gattn_layout_probe measures the AVX-512 build only\n");
    return 0;
  }
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 30;
  const gi distance = (argc > 2 ? std::max(1, std::atoi(argv[2])) : 128) * 1024;
  const bool tiled_prefetch = argc > 3 ? std::atoi(argv[3]) != 0 : true;
  const std::string shape = argc > 4 ? argv[4] : "bd";
  const std::string which = argc > 5 ? argv[5] : "rows,tiled,stream";
  bool wanted[3];
  for (int lay = 0; lay < 3; ++lay) wanted[lay] = ("," + which + ",").find(std::string(",") + layout_name[lay] + ",") != std::string::npos;
  if (!wanted[rows] && !wanted[tiled] && !wanted[stream]) {
    std::fprintf(stderr, "gattn_layout_probe: no layout in %s (rows, tiled, stream)\n", which.c_str());
    return 2;
  }
  using gattn::storage_type;
  if (shape == "bd") measure<probe<storage_type::bf16, 2304, 2, 256, 8>>("BD's decode, bf16", rounds, distance, tiled_prefetch, wanted);
  else if (shape == "d1") measure<probe<storage_type::bf16, 8192, 8, 128, 4>>("D1, bf16", rounds, distance, tiled_prefetch, wanted);
  else if (shape == "d1_fp32") measure<probe<storage_type::f32, 8192, 8, 128, 4>>("D1, fp32", rounds, distance, tiled_prefetch, wanted);
  else {
    std::fprintf(stderr, "gattn_layout_probe: shape %s is not bd, d1 or d1_fp32\n", shape.c_str());
    return 2;
  }
  return 0;
}
