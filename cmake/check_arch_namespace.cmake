# Every header under include/gattn puts its code in the arch namespace (core/arch_namespace.hpp):
# it opens gattn only through GATTN_NAMESPACE_BEGIN, never with `namespace gattn {` or
# `namespace gattn::x {`, except the few headers whose types are meant to cross translation units
# compiled for different ISAs (docs/api.md, "Several ISAs in one binary").
#
#   cmake -DINCLUDE_DIR=<repo>/include -P cmake/check_arch_namespace.cmake   (ctest: style.arch_namespace)
cmake_minimum_required(VERSION 3.16)
if(NOT DEFINED INCLUDE_DIR)
  message(FATAL_ERROR "check_arch_namespace.cmake: -DINCLUDE_DIR=<repo>/include is required")
endif()
get_filename_component(INCLUDE_DIR "${INCLUDE_DIR}" ABSOLUTE)

# Headers allowed to open gattn outside the arch namespace, and why: exceptions (caught across
# TUs), index and matrix_view, plain configurations and enums, process-wide kernel choices, and
# the runtime dispatcher (called from a translation unit of no particular arch).
set(outside core/error.hpp core/types.hpp core/config.hpp core/cpu.hpp core/arch_namespace.hpp simd/dispatch.hpp)

set(problems "")
file(GLOB_RECURSE headers RELATIVE ${INCLUDE_DIR}/gattn ${INCLUDE_DIR}/gattn/*.hpp)
foreach(h IN LISTS headers)
  if(h IN_LIST outside)
    continue()
  endif()
  file(STRINGS ${INCLUDE_DIR}/gattn/${h} lines REGEX "^[ \t]*(inline[ \t]+)?namespace[ \t]+gattn([ \t]|::|{|$)")
  foreach(line IN LISTS lines)
    string(APPEND problems "  include/gattn/${h}: '${line}' (use GATTN_NAMESPACE_BEGIN)\n")
  endforeach()
endforeach()
if(problems)
  message(FATAL_ERROR "check_arch_namespace.cmake: gattn opened outside the arch namespace:\n${problems}")
endif()
list(LENGTH headers n)
message(STATUS "check_arch_namespace.cmake: ${n} headers, every one in the arch namespace or allowed outside it")
