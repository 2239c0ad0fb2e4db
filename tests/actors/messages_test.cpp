// Every message type crosses a real connection whole: CAF 0.17 sends an unregistered type EMPTY.
#include <doctest/doctest.h>

#include <caf/io/all.hpp>

#include <chrono>

#include "actors/messages.hpp"
#include "actors/system_config.hpp"
#include "test_support.hpp"

namespace gridtrain::testing {
namespace {

using namespace gridtrain::actors;

// Two actor systems in one process, connected over loopback TCP: `here` talks to an echo actor `there`.
struct Connection {
  Connection() : config(cluster_config(2, 1.0)), here_config(config), there_config(config), here(here_config),
                 there(there_config), self(here) {
    // The unused argument: CAF 0.17 spawns an actor without arguments through a null pointer to an empty
    // tuple, which UBSan (make asan) reports.
    auto echo_actor = there.spawn(
        [](caf::event_based_actor* self, int) -> caf::behavior {
          self->set_default_handler([](caf::scheduled_actor*, caf::message_view& x) -> caf::result<caf::message> {
            return x.move_content_to_message();
          });
          return {[] {}};
        },
        0);
    auto port = there.middleman().publish(echo_actor, 0, "127.0.0.1");
    REQUIRE(port);
    auto remote = here.middleman().remote_actor("127.0.0.1", *port);
    REQUIRE(remote);
    echo = *remote;
    local_echo = echo_actor;
  }
  ~Connection() {
    caf::anon_send_exit(local_echo, caf::exit_reason::kill);
    echo = nullptr;
  }

  template <class T>
  T round_trip(const T& x) {
    T out;
    bool got = false;
    self->request(echo, std::chrono::seconds(30), x)
        .receive([&](T& y) { out = std::move(y); got = true; },
                 [&](caf::error& e) { FAIL("no echo: " << here.render(e)); });
    CHECK(got);
    return out;
  }

  config::Config config;
  SystemConfig here_config, there_config;
  caf::actor_system here, there;
  caf::scoped_actor self;
  caf::actor echo, local_echo;
};

template <class T>
std::string text(const T& x) {
  return caf::deep_to_string(x);
}

}  // namespace

TEST_CASE("every message type crosses a real connection whole") {
  Connection c;
  const caf::actor a = caf::actor_cast<caf::actor>(c.self);
  const allreduce::RoundKey key{3, 5, 1, 7, 11};
  FloatPayload payload{{1.5f, -2.25f, 3e7f, 0.0f}};

  const Join join{42, "h:1", "h:11", 0xabcdef, 99, protocol_version, 5, 0x1234567890abcdefull, "proof", a,
                  std::vector<caf::actor>(kDimsOffered, a), std::vector<caf::actor>(kDimsOffered, a)};
  CHECK(text(c.round_trip(join)) == text(join));
  const JoinChallenge challenge{42, 5, 0xfedcba0987654321ull};
  CHECK(text(c.round_trip(challenge)) == text(challenge));
  const Welcome welcome{42, 3, "grid:\n  dims: 2\n", a, "h:9", 9};
  CHECK(text(c.round_trip(welcome)) == text(welcome));
  const Reject reject{42, "a different model"};
  CHECK(text(c.round_trip(reject)) == text(reject));
  const Leave leave{42, 3};
  CHECK(text(c.round_trip(leave)) == text(leave));
  const JoinOutcome outcome{JoinResult::rejected, "why"};
  CHECK(c.round_trip(outcome).reason == "why");
  CHECK(c.round_trip(outcome).result == JoinResult::rejected);

  const LineSettings settings{1000, 3, {0.75, 0.5, 0.25, allreduce::QuorumMode::timeout, 300, 64, 0.3}};
  const StartLine start{3, 5, 1, 7, {{42, a, "h:1", "h:11"}, {43, a, "h:2", "h:12"}}, settings, a};
  CHECK(text(c.round_trip(start)) == text(start));
  const StopLine stop{3, 5, 1, 7};
  CHECK(text(c.round_trip(stop)) == text(stop));
  const StartRound round{key};
  CHECK(c.round_trip(round).key == key);

  const RoundDone done{key, 2, 1};
  CHECK(text(c.round_trip(done)) == text(done));

  const LayoutState layout{2, 0, 2, 3, {42}, {0, 1}, {1}, {0}, {42}};
  const GridState grid{3, 5, 2, {3, 3}, {{{42, "h:1", {0, 1}, {1}}, a, {a, a}, {a}, "h:11"}}, layout, 42, {42}};
  const auto grid_back = c.round_trip(grid);
  CHECK(text(grid_back) == text(grid));
  CHECK(grid_back.members.at(0).dimension_nodes.size() == 2);
  CHECK(grid_back.layout.coords == layout.coords);
  const NodeFigures figures{10, 0.5, 2.0, 100, -1, 3, 4};
  const NodeReport report{42, figures, payload, 3, 5};
  const auto report_back = c.round_trip(report);
  CHECK(text(report_back) == text(report));
  CHECK(report_back.sample == payload);
  GridView view{3, 5, 2, {3, 3}, {}, 42, {1, 2, 3, 4, 5, 6, 7, 8, 9}};
  view.nodes.push_back(NodeView{{42, "h:1", {0, 1}, {1}}, figures, 0.125});
  CHECK(text(c.round_trip(view)) == text(view));
  const RoundStats stats{1, 2, 3, 4, 5, 6, 7, 8, 9};
  CHECK(text(c.round_trip(stats)) == text(stats));
  const NodeStats node_stats{42, true, {DimensionStats{1, 5, 7, 3, stats}}, 9, 4, {1, 2, 3, 4, 5}, {6, 7, 8}, {}};
  CHECK(text(c.round_trip(node_stats)) == text(node_stats));
}

TEST_CASE("a large float payload crosses the wire as raw bytes, bit for bit") {
  Connection c;
  FloatPayload big;
  big.values.resize(1 << 20);
  for (std::size_t i = 0; i < big.values.size(); ++i) big.values[i] = static_cast<float>(i) * 0.5f - 1e5f;
  const NodeReport report{42, {}, big, 3, 5};
  CHECK(c.round_trip(report).sample == big);
}

TEST_CASE("a payload that announces more floats than allowed is refused when read") {
  caf::binary_serializer::container_type buffer;
  {
    caf::binary_serializer sink{nullptr, buffer};
    std::uint64_t huge = max_payload_floats + 1;
    REQUIRE_FALSE(sink(huge));
  }
  caf::binary_deserializer source{nullptr, buffer};
  FloatPayload x;
  CHECK(source(x));  // an error, and no allocation of gigabytes
  CHECK(x.values.empty());
}

TEST_CASE("a payload that announces more floats than its message holds is refused before anything is allocated") {
  // 2^28 floats (1 GiB) allowed, 16 bytes there: the count is checked against the bytes, not only the limit.
  caf::binary_serializer::container_type buffer;
  {
    caf::binary_serializer sink{nullptr, buffer};
    std::uint64_t declared = max_payload_floats;
    float four[4] = {1, 2, 3, 4};
    REQUIRE_FALSE(sink(declared));
    REQUIRE_FALSE(sink.apply_raw(sizeof four, four));
  }
  caf::binary_deserializer source{nullptr, buffer};
  FloatPayload x;
  const std::uint64_t before = refused_payloads();
  const caf::error refused = source(x);
  CHECK(refused);
  CHECK(x.values.capacity() == 0);
  CHECK(refused_payloads() == before + 1);  // counted where /metrics reads it
}

}  // namespace gridtrain::testing
