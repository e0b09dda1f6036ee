// The communicator over MPI (docs/spec.md §12 across processes and machines). Part of the optional target
// gattn::mpi, which links MPI::MPI_CXX; nothing in gattn::gattn includes this header.
#pragma once

// gattn uses MPI's C API only; the deprecated C++ bindings would add nothing but warnings.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>

#include "gattn/core/error.hpp"
#include "gattn/parallel/communicator.hpp"

GATTN_NAMESPACE_BEGIN

/// An MPI error, with MPI's own description of it.
class mpi_error : public error {
 public:
  using error::error;
};

namespace detail {

inline void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw mpi_error(concat(call, " failed: ", std::string(text, std::size_t(std::max(length, 0)))));
}

}  // namespace detail

/// Initialises MPI for the life of the object unless something else already has, and finalises
/// only what it initialised. Threads: MPI_THREAD_FUNNELED (only the main thread calls MPI; the
/// OpenMP threads of the kernels never do).
class mpi_session {
 public:
  mpi_session(int* argc, char*** argv) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) return;
    int provided = 0;
    detail::check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    owns_ = true;
  }
  ~mpi_session() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_ && !finalized) MPI_Finalize();
  }
  mpi_session(const mpi_session&) = delete;
  mpi_session& operator=(const mpi_session&) = delete;

  /// True when this process was started by Open MPI's launcher (mpirun / mpiexec), which sets
  /// OMPI_COMM_WORLD_SIZE: a program can then decide to initialise MPI at all.
  static bool launched_by_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

 private:
  bool owns_ = false;
};

/// A communicator over an MPI communicator (default MPI_COMM_WORLD); MPI must be initialised.
class mpi_communicator final : public communicator {
 public:
  explicit mpi_communicator(MPI_Comm comm = MPI_COMM_WORLD) : comm_(comm) {
    detail::check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    detail::check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // MPI counts are int: longer buffers go in chunks.
  void all_reduce_sum(float* data, index count) override {
    for (index done = 0; done < count;) {
      const int n = int(std::min<index>(count - done, INT_MAX));
      detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, data + done, n, MPI_FLOAT, MPI_SUM, comm_), "MPI_Allreduce");
      done += n;
    }
  }
  void broadcast(void* bytes, std::size_t count) override {
    char* p = static_cast<char*>(bytes);
    for (std::size_t done = 0; done < count;) {
      const int n = int(std::min<std::size_t>(count - done, INT_MAX));
      detail::check_mpi(MPI_Bcast(p + done, n, MPI_BYTE, 0, comm_), "MPI_Bcast");
      done += std::size_t(n);
    }
  }
  void barrier() override { detail::check_mpi(MPI_Barrier(comm_), "MPI_Barrier"); }

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

GATTN_NAMESPACE_END  // namespace gattn
