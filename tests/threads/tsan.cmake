# ctest "threads.tsan": tests/threads/shared_pools_tsan.cpp built with ThreadSanitizer, then run;
# a data race ThreadSanitizer sees, a wrong output or a leaked block fails the test. A compiler
# without a ThreadSanitizer runtime prints "threads.tsan: skipped" (the test's skip pattern).
#   cmake -DCXX=... -DSOURCE=... -DOUT=<dir> -DINCLUDES="dir|dir" -DSYSTEM_INCLUDES="dir|dir"
#         -DFLAGS="flag|flag" -P tsan.cmake
cmake_minimum_required(VERSION 3.16)
foreach(v CXX SOURCE OUT INCLUDES FLAGS)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "tsan.cmake: -D${v}=... is required")
  endif()
endforeach()
file(MAKE_DIRECTORY "${OUT}")

# Does this compiler link a ThreadSanitizer program at all?
file(WRITE "${OUT}/probe.cpp" "int main() { return 0; }\n")
execute_process(COMMAND ${CXX} -fsanitize=thread "${OUT}/probe.cpp" -o "${OUT}/probe"
  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
if(NOT rc EQUAL 0)
  message(STATUS "threads.tsan: skipped (${CXX} cannot link -fsanitize=thread)")
  return()
endif()

string(REPLACE "|" ";" flags "${FLAGS}")
string(REPLACE "|" ";" dirs "${INCLUDES}")
foreach(dir IN LISTS dirs)
  list(APPEND flags "-I${dir}")
endforeach()
string(REPLACE "|" ";" dirs "${SYSTEM_INCLUDES}")
foreach(dir IN LISTS dirs)
  # The compiler's own /usr/include must stay where it is in the search order (<cmath> includes past it).
  if(dir AND NOT dir STREQUAL "/usr/include")
    list(APPEND flags "-isystem" "${dir}")
  endif()
endforeach()
set(binary "${OUT}/shared_pools_tsan")
execute_process(COMMAND ${CXX} -std=c++17 -O1 -g -fsanitize=thread -pthread ${flags} "${SOURCE}" -o "${binary}"
  RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "threads.tsan: ${SOURCE} does not compile with -fsanitize=thread:\n${err}")
endif()
set(ENV{TSAN_OPTIONS} "halt_on_error=1 exitcode=66")
execute_process(COMMAND "${binary}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "threads.tsan: exit status ${rc}\n${out}${err}")
endif()
