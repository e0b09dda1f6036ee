// The CLI's process group: MPI only when Open MPI's launcher started the process (so a plain
// `gattn run` never touches MPI, and a build without gattn::mpi still runs everywhere).
#include "cli_tp.hpp"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#if defined(GATTN_CLI_WITH_MPI)
#include "gattn/mpi/mpi_communicator.hpp"
#endif

GATTN_NAMESPACE_BEGIN namespace cli {

namespace {

tp_group* current_group = nullptr;

/// Counts collectives, so that fail() knows whether the ranks may be waiting on one another.
class counting_communicator final : public communicator {
 public:
  explicit counting_communicator(std::unique_ptr<communicator> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void all_reduce_sum(float* data, index count) override {
    started = true;
    inner_->all_reduce_sum(data, count);
  }
  void broadcast(void* bytes, std::size_t count) override {
    started = true;
    inner_->broadcast(bytes, count);
  }
  void barrier() override {
    started = true;
    inner_->barrier();
  }
  bool started = false;

 private:
  std::unique_ptr<communicator> inner_;
};

}  // namespace

#if defined(GATTN_CLI_WITH_MPI)
struct tp_group::mpi_state {
  mpi_state(int* argc, char*** argv) : session(argc, argv) {}
  mpi_session session;
};
#else
struct tp_group::mpi_state {};
#endif

tp_group::tp_group([[maybe_unused]] int* argc, [[maybe_unused]] char*** argv) {
#if defined(GATTN_CLI_WITH_MPI)
  if (mpi_session::launched_by_mpirun()) {
    mpi_state_ = std::make_unique<mpi_state>(argc, argv);
    comm_ = std::make_unique<counting_communicator>(std::make_unique<mpi_communicator>());
    mpi_ = true;
  }
#else
  if (std::getenv("OMPI_COMM_WORLD_SIZE") && std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")) > 1)
    std::fprintf(stderr, "gattn: warning: started by mpirun, but this gattn links no MPI: every rank runs "
                         "the whole layer alone (gattn-mpi shards the heads over the ranks)\n");
#endif
  if (!comm_) comm_ = std::make_unique<counting_communicator>(std::make_unique<single_rank_communicator>());
  current_group = this;
}

tp_group::~tp_group() {
  if (current_group == this) current_group = nullptr;
}

void tp_group::fail([[maybe_unused]] int status) {
#if defined(GATTN_CLI_WITH_MPI)
  if (mpi_ && size() > 1 && static_cast<counting_communicator&>(*comm_).started) {
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, status);
  }
#endif
}

std::vector<rank_state> tp_group::gather(const rank_state& mine) {
  std::vector<rank_state> all(std::size_t(size()), mine);
#if defined(GATTN_CLI_WITH_MPI)
  if (mpi_ && size() > 1) {
    static_assert(sizeof(rank_state) == 5 * sizeof(std::uint64_t), "rank_state is sent as 5 uint64");
    // MPI_COMM_WORLD directly, not comm(): this exchange is not one of the layer's collectives, so
    // fail() may still end a rank normally after it.
    gattn::detail::check_mpi(MPI_Allgather(&mine, 5, MPI_UINT64_T, all.data(), 5, MPI_UINT64_T, MPI_COMM_WORLD),
                      "MPI_Allgather");
  }
#endif
  return all;
}

tp_group& tp_group::current() {
  if (!current_group) throw std::logic_error("gattn::cli::tp_group::current(): main() made no group");
  return *current_group;
}

}  GATTN_NAMESPACE_END  // namespace gattn::cli
