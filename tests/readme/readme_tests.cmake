# ctest readme.snippets: README.md's C++ blocks compile against include/ (check_snippets.cmake).
set(_readme_includes "${PROJECT_SOURCE_DIR}/include")
foreach(_t Eigen3::Eigen xsimd nlohmann_json::nlohmann_json)
  if(TARGET ${_t})
    string(APPEND _readme_includes "|$<JOIN:$<TARGET_PROPERTY:${_t},INTERFACE_INCLUDE_DIRECTORIES>,|>")
  endif()
endforeach()
set(_readme_flags "-std=c++17|-Wall|-Wextra|-Werror|-DGATTN_NO_SIMD_NOTICE")
if(GATTN_WITH_OPENMP)
  string(REPLACE " " "|" _omp "${OpenMP_CXX_FLAGS}")
  string(APPEND _readme_flags "|${_omp}")
else()
  string(APPEND _readme_flags "|-Wno-unknown-pragmas")
endif()
set(_readme_mpi "")
if(TARGET MPI::MPI_CXX)
  set(_readme_mpi "$<JOIN:$<TARGET_PROPERTY:MPI::MPI_CXX,INTERFACE_INCLUDE_DIRECTORIES>,|>")
endif()
add_test(NAME readme.snippets COMMAND ${CMAKE_COMMAND} -DCXX=${CMAKE_CXX_COMPILER}
  -DREADME=${PROJECT_SOURCE_DIR}/README.md -DPREAMBLE=${CMAKE_CURRENT_LIST_DIR}/preamble.hpp
  -DOUT=${CMAKE_CURRENT_BINARY_DIR}/readme "-DINCLUDES=${_readme_includes}" "-DFLAGS=${_readme_flags}"
  "-DMPI_INCLUDES=${_readme_mpi}" -P ${CMAKE_CURRENT_LIST_DIR}/check_snippets.cmake)
