// Optional runtime dispatch: one program built for several arches runs the best one this CPU has,
// chosen by xsimd's dispatcher (xsimd::dispatch, xsimd::available_architectures). Compile-time
// dispatch (the compiler's flags pick the arch) stays the default; this header only serves
// programs built with CMake's gattn_add_dispatched() (cmake/GattnDispatch.cmake, docs/api.md).
//
// The pattern is xsimd's: an entry functor whose call operator is a template on Arch,
//
//   struct app_entry {                                     // app_entry.hpp, seen by every TU
//     template <class Arch> int operator()(Arch, int argc, char** argv) const;
//   };
//   template <class Arch>                                  // app.cpp, compiled once per arch
//   int app_entry::operator()(Arch, int argc, char** argv) const { ... gattn code ... }
//   template int app_entry::operator()(gattn::dispatch_target, int, char**) const;
//
//   int main(int argc, char** argv) { return gattn::dispatch(app_entry{}, argc, argv); }  // main.cpp
//
// gattn_add_dispatched() compiles app.cpp with each arch's flags and GATTN_DISPATCH_TARGET_<ARCH>,
// and defines GATTN_DISPATCH_HAS_<ARCH> for every arch built on every translation unit.
#pragma once

#include <exception>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <xsimd/xsimd.hpp>

#include "gattn/simd/arch.hpp"

#ifndef GATTN_DISPATCH_HAS_AVX512
#define GATTN_DISPATCH_HAS_AVX512 0
#endif
#ifndef GATTN_DISPATCH_HAS_AVX2
#define GATTN_DISPATCH_HAS_AVX2 0
#endif
#ifndef GATTN_DISPATCH_HAS_SSE2
#define GATTN_DISPATCH_HAS_SSE2 0
#endif
#ifndef GATTN_DISPATCH_HAS_NEON64
#define GATTN_DISPATCH_HAS_NEON64 0
#endif

// Outside the arch namespace: the dispatcher translation unit and the arches' must agree on it.
namespace gattn {
namespace dispatch_detail {

template <class... Lists>
struct join {
  using type = xsimd::arch_list<>;
};
template <class... A, class... B, class... Rest>
struct join<xsimd::arch_list<A...>, xsimd::arch_list<B...>, Rest...>
    : join<xsimd::arch_list<A..., B...>, Rest...> {};
template <class... A>
struct join<xsimd::arch_list<A...>> {
  using type = xsimd::arch_list<A...>;
};

template <bool Built, class Arch>
using arch_if = std::conditional_t<Built, xsimd::arch_list<Arch>, xsimd::arch_list<>>;

template <class Arch>
bool runs_here() {
  return Arch::version() <= xsimd::available_architectures().best;
}

// xsimd's dispatcher is noexcept: the entry's exception is carried out of it and rethrown.
template <class F>
struct catching {
  F f;
  std::exception_ptr* error;
  const char** chosen;

  template <class Arch, class... Args>
  auto operator()(Arch arch, Args&&... args) noexcept -> decltype(f(arch, std::forward<Args>(args)...)) {
    using result = decltype(f(arch, std::forward<Args>(args)...));
    *chosen = Arch::name();
    try {
      return f(arch, std::forward<Args>(args)...);
    } catch (...) {
      *error = std::current_exception();
    }
    if constexpr (!std::is_void<result>::value) return result{};
  }
};

template <class... Archs>
const char* first_that_runs(xsimd::arch_list<Archs...>) {
  const char* name = nullptr;
  (void)((runs_here<Archs>() ? (name = Archs::name(), true) : false) || ...);
  return name;
}

}  // namespace dispatch_detail

/// The arches this program was built for (gattn_add_dispatched's ARCHES), best first: AVX-512
/// (xsimd::avx512bw, built with -march=x86-64-v4), AVX2 (xsimd::fma3<xsimd::avx2>, x86-64-v3),
/// SSE2 (xsimd::sse2, x86-64), NEON (xsimd::neon64).
using dispatch_arches = typename dispatch_detail::join<
    dispatch_detail::arch_if<GATTN_DISPATCH_HAS_AVX512 != 0, xsimd::avx512bw>,
    dispatch_detail::arch_if<GATTN_DISPATCH_HAS_AVX2 != 0, xsimd::fma3<xsimd::avx2>>,
    dispatch_detail::arch_if<GATTN_DISPATCH_HAS_SSE2 != 0, xsimd::sse2>,
    dispatch_detail::arch_if<GATTN_DISPATCH_HAS_NEON64 != 0, xsimd::neon64>>::type;

/// The name (xsimd's) of the arch dispatch() runs on this CPU, or nullptr when none of
/// dispatch_arches does (a program built without its baseline arch, on an older CPU).
inline const char* dispatched_arch_name() { return dispatch_detail::first_that_runs(dispatch_arches{}); }

/// Calls f(Arch{}, args...) for the best of dispatch_arches this CPU has, as xsimd's runtime
/// detection sees it, and returns its result; an exception from f propagates. Throws
/// std::runtime_error when no arch of the list runs here.
template <class F, class... Args>
decltype(auto) dispatch(F f, Args&&... args) {
  static_assert(sizeof(F) > 0 && !std::is_same<dispatch_arches, xsimd::arch_list<>>::value,
                "gattn::dispatch: no arch built (define GATTN_DISPATCH_HAS_<ARCH>: use gattn_add_dispatched)");
  if (dispatched_arch_name() == nullptr)
    throw std::runtime_error("gattn::dispatch: this CPU runs none of the arches the program was built for");
  std::exception_ptr error;
  const char* chosen = nullptr;
  auto run = xsimd::dispatch<dispatch_arches>(dispatch_detail::catching<F>{std::move(f), &error, &chosen});
  if constexpr (std::is_void<decltype(run(std::forward<Args>(args)...))>::value) {
    run(std::forward<Args>(args)...);
    if (error) std::rethrow_exception(error);
  } else {
    auto result = run(std::forward<Args>(args)...);
    if (error) std::rethrow_exception(error);
    return result;
  }
}

}  // namespace gattn

GATTN_NAMESPACE_BEGIN

// In a translation unit gattn_add_dispatched() compiles for one arch: that arch's tag.
#if defined(GATTN_DISPATCH_TARGET_AVX512)
using dispatch_target = xsimd::avx512bw;
#elif defined(GATTN_DISPATCH_TARGET_AVX2)
using dispatch_target = xsimd::fma3<xsimd::avx2>;
#elif defined(GATTN_DISPATCH_TARGET_SSE2)
using dispatch_target = xsimd::sse2;
#elif defined(GATTN_DISPATCH_TARGET_NEON64)
using dispatch_target = xsimd::neon64;
#endif
#if defined(GATTN_DISPATCH_TARGET_AVX512) || defined(GATTN_DISPATCH_TARGET_AVX2) || \
    defined(GATTN_DISPATCH_TARGET_SSE2) || defined(GATTN_DISPATCH_TARGET_NEON64)
static_assert(std::is_same<dispatch_target, default_arch>::value,
              "gattn: this translation unit's flags do not build the arch gattn_add_dispatched() named");
#endif

GATTN_NAMESPACE_END
