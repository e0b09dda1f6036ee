# ctest dispatch.cli_links_no_mpi: `gattn` needs no MPI library (tensor parallelism is gattn-mpi's);
# gattn-mpi, when built, does.
#
#   cmake -DREADELF=<readelf> -DCLI=<gattn> [-DMPI_CLI=<gattn-mpi>] -P check_no_mpi.cmake
function(needed file out)
  execute_process(COMMAND ${READELF} -d ${file} RESULT_VARIABLE rc OUTPUT_VARIABLE text)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "readelf -d ${file} failed (${rc})")
  endif()
  string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*" lines "${text}")
  set(${out} "${lines}" PARENT_SCOPE)
endfunction()
needed(${CLI} libs)
message("gattn: ${libs}")
if(libs MATCHES "libmpi")
  message(FATAL_ERROR "gattn links an MPI library: ${libs}")
endif()
if(MPI_CLI)
  needed(${MPI_CLI} libs)
  message("gattn-mpi: ${libs}")
  if(NOT libs MATCHES "libmpi")
    message(FATAL_ERROR "gattn-mpi links no MPI library: ${libs}")
  endif()
endif()
