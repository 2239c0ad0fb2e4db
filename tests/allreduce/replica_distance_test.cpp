#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "allreduce/replica_distance.hpp"

namespace gridtrain::allreduce {

TEST_CASE("replica samples cover the model evenly, and are the whole model when it is small") {
  CHECK(replica_sample_indices(5) == std::vector<std::size_t>{0, 1, 2, 3, 4});
  const auto big = replica_sample_indices(1024);
  REQUIRE(big.size() == kMaxReplicaSample);
  CHECK(big[1] == 4);
  CHECK(big.back() == 1020);
  CHECK(replica_sample_indices(0).empty());
}

TEST_CASE("the distance to the replicas' mean is exact for a small model, and unknown without a sample") {
  const std::vector<float> a{0, 0}, b{2, 4};
  const auto d = replica_distances({&a, &b, nullptr}, 2);
  // The mean is (1, 2); each node is sqrt(1 + 4) away.
  CHECK(d[0] == doctest::Approx(std::sqrt(5.0)));
  CHECK(d[1] == doctest::Approx(std::sqrt(5.0)));
  CHECK(d[2] < 0);
}

TEST_CASE("the distance estimate scales a sample of a large model to the whole model") {
  // 1024 floats, sampled at 256 of them; node a is 0 everywhere and node b 2 everywhere: each is 1 from the mean
  // in every coordinate, sqrt(1024) = 32 in all.
  const std::vector<float> a(256, 0.0f), b(256, 2.0f);
  const auto d = replica_distances({&a, &b}, 1024);
  CHECK(d[0] == doctest::Approx(32.0));
  CHECK(d[1] == doctest::Approx(32.0));
}

}  // namespace gridtrain::allreduce
