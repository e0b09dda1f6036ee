// Tests of gattn/mpi/mpi_communicator.hpp, run by mpiexec on 2 ranks (ctest mpi.communicator; the
// tensor-parallel layers over it run end to end in tests/parallel/mpi_tests.cmake): rank and size,
// the collectives a tensor-parallel layer uses, an mpi_session that finds MPI initialised, and
// MPI's errors as mpi_error.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gattn/mpi/mpi_communicator.hpp"

namespace {

using gattn::index;

TEST(MpiCommunicator, RankAndSizeAreMpisOwn) {
  gattn::mpi_communicator comm;
  int rank = -1, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(comm.rank(), rank);
  EXPECT_EQ(comm.size(), size);
  EXPECT_GE(comm.size(), 1);
}

TEST(MpiCommunicator, AllReduceSumsEveryRanksRowsOnEveryRank) {
  gattn::mpi_communicator comm;
  const index n = 1000;
  std::vector<float> data(static_cast<std::size_t>(n));
  for (index i = 0; i < n; ++i) data[std::size_t(i)] = float(comm.rank() + 1) * float(i % 7);
  comm.all_reduce_sum(data.data(), n);
  const float ranks_sum = float(comm.size() * (comm.size() + 1) / 2);  // Σ (rank + 1)
  for (index i = 0; i < n; ++i) ASSERT_EQ(data[std::size_t(i)], ranks_sum * float(i % 7)) << "i=" << i;
  comm.all_reduce_sum(data.data(), 0);  // nothing to do, on every rank
}

TEST(MpiCommunicator, BroadcastGivesEveryRankRankZerosBytes) {
  gattn::mpi_communicator comm;
  char text[32] = {};
  std::snprintf(text, sizeof text, "from rank %d", comm.rank());
  comm.broadcast(text, sizeof text);
  EXPECT_STREQ(text, "from rank 0");
  comm.barrier();
}

TEST(MpiCommunicator, ASessionLeavesAnInitialisedMpiToItsOwner) {
  {
    int argc = 0;
    char** argv = nullptr;
    gattn::mpi_session inner(&argc, &argv);  // MPI is already initialised by main()
  }
  int finalized = 1;
  MPI_Finalized(&finalized);
  EXPECT_EQ(finalized, 0);
  gattn::mpi_communicator comm;  // still usable
  comm.barrier();
}

TEST(MpiCommunicator, MpiErrorsBecomeMpiErrorNamingTheCall) {
  try {
    gattn::detail::check_mpi(MPI_ERR_COUNT, "MPI_Allreduce");
    FAIL() << "no exception";
  } catch (const gattn::mpi_error& e) {
    EXPECT_NE(std::string(e.what()).find("MPI_Allreduce failed"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(gattn::detail::check_mpi(MPI_SUCCESS, "MPI_Barrier"));
}

}  // namespace

int main(int argc, char** argv) {
  gattn::mpi_session session(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {  // one rank reports; every rank's result decides mpiexec's exit code
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  return RUN_ALL_TESTS();
}
