// One prefill work unit (a KV head × a block of queries of its G heads): packing, and key tiles with
// the online softmax (the rows are finished by kernel/epilogue.hpp).
#pragma once

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "gattn/core/config.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/types.hpp"
#include "gattn/kernel/kernel_traits.hpp"
#include "gattn/kernel/microkernels.hpp"
#include "gattn/kernel/online_softmax.hpp"
#include "gattn/kernel/prefill_bf16.hpp"
#include "gattn/kernel/scratch.hpp"
#include "gattn/kernel/sdpa_params.hpp"
#include "gattn/simd/arch.hpp"
#include "gattn/simd/convert.hpp"
#include "gattn/simd/prefetch.hpp"
#include "gattn/simd/simd.hpp"

GATTN_NAMESPACE_BEGIN
namespace detail {

/// The stored K and V of p as elements of storage type S.
template <storage_type S>
inline const storage_element_t<S>* stored_k(const sdpa_params& p) {
  if constexpr (S == storage_type::f32) return p.k;
  else return p.k_bits;
}
template <storage_type S>
inline const storage_element_t<S>* stored_v(const sdpa_params& p) {
  if constexpr (S == storage_type::f32) return p.v;
  else return p.v_bits;
}

/// The stored K row (d_qk elements) of key j and KV head r, and the V row (d_v elements): the one
/// place each address is computed.
template <storage_type S>
inline const storage_element_t<S>* key_row(const sdpa_params& p, index j, index r) {
  return key_row(p, stored_k<S>(p), j) + r * p.k_head_stride;  // through the block table, if any
}
template <storage_type S>
inline const storage_element_t<S>* value_row(const sdpa_params& p, index j, index r) {
  return value_row(p, stored_v<S>(p), j) + r * p.v_head_stride;
}

/// True when the V rows lie inside the K rows (the MLA latent cache): a K prefetch covers V.
template <storage_type S = storage_type::f32>
inline bool v_inside_k(const sdpa_params& p) {
  const storage_element_t<S>* k = stored_k<S>(p);
  const storage_element_t<S>* v = stored_v<S>(p);
  return v >= k && v + p.d_v <= k + p.d_qk && p.v_token_stride == p.k_token_stride &&
         p.v_block_stride == p.k_block_stride;
}

/// Copies n V rows (stride ldv) into `pack` as rows of dv_pad floats, zero-padded past d_v, so the
/// P·V microkernel can read whole vectors; returns `pack` and sets `pack_stride` = dv_pad.
inline const float* pack_v_tile(const float* v, index ldv, index n, index d_v, index dv_pad, float* pack,
                                index& pack_stride) {
  for (index j = 0; j < n; ++j) {
    float* dst = pack + j * dv_pad;
    std::memcpy(dst, v + j * ldv, sizeof(float) * std::size_t(d_v));
    std::fill(dst + d_v, dst + dv_pad, 0.0f);
  }
  pack_stride = dv_pad;
  return pack;
}

/// What unit_begin learns about a unit: its valid rows and the range of visible-key counts.
struct unit_info {
  index r = 0, valid_rows = 0, min_lim = 0, max_lim = 0;
};

/// Starts a work unit: packs scale·Qᵀ (as bf16 pairs for bf16 products) and the per-row visible-key
/// limits (padding rows are zeros that see every key) and clears m, l and O.
template <class Arch>
inline unit_info unit_begin(const sdpa_params& p, const sdpa_plan& pl, const unit_scratch& sc, index r, index qb) {
  const index ldq = pl.rows_pad;
  const index i0 = qb * pl.br;
  const index valid_rows = std::min(pl.br, p.t_q - i0) * pl.group;
  const float ninf = -std::numeric_limits<float>::infinity();
  index min_lim = p.t_k, max_lim = 0;
  for (index m = 0; m < pl.rows_pad; ++m) {
    if (m < valid_rows) {
      const index i = i0 + m / pl.group;
      const index h = r * pl.group + m % pl.group;
      const float* qrow = p.q + i * p.q_token_stride + h * p.q_head_stride;
      if (!pl.bf16_products)
        for (index c = 0; c < p.d_qk; ++c) sc.qt[c * ldq + m] = qrow[c] * p.scale;
      const index lim = visible_keys(p, i);
      sc.lim[m] = float(lim);
      min_lim = std::min(min_lim, lim);
      max_lim = std::max(max_lim, lim);
    } else {
      if (!pl.bf16_products)
        for (index c = 0; c < p.d_qk; ++c) sc.qt[c * ldq + m] = 0.0f;
      sc.lim[m] = float(p.t_k);
    }
    sc.m[m] = ninf;
    sc.l[m] = 0.0f;
  }
  if (pl.bf16_products)  // the K tile's slot is free until the first tile
    pack_q_bf16<Arch>(p, pl, reinterpret_cast<std::uint16_t*>(sc.qt), r, i0, valid_rows,
                      reinterpret_cast<std::uint16_t*>(sc.kpack));
  std::fill(sc.o, sc.o + pl.rows_pad * pl.dv_pad, 0.0f);
  return {r, valid_rows, min_lim, max_lim};
}

/// Widens n stored rows (stride ld elements, `width` values each) into `pack` as rows of
/// `pack_stride` floats, zero-padded past `width`: the unit reads a bf16/f16 K or V tile from there.
template <class Arch, storage_type S>
inline void widen_tile(const storage_element_t<S>* src, index ld, index n, index width, float* pack,
                       index pack_stride) {
  for (index j = 0; j < n; ++j) {
    float* dst = pack + j * pack_stride;
    if constexpr (S == storage_type::bf16) simd::widen_bf16<Arch>(src + j * ld, dst, width);
    else simd::widen_f16<Arch>(src + j * ld, dst, width);
    std::fill(dst + width, dst + pack_stride, 0.0f);
  }
}

/// Step 1 of a unit's key tile: Sᵀ = K_tile · Qt over its nk keys (K rows kt, stride ldk).
template <class Arch>
inline void unit_scores(const sdpa_params& p, const sdpa_plan& pl, const unit_scratch& sc, const float* kt, index ldk,
                        index nk) {
  using tr = kernel_traits<Arch>;
  constexpr index W = tr::width;
  const index ldq = pl.rows_pad, nvq = pl.rows_pad / W;
  for (index v0 = 0; v0 < nvq; v0 += tr::qk_nv) {
    const int nv = int(std::min<index>(tr::qk_nv, nvq - v0));
    for (index j = 0; j < nk; j += tr::qk_mr) {
      const int mr = int(std::min<index>(tr::qk_mr, nk - j));
      static_switch<tr::qk_mr>(mr, [&](auto MR) {
        static_switch<tr::qk_nv>(nv, [&](auto NV) {
          qk_micro<Arch, decltype(MR)::value, decltype(NV)::value>(kt + j * ldk, ldk, sc.qt + v0 * W, ldq, p.d_qk,
                                                                    sc.st + j * ldq + v0 * W, ldq);
        });
      });
    }
  }
}

/// Step 2: online softmax down the key axis of Sᵀ, W rows per vector. On a tile crossing the
/// diagonal (diag) a row's keys at or past its limit become -inf first.
template <class Arch>
inline void unit_softmax(const sdpa_plan& pl, const unit_scratch& sc, bool diag, index j0, index nk) {
  using B = simd::batch<float, Arch>;
  constexpr index W = kernel_traits<Arch>::width;
  const index ldq = pl.rows_pad, nvq = pl.rows_pad / W;
  const float ninf = -std::numeric_limits<float>::infinity();
  for (index v0 = 0; v0 < nvq; ++v0) {
    float* s = sc.st + v0 * W;
    online_softmax_state<B> st;
    st.m = simd::load<Arch>(sc.m + v0 * W);
    st.l = simd::load<Arch>(sc.l + v0 * W);
    B tmax = B(ninf);
    if (diag) {
      const B lim = simd::load<Arch>(sc.lim + v0 * W);
      for (index j = 0; j < nk; ++j) {
        B x = simd::load<Arch>(s + j * ldq);
        x = simd::select(B(float(j0 + j)) < lim, x, B(ninf));
        simd::store(s + j * ldq, x);
        tmax = simd::max(tmax, x);
      }
    } else {
      for (index j = 0; j < nk; ++j) tmax = simd::max(tmax, simd::load<Arch>(s + j * ldq));
    }
    B m_use;
    const B alpha = st.rescale(tmax, m_use);
    B tile_sum(0.0f);
    for (index j = 0; j < nk; ++j) simd::store(s + j * ldq, st.accumulate(simd::load<Arch>(s + j * ldq), m_use, tile_sum));
    st.end_tile(alpha, tile_sum);
    simd::store(sc.m + v0 * W, st.m);
    simd::store(sc.l + v0 * W, st.l);
    simd::store(sc.alpha + v0 * W, alpha);
  }
}

/// Step 3: O = alpha·O + P·V_tile (V rows vt, stride ldv); on a diagonal tile each row takes only
/// its visible keys, so a hidden key's V (NaN included) is never multiplied.
template <class Arch>
inline void unit_pv(const sdpa_plan& pl, const unit_scratch& sc, index valid_rows, bool diag, const float* vt,
                    index ldv, index j0, index nk) {
  using tr = kernel_traits<Arch>;
  constexpr index W = tr::width;
  const index nvo = pl.dv_pad / W;
  for (index x0 = 0; x0 < nvo; x0 += tr::pv_nv) {
    const int nv = int(std::min<index>(tr::pv_nv, nvo - x0));
    for (index m = 0; m < valid_rows; m += tr::pv_mr) {
      const int mr = int(std::min<index>(tr::pv_mr, valid_rows - m));
      index vis[tr::pv_mr];
      const index most = diag ? visible_in_tile(mr, j0, nk, [&](int k) { return index(sc.lim[m + k]); }, vis) : -1;
      pv_dispatch<Arch, true>(mr, nv, sc.st + m, pl.rows_pad, most < 0 ? nk : most, vt + x0 * W, ldv,
                              sc.o + m * pl.dv_pad + x0 * W, pl.dv_pad, sc.alpha + m, most < 0 ? nullptr : vis);
    }
  }
}

/// Prefetches into L2 the K and V rows of head r for keys [j0, j1): the bf16 path rounds each
/// row as soon as it loads it, with no products to hide the wait (the fp32 path reads them inside
/// its microkernels instead), so the next tile's rows are fetched during this tile's Q·Kᵀ.
template <storage_type S>
inline void prefetch_tile_l2(const sdpa_params& p, index j0, index j1, index r) {
  constexpr index line = 64;
  const index kb = p.d_qk * index(sizeof(storage_element_t<S>)), vb = p.d_v * index(sizeof(storage_element_t<S>));
  for (index j = j0; j < j1; ++j) {
    const char* k = reinterpret_cast<const char*>(key_row<S>(p, j, r));
    const char* v = reinterpret_cast<const char*>(value_row<S>(p, j, r));
    for (index b = 0; b < kb; b += line) detail::prefetch_l2(k + b);
    for (index b = 0; b < vb; b += line) detail::prefetch_l2(v + b);
  }
}

/// unit_tile with bf16 products (engine E, kernel/prefill_bf16.hpp): the K tile rounded to bf16 rows
/// (a bf16 cache with even d_qk read in place), the fp32 softmax, P and the V tile packed as key pairs.
template <class Arch, storage_type S, prefill_products E>
inline void unit_tile_bf16(const sdpa_params& p, const sdpa_plan& pl, const unit_scratch& sc, const unit_info& ui,
                           index j0, index nk) {
  const index r = ui.r;
  const index next_end = std::min(std::min(p.t_k, ui.max_lim), j0 + 2 * nk);
  auto prefetch_next = [&](index j, index mr) { prefetch_tile_l2<S>(p, j0 + nk + j, std::min(next_end, j0 + nk + j + mr), r); };
  auto* kp16 = reinterpret_cast<std::uint16_t*>(sc.kpack);
  const std::uint16_t* k16 = kp16;
  index ldk = round_up(p.d_qk, 2);
  bool in_place = false;
  if constexpr (S == storage_type::bf16) {
    in_place = p.d_qk % 2 == 0;
    if (in_place) {
      k16 = key_row<S>(p, j0, r);
      ldk = p.k_token_stride;
    }
  }
  if (!in_place) pack_k_bf16<Arch, S>(key_row<S>(p, j0, r), p.k_token_stride, nk, p.d_qk, kp16);
  unit_scores_bf16<Arch, E>(p, pl, sc, k16, ldk, nk, prefetch_next);
  const bool diag = p.causal && j0 + nk > ui.min_lim;
  unit_softmax<Arch>(pl, sc, diag, j0, nk);
  pack_p_bf16<Arch>(sc.st, pl.rows_pad, nk, reinterpret_cast<std::uint16_t*>(sc.pk));
  auto* vp16 = reinterpret_cast<std::uint16_t*>(sc.vpack);
  pack_v_bf16<Arch, S>(value_row<S>(p, j0, r), p.v_token_stride, nk, p.d_v, pl.dv_pad, vp16);
  unit_pv_bf16<Arch, E>(pl, sc, ui.valid_rows, diag, vp16, j0, nk);
}

/// One key tile [j0, j0 + nk) of a unit: scores, online softmax, P·V (the three steps above).
/// K/V stored as S: fp32 is read in place; bf16/f16 tiles are widened into the scratch first
/// (exact, so the arithmetic after it is the fp32 path's). E: fp32 products, or bf16 ones.
template <class Arch, storage_type S = storage_type::f32, prefill_products E = prefill_products::fp32>
inline void unit_tile(const sdpa_params& p, const sdpa_plan& pl, const unit_scratch& sc, const unit_info& ui,
                      index j0, index nk) {
  if (const index nb = keys_in_block(p, j0, nk); nb < nk) {  // paged: a tile never crosses a block
    unit_tile<Arch, S, E>(p, pl, sc, ui, j0, nb);
    unit_tile<Arch, S, E>(p, pl, sc, ui, j0 + nb, nk - nb);
    return;
  }
  if constexpr (E != prefill_products::fp32) {
    unit_tile_bf16<Arch, S, E>(p, pl, sc, ui, j0, nk);
    return;
  }
  const index r = ui.r;
  if constexpr (S == storage_type::f32) {
    unit_scores<Arch>(p, pl, sc, key_row<S>(p, j0, r), p.k_token_stride, nk);
  } else {
    widen_tile<Arch, S>(key_row<S>(p, j0, r), p.k_token_stride, nk, p.d_qk, sc.kpack, p.d_qk);
    unit_scores<Arch>(p, pl, sc, sc.kpack, p.d_qk, nk);
  }
  const bool diag = p.causal && j0 + nk > ui.min_lim;
  unit_softmax<Arch>(pl, sc, diag, j0, nk);
  const float* vt;
  index ldv = p.v_token_stride;
  if constexpr (S == storage_type::f32) {
    vt = value_row<S>(p, j0, r);
    if (pl.pack_v) vt = pack_v_tile(vt, p.v_token_stride, nk, p.d_v, pl.dv_pad, sc.vpack, ldv);
  } else {
    // Only the nk rows of this tile are widened; unit_pv reads no row past them, and on a diagonal
    // tile each row's masked count keeps a NaN of a hidden key out of its P·V.
    widen_tile<Arch, S>(value_row<S>(p, j0, r), p.v_token_stride, nk, p.d_v, sc.vpack, pl.dv_pad);
    vt = sc.vpack;
    ldv = pl.dv_pad;
  }
  unit_pv<Arch>(pl, sc, ui.valid_rows, diag, vt, ldv, j0, nk);
}

/// Runs one work unit over keys [k_begin, k_end). Leaves the unnormalised O, m and l in the
/// scratch (its first unit_info::valid_rows rows are meaningful).
template <class Arch, storage_type S = storage_type::f32, prefill_products E = prefill_products::fp32>
inline void run_unit(const sdpa_params& p, const sdpa_plan& pl, const unit_scratch& sc, index r, index qb,
                     index k_begin, index k_end) {
  constexpr index bc = kernel_traits<Arch>::block_keys;
  const unit_info ui = unit_begin<Arch>(p, pl, sc, r, qb);
  const index kend = std::min(k_end, ui.max_lim);  // keys past every row's limit are never visible
  for (index j0 = k_begin; j0 < kend; j0 += bc) unit_tile<Arch, S, E>(p, pl, sc, ui, j0, std::min(bc, kend - j0));
}

}  // namespace detail
GATTN_NAMESPACE_END  // namespace gattn
