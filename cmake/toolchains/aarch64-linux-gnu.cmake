# Cross-compile gattn's tests for AArch64 (Debian 12: g++-aarch64-linux-gnu, libc6-dev-arm64-cross,
# qemu-user) and run them under qemu:
#
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake
#   cmake --build build-aarch64 -j2 && (cd build-aarch64 && GATTN_SWEEP=small ctest --output-on-failure)
#
# - Header-only deps (Eigen3, xsimd, nlohmann_json) are architecture independent: their CMake
#   package configs under the x86_64 prefixes are used as they are.
# - GoogleTest is built from Debian's sources in /usr/src/googletest (tests/CMakeLists.txt does this
#   when CMAKE_CROSSCOMPILING), because libgtest-dev ships x86_64 libraries only.
# - ctest and gtest_discover_tests run the aarch64 binary through CMAKE_CROSSCOMPILING_EMULATOR.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

set(GATTN_AARCH64_SYSROOT /usr/aarch64-linux-gnu)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;${GATTN_AARCH64_SYSROOT})

# Libraries and headers only from the target prefix; programs from the host. Packages (config files)
# from both, so that the header-only packages' configs under the host prefixes are found.
set(CMAKE_FIND_ROOT_PATH ${GATTN_AARCH64_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# Explicit locations of the header-only packages' configs (Debian 12), so no x86_64 library
# package is ever picked up by accident.
if(EXISTS /usr/share/eigen3/cmake/Eigen3Config.cmake)
  set(Eigen3_DIR /usr/share/eigen3/cmake CACHE PATH "")
endif()
if(EXISTS /usr/lib/x86_64-linux-gnu/cmake/xsimd/xsimdConfig.cmake)
  set(xsimd_DIR /usr/lib/x86_64-linux-gnu/cmake/xsimd CACHE PATH "")
endif()
if(EXISTS /usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake)
  set(nlohmann_json_DIR /usr/share/cmake/nlohmann_json CACHE PATH "")
endif()

# gattn defaults for this target (still overridable with -D on the first configure).
set(GATTN_SIMD neon CACHE STRING "SIMD flags for gattn's own targets: native, avx512, avx2, scalar, neon")
set(GATTN_BUILD_BENCH OFF CACHE BOOL "Build the benchmarks (Google Benchmark)")
# Representative sweep only: the tests are ~10x slower under qemu (see docs/testing.md).
set(GATTN_TEST_SWEEP small CACHE STRING "GATTN_SWEEP value baked into the registered tests (empty: inherit)")
