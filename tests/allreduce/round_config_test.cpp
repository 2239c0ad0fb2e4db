#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "allreduce/round_config.hpp"

namespace gridtrain::allreduce {

TEST_CASE("the default round config is valid") { CHECK(validate(RoundConfig{}).ok()); }

TEST_CASE("a threshold or elastic rate outside (0, 1] is refused, naming the key and the value") {
  const struct {
    double RoundConfig::*field;
    const char* key;
  } fractions[] = {{&RoundConfig::reduce_threshold, "allreduce.reduce_threshold"},
                   {&RoundConfig::complete_threshold, "allreduce.complete_threshold"},
                   {&RoundConfig::advance_threshold, "allreduce.advance_threshold"},
                   {&RoundConfig::elastic_rate, "allreduce.elastic_rate"}};
  for (const auto& f : fractions) {
    CAPTURE(f.key);
    for (double bad : {0.0, -0.5, 1.5, std::nan("")}) {
      RoundConfig c;
      c.*f.field = bad;
      const Status st = validate(c);
      REQUIRE_FALSE(st.ok());
      CHECK(st.error().key == f.key);
      CHECK(st.error().message.find("expected a number in (0, 1]") != std::string::npos);
    }
    RoundConfig edge;
    edge.*f.field = 1.0;
    CHECK(validate(edge).ok());
    edge.*f.field = 1e-9;
    CHECK(validate(edge).ok());
  }
}

TEST_CASE("timeout quorum needs a timeout; fraction quorum does not") {
  RoundConfig c;
  c.quorum = QuorumMode::fraction;
  c.quorum_timeout_ms = 0;
  CHECK(validate(c).ok());
  c.quorum = QuorumMode::timeout;
  const Status st = validate(c);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().key == "allreduce.quorum_timeout_ms");
  CHECK(st.error().message == "expected > 0 with allreduce.quorum timeout, found 0");
}

TEST_CASE("a chunk of no floats, or an unknown quorum mode, is refused") {
  RoundConfig c;
  c.max_chunk_floats = 0;
  CHECK(validate(c).error().key == "allreduce.max_chunk_floats");
  RoundConfig mode;
  mode.quorum = static_cast<QuorumMode>(7);  // off the wire, an enum is any byte
  CHECK(validate(mode).error().key == "allreduce.quorum");
}

TEST_CASE("the outer step's rate lies in (0, 2] and its momentum in [0, 1)") {
  RoundConfig c;
  c.outer = OuterMode::nesterov;
  CHECK(validate(c).ok());
  c.outer_rate = 0;
  CHECK(validate(c).error().message == "expected a number in (0, 2], found 0");
  c.outer_rate = 2;
  CHECK(validate(c).ok());
  c.outer_rate = 2.5;
  CHECK(validate(c).error().key == "allreduce.outer_rate");
  c.outer_rate = 0.7;
  c.outer_momentum = 1;
  CHECK(validate(c).error().message == "expected a number in [0, 1), found 1");
  c.outer_momentum = 0;
  CHECK(validate(c).ok());
  RoundConfig mode;
  mode.outer = static_cast<OuterMode>(5);
  CHECK(validate(mode).error().key == "allreduce.outer");
}

TEST_CASE("nesterov is refused with a fraction quorum whose lines of two reduce from one model") {
  RoundConfig c;
  c.outer = OuterMode::nesterov;
  c.quorum = QuorumMode::fraction;
  CHECK(validate(c).error().key == "allreduce.outer");
  c.reduce_threshold = 0.75;  // ceil(0.75·2) = 2: both models
  CHECK(validate(c).ok());
  c.reduce_threshold = 0.5;
  c.quorum = QuorumMode::timeout;  // waits for all first; a late peer's chunk is skipped by the step
  CHECK(validate(c).ok());
  c.outer = OuterMode::elastic;
  c.quorum = QuorumMode::fraction;
  CHECK(validate(c).ok());
}

}  // namespace gridtrain::allreduce
