#include "learner/parameter_store.hpp"

#include <algorithm>
#include <string>

#include "base/check.hpp"
#include "base/float_loop.hpp"

namespace gridtrain::learner {

namespace {

// The passes over a tensor's pending updates: a PyTorch node's step() runs one over the whole model after every
// round, on its training thread, and the data plane one as it reads a chunk. GRIDTRAIN_FLOAT_LOOPs, so that they
// vectorize: written in place, the aliasing checks GCC's -O2 will not add left them scalar.
GRIDTRAIN_FLOAT_LOOP void add_run(std::size_t n, float* __restrict into, const float* __restrict pending) {
  for (std::size_t k = 0; k < n; ++k) into[k] += pending[k];
}

// Adds the pending updates to the model and clears them; with `taken`, also copies them there.
GRIDTRAIN_FLOAT_LOOP void apply_run(std::size_t n, float* __restrict model, float* __restrict pending,
                                    float* __restrict taken) {
  if (taken) {
    for (std::size_t k = 0; k < n; ++k) {
      taken[k] = pending[k];
      model[k] += pending[k];
      pending[k] = 0.0f;
    }
    return;
  }
  for (std::size_t k = 0; k < n; ++k) {
    model[k] += pending[k];
    pending[k] = 0.0f;
  }
}

// FNV-1a: stable across platforms and runs, which std::hash is not.
struct Fnv1a {
  std::uint64_t h = 1469598103934665603ull;
  void add(const void* p, std::size_t n) {
    auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  void add_u64(std::uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    add(b, 8);
  }
};

}  // namespace

std::size_t TensorSpec::size() const {
  std::size_t n = 1;
  for (int e : shape) n *= static_cast<std::size_t>(e);
  return n;
}

ParameterStore::ParameterStore(std::vector<TensorSpec> specs, UpdateMode mode)
    : mode_(mode), locks_(new std::mutex[specs.size()]) {
  Fnv1a hash;
  hash.add_u64(specs.size());
  std::size_t offset = 0;
  tensors_.reserve(specs.size());
  for (auto& s : specs) {
    if (std::any_of(s.shape.begin(), s.shape.end(), [](int e) { return e < 1; }))
      precondition_violated("tensor '" + s.name + "' has an extent < 1");
    Tensor t{std::move(s.name), std::move(s.shape), offset, 0};
    t.size = TensorSpec{t.name, t.shape}.size();
    offset += t.size;
    hash.add_u64(t.name.size());
    hash.add(t.name.data(), t.name.size());
    hash.add_u64(t.shape.size());
    for (int e : t.shape) hash.add_u64(static_cast<std::uint64_t>(e));
    tensors_.push_back(std::move(t));
  }
  arena_.assign(offset, 0.0f);
  signature_ = hash.h;
  if (mode_ == UpdateMode::deferred) {
    pending_.assign(offset, 0.0f);
    has_pending_.reset(new bool[tensors_.size()]());
  }
}

void ParameterStore::fetch(std::span<float> out) const {
  GRIDTRAIN_REQUIRE(out.size() == size());
  fetch_range(0, out);
}

void ParameterStore::copy_model(std::size_t from, std::size_t to, float* into) const {
  std::copy(arena_.begin() + static_cast<std::ptrdiff_t>(from), arena_.begin() + static_cast<std::ptrdiff_t>(to),
            into);
  if (mode_ == UpdateMode::deferred) add_run(to - from, into, pending_.data() + from);
}

void ParameterStore::fetch_range(std::size_t begin, std::span<float> out) const {
  GRIDTRAIN_REQUIRE(begin + out.size() <= size());
  visit_range(begin, begin + out.size(),
              [&](std::size_t, std::size_t from, std::size_t to) { copy_model(from, to, out.data() + (from - begin)); });
}

void ParameterStore::fetch_range_with_outer(std::size_t begin, std::span<float> out, std::span<float> outer) {
  GRIDTRAIN_REQUIRE(outer.size() == out.size() && begin + out.size() <= size());
  make_outer();
  visit_range(begin, begin + out.size(), [&](std::size_t i, std::size_t from, std::size_t to) {
    if (!outer_ready_[i]) start_outer(i);
    copy_model(from, to, out.data() + (from - begin));
    std::copy(outer_.begin() + static_cast<std::ptrdiff_t>(from), outer_.begin() + static_cast<std::ptrdiff_t>(to),
              outer.data() + (from - begin));
  });
}

std::size_t ParameterStore::last_tensor_before(std::size_t end) const {
  const auto it =
      std::partition_point(tensors_.begin(), tensors_.end(), [&](const Tensor& t) { return t.offset < end; });
  return static_cast<std::size_t>(it - tensors_.begin());
}

void ParameterStore::assign(std::span<const float> in) {
  GRIDTRAIN_REQUIRE(in.size() == size());
  reset_outer();  // the outer state belonged to the model this one replaces
  if (mode_ == UpdateMode::in_place) {
    update_each([&](std::size_t offset, std::span<float> t) {
      std::copy_n(in.begin() + static_cast<std::ptrdiff_t>(offset), t.size(), t.begin());
    });
    return;
  }
  // The owner may be writing the model as we read it: what it writes after our read stays its change.
  defer_range(0, size(), [&](std::size_t offset, std::span<float> pending) {
    for (std::size_t i = 0; i < pending.size(); ++i) pending[i] = in[offset + i] - arena_[offset + i];
  });
}

void ParameterStore::make_outer() {
  if (outer_made_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> hold(outer_alloc_);
  if (outer_made_.load(std::memory_order_relaxed)) return;
  outer_.assign(size(), 0.0f);
  velocity_.assign(size(), 0.0f);
  outer_ready_.reset(new bool[tensors_.size()]());
  outer_made_.store(true, std::memory_order_release);
}

void ParameterStore::start_outer(std::size_t i) {
  const Tensor& t = tensors_[i];
  copy_model(t.offset, t.offset + t.size, outer_.data() + t.offset);
  std::fill_n(velocity_.begin() + static_cast<std::ptrdiff_t>(t.offset), t.size, 0.0f);
  outer_ready_[i] = true;
}

void ParameterStore::reset_outer() {
  if (!has_outer()) return;
  visit_range(0, size(), [&](std::size_t i, std::size_t, std::size_t) { outer_ready_[i] = false; });
}

void ParameterStore::outer_state(std::span<float> outer, std::span<float> velocity) const {
  GRIDTRAIN_REQUIRE(outer.size() == size() && velocity.size() == size());
  const bool made = has_outer();
  visit_range(0, size(), [&](std::size_t i, std::size_t from, std::size_t to) {
    const auto first = static_cast<std::ptrdiff_t>(from), last = static_cast<std::ptrdiff_t>(to);
    if (made && outer_ready_[i]) {
      std::copy(outer_.begin() + first, outer_.begin() + last, outer.begin() + first);
      std::copy(velocity_.begin() + first, velocity_.begin() + last, velocity.begin() + first);
    } else {
      copy_model(from, to, outer.data() + from);
      std::fill(velocity.begin() + first, velocity.begin() + last, 0.0f);
    }
  });
}

void ParameterStore::set_outer_state(std::span<const float> outer, std::span<const float> velocity) {
  GRIDTRAIN_REQUIRE(outer.size() == size() && velocity.size() == size());
  make_outer();
  visit_range(0, size(), [&](std::size_t i, std::size_t from, std::size_t to) {
    std::copy(outer.begin() + static_cast<std::ptrdiff_t>(from), outer.begin() + static_cast<std::ptrdiff_t>(to),
              outer_.begin() + static_cast<std::ptrdiff_t>(from));
    std::copy(velocity.begin() + static_cast<std::ptrdiff_t>(from), velocity.begin() + static_cast<std::ptrdiff_t>(to),
              velocity_.begin() + static_cast<std::ptrdiff_t>(from));
    outer_ready_[i] = true;
  });
}

void ParameterStore::require_mode(UpdateMode mode, const char* what) const {
  if (mode_ != mode)
    precondition_violated(std::string("ParameterStore::") + what + " on a store whose updates are " +
                          (mode_ == UpdateMode::deferred ? "deferred" : "in place"));
}

void ParameterStore::mark_pending(std::size_t i) {
  has_pending_[i] = true;
  any_pending_.store(true, std::memory_order_release);
}

template <class Fn>
void ParameterStore::drain_pending(const char* what, Fn&& fn) {
  require_mode(UpdateMode::deferred, what);
  if (!any_pending_.exchange(false, std::memory_order_acq_rel)) return;
  const auto started = std::chrono::steady_clock::now();
  for (std::size_t i = tensors_.size(); i-- > 0;) {
    std::lock_guard<std::mutex> hold(locks_[i]);
    if (!has_pending_[i]) continue;
    fn(i);
    has_pending_[i] = false;
  }
  deferred_apply_ns_.fetch_add(std::chrono::nanoseconds(std::chrono::steady_clock::now() - started).count(),
                               std::memory_order_relaxed);
}

std::size_t ParameterStore::apply_deferred() {
  std::size_t applied = 0;
  drain_pending("apply_deferred", [&](std::size_t i) {
    const Tensor& t = tensors_[i];
    apply_run(t.size, arena_.data() + t.offset, pending_.data() + t.offset, nullptr);
    applied += t.size;
  });
  return applied;
}

std::vector<ParameterStore::Range> ParameterStore::take_deferred(std::span<float> out) {
  GRIDTRAIN_REQUIRE(out.size() == size());
  std::vector<Range> taken;  // in reverse tensor order as drained; merged where adjacent
  drain_pending("take_deferred", [&](std::size_t i) {
    const Tensor& t = tensors_[i];
    apply_run(t.size, arena_.data() + t.offset, pending_.data() + t.offset, out.data() + t.offset);
    if (!taken.empty() && taken.back().offset == t.offset + t.size) {
      taken.back().offset = t.offset;
      taken.back().size += t.size;
    } else {
      taken.push_back({t.offset, t.size});
    }
  });
  std::reverse(taken.begin(), taken.end());
  return taken;
}

void ParameterStore::update_mirror(std::span<const float> in) {
  require_mode(UpdateMode::deferred, "update_mirror");
  GRIDTRAIN_REQUIRE(in.size() == size());
  visit_range(0, size(), [&](std::size_t, std::size_t from, std::size_t to) {
    std::copy(in.begin() + static_cast<std::ptrdiff_t>(from), in.begin() + static_cast<std::ptrdiff_t>(to),
              arena_.begin() + static_cast<std::ptrdiff_t>(from));
  });
}

}  // namespace gridtrain::learner
