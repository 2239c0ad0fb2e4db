#include "learner/parameter_store.hpp"

#include <algorithm>
#include <cassert>

#include "base/check.hpp"

namespace gridtrain::learner {

namespace {

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

ParameterStore::ParameterStore(std::vector<TensorSpec> specs) : locks_(new std::mutex[specs.size()]) {
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
}

void ParameterStore::fetch(std::span<float> out) const {
  assert(out.size() == size());
  for (std::size_t i = tensors_.size(); i-- > 0;) {
    std::lock_guard<std::mutex> hold(locks_[i]);
    auto src = data(i);
    std::copy(src.begin(), src.end(), out.begin() + static_cast<std::ptrdiff_t>(tensors_[i].offset));
  }
}

void ParameterStore::fetch_range(std::size_t begin, std::span<float> out) const {
  assert(begin + out.size() <= size());
  visit_range(begin, begin + out.size(), [&](std::size_t from, std::size_t to) {
    std::copy(arena_.begin() + static_cast<std::ptrdiff_t>(from), arena_.begin() + static_cast<std::ptrdiff_t>(to),
              out.begin() + static_cast<std::ptrdiff_t>(from - begin));
  });
}

std::size_t ParameterStore::last_tensor_before(std::size_t end) const {
  const auto it =
      std::partition_point(tensors_.begin(), tensors_.end(), [&](const Tensor& t) { return t.offset < end; });
  return static_cast<std::size_t>(it - tensors_.begin());
}

void ParameterStore::assign(std::span<const float> in) {
  assert(in.size() == size());
  update_each([&](std::size_t offset, std::span<float> t) {
    std::copy_n(in.begin() + static_cast<std::ptrdiff_t>(offset), t.size(), t.begin());
  });
}

}  // namespace gridtrain::learner
