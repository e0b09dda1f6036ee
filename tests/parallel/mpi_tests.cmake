# ctest tests mpi.*: `mpirun -np P gattn-mpi run --check` on every causal vector and Hugging Face folder
# of tests/data, in prefill and decode, for P = 2 and 4 where the heads allow (3 for 3-headed
# vectors); `-np 3` over 4 heads, which every rank must refuse within seconds; and two ranks given
# different inputs (one rank's weights missing, a different x, a different T), which both ranks must
# refuse within seconds, writing nothing. The gattn config
# vectors run at the largest of those P only (each mpirun costs about a second of start-up, and the
# in-process TensorParallelVectors already cover every P on every vector): the transport is tested
# at both P on the Hugging Face folders.
# Registered only with gattn-mpi (the CLI built with gattn::mpi, tools/CMakeLists.txt) and an mpiexec
# (never in a cross build).
if(NOT (TARGET gattn_mpi_cli AND MPIEXEC_EXECUTABLE) OR CMAKE_CROSSCOMPILING)
  return()
endif()

set(_mpi_runner ${CMAKE_CURRENT_LIST_DIR}/run_mpi_cli.cmake)
# One thread per rank; and no cross-memory-attach copies, which containers without ptrace refuse
# (Open MPI's shared-memory transport then falls back to copy-in/copy-out).
set(_mpi_env "OMP_NUM_THREADS=1;OMPI_MCA_btl_vader_single_copy_mechanism=none")
set(_mpi_data ${CMAKE_CURRENT_LIST_DIR}/../data)

# The rank counts a layer's heads allow (docs/spec.md §12), out of 2, 3, 4; 3 only when 2 is not allowed.
function(_gattn_mpi_ranks q kv out)
  set(ranks "")
  foreach(p 2 4)
    math(EXPR qm "${q} % ${p}")
    math(EXPR km "${kv} % ${p}")
    math(EXPR pm "${p} % ${kv}")
    if(qm EQUAL 0 AND (km EQUAL 0 OR pm EQUAL 0))
      list(APPEND ranks ${p})
    endif()
  endforeach()
  if(NOT ranks)
    math(EXPR qm "${q} % 3")
    math(EXPR km "${kv} % 3")
    math(EXPR pm "3 % ${kv}")
    if(qm EQUAL 0 AND (km EQUAL 0 OR pm EQUAL 0))
      set(ranks 3)
    endif()
  endif()
  set(${out} "${ranks}" PARENT_SCOPE)
endfunction()

# Heads of a gattn or Hugging Face config: H_q, and H_kv (1 for MLA: every head reads the latent). A
# delta-rule layer splits its value heads as query heads and its key heads as KV heads; `linear` says
# the Hugging Face layer under test is a linear-attention one.
function(_gattn_mpi_heads json linear q_out kv_out)
  string(JSON attention ERROR_VARIABLE no_attention GET "${json}" attention)
  if(attention STREQUAL "gated_deltanet" OR attention STREQUAL "kda")
    string(JSON q GET "${json}" num_value_heads)
    string(JSON kv GET "${json}" num_key_heads)
  elseif(linear)
    string(JSON q ERROR_VARIABLE no_q GET "${json}" linear_num_value_heads)
    string(JSON kv ERROR_VARIABLE no_kv GET "${json}" linear_num_key_heads)
    if(no_q)  # Kimi Linear: KDA, one set of heads
      string(JSON q GET "${json}" linear_attn_config num_heads)
      set(kv ${q})
    endif()
  else()
    _gattn_mpi_softmax_heads("${json}" q kv)
  endif()
  set(${q_out} ${q} PARENT_SCOPE)
  set(${kv_out} ${kv} PARENT_SCOPE)
endfunction()

function(_gattn_mpi_softmax_heads json q_out kv_out)
  string(JSON q GET "${json}" num_attention_heads)
  string(JSON attention ERROR_VARIABLE no_attention GET "${json}" attention)
  string(JSON lora ERROR_VARIABLE no_lora GET "${json}" kv_lora_rank)
  string(JSON kv ERROR_VARIABLE no_kv GET "${json}" num_key_value_heads)
  if(attention STREQUAL "mla" OR NOT no_lora OR no_kv)
    set(kv 1)
  endif()
  set(${q_out} ${q} PARENT_SCOPE)
  set(${kv_out} ${kv} PARENT_SCOPE)
endfunction()

# The `layer` entry of a safetensors file's metadata (the Hugging Face folders' io.safetensors name the
# layer their weights hold), or "" when it has none.
function(_gattn_mpi_vector_layer file out)
  file(READ ${file} length_hex HEX LIMIT 4)  # the header length, little-endian (a small header)
  string(REGEX REPLACE "(..)(..)(..)(..)" "0x\\4\\3\\2\\1" length_hex "${length_hex}")
  math(EXPR length "${length_hex}")
  file(READ ${file} header OFFSET 8 LIMIT ${length})
  string(JSON layer ERROR_VARIABLE none GET "${header}" __metadata__ layer)
  if(none)
    set(layer "")
  endif()
  set(${out} "${layer}" PARENT_SCOPE)
endfunction()

