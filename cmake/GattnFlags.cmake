# gattn_internal: compile flags for gattn's own targets (never propagated to consumers).
# gattn_warnings: the same without the SIMD flags, for code built once per arch (the CLI's runtime
# dispatch, cmake/GattnDispatch.cmake) and tests that choose their arch themselves.
add_library(gattn_warnings INTERFACE)
target_link_libraries(gattn_warnings INTERFACE gattn::gattn)
add_library(gattn_internal INTERFACE)
target_link_libraries(gattn_internal INTERFACE gattn_warnings)

# Debian 12's libxsimd-dev (8.1.0-7) exports `xsimd` with INTERFACE_LINK_LIBRARIES "xtl" but does not
# depend on libxtl-dev, so every link line gets a bare -lxtl ("cannot find -lxtl"). xsimd only needs
# xtl for XSIMD_ENABLE_XTL_COMPLEX, which gattn does not use: drop it unless a real xtl target exists.
# (gattnConfig.cmake.in needs the same lines after find_dependency(xsimd) for installed consumers.)
if(TARGET xsimd AND NOT TARGET xtl)
  get_target_property(_gattn_xsimd_libs xsimd INTERFACE_LINK_LIBRARIES)
  if(_gattn_xsimd_libs)
    list(REMOVE_ITEM _gattn_xsimd_libs xtl)
    set_property(TARGET xsimd PROPERTY INTERFACE_LINK_LIBRARIES "${_gattn_xsimd_libs}")
  endif()
endif()

if(GATTN_SIMD STREQUAL "native")
  target_compile_options(gattn_internal INTERFACE -march=native)
elseif(GATTN_SIMD STREQUAL "avx512")
  target_compile_options(gattn_internal INTERFACE -march=x86-64-v4 -mtune=znver4)
elseif(GATTN_SIMD STREQUAL "avx2")
  target_compile_options(gattn_internal INTERFACE -march=x86-64-v3)
elseif(GATTN_SIMD STREQUAL "scalar")
  # Portable baseline code; GATTN_FORCE_SCALAR makes the kernels use gattn's scalar arch.
  target_compile_definitions(gattn_internal INTERFACE GATTN_FORCE_SCALAR=1)
elseif(GATTN_SIMD STREQUAL "neon")
  # AArch64 has NEON in its baseline; nothing to add (the toolchain file sets the compiler).
else()
  message(FATAL_ERROR "GATTN_SIMD must be native, avx512, avx2, scalar or neon (got '${GATTN_SIMD}')")
endif()

# -Wno-(maybe-)uninitialized: g++ 12 reports false positives inside avx512fintrin.h for xsimd/Eigen.
target_compile_options(gattn_warnings INTERFACE -Wall -Wextra -Werror
  $<$<CXX_COMPILER_ID:GNU>:-Wno-uninitialized -Wno-maybe-uninitialized>)

# Build type "Sanitize" (CI's ASan+UBSan job): -Og compiles in half the time of -O1 under the
# sanitizers (241 s against 443 s for the suite on 2 cores) and runs the small sweep as fast (95 s
# against 92 s); -g1 (line tables only) keeps sanitizer reports naming file and line.
if(CMAKE_BUILD_TYPE STREQUAL "Sanitize")
  target_compile_options(gattn_warnings INTERFACE -Og -g1)
endif()

if(GATTN_SANITIZE)
  target_compile_options(gattn_warnings INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_link_options(gattn_warnings INTERFACE -fsanitize=address,undefined)
endif()
