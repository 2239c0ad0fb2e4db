#pragma once
// ParameterStore: the model's tensors in one contiguous float arena (a "tensor collective": the allreduce sends
// it as one vector), with one mutex per tensor.
//
// Locking rule (docs/design.md, "The learner"): whoever reads or writes a tensor's floats holds that
// tensor's mutex, and holds no other tensor's mutex at the same time. The learner takes a tensor's lock only to
// apply that tensor's update; the allreduce's fetch and elastic update take the same locks one tensor at a time,
// in reverse tensor order (the backward pass updates the last tensor first, so reverse order crosses the learner
// least often). Holding one lock at a time means no lock ordering, hence no deadlock.
//
// Two update modes (docs/design.md, "The PyTorch front end"):
// - in_place (the native learner): the rounds' elastic updates are written into the model's floats under each
//   tensor's lock, which the learner takes too.
// - deferred (a model whose floats a writer outside our locks owns: PyTorch's optimizer writes its parameters, which
//   are views of this arena): the rounds never write the model. Their updates collect in a pending buffer of the
//   same layout (defer_range), and the owner adds them to the model on its own thread (apply_deferred), between its
//   optimizer's steps. Readers see the model as it will be once they are applied (fetch and fetch_range give model
//   plus pending), so a round that starts before the owner applied the last one's pull does not pull again. So no
//   float of the model is written by two threads, and the owner's forward and backward passes see no float move.

#include <algorithm>
#include <atomic>
#include <chrono>
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

// How the rounds' elastic updates reach the model (see above).
enum class UpdateMode { in_place, deferred };

class ParameterStore {
 public:
  struct Tensor {
    std::string name;
    std::vector<int> shape;
    std::size_t offset = 0;  // into the arena, in floats
    std::size_t size = 0;
  };

  // A run of floats of the arena, [offset, offset + size).
  struct Range {
    std::size_t offset = 0;
    std::size_t size = 0;
    friend bool operator==(const Range&, const Range&) = default;
  };

  // REQUIRES: every extent of every shape >= 1.
  explicit ParameterStore(std::vector<TensorSpec> tensors, UpdateMode mode = UpdateMode::in_place);

  ParameterStore(const ParameterStore&) = delete;
  ParameterStore& operator=(const ParameterStore&) = delete;

  std::size_t size() const { return arena_.size(); }  // floats in the arena
  UpdateMode mode() const { return mode_; }
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

  // Copies the whole model into `out`, tensor by tensor in reverse order, each under its lock (deferred: with the
  // pending updates added).
  // REQUIRES: out.size() == size(); no tensor lock held by the caller.
  void fetch(std::span<float> out) const;
  // Copies the model's floats [begin, begin + out.size()) into `out`, each tensor's part under its lock (a round's
  // snapshot of one chunk, taken just before the chunk is sent or reduced; deferred: with the pending updates added).
  // REQUIRES: begin + out.size() <= size(); no tensor lock held by the caller.
  void fetch_range(std::size_t begin, std::span<float> out) const;

  // Makes the model `in` (warm start, checkpoint restore), tensor by tensor under its lock. Deferred: as a pending
  // update, in - model, which the owner's next apply_deferred() adds (whatever the owner changed meanwhile is kept).
  // REQUIRES: in.size() == size(); no tensor lock held by the caller.
  void assign(std::span<const float> in);

  // Calls fn(offset, tensor floats) for every tensor in reverse order, each under its lock: the elastic update.
  // REQUIRES: mode() == in_place; no tensor lock held by the caller; fn takes no tensor lock.
  template <class Fn>
  void update_each(Fn&& fn) {
    update_range(0, size(), fn);
  }

  // The same for the floats in [begin, end) only: fn(offset, floats) for each tensor's part of the range, in
  // reverse order, each under its lock (the elastic update of one chunk, as its mean comes).
  // REQUIRES: mode() == in_place; begin <= end <= size(); no tensor lock held by the caller; fn takes no tensor lock.
  template <class Fn>
  void update_range(std::size_t begin, std::size_t end, Fn&& fn) {
    require_mode(UpdateMode::in_place, "update_range");
    visit_range(begin, end, [&](std::size_t, std::size_t from, std::size_t to) {
      fn(from, std::span<float>(arena_.data() + from, to - from));
    });
  }

