// What a tensor-parallel layer needs from its process group (docs/spec.md §12): its rank, the group size,
// an in-place sum of fp32 rows over all ranks, and a broadcast of bytes from rank 0.
#pragma once

#include <cstddef>

#include "gattn/core/types.hpp"

GATTN_NAMESPACE_BEGIN

/// A group of P ranks. Every collective call must be made by every rank, in the same order, with
/// the same counts (as in MPI). Implementations: single_rank_communicator (below),
/// in_process_group (threads of one process, for tests), mpi_communicator (gattn::mpi).
class communicator {
 public:
  virtual ~communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// data[0..count) ← Σ over ranks of every rank's data[0..count), on every rank.
  virtual void all_reduce_sum(float* data, index count) = 0;
  /// bytes[0..count) ← rank 0's bytes[0..count), on every rank.
  virtual void broadcast(void* bytes, std::size_t count) = 0;
  virtual void barrier() = 0;

 protected:
  communicator() = default;
  communicator(const communicator&) = default;
  communicator& operator=(const communicator&) = default;
};

/// The group of one: every collective is a no-op.
class single_rank_communicator final : public communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(float*, index) override {}
  void broadcast(void*, std::size_t) override {}
  void barrier() override {}
};

GATTN_NAMESPACE_END  // namespace gattn
