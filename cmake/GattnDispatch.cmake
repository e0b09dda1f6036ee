# Runtime dispatch (include/gattn/simd/dispatch.hpp): build sources once per arch and let the CPU pick.
#
#   gattn_add_dispatched(<target> ARCHES <arch>... SOURCES <file>... ENTRY <name>
#                        [LINK <item>...] [OBJECTS <name>...])
#
# compiles SOURCES once per arch of ARCHES (avx512, avx2, sse2 on x86-64; neon64 on AArch64) with that
# arch's flags and GATTN_DISPATCH_TARGET_<ARCH>, linking LINK's usage requirements (gattn::gattn
# at least), and adds the objects to <target>, whose own sources are the dispatcher (main() calling
# gattn::dispatch). GATTN_DISPATCH_HAS_<ARCH> is defined on <target> and on every arch's objects.
# ENTRY names the entry functor (its unqualified name, e.g. app_entry): each arch's objects are
# linked into one relocatable object whose only global definitions are that functor's members, so
# the inline functions of gattn, Eigen, xsimd and the standard library that every arch compiles
# keep one copy per arch instead of one merged copy (an AVX-512 body run on an AVX2 CPU); so do the
# static variables of inline functions (compiled with -fno-gnu-unique, which lets them be made
# local): a process-wide setting such as gattn::set_bf16_dot_products must then be made inside the
# entry, by the arch that runs, not in main(). Without
# GNU ld and objcopy the objects are linked as they are, baseline arch first (the copy the linker
# keeps is then the baseline one: correct on every CPU, slower where it is not inlined).
#
# SOURCES must not define namespace-scope objects that need dynamic initialization (a std::string,
# a std::vector): their initializers run at start-up, before any dispatch, compiled for the arch;
# use function-local statics (gattn's headers do).
#
#   gattn_dispatch_objects(<name> ARCHES <arch>... SOURCES <file>... [LINK <item>...])
#
# builds the per-arch object libraries <name>_<arch> alone, for sources that several dispatched
# targets share (pass <name> to their OBJECTS).
include_guard(GLOBAL)

set(GATTN_DISPATCH_FLAGS_avx512 -march=x86-64-v4)
set(GATTN_DISPATCH_FLAGS_avx2 -march=x86-64-v3)
set(GATTN_DISPATCH_FLAGS_sse2 -march=x86-64)
set(GATTN_DISPATCH_FLAGS_neon64 "")
# Baseline first: the order objects reach the linker in when they cannot be isolated.
set(GATTN_DISPATCH_ORDER sse2 neon64 avx2 avx512)

function(_gattn_dispatch_check_arches)
  foreach(arch IN LISTS ARGN)
    if(NOT DEFINED GATTN_DISPATCH_FLAGS_${arch})
      message(FATAL_ERROR "gattn_add_dispatched: unknown arch '${arch}' (avx512, avx2, sse2, neon64)")
    endif()
  endforeach()
endfunction()

function(_gattn_dispatch_defines out)
  set(defs GATTN_NO_SIMD_NOTICE)
  foreach(arch IN LISTS ARGN)
    string(TOUPPER ${arch} up)
    list(APPEND defs GATTN_DISPATCH_HAS_${up}=1)
  endforeach()
  set(${out} ${defs} PARENT_SCOPE)
endfunction()

function(gattn_dispatch_objects name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "ARCHES;SOURCES;LINK")
  _gattn_dispatch_check_arches(${arg_ARCHES})
  _gattn_dispatch_defines(defs ${arg_ARCHES})
  foreach(arch IN LISTS arg_ARCHES)
    string(TOUPPER ${arch} up)
    add_library(${name}_${arch} OBJECT ${arg_SOURCES})
    target_link_libraries(${name}_${arch} PRIVATE ${arg_LINK})
    target_compile_options(${name}_${arch} PRIVATE ${GATTN_DISPATCH_FLAGS_${arch}}
      $<$<CXX_COMPILER_ID:GNU>:-fno-gnu-unique>)
    target_compile_definitions(${name}_${arch} PRIVATE ${defs} GATTN_DISPATCH_TARGET_${up}=1)
  endforeach()
endfunction()

function(gattn_add_dispatched target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "ENTRY" "ARCHES;SOURCES;LINK;OBJECTS")
  if(NOT arg_ENTRY)
    message(FATAL_ERROR "gattn_add_dispatched(${target}): ENTRY <functor name> is required")
  endif()
  _gattn_dispatch_check_arches(${arg_ARCHES})
  _gattn_dispatch_defines(defs ${arg_ARCHES})
  target_compile_definitions(${target} PRIVATE ${defs})
  if(arg_SOURCES)
    gattn_dispatch_objects(${target}_dispatched ARCHES ${arg_ARCHES} SOURCES ${arg_SOURCES} LINK ${arg_LINK})
    list(APPEND arg_OBJECTS ${target}_dispatched)
  endif()
  # A mangled name spells an identifier as <length><name>.
  string(LENGTH "${arg_ENTRY}" entry_length)
  set(keep "*${entry_length}${arg_ENTRY}*")
  find_program(GATTN_OBJCOPY NAMES ${CMAKE_OBJCOPY} objcopy)
  set(isolate OFF)
  if(CMAKE_LINKER MATCHES "ld$" AND GATTN_OBJCOPY AND CMAKE_EXECUTABLE_FORMAT STREQUAL "ELF")
    set(isolate ON)
  endif()
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/${target}_dispatch)
  foreach(arch IN LISTS GATTN_DISPATCH_ORDER)
    if(NOT arch IN_LIST arg_ARCHES)
      continue()
    endif()
    set(objects "")
    foreach(o IN LISTS arg_OBJECTS)
      list(APPEND objects $<TARGET_OBJECTS:${o}_${arch}>)
    endforeach()
    if(NOT isolate)
      target_sources(${target} PRIVATE ${objects})
      continue()
    endif()
    set(out ${dir}/${arch}.o)
    set(deps "")
    foreach(o IN LISTS arg_OBJECTS)
      list(APPEND deps ${o}_${arch})
    endforeach()
    add_custom_command(OUTPUT ${out}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${dir}
      COMMAND ${CMAKE_LINKER} -r --force-group-allocation -o ${dir}/${arch}.partial.o ${objects}
      COMMAND ${GATTN_OBJCOPY} --wildcard "--keep-global-symbol=${keep}" ${dir}/${arch}.partial.o ${out}
      DEPENDS ${deps} ${objects}
      COMMAND_EXPAND_LISTS VERBATIM
      COMMENT "gattn_add_dispatched: ${target}'s ${arch} objects, keeping ${arg_ENTRY} global")
    set_source_files_properties(${out} PROPERTIES EXTERNAL_OBJECT ON GENERATED ON)
    target_sources(${target} PRIVATE ${out})
  endforeach()
endfunction()
