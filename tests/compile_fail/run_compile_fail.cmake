# ctest "compile_fail.*": compiles SOURCE twice with -fsyntax-only. With -DGATTN_COMPILE_FAIL_CONTROL it
# must succeed; without it, it must fail with a diagnostic matching EXPECT.
#   cmake -DCXX=... -DSOURCE=... -DEXPECT=regex -DFLAGS="-std=c++17;-I...;..." -P run_compile_fail.cmake
foreach(v CXX SOURCE EXPECT FLAGS)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_compile_fail.cmake: -D${v}=... is required")
  endif()
endforeach()
execute_process(COMMAND ${CXX} ${FLAGS} -DGATTN_COMPILE_FAIL_CONTROL -fsyntax-only ${SOURCE}
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "control variant of ${SOURCE} does not compile:\n${err}")
endif()
execute_process(COMMAND ${CXX} ${FLAGS} -fsyntax-only ${SOURCE} RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but must be refused at compile time")
endif()
if(NOT err MATCHES "${EXPECT}")
  message(FATAL_ERROR "${SOURCE} failed to compile, but not with a diagnostic matching '${EXPECT}':\n${err}")
endif()
message(STATUS "${SOURCE}: refused at compile time as expected")