function(_gattn_mpi_test name config weights input tol json every_p layer)
  string(JSON causal ERROR_VARIABLE no_causal GET "${json}" causal)
  if(NOT no_causal AND NOT causal)
    return()  # decode needs a causal layer; the issue asks for causal vectors
  endif()
  set(linear FALSE)
  if(NOT layer STREQUAL "" AND (name MATCHES "linear"))
    set(linear TRUE)
  endif()
  _gattn_mpi_heads("${json}" ${linear} q kv)
  _gattn_mpi_ranks(${q} ${kv} ranks)
  if(NOT ranks)
    return()
  endif()
  if(NOT every_p)
    list(GET ranks -1 ranks)
  endif()
  add_test(NAME mpi.${name} COMMAND ${CMAKE_COMMAND} -DMPIEXEC=${MPIEXEC_EXECUTABLE} -DCLI=$<TARGET_FILE:gattn_mpi_cli>
    -DCONFIG=${config} -DWEIGHTS=${weights} -DINPUT=${input} -DTOL=${tol} "-DRANKS=${ranks}" "-DLAYER=${layer}"
    -P ${_mpi_runner})
  set_tests_properties(mpi.${name} PROPERTIES TIMEOUT 300 LABELS mpi ENVIRONMENT "${_mpi_env}")
endfunction()

file(GLOB _mpi_configs ${_mpi_data}/*.config.json)
foreach(cfg IN LISTS _mpi_configs)
  get_filename_component(name ${cfg} NAME)
  string(REPLACE ".config.json" "" name ${name})
  file(READ ${cfg} json)
  set(tol 1e-4)
  if(name MATCHES "kv_bf16")
    set(tol 5e-4)  # docs/spec.md §10: a bf16 cache, as tests/tools/test_cli.cpp checks it
  endif()
  if(name MATCHES "_t1$")
    continue()  # one token: no decode to split off (the in-process TensorParallelDelta covers it)
  endif()
  set(st ${_mpi_data}/${name}.safetensors)
  _gattn_mpi_test(${name} ${cfg} ${st} ${st} ${tol} "${json}" FALSE "")
endforeach()

file(GLOB _mpi_hf_configs ${_mpi_data}/*/config.json)
foreach(cfg IN LISTS _mpi_hf_configs)
  get_filename_component(dir ${cfg} DIRECTORY)
  get_filename_component(name ${dir} NAME)
  if(NOT EXISTS ${dir}/io.safetensors)
    continue()
  endif()
  file(READ ${cfg} json)
  # A Qwen3.5 multimodal wrapper keeps the text model's keys under text_config (docs/spec.md §14).
  string(JSON text ERROR_VARIABLE no_text GET "${json}" text_config)
  if(NOT no_text)
    set(json "${text}")
  endif()
  _gattn_mpi_vector_layer(${dir}/io.safetensors layer)
  _gattn_mpi_test(${name} ${cfg} ${dir}/model.safetensors ${dir}/io.safetensors 1e-4 "${json}" TRUE "${layer}")
endforeach()

add_test(NAME mpi.refuses_3_ranks_over_4_heads COMMAND ${CMAKE_COMMAND} -DMPIEXEC=${MPIEXEC_EXECUTABLE}
  -DCLI=$<TARGET_FILE:gattn_mpi_cli> -DCONFIG=${_mpi_data}/gqa_plain.config.json
  -DWEIGHTS=${_mpi_data}/gqa_plain.safetensors -DINPUT=${_mpi_data}/gqa_plain.safetensors -DREFUSE=3
  -P ${_mpi_runner})
set_tests_properties(mpi.refuses_3_ranks_over_4_heads PROPERTIES TIMEOUT 120 LABELS mpi ENVIRONMENT "${_mpi_env}")

# Ranks that do not start alike: rank 1's weights are missing, or its x differs (same shape), or its
# x has another number of tokens. Each must end every rank within seconds, with nothing written.
set(_plain ${_mpi_data}/gqa_plain)
foreach(_case "weights_missing|/nonexistent/w.safetensors|${_plain}.safetensors|nonexistent"
              "x_differs|${_plain}.safetensors|${_mpi_data}/gqa_g1_bias.safetensors|different x"
              "tokens_differ|${_plain}.safetensors|${_mpi_data}/gqa_kv_bf16.safetensors|T=21")
  string(REPLACE "|" ";" _case "${_case}")
  list(GET _case 0 _name)
  list(GET _case 1 _weights2)
  list(GET _case 2 _input2)
  list(GET _case 3 _expect)
  add_test(NAME mpi.ranks_disagree_${_name} COMMAND ${CMAKE_COMMAND} -DMPIEXEC=${MPIEXEC_EXECUTABLE}
    -DCLI=$<TARGET_FILE:gattn_mpi_cli> -DCONFIG=${_plain}.config.json -DWEIGHTS=${_plain}.safetensors
    -DINPUT=${_plain}.safetensors -DWEIGHTS2=${_weights2} -DINPUT2=${_input2} -DDIVERGE=${_name}
    -DOUTPUT=${CMAKE_CURRENT_BINARY_DIR}/mpi_disagree_${_name}.safetensors "-DEXPECT=${_expect}" -P ${_mpi_runner})
  set_tests_properties(mpi.ranks_disagree_${_name} PROPERTIES TIMEOUT 120 LABELS mpi ENVIRONMENT "${_mpi_env}")
endforeach()
