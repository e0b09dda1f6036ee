// The AMX tile operations (TILELOADD, TDPBF16PS, TILESTORED) behind the tile engine of the fast GEMM
// (linalg/tile_engine.hpp), compiled by function attribute into x86-64 AVX-512 builds only.
#pragma once

#include <cstdint>

#include "gattn/core/config.hpp"
#include "gattn/core/types.hpp"

// AMX code exists only in x86-64 builds for AVX-512 (the only arch whose x packing matches the
// tile layout); the AVX2 and scalar builds and other CPUs never see it. The target attribute
// lets the ordinary build carry it without -mamx flags; it runs only where core/cpu.hpp's
// amx_tiles_wanted() says the CPU, the OS and the process permit it.
#if defined(__x86_64__) && defined(__AVX512F__) && \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#define GATTN_AMX_COMPILED 1
#define GATTN_TILE_TARGET __attribute__((target("amx-tile,amx-bf16")))
#include <immintrin.h>
#else
#define GATTN_AMX_COMPILED 0
#define GATTN_TILE_TARGET
#endif

GATTN_NAMESPACE_BEGIN namespace detail {

#if GATTN_AMX_COMPILED
/// The tile registers as the tile engine uses them: C tiles 0-3 (16 × 16 fp32), A tiles 4-5
/// (16 rows × `pairs` bf16 pairs), B tiles 6-7 (`pairs` rows × 16 bf16 pairs). The intrinsics
/// take the tile number as a literal, hence the if-constexpr ladders.
struct amx_tiles {
  static constexpr const char* name() { return "amx"; }

  /// Loads the configuration for k steps of `pairs` pairs (zeroes every tile).
  GATTN_TILE_TARGET void configure(int pairs) noexcept {
    alignas(64) unsigned char cfg[64] = {};
    cfg[0] = 1;  // palette 1
    for (int t = 0; t < 8; ++t) {
      const int colsb = t >= 4 && t < 6 ? 4 * pairs : 64, rows = t >= 6 ? pairs : 16;
      cfg[16 + 2 * t] = static_cast<unsigned char>(colsb);
      cfg[48 + t] = static_cast<unsigned char>(rows);
    }
    // GCC's _tile_loadconfig names only the first 8 bytes as its operand: the asm makes every
    // byte of cfg written before ldtilecfg reads it.
    __asm__ volatile("" : : "r"(cfg) : "memory");
    _tile_loadconfig(cfg);
  }
  GATTN_TILE_TARGET void release() noexcept { _tile_release(); }

  template <int T>
  GATTN_TILE_TARGET void zero() noexcept {
    if constexpr (T == 0) _tile_zero(0);
    else if constexpr (T == 1) _tile_zero(1);
    else if constexpr (T == 2) _tile_zero(2);
    else _tile_zero(3);
  }
  /// Tile T from p, rows `stride` bytes apart. (GCC's tile intrinsics are asm statements that
  /// name no memory: the empty asm tells the compiler that memory is read or written here.)
  template <int T>
  GATTN_TILE_TARGET void load(const void* p, index stride) noexcept {
    __asm__ volatile("" ::: "memory");
    if constexpr (T == 0) _tile_loadd(0, p, stride);
    else if constexpr (T == 1) _tile_loadd(1, p, stride);
    else if constexpr (T == 2) _tile_loadd(2, p, stride);
    else if constexpr (T == 3) _tile_loadd(3, p, stride);
    else if constexpr (T == 4) _tile_loadd(4, p, stride);
    else if constexpr (T == 5) _tile_loadd(5, p, stride);
    else if constexpr (T == 6) _tile_loadd(6, p, stride);
    else _tile_loadd(7, p, stride);
  }
  template <int T>
  GATTN_TILE_TARGET void store(void* p, index stride) noexcept {
    if constexpr (T == 0) _tile_stored(0, p, stride);
    else if constexpr (T == 1) _tile_stored(1, p, stride);
    else if constexpr (T == 2) _tile_stored(2, p, stride);
    else _tile_stored(3, p, stride);
    __asm__ volatile("" ::: "memory");
  }
  /// C += A · B for the four (C, A, B) triples the engine uses.
  template <int C, int A, int B>
  GATTN_TILE_TARGET void dp() noexcept {
    if constexpr (C == 0) _tile_dpbf16ps(0, 4, 6);
    else if constexpr (C == 1) _tile_dpbf16ps(1, 4, 7);
    else if constexpr (C == 2) _tile_dpbf16ps(2, 5, 6);
    else _tile_dpbf16ps(3, 5, 7);
    static_assert(A == 4 + C / 2 && B == 6 + C % 2, "the engine's fixed tile triples");
  }
};
#endif

}  GATTN_NAMESPACE_END  // namespace gattn::detail
