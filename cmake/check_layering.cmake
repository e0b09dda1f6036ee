# The folders of include/gattn form layers: a header may include headers of its own folder and of
# the folders its folder is allowed to see below, never above (so the include graph has no cycle).
# From the bottom: core/ (configs, errors, threads), simd/ (the ISA layer), linalg/ (products over
# stored weights), gate/ (activations, the gate applied to a head, score sources: below kernel/,
# whose epilogue applies the gate), kernel/ (the fused SDPA), cache/ (KV caches and the layer
# workspace: above kernel/, whose problem views they fill), then the layers (attention/) and what
# composes them. reference/ is the oracle: it may see core/ only, so it shares no code with what it
# checks. baseline/ (the unfused SDPA and the SDPA backends) may see everything but parallel/ and io/.
#
#   cmake -DINCLUDE_DIR=<repo>/include -P cmake/check_layering.cmake      (ctest: layering.include_graph)
cmake_minimum_required(VERSION 3.16)
if(NOT DEFINED INCLUDE_DIR)
  message(FATAL_ERROR "check_layering.cmake: -DINCLUDE_DIR=<repo>/include is required")
endif()

# folder -> the folders it may include (besides itself). Keep this list acyclic: each folder names
# only folders listed before it.
get_filename_component(INCLUDE_DIR "${INCLUDE_DIR}" ABSOLUTE)

set(allowed_core "")
set(allowed_simd "core")
set(allowed_linalg "core;simd")
set(allowed_gate "core;simd;linalg")
set(allowed_kernel "core;simd;gate")
set(allowed_cache "core;simd;kernel")
set(allowed_reference "core")
set(allowed_diagnostics "core;simd;gate")
set(allowed_attention "core;simd;linalg;gate;kernel;cache;diagnostics")
set(allowed_baseline "core;simd;linalg;gate;kernel;cache;diagnostics;attention;reference")
set(allowed_io "core;simd;gate")
# Tensor parallelism (docs/spec.md §12) sits above the layers it shards; mpi/ is the optional MPI transport
# (target gattn::mpi), so nothing but itself may include it.
set(allowed_parallel "core;simd;linalg;gate;kernel;cache;diagnostics;attention")
set(allowed_mpi "core;parallel")
set(order core simd linalg gate kernel cache reference diagnostics attention baseline io parallel mpi)

# The list itself must be acyclic: every allowed folder comes earlier in `order`.
set(seen "")
foreach(folder IN LISTS order)
  foreach(dep IN LISTS allowed_${folder})
    if(NOT dep IN_LIST seen)
      message(FATAL_ERROR "check_layering.cmake: '${folder}' may include '${dep}', which is not below it")
    endif()
  endforeach()
  list(APPEND seen ${folder})
endforeach()

set(problems "")
file(GLOB folders RELATIVE ${INCLUDE_DIR}/gattn ${INCLUDE_DIR}/gattn/*)
foreach(folder IN LISTS folders)
  if(NOT IS_DIRECTORY ${INCLUDE_DIR}/gattn/${folder})
    continue()  # umbrella headers at the top (gattn.hpp, io.hpp) may include anything
  endif()
  if(NOT folder IN_LIST order)
    string(APPEND problems "  include/gattn/${folder}/ is not in the layer list of cmake/check_layering.cmake\n")
    continue()
  endif()
  file(GLOB_RECURSE headers ${INCLUDE_DIR}/gattn/${folder}/*.hpp)
  foreach(h IN LISTS headers)
    file(STRINGS ${h} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]gattn/")
    foreach(line IN LISTS lines)
      string(REGEX MATCH "gattn/([a-z_]+)/" _ "${line}")
      set(dep "${CMAKE_MATCH_1}")
      if(dep STREQUAL "" OR dep STREQUAL folder)
        if(dep STREQUAL "")
          string(APPEND problems "  ${h}: includes a top-level umbrella header: ${line}\n")
        endif()
        continue()
      endif()
      if(NOT dep IN_LIST allowed_${folder})
        file(RELATIVE_PATH rel ${INCLUDE_DIR} ${h})
        string(STRIP "${line}" line)
        string(APPEND problems "  ${rel}: ${folder}/ may not include ${dep}/ (${line})\n")
      endif()
    endforeach()
  endforeach()
endforeach()

if(problems)
  message(FATAL_ERROR "include/gattn layering broken:\n${problems}")
endif()
message(STATUS "include/gattn layering: no folder includes a folder above it")
