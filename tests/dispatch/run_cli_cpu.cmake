# ctest dispatch.cli_<cpu> (tests/dispatch/dispatch_tests.cmake): the runtime-dispatched `gattn` under
# qemu-x86_64 -cpu <CPU>: `info` must name ARCH as the arch chosen, and `run --check` must reproduce
# one reference vector there.
#
#   cmake -DQEMU=<qemu-x86_64 or empty> -DCPU=Haswell -DARCH=fma3+avx2 -DCLI=<gattn> -DDATA=<tests/data> -P run_cli_cpu.cmake
if(NOT QEMU)
  message("dispatch.cli_${CPU}: skipped: no qemu-x86_64 on this machine (apt install qemu-user)")
  return()
endif()
set(ENV{OMP_NUM_THREADS} 1)
execute_process(COMMAND ${QEMU} -cpu ${CPU} ${CLI} info RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "dispatch.cli_${CPU}: `gattn info` failed (${rc}) under qemu -cpu ${CPU}")
endif()
string(FIND "${out}" "dispatch: at run time, ${ARCH} chosen" at)
if(at LESS 0)
  message(FATAL_ERROR "dispatch.cli_${CPU}: `gattn info` does not say it chose ${ARCH}")
endif()
set(v ${DATA}/gqa_plain)
execute_process(COMMAND ${QEMU} -cpu ${CPU} ${CLI} run --config ${v}.config.json --weights ${v}.safetensors
  --input ${v}.safetensors --decode-from 4 --check RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "dispatch.cli_${CPU}: `gattn run --check` failed (${rc}) under qemu -cpu ${CPU}")
endif()
