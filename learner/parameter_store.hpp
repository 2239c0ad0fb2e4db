#pragma once
// ParameterStore: the model's tensors in one contiguous float arena (a "tensor collective": the allreduce sends
// it as one vector), with one mutex per tensor.
//
// Locking rule (docs/design.md, "The learner"): whoever reads or writes a tensor's floats holds that
// tensor's mutex, and holds no other tensor's mutex at the same time. The learner takes a tensor's lock only to
// apply that tensor's update; the allreduce's fetch and elastic update take the same locks one tensor at a time,
// in reverse tensor order (the backward pass updates the last tensor first, so reverse order crosses the learner
// least often). Holding one lock at a time means no lock ordering, hence no deadlock.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "base/large_buffer.hpp"

namespace gridtrain::learner {

struct TensorSpec {
  std::string name;
  std::vector<int> shape;  // every extent >= 1

  std::size_t size() const;
};

class ParameterStore {
 public:
  struct Tensor {
    std::string name;
    std::vector<int> shape;
    std::size_t offset = 0;  // into the arena, in floats
    std::size_t size = 0;
  };

  // REQUIRES: every extent of every shape >= 1.
  explicit ParameterStore(std::vector<TensorSpec> tensors);

  ParameterStore(const ParameterStore&) = delete;
  ParameterStore& operator=(const ParameterStore&) = delete;

  std::size_t size() const { return arena_.size(); }  // floats in the arena
  std::size_t tensor_count() const { return tensors_.size(); }
  const Tensor& tensor(std::size_t i) const { return tensors_[i]; }

  // A hash of the tensor names and shapes. Nodes whose signatures differ train different models and must not
  // average (the GridMaster rejects such a join).
  std::uint64_t signature() const { return signature_; }

  // The tensor's mutex. The learner holds it while it writes the tensor.
  std::mutex& mutex(std::size_t i) const { return locks_[i]; }

  // The tensor's floats. REQUIRES: mutex(i) held, or no other thread touches the store.
  std::span<float> data(std::size_t i) { return {arena_.data() + tensors_[i].offset, tensors_[i].size}; }
  std::span<const float> data(std::size_t i) const {
    return {arena_.data() + tensors_[i].offset, tensors_[i].size};
  }
  // The whole arena, where it stays for the store's life, for a reader that takes no lock: one that tolerates a
  // float written while it reads (the kernel sending a chunk that a delta will answer: dataplane/line_runner.hpp).
  std::span<const float> arena() const { return {arena_.data(), arena_.size()}; }

  // Copies the whole arena into `out`, tensor by tensor in reverse order, each under its lock.
  // REQUIRES: out.size() == size(); no tensor lock held by the caller.
  void fetch(std::span<float> out) const;
  // Copies the floats [begin, begin + out.size()) into `out`, each tensor's part under its lock (a round's snapshot
  // of one chunk, taken just before the chunk is sent or reduced).
  // REQUIRES: begin + out.size() <= size(); no tensor lock held by the caller.
  void fetch_range(std::size_t begin, std::span<float> out) const;

  // Overwrites the whole arena from `in` (warm start, checkpoint restore), tensor by tensor under its lock.
  // REQUIRES: in.size() == size(); no tensor lock held by the caller.
  void assign(std::span<const float> in);

  // Calls fn(offset, tensor floats) for every tensor in reverse order, each under its lock: the elastic update.
  // REQUIRES: no tensor lock held by the caller; fn takes no tensor lock.
  template <class Fn>
  void update_each(Fn&& fn) {
    update_range(0, size(), fn);
  }

  // The same for the floats in [begin, end) only: fn(offset, floats) for each tensor's part of the range, in
  // reverse order, each under its lock (the elastic update of one chunk, as its mean comes).
  // REQUIRES: begin <= end <= size(); no tensor lock held by the caller; fn takes no tensor lock.
  template <class Fn>
  void update_range(std::size_t begin, std::size_t end, Fn&& fn) {
    visit_range(begin, end, [&](std::size_t from, std::size_t to) {
      fn(from, std::span<float>(arena_.data() + from, to - from));
    });
  }

 private:
  // Calls fn(from, to) for each tensor's part [from, to) of [begin, end), in reverse order, under its lock.
  template <class Fn>
  void visit_range(std::size_t begin, std::size_t end, Fn&& fn) const {
    if (begin >= end) return;
    for (std::size_t i = last_tensor_before(end); i-- > 0;) {
      const Tensor& t = tensors_[i];
      if (t.offset + t.size <= begin) break;
      std::lock_guard<std::mutex> hold(locks_[i]);
      fn(std::max(begin, t.offset), std::min(end, t.offset + t.size));
    }
  }

  // How many tensors start before `end` (tensors lie in the arena in order).
  std::size_t last_tensor_before(std::size_t end) const;

  std::vector<Tensor> tensors_;
  LargeBuffer<float> arena_;  // huge pages: a round's fetch and update pass over it (base/large_buffer.hpp)
  std::unique_ptr<std::mutex[]> locks_;
  std::uint64_t signature_ = 0;
};

}  // namespace gridtrain::learner