  // Deferred: fn(offset, pending floats) for each tensor's part of [begin, end), in reverse order, each under its
  // lock; fn adds the update it wants the model to get into the pending floats (allreduce::elastic_pull).
  // REQUIRES: mode() == deferred; begin <= end <= size(); no tensor lock held by the caller; fn takes no tensor lock.
  template <class Fn>
  void defer_range(std::size_t begin, std::size_t end, Fn&& fn) {
    require_mode(UpdateMode::deferred, "defer_range");
    visit_range(begin, end, [&](std::size_t i, std::size_t from, std::size_t to) {
      mark_pending(i);
      fn(from, std::span<float>(pending_.data() + from, to - from));
    });
  }

  // Deferred, for the owner of the model's floats: adds the pending updates to the model and clears them, each
  // tensor that has some under its lock. Returns the floats updated (0: nothing was pending; then it takes no lock).
  // REQUIRES: mode() == deferred; called by the owner (the only writer of the model) or while no one writes it;
  // no tensor lock held by the caller.
  std::size_t apply_deferred();
  // Deferred, for an owner that keeps the model elsewhere (a GPU) and this arena as its host mirror: moves the
  // pending updates into `out` at their offsets (the tensors without any are not written), adds them to the mirror
  // too, and returns the ranges written, adjacent tensors merged. The owner adds `out` over those ranges to its
  // model. REQUIRES: as apply_deferred; out.size() == size().
  std::vector<Range> take_deferred(std::span<float> out);
  // Deferred, for the owner of a host mirror: the owner's model, as it is now, into the mirror (each tensor under its
  // lock); the pending updates stay pending. REQUIRES: as apply_deferred; in.size() == size().
  void update_mirror(std::span<const float> in);
  // Deferred: the time spent adding pending updates to the model (apply_deferred, take_deferred), in all. It is
  // averaging's cost on the owner's thread, which a training node counts in its cpu_share (learner/round_pacing.hpp).
  std::chrono::nanoseconds deferred_apply_time() const {
    return std::chrono::nanoseconds(deferred_apply_ns_.load(std::memory_order_relaxed));
  }
  // The outer optimizer's state (allreduce.outer nesterov: allreduce/outer_step.hpp): per float, the outer parameters
  // o and the outer momentum v, laid out as the arena and guarded by the same tensor locks. A tensor's state is made
  // at the first outer step that touches it, from the model as it is then (deferred: with the pending updates) and
  // no momentum; so a store that never sees an outer step holds none.
  //
  // fn(offset, target, outer, velocity) for each tensor's part of [begin, end), in reverse order, each under its
  // lock: target is the model's floats (in place) or the pending buffer's (deferred), where the step adds o' - s.
  // REQUIRES: begin <= end <= size(); no tensor lock held by the caller; fn takes no tensor lock.
  template <class Fn>
  void outer_range(std::size_t begin, std::size_t end, Fn&& fn) {
    make_outer();
    visit_range(begin, end, [&](std::size_t i, std::size_t from, std::size_t to) {
      if (!outer_ready_[i]) start_outer(i);
      float* target = arena_.data();
      if (mode_ == UpdateMode::deferred) {
        mark_pending(i);
        target = pending_.data();
      }
      const std::size_t n = to - from;
      fn(from, std::span<float>(target + from, n), std::span<float>(outer_.data() + from, n),
         std::span<float>(velocity_.data() + from, n));
    });
  }
  // fetch_range's copy of [begin, begin + out.size()) into out, and the outer parameters o of the same floats into
  // outer, each tensor under its lock (made from the model now where a tensor has none): a round's snapshot and its
  // anchor (allreduce/outer_step.hpp). REQUIRES: outer.size() == out.size(); begin + out.size() <= size(); no tensor
  // lock held by the caller.
  void fetch_range_with_outer(std::size_t begin, std::span<float> out, std::span<float> outer);
  // Forgets the outer state: each tensor's is made again at its next outer step, from the model then (a warm start
  // or a restore gave the node another model: assign() calls it).
  void reset_outer();
  // Whether the store holds outer state, and a copy of it for a checkpoint: o and v per float (a tensor without
  // state yet: o the model, with its pending updates, and v 0). REQUIRES: outer.size() == velocity.size() == size().
  bool has_outer() const { return outer_made_.load(std::memory_order_acquire); }
  void outer_state(std::span<float> outer, std::span<float> velocity) const;
  // Restores the outer state of a checkpoint, after its model was assigned. REQUIRES: as outer_state.
  void set_outer_state(std::span<const float> outer, std::span<const float> velocity);

