# The runtime-dispatched CLI (tools/CMakeLists.txt, GATTN_CLI_DISPATCH): it runs on an AVX2-only
# CPU and on a baseline x86-64 CPU (under qemu-x86_64, when there is one) and picks the matching
# arch; and `gattn` links no MPI.
if(NOT TARGET gattn_cli OR CMAKE_CROSSCOMPILING)
  return()
endif()
if(GATTN_CLI_DISPATCH)
  find_program(GATTN_QEMU_X86_64 NAMES qemu-x86_64 qemu-x86_64-static)
  set(_qemu "")
  if(GATTN_QEMU_X86_64)
    set(_qemu ${GATTN_QEMU_X86_64})
  endif()
  foreach(_case "Haswell|fma3+avx2" "qemu64|sse2")
    string(REPLACE "|" ";" _case "${_case}")
    list(GET _case 0 _cpu)
    list(GET _case 1 _arch)
    add_test(NAME dispatch.cli_${_cpu} COMMAND ${CMAKE_COMMAND} "-DQEMU=${_qemu}" -DCPU=${_cpu} -DARCH=${_arch}
      -DCLI=$<TARGET_FILE:gattn_cli> -DDATA=${CMAKE_CURRENT_LIST_DIR}/../data -P ${CMAKE_CURRENT_LIST_DIR}/run_cli_cpu.cmake)
    set_tests_properties(dispatch.cli_${_cpu} PROPERTIES TIMEOUT 300 LABELS dispatch
      SKIP_REGULAR_EXPRESSION "dispatch.cli_${_cpu}: skipped")
  endforeach()
endif()
find_program(GATTN_READELF NAMES readelf ${CMAKE_READELF})
if(GATTN_READELF)
  set(_mpi_cli "")
  if(TARGET gattn_mpi_cli)
    set(_mpi_cli $<TARGET_FILE:gattn_mpi_cli>)
  endif()
  add_test(NAME dispatch.cli_links_no_mpi COMMAND ${CMAKE_COMMAND} -DREADELF=${GATTN_READELF}
    -DCLI=$<TARGET_FILE:gattn_cli> "-DMPI_CLI=${_mpi_cli}" -P ${CMAKE_CURRENT_LIST_DIR}/check_no_mpi.cmake)
  set_tests_properties(dispatch.cli_links_no_mpi PROPERTIES LABELS dispatch)
endif()
