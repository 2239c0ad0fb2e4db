// Admission (dataplane/admission.hpp): slots for handshakes, in all and per source address.
#include <doctest/doctest.h>

#include <memory>
#include <optional>
#include <vector>

#include "dataplane/admission.hpp"

using gridtrain::dataplane::Admission;

TEST_CASE("one address holds at most its share; others still find a slot; a ticket frees its slot when it goes") {
  auto admission = std::make_shared<Admission>(6, 2);
  std::vector<Admission::Ticket> held;
  for (int i = 0; i < 2; ++i) {
    auto r = admission->admit("10.0.0.9");
    REQUIRE(r.ticket);
    held.push_back(std::move(*r.ticket));
  }
  auto third = admission->admit("10.0.0.9");
  CHECK_FALSE(third.ticket);
  CHECK(third.busy == Admission::Busy::address);
  CHECK(admission->pending_from("10.0.0.9") == 2);
  auto other = admission->admit("10.0.0.1");
  REQUIRE(other.ticket);
  CHECK(admission->pending() == 3);
  held.pop_back();  // one of the flood's handshakes ended
  CHECK(admission->pending_from("10.0.0.9") == 1);
  CHECK(admission->admit("10.0.0.9").ticket.has_value());  // admitted, and freed again as the result goes
  CHECK(admission->pending() == 2);
}

TEST_CASE("in all, at most the total: the next address is told busy for the total, not for itself") {
  auto admission = std::make_shared<Admission>(4, 2);
  std::vector<Admission::Ticket> held;
  for (const char* from : {"a", "a", "b", "b"}) held.push_back(std::move(*admission->admit(from).ticket));
  auto next = admission->admit("c");
  CHECK_FALSE(next.ticket);
  CHECK(next.busy == Admission::Busy::total);
  CHECK(admission->pending_from("c") == 0);
  held.clear();
  CHECK(admission->pending() == 0);
}

TEST_CASE("a ticket outlives its admission's owner: the slot is freed where the ticket goes") {
  std::optional<Admission::Ticket> late;
  std::weak_ptr<Admission> watch;
  {
    auto admission = std::make_shared<Admission>(2, 1);
    watch = admission;
    late.emplace(std::move(*admission->admit("x").ticket));
  }
  CHECK_FALSE(watch.expired());  // the ticket keeps it
  late.reset();
  CHECK(watch.expired());
}
