// P "ranks" as threads of one process sharing memory: the sharding math of docs/spec.md §12 runs in every
// build (sanitizers, scalar, AArch64 under qemu) without MPI.
#pragma once

#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "gattn/core/error.hpp"
#include "gattn/parallel/communicator.hpp"

GATTN_NAMESPACE_BEGIN

/// Thrown in the ranks still waiting in a collective when another rank of the group has failed,
/// so that a failure never leaves the others waiting forever.
class group_aborted : public error {
 public:
  using error::error;
};

/// A group of `size` ranks in one process. `run(f)` calls f(comm) on `size` threads, one per rank,
/// and rethrows the first exception any rank threw (after every thread has ended).
class in_process_group {
 public:
  explicit in_process_group(int size) : size_(size), slots_(std::size_t(size > 0 ? size : 0), nullptr) {
    detail::require<config_error>(size >= 1, "in_process_group: size=", size, " must be at least 1");
  }
  in_process_group(const in_process_group&) = delete;
  in_process_group& operator=(const in_process_group&) = delete;

  int size() const { return size_; }

  void run(const std::function<void(communicator&)>& f) {
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size_));
    std::vector<std::thread> threads;
    for (int r = 0; r < size_; ++r)
      threads.emplace_back([&, r] {
        member m(*this, r);
        try {
          f(m);
        } catch (...) {
          errors[std::size_t(r)] = std::current_exception();
          abort();
        }
      });
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& e : errors)  // a rank's own error before the aborts it caused
      if (e && !is_abort(e)) std::rethrow_exception(e);
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
  }

 private:
  class member final : public communicator {
   public:
    member(in_process_group& g, int rank) : g_(g), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return g_.size_; }
    void all_reduce_sum(float* data, index count) override { g_.all_reduce(rank_, data, count); }
    void broadcast(void* bytes, std::size_t count) override { g_.broadcast(rank_, bytes, count); }
    void barrier() override { g_.wait(); }

   private:
    in_process_group& g_;
    int rank_;
  };

  static bool is_abort(const std::exception_ptr& e) {
    try {
      std::rethrow_exception(e);
    } catch (const group_aborted&) {
      return true;
    } catch (...) {
      return false;
    }
  }

  void abort() {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_ = true;
    cv_.notify_all();
  }

  /// A reusable barrier (generation counter); throws group_aborted once any rank has failed.
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (aborted_) throw group_aborted("in_process_group: another rank failed");
    const long generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != generation || aborted_; });
    if (generation_ == generation) throw group_aborted("in_process_group: another rank failed");
  }

  // Every rank sums all ranks' buffers in rank order, so every rank gets the same bits.
  void all_reduce(int rank, float* data, index count) {
    slots_[std::size_t(rank)] = data;
    wait();
    std::vector<float> sum(std::size_t(count), 0.0f);
    for (int r = 0; r < size_; ++r) {
      const float* src = static_cast<const float*>(slots_[std::size_t(r)]);
      for (index i = 0; i < count; ++i) sum[std::size_t(i)] += src[i];
    }
    wait();  // every rank has read every buffer
    std::memcpy(data, sum.data(), std::size_t(count) * sizeof(float));
  }

  void broadcast(int rank, void* bytes, std::size_t count) {
    if (rank == 0) slots_[0] = bytes;
    wait();
    if (rank != 0 && count) std::memcpy(bytes, slots_[0], count);
    wait();
  }

  int size_;
  std::vector<void*> slots_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  long generation_ = 0;
  bool aborted_ = false;
};

GATTN_NAMESPACE_END  // namespace gattn
