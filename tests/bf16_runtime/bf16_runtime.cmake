# gattn_bf16_runtime_tests: the engine tests of `fast` numerics (prefill, decode dot products, the
# small and the packed GEMM) compiled with -march=x86-64-v4, plus engine_at_run_time.cpp: in a
# build without AVX512-BF16 in its flags, the vdpbf16ps kernels compile by attribute and run where
# the CPU has them, giving the bits they give in a -march=native build. Built beside the native and
# avx512 suites on x86-64 (CI's AVX2, scalar and sanitizer builds test other paths); the tests run
# through ctest one each, gtest's skips reported as skips; -O1: the code paths are under test here,
# the native suite covers -O3.
if(CMAKE_CROSSCOMPILING OR GATTN_SANITIZE OR NOT GATTN_SIMD MATCHES "^(native|avx512)$" OR
   NOT CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  return()
endif()
# A native build runs it only where the host has AVX-512 (ctest lists the tests by running it).
if(GATTN_SIMD STREQUAL "native")
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS -march=native)
  check_cxx_source_compiles("#if !defined(__AVX512BW__) || !defined(__AVX512VL__)
#error no AVX-512
#endif
int main() { return 0; }" GATTN_HOST_HAS_AVX512)
  unset(CMAKE_REQUIRED_FLAGS)
  if(NOT GATTN_HOST_HAS_AVX512)
    return()
  endif()
endif()
set(_dir ${CMAKE_CURRENT_LIST_DIR})
add_executable(gattn_bf16_runtime_tests ${_dir}/engine_at_run_time.cpp ${_dir}/../kernel/test_prefill_bf16.cpp
  ${_dir}/../kernel/test_decode_bf16_dot.cpp ${_dir}/../linalg/test_gemm_fast.cpp ${_dir}/../linalg/test_packed_gemm.cpp)
target_include_directories(gattn_bf16_runtime_tests PRIVATE ${_dir}/..)
target_link_libraries(gattn_bf16_runtime_tests PRIVATE gattn_warnings GTest::gtest GTest::gtest_main)
target_compile_options(gattn_bf16_runtime_tests PRIVATE -march=x86-64-v4 -O1)
target_compile_definitions(gattn_bf16_runtime_tests PRIVATE GATTN_TEST_DATA="${_dir}/../data" GATTN_NO_SIMD_NOTICE)
gtest_discover_tests(gattn_bf16_runtime_tests TEST_PREFIX bf16_runtime. DISCOVERY_TIMEOUT 120
  PROPERTIES ${GATTN_TEST_PROPERTIES})
