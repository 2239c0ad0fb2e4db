#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "base/result.hpp"

using gridtrain::Error;
using gridtrain::Result;
using gridtrain::Status;

TEST_CASE("an error prints as one line of source, position, key and message") {
  const Error e{"cluster.yaml", 12, 5, "allreduce.reduce_threshold", "expected a number in (0, 1], found 1.5"};
  CHECK(e.to_string() == "cluster.yaml:12:5: allreduce.reduce_threshold: expected a number in (0, 1], found 1.5");
}

TEST_CASE("an error leaves out the parts it does not have") {
  CHECK(Error{"--set", 0, 0, "grid.dims", "expected x, found y"}.to_string() ==
        "--set: grid.dims: expected x, found y");
  CHECK(Error{"c.yaml", 3, 0, "", "bad"}.to_string() == "c.yaml:3: bad");
  CHECK(Error{"c.yaml", 0, 7, "k", "bad"}.to_string() == "c.yaml: k: bad");  // a column without a line means nothing
  CHECK(Error{"", 0, 0, "k", "bad"}.to_string() == "k: bad");
  CHECK(Error{.message = "bad"}.to_string() == "bad");
  CHECK(Error{}.to_string().empty());
}

TEST_CASE("a result holds either a value or an error") {
  Result<int> good = 42;
  REQUIRE(good.ok());
  CHECK(static_cast<bool>(good));
  CHECK(good.value() == 42);

  Result<int> bad = Error{"f", 1, 2, "k", "m"};
  REQUIRE_FALSE(bad.ok());
  CHECK_FALSE(static_cast<bool>(bad));
  CHECK(bad.error() == Error{"f", 1, 2, "k", "m"});
}

TEST_CASE("a result can move its value out, for types that only move") {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  std::unique_ptr<int> p = std::move(r).value();
  REQUIRE(p);
  CHECK(*p == 7);
}

TEST_CASE("a status is ok by default and carries an error otherwise") {
  Status fine;
  CHECK(fine.ok());
  Status broken = Error{.message = "disk full"};
  REQUIRE_FALSE(broken.ok());
  CHECK(broken.error().message == "disk full");
}

TEST_CASE("text quoted into a message is kept to one short line") {
  using gridtrain::printable;
  CHECK(printable("plain text") == "plain text");
  CHECK(printable("two\nlines\tand\r\x01") == "two\\nlines\\tand\\r\\x01");
  CHECK(printable(std::string(200, 'a')) == std::string(80, 'a') + "...");
  CHECK(printable("") == "");
}
