# One mpi.* test (tests/parallel/mpi_tests.cmake): runs the gattn CLI under mpiexec.
#   -DRANKS="2;4" -DTOL=R : for each P, prefill, --decode-from 3 and a batch (--batch-lengths 1,2
#                           through a paged cache of 1-token blocks) must pass --check, and the
#                           summary line must say ranks=P
#   -DREFUSE=P            : P ranks must all fail with a `gattn: error:` line, within seconds
#   -DDIVERGE=W -DWEIGHTS2=.. -DINPUT2=.. -DOUTPUT=Y -DEXPECT=RE : two ranks (Open MPI's MPMD form),
#                           rank 1 given WEIGHTS2 and INPUT2: both must end within seconds with
#                           exactly one `gattn: error:` line each, one of them matching RE, a
#                           non-zero status, and no output written
cmake_minimum_required(VERSION 3.19)
set(launch ${MPIEXEC} --allow-run-as-root --oversubscribe)
set(files run --config ${CONFIG} --weights ${WEIGHTS} --input ${INPUT})
if(DEFINED LAYER AND NOT LAYER STREQUAL "")
  list(APPEND files --layer ${LAYER})  # a Hugging Face folder's layer (its io.safetensors names it)
endif()

if(DEFINED REFUSE)
  string(TIMESTAMP start "%s")
  execute_process(COMMAND ${launch} -np ${REFUSE} ${CLI} ${files} --check TIMEOUT 60
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(TIMESTAMP end "%s")
  math(EXPR seconds "${end} - ${start}")
  if(rc EQUAL 0 OR rc MATCHES "timeout")
    message(FATAL_ERROR "-np ${REFUSE}: expected a refusal, got '${rc}' after ${seconds} s\n${out}\n${err}")
  endif()
  string(REGEX MATCHALL "gattn: error: tensor parallelism: num_attention_heads=[0-9]+ is not divisible by the ${REFUSE} ranks"
         lines "${err}")
  list(LENGTH lines n)
  if(NOT n EQUAL REFUSE OR seconds GREATER 20)
    message(FATAL_ERROR "-np ${REFUSE}: ${n} of ${REFUSE} ranks named the split, after ${seconds} s:\n${err}")
  endif()
  message(STATUS "-np ${REFUSE}: every rank refused in ${seconds} s (exit status ${rc})")
  return()
endif()

if(DEFINED DIVERGE)
  file(REMOVE ${OUTPUT})
  string(TIMESTAMP start "%s")
  # timeout(1) ends a hang as a failure of the test instead of waiting for ctest's TIMEOUT.
  execute_process(COMMAND timeout -k 5 40 ${launch}
      -np 1 ${CLI} ${files} --output ${OUTPUT}
      : -np 1 ${CLI} run --config ${CONFIG} --weights ${WEIGHTS2} --input ${INPUT2} --output ${OUTPUT}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(TIMESTAMP end "%s")
  math(EXPR seconds "${end} - ${start}")
  if(rc EQUAL 0 OR rc EQUAL 124 OR rc EQUAL 137 OR seconds GREATER 20)
    message(FATAL_ERROR "${DIVERGE}: expected every rank to refuse within seconds, got exit status '${rc}' after ${seconds} s\n${out}\n${err}")
  endif()
  string(REGEX MATCHALL "(^|\n)gattn: (error|run)[^\n]*" lines "${err}")
  list(LENGTH lines n)
  if(NOT n EQUAL 2 OR NOT err MATCHES "(^|\n)gattn: error: [^\n]*${EXPECT}" OR err MATCHES "gattn: run:")
    message(FATAL_ERROR "${DIVERGE}: expected one `gattn: error:` line per rank, one matching '${EXPECT}':\n${err}")
  endif()
  if(EXISTS ${OUTPUT})
    message(FATAL_ERROR "${DIVERGE}: the output was written although the ranks disagreed:\n${err}")
  endif()
  message(STATUS "${DIVERGE}: both ranks refused in ${seconds} s (exit status ${rc}):\n${err}")
  return()
endif()

foreach(p IN LISTS RANKS)
  foreach(mode "" "--decode-from;3" "--batch-lengths;1,2;--block-size;1")
    execute_process(COMMAND ${launch} -np ${p} ${CLI} ${files} --check --tol ${TOL} ${mode} TIMEOUT 120
      RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0 OR NOT out MATCHES " ok\n" OR out MATCHES "FAILED" OR NOT err MATCHES "gattn: run: [^\n]* ranks=${p}\n")
      message(FATAL_ERROR "-np ${p} ${mode}: exit status ${rc}\n${out}\n${err}")
    endif()
    string(STRIP "${out}" out)
    message(STATUS "-np ${p} ${mode}: ${out}")
  endforeach()
endforeach()
