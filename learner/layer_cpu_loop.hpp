#pragma once
// The elementwise loops of the CPU backend (activations, bias sums, the optimizer) are memory-bound and run
// between GEMMs on one thread; left scalar they cost as much as the GEMMs of a small layer. The build compiles
// at -O2, where GCC's "very cheap" vectorizer skips loops of unknown length, so the loop is cut into blocks of
// a fixed 16, which it does vectorize. The vectorizer may not add aliasing checks either, so the body's pointers
// must be __restrict parameters of a [[gnu::noinline]] function (GCC loses __restrict on local pointers and
// when it inlines), and the body should be branch-free (a ?: between two plain values is fine).

#include <cstddef>

namespace gridtrain::learner {

template <class Body>
inline void vector_loop(std::size_t n, Body body) {  // by value: a closure in memory would alias the stores
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (std::size_t j = 0; j < 16; ++j) body(i + j);
  for (; i < n; ++i) body(i);
}

}  // namespace gridtrain::learner
