#include <doctest/doctest.h>

#include "learner/probe.hpp"

namespace gridtrain::learner {

TEST_CASE("a probe holds probe_floats floats, all at the value derived from the node id") {
  config::LearnerConfig learner = config::defaults().learner;
  learner.kind = config::LearnerKind::probe;
  learner.probe_floats = 10;
  learner.probe_value.reset();
  auto store = make_probe_store(learner, 12345);
  REQUIRE(store->size() == 10);
  REQUIRE(store->tensor_count() == 1);
  CHECK(store->tensor(0).name == "probe");
  for (float x : store->data(0)) CHECK(x == 345.0f);  // node id mod 1000
}

TEST_CASE("a probe value, when set, is every node's starting value") {
  config::LearnerConfig learner = config::defaults().learner;
  learner.probe_floats = 3;
  learner.probe_value = 2.5;
  auto store = make_probe_store(learner, 12345);
  for (float x : store->data(0)) CHECK(x == 2.5f);
}

TEST_CASE("probes of different lengths are different models") {
  config::LearnerConfig a = config::defaults().learner;
  a.probe_floats = 10;
  config::LearnerConfig b = a;
  b.probe_floats = 11;
  CHECK(make_probe_store(a, 1)->signature() == make_probe_store(a, 2)->signature());
  CHECK(make_probe_store(a, 1)->signature() != make_probe_store(b, 1)->signature());
}

}  // namespace gridtrain::learner
