# ctest "install.consumer": install the gattn build tree into a scratch prefix, then configure,
# build and run tests/install/consumer against that prefix only (find_package(gattn CONFIG)).
#
#   cmake -DGATTN_BINARY_DIR=<gattn build> -DCONSUMER_SOURCE_DIR=<tests/install/consumer>
#         -DWORK_DIR=<scratch> [-DCONSUMER_ARGS=dir|dir] [-DCMAKE_CXX_COMPILER=...] [-DCMAKE_GENERATOR=...]
#         -P run_install_test.cmake
foreach(v GATTN_BINARY_DIR CONSUMER_SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_install_test.cmake: -D${v}=... is required")
  endif()
endforeach()

set(prefix ${WORK_DIR}/prefix)
set(build ${WORK_DIR}/consumer-build)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install.consumer: ${step} failed (${rc}): ${ARGN}")
  endif()
endfunction()

run("install" ${CMAKE_COMMAND} --install ${GATTN_BINARY_DIR} --prefix ${prefix})

if(NOT EXISTS ${prefix}/bin/gattn)
  message(FATAL_ERROR "install.consumer: the gattn CLI was not installed as ${prefix}/bin/gattn")
endif()
if(NOT EXISTS ${prefix}/include/gattn/core/config.hpp)
  message(FATAL_ERROR "install.consumer: headers missing under ${prefix}/include")
endif()
file(GLOB_RECURSE cfg ${prefix}/*/gattnConfig.cmake)
if(NOT cfg)
  message(FATAL_ERROR "install.consumer: gattnConfig.cmake not installed under ${prefix}")
endif()

set(gen_args)
if(CMAKE_GENERATOR)
  list(APPEND gen_args -G ${CMAKE_GENERATOR})
endif()
if(CMAKE_CXX_COMPILER)
  list(APPEND gen_args -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER})
endif()
run("configure" ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${build} ${gen_args}
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON
  # The check is the package, not the optimiser: -O1 compiles the consumer's seven files in a third
  # of the time (the test suite covers -O3 code generation).
  "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG")

# The consumer must have found the installed package, not a build tree.
file(STRINGS ${build}/CMakeCache.txt dir_line REGEX "^gattn_DIR:")
string(REGEX REPLACE "^gattn_DIR:[A-Z]+=" "" found_dir "${dir_line}")
file(REAL_PATH "${found_dir}" found_dir)
file(REAL_PATH "${prefix}" real_prefix)
string(FIND "${found_dir}" "${real_prefix}/" pos)
if(NOT pos EQUAL 0)
  message(FATAL_ERROR "install.consumer: gattn found in '${found_dir}', not under '${real_prefix}'")
endif()

run("build" ${CMAKE_COMMAND} --build ${build} --parallel 2)
set(ENV{OMP_NUM_THREADS} 2)
string(REPLACE "|" ";" consumer_args "${CONSUMER_ARGS}")  # | separates folders: ctest would split a ;
run("run" ${build}/consumer ${consumer_args})
run("run without OpenMP" ${build}/consumer_no_openmp)
if(EXISTS ${build}/consumer_two_arches)
  run("run two arches" ${build}/consumer_two_arches)
  run("run dispatched" ${build}/consumer_dispatched)
endif()