  // Deferred: the model's floats, for their owner to write without our locks (PyTorch's parameters are views of
  // them), and for the owner's own reads. REQUIRES: mode() == deferred.
  std::span<float> owner_arena() {
    require_mode(UpdateMode::deferred, "owner_arena");
    return {arena_.data(), arena_.size()};
  }

 private:
  // Calls fn(i, from, to) for each tensor i's part [from, to) of [begin, end), in reverse order, under its lock.
  template <class Fn>
  void visit_range(std::size_t begin, std::size_t end, Fn&& fn) const {
    if (begin >= end) return;
    for (std::size_t i = last_tensor_before(end); i-- > 0;) {
      const Tensor& t = tensors_[i];
      if (t.offset + t.size <= begin) break;
      std::lock_guard<std::mutex> hold(locks_[i]);
      fn(i, std::max(begin, t.offset), std::min(end, t.offset + t.size));
    }
  }

  // The model's floats [from, to) into `into`, with their pending updates in deferred mode: what a reader of the
  // model sees. REQUIRES: the lock of every tensor the range touches.
  void copy_model(std::size_t from, std::size_t to, float* into) const;
  // Allocates the outer state once (no tensor's ready); start_outer(i) makes tensor i's. REQUIRES: tensor i's lock.
  void make_outer();
  void start_outer(std::size_t i);
  // How many tensors start before `end` (tensors lie in the arena in order).
  std::size_t last_tensor_before(std::size_t end) const;
  // Aborts unless the store is in `mode`: `what` was called in the other one.
  void require_mode(UpdateMode mode, const char* what) const;
  // Tensor i has pending updates. REQUIRES: its lock held.
  void mark_pending(std::size_t i);
  // Calls fn(i) for each tensor i with pending updates, under its lock, and clears its mark after fn. `what` names
  // the caller for a broken precondition.
  template <class Fn>
  void drain_pending(const char* what, Fn&& fn);

  std::vector<Tensor> tensors_;
  UpdateMode mode_;
  LargeBuffer<float> arena_;  // huge pages: a round's fetch and update pass over it (base/large_buffer.hpp)
  std::unique_ptr<std::mutex[]> locks_;
  std::uint64_t signature_ = 0;
  // Deferred only (empty in place): the pending updates, laid out as the arena; per tensor, whether it has any
  // (under the tensor's lock); and whether any tensor may have some, so that the owner's apply after a step in which
  // no round ended takes no lock at all. Set after a tensor's mark (under its lock), cleared before the marks are
  // read: an update that lands while they are read is applied now or at the next apply, never lost.
  LargeBuffer<float> pending_;
  std::unique_ptr<bool[]> has_pending_;
  std::atomic<bool> any_pending_{false};
  std::atomic<std::int64_t> deferred_apply_ns_{0};  // deferred_apply_time()
  // The outer state (outer_range): allocated at the first outer step or restore, under outer_alloc_; per tensor,
  // whether its floats hold state (under the tensor's lock).
  mutable std::mutex outer_alloc_;
  std::atomic<bool> outer_made_{false};
  LargeBuffer<float> outer_;
  LargeBuffer<float> velocity_;
  std::unique_ptr<bool[]> outer_ready_;
};

}  // namespace gridtrain::learner
