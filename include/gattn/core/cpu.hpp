// The CPU's vendor, and the process-wide kernel choices that depend on it.
//
// Two decode-path choices measured opposite on the two x86 machines gattn is benchmarked on
// (docs/performance.md): the software prefetch through the K/V cache (kernel/cache_stream.hpp) and
// the bf16 dot products of docs/spec.md §10's fast numerics (simd/bf16_dot.hpp). On AMD Zen 5 both paid;
// on Intel Emerald Rapids both cost time (the hardware prefetchers already keep the read rate,
// and vdpbf16ps issues at a quarter of the FMA rate). `automatic` takes each where it paid;
// `always` / `never` override it for the whole process (benchmarks and tests use them).
#pragma once

#include <atomic>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__linux__) && defined(__aarch64__)
#include <sys/auxv.h>
#endif

// Outside the arch namespace (core/arch_namespace.hpp): one setting for the whole process, whichever
// ISA each translation unit of the program was compiled for.
namespace gattn {

enum class cpu_vendor { amd, intel, other };

/// The vendor of the CPU this process runs on (cpuid leaf 0; `other` off x86). Read once.
inline cpu_vendor this_cpu_vendor() {
  static const cpu_vendor vendor = [] {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(0, &a, &b, &c, &d) == 0) return cpu_vendor::other;
    char name[13] = {};
    std::memcpy(name, &b, 4);
    std::memcpy(name + 4, &d, 4);
    std::memcpy(name + 8, &c, 4);
    if (std::strcmp(name, "AuthenticAMD") == 0) return cpu_vendor::amd;
    if (std::strcmp(name, "GenuineIntel") == 0) return cpu_vendor::intel;
#endif
    return cpu_vendor::other;
  }();
  return vendor;
}

inline const char* cpu_vendor_name(cpu_vendor v) {
  return v == cpu_vendor::amd ? "amd" : v == cpu_vendor::intel ? "intel" : "other";
}

/// How a vendor-dependent kernel choice is made.
enum class kernel_choice { automatic, always, never };

namespace cpu_detail {
inline std::atomic<kernel_choice> decode_prefetch_choice{kernel_choice::automatic};
inline std::atomic<kernel_choice> bf16_dot_choice{kernel_choice::automatic};
inline std::atomic<kernel_choice> amx_choice{kernel_choice::automatic};
inline bool resolve(kernel_choice c, bool automatic) {
  return c == kernel_choice::always || (c == kernel_choice::automatic && automatic);
}
/// XCR0, the register states the OS saves (0 without OSXSAVE or off x86).
inline unsigned os_saved_state() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0 || !(c >> 27 & 1u)) return 0;  // OSXSAVE, for xgetbv
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0u));
  return lo;
#else
  return 0;
#endif
}
}  // namespace cpu_detail

/// The decode path's software prefetch through the K/V cache. Automatic: everywhere but Intel.
inline void set_decode_prefetch(kernel_choice c) { cpu_detail::decode_prefetch_choice.store(c); }
inline bool decode_prefetch_wanted() {
  return cpu_detail::resolve(cpu_detail::decode_prefetch_choice.load(std::memory_order_relaxed),
                         this_cpu_vendor() != cpu_vendor::intel);
}

/// True when the CPU has AVX512-BF16 (cpuid leaf 7 subleaf 1: eax bit 5) and the OS saves the
/// AVX-512 state (XCR0 bits 1, 2, 5-7). Read once.
inline bool avx512_bf16_usable() {
  static const bool usable = [] {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0 || a < 1) return false;
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d) == 0 || !(a >> 5 & 1u)) return false;
    return (cpu_detail::os_saved_state() & 0xE6u) == 0xE6u;
#else
    return false;
#endif
  }();
  return usable;
}

/// vdpbf16ps for `fast` numerics (simd/avx512_bf16.hpp), where the CPU has it
/// (avx512_bf16_usable(): `always` cannot make a CPU without it use it). Automatic: on AMD only.
/// Archs without the instruction run their portable engine whatever this says.
inline void set_bf16_dot_products(kernel_choice c) { cpu_detail::bf16_dot_choice.store(c); }
inline bool bf16_dot_products_wanted() {
  return cpu_detail::resolve(cpu_detail::bf16_dot_choice.load(std::memory_order_relaxed),
                             this_cpu_vendor() == cpu_vendor::amd) &&
         avx512_bf16_usable();
}

/// True when this process may run AMX-BF16 tile instructions: the CPU has AMX-TILE and AMX-BF16
/// (cpuid leaf 7: edx bits 24, 22), the OS saves the tile state (XCR0 bits 17, 18) and Linux
/// granted the process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA).
/// Asked once; a refusal leaves it false and the fast GEMM on its next engine.
inline bool amx_usable() {
  static const bool usable = [] {
#if defined(__linux__) && defined(__x86_64__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0 || !(d >> 24 & 1u) || !(d >> 22 & 1u)) return false;
    if ((cpu_detail::os_saved_state() >> 17 & 3u) != 3u) return false;
    constexpr long req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
    return syscall(SYS_arch_prctl, req_xcomp_perm, xfeature_xtiledata) == 0;
#else
    return false;
#endif
  }();
  return usable;
}

/// AMX tiles for `fast` numerics (linalg/tile_engine.hpp), where the build carries them and
/// amx_usable(). Automatic: wherever usable; `always` cannot make an unusable CPU use them.
inline void set_amx_tiles(kernel_choice c) { cpu_detail::amx_choice.store(c); }
inline bool amx_tiles_wanted() {
  return cpu_detail::resolve(cpu_detail::amx_choice.load(std::memory_order_relaxed), true) && amx_usable();
}

/// True when the CPU has Armv8.6's BF16 instructions (BFDOT) and the OS reports them (AT_HWCAP2).
inline bool neon_bf16_usable() {
#if defined(__linux__) && defined(__aarch64__)
  static const bool usable = (getauxval(AT_HWCAP2) & (1ul << 14)) != 0;  // HWCAP2_BF16
  return usable;
#else
  return false;
#endif
}

/// BFDOT for `fast` numerics on AArch64: where neon_bf16_usable(), unless set_bf16_dot_products
/// (kernel_choice::never) (its vendor rule is for x86; on Arm the instruction paid wherever it exists).
inline bool neon_bf16_dots_wanted() {
  return cpu_detail::bf16_dot_choice.load(std::memory_order_relaxed) != kernel_choice::never && neon_bf16_usable();
}

}  // namespace gattn
