// Joining: who gets in, who is turned away and why, run deterministically with real Nodes joining through a seed
// Node; and, in real time, joining over a real connection and a seed that cannot be reached.
#include <doctest/doctest.h>

#include <caf/io/all.hpp>
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include <unistd.h>

#include "actors/gate.hpp"
#include "actors/messages.hpp"
#include "actors/node_handle.hpp"
#include "actors/runtime.hpp"
#include "actors/token_proof.hpp"
#include "cluster_harness.hpp"
#include "deterministic_cluster.hpp"
#include "join_challenge.hpp"
#include "tests/base/require_ok.hpp"

namespace gridtrain::testing {
namespace {

std::size_t members_listed(DeterministicCluster& cluster) { return cluster.status().nodes.size(); }

// A TCP port on 127.0.0.1 that nothing listens on now (the system's pick, released at once).
std::uint16_t free_port() {
  const LoopbackSocket socket = bind_loopback();
  ::close(socket.fd);
  return socket.port;
}

}  // namespace

TEST_CASE("a node with a different model is rejected with a reason, and ends") {
  DeterministicCluster cluster(cluster_config(2, 1.0));
  cluster.add(1, make_store(64, 1.0f));
  auto other = make_store(65, 1.0f);
  cluster.start(cluster.setup(2, other));
  cluster.sim().run();
  const auto outcome = cluster.outcome(2);
  CHECK(outcome.result == actors::JoinResult::rejected);
  // The reason names both models, so that whoever runs the joiner sees what differs.
  CHECK(outcome.reason.find("different model") != std::string::npos);
  CHECK(outcome.reason.find(fmt::format("{:016x} with 65 floats", other->signature())) != std::string::npos);
  CHECK(outcome.reason.find(fmt::format("{:016x} with 64", cluster.store(1)->signature())) != std::string::npos);
  CHECK(cluster.ended(2));
  CHECK(cluster.members() == std::vector<std::uint64_t>{1});
  CHECK(cluster.grid_master().rejected == 1);
  CHECK(members_listed(cluster) == 1);
}

TEST_CASE("a node whose chunks would go on the wire in another format is rejected with a reason, and ends") {
  DeterministicCluster cluster(cluster_config(2, 1.0));
  cluster.add(1, make_store(64, 1.0f));
  auto setup = cluster.setup(2, make_store(64, 1.0f));
  setup.config.allreduce.wire = allreduce::WireFormat::int8;
  cluster.start(setup);
  cluster.sim().run();
  const auto outcome = cluster.outcome(2);
  CHECK(outcome.result == actors::JoinResult::rejected);
  CHECK(outcome.reason.find("allreduce.wire int8 differs from the cluster's fp32") != std::string::npos);
  CHECK(cluster.ended(2));
  CHECK(cluster.members() == std::vector<std::uint64_t>{1});
}

TEST_CASE("a node that cannot prove the cluster token is rejected; one that can is welcomed") {
  TokenFile right("alpha"), wrong("beta");
  auto config = cluster_config(2, 1.0);
  config.cluster.token_file = right.path();
  DeterministicCluster cluster(config);
  // Paced: the two members that end up sharing a line would otherwise average forever and never let the
  // simulation go idle.
  cluster.add(1, make_store(64, 1.0f), true);

  auto bad = cluster.setup(2, make_store(64, 1.0f));
  bad.credentials.token = token_in(wrong.path());
  cluster.start(bad);
  cluster.sim().run();
  const auto outcome = cluster.outcome(2);
  CHECK(outcome.result == actors::JoinResult::rejected);
  CHECK(outcome.reason.find("token") != std::string::npos);
  CHECK(cluster.ended(2));

  auto none = cluster.setup(3, make_store(64, 1.0f));
  none.credentials.token = token_in("");
  cluster.start(none);
  cluster.sim().run();
  CHECK(cluster.outcome(3).result == actors::JoinResult::rejected);
  CHECK(cluster.outcome(3).reason.find("token") != std::string::npos);
  CHECK(cluster.ended(3));

  cluster.start(cluster.setup(4, make_store(64, 1.0f), true));  // the cluster's own token file
  cluster.sim().run();
  CHECK(cluster.outcome(4).result == actors::JoinResult::welcomed);
  CHECK(cluster.members() == std::vector<std::uint64_t>{1, 4});
  CHECK(cluster.grid_master().rejected == 2);
  CHECK(members_listed(cluster) == 2);
}

TEST_CASE("a node started by start_node proves the token its cluster.token_file holds") {
  // The cases above give the joiners' Nodes their tokens as start_node does, from the token file; this holds
  // start_node to it.
  TokenFile file("alpha");
  auto config = cluster_config(2, 1.0);
  config.cluster.token_file = file.path();
  DeterministicSystem sim;
  actors::NodeOptions options = node_options(config, 1, make_store(8, 1.0f));
  options.listen = false;
  options.grid_master_thread = false;  // the test scheduler runs every actor
  auto started = actors::start_node(sim.system(), options);
  REQUIRE(started.ok());
  const caf::actor node = sim.adopt(started.value().actor());
  sim.run();
  const auto& s = state_of<actors::NodeState>(node);
  CHECK(s.setup.credentials.token == "alpha");
  CHECK(s.outcome.result == actors::JoinResult::welcomed);  // by the GridMaster it bootstrapped, with that token
  CHECK(state_of<actors::GridMasterState>(s.grid_master).setup.credentials.token == "alpha");
}

TEST_CASE("a join with another protocol version, a duplicate id or missing handles is rejected with a reason") {
  DeterministicCluster cluster(cluster_config(2, 1.0));
  const caf::actor first = cluster.add(1, make_store(64, 1.0f));
  const caf::actor me = cluster.sim().recorder("joiner");
  const auto& store = *cluster.store(1);
  auto join = [&](std::uint64_t id, std::uint32_t protocol, std::size_t handles) {
    return actors::Join{id, "test", "", store.signature(), store.size(), protocol, 1, 0, "", me,
                        std::vector<caf::actor>(handles, me), std::vector<caf::actor>(handles, me)};
  };
  // The answer to a join sent to the first node, our seed, its challenge answered: exactly one Reject for that
  // node id.
  auto reason_for = [&](const actors::Join& j) {
    join_with_challenge(cluster.sim(), first, cluster.grid_master_actor(), j);
    const auto rejects = take<actors::Reject>(me);
    REQUIRE_MESSAGE(messages(me).empty(), describe(me));
    REQUIRE(rejects.size() == 1);
    CHECK(rejects[0].node_id == j.node_id);
    return rejects[0].reason;
  };
  CHECK(reason_for(join(7, actors::protocol_version + 1, actors::kDimsOffered)).find("protocol") != std::string::npos);
  CHECK(reason_for(join(1, actors::protocol_version, actors::kDimsOffered)).find("already") != std::string::npos);
  CHECK(reason_for(join(8, actors::protocol_version, 2)).find("malformed") != std::string::npos);
  CHECK(cluster.members() == std::vector<std::uint64_t>{1});
  CHECK(cluster.grid_master().rejected == 3);
  CHECK(members_listed(cluster) == 1);
}

// A Join as the test's recorder `me` sends it for node `id`, with the store's model.
actors::Join recorded_join(const caf::actor& me, std::uint64_t id, const learner::ParameterStore& store) {
  const std::vector<caf::actor> handles(actors::kDimsOffered, me);
  return actors::Join{id, "test", "", store.signature(), store.size(), actors::protocol_version, 1, 0, "", me,
                      handles, handles};
}

// A cluster of one paced node with token "alpha", and a recorder to send Joins as.
struct TokenCluster {
  TokenFile token{"alpha"};
  DeterministicCluster cluster{with_token(cluster_config(2, 1.0), token)};
  caf::actor me = cluster.sim().recorder("joiner");
  TokenCluster() { cluster.add(1, make_store(64, 1.0f), true); }
  static config::Config with_token(config::Config config, const TokenFile& token) {
    config.cluster.token_file = token.path();
    return config;
  }
};

TEST_CASE("a join proof is good once: the same Join again is dropped and counted, before and after the node left") {
  TokenCluster t;
  auto& [token, cluster, me] = t;
  const auto answer =
      join_with_challenge(cluster.sim(), cluster.node(1), cluster.grid_master_actor(),
                          recorded_join(me, 9, *cluster.store(1)), token_in(token.path()));
  REQUIRE(answer.has_value());
  CHECK(take<actors::Welcome>(me).size() == 1);
  CHECK(cluster.members() == std::vector<std::uint64_t>{1, 9});

  // Replayed while it is a member: not even "already in the cluster"; nothing comes back.
  messages(me).clear();
  caf::anon_send(cluster.grid_master_actor(), *answer);
  cluster.sim().run();
  CHECK(cluster.grid_master().stale_join_proofs == 1);
  CHECK(received<actors::Reject>(me).empty());
  CHECK(received<actors::Welcome>(me).empty());

  // Replayed after it left: it does not come back.
  caf::anon_send(cluster.grid_master_actor(), actors::Leave{9, cluster.grid_master().epoch});
  cluster.sim().run();
  REQUIRE(cluster.members() == std::vector<std::uint64_t>{1});
  messages(me).clear();
  caf::anon_send(cluster.grid_master_actor(), *answer);
  caf::anon_send(cluster.node(1), *answer);  // through a seed, as the first Join came
  cluster.sim().run();
  CHECK(cluster.grid_master().stale_join_proofs == 3);
  CHECK(received<actors::Welcome>(me).empty());
  CHECK(cluster.members() == std::vector<std::uint64_t>{1});
  CHECK(cluster.grid_master().rejected == 0);
}

TEST_CASE("a nonce sent to one node proves nothing for another; a proof without the token is refused") {
  TokenCluster t;
  auto& [token, cluster, me] = t;
  const caf::actor gm = cluster.grid_master_actor();
  auto join = recorded_join(me, 9, *cluster.store(1));
  caf::anon_send(gm, join);
  cluster.sim().run();
  const auto challenges = take<actors::JoinChallenge>(me);
  REQUIRE(challenges.size() == 1);
  CHECK(challenges[0].nonce != 0);

  // Node 10 answers with node 9's nonce and a good proof for itself: dropped, and node 9's nonce stays good.
  auto other = join;
  other.node_id = 10;
  other.nonce = challenges[0].nonce;
  other.token_proof = actors::token_proof(token_in(token.path()), 10, other.nonce);
  caf::anon_send(gm, other);
  cluster.sim().run();
  CHECK(cluster.grid_master().stale_join_proofs == 1);
  CHECK(messages(me).empty());

  // Node 9 answers with a proof under another token: refused, and the nonce is used up.
  join.nonce = challenges[0].nonce;
  join.token_proof = actors::token_proof("beta", 9, join.nonce);
  caf::anon_send(gm, join);
  cluster.sim().run();
  const auto rejects = take<actors::Reject>(me);
  REQUIRE(rejects.size() == 1);
  CHECK(rejects[0].reason.find("token") != std::string::npos);
  join.token_proof = actors::token_proof(token_in(token.path()), 9, join.nonce);
  caf::anon_send(gm, join);
  cluster.sim().run();
  CHECK(messages(me).empty());
  CHECK(cluster.grid_master().stale_join_proofs == 2);
  CHECK(cluster.members() == std::vector<std::uint64_t>{1});
}

TEST_CASE("a flood of Joins without a nonce holds a bounded number of challenges, and a node still joins") {
  DeterministicCluster cluster(cluster_config(2, 1.0));
  cluster.add(1, make_store(64, 1.0f), true);
  const caf::actor me = cluster.sim().recorder("flood");
  for (std::uint64_t id = 100; id < 100 + actors::kMaxJoinChallenges + 500; ++id)
    caf::anon_send(cluster.grid_master_actor(), recorded_join(me, id, *cluster.store(1)));
  cluster.sim().run();
  CHECK(take<actors::JoinChallenge>(me).size() == actors::kMaxJoinChallenges + 500);
  CHECK(cluster.grid_master().challenges.size() == actors::kMaxJoinChallenges);
  cluster.add(2, make_store(64, 2.0f), true);
  CHECK(cluster.members() == std::vector<std::uint64_t>{1, 2});
}

TEST_CASE("garbage sent to a node is dropped and counted, and the cluster goes on") {
  DeterministicCluster cluster(cluster_config(2, 1.0));
  const caf::actor first = cluster.add(1, make_store(64, 1.0f));
  caf::anon_send(first, std::string("garbage"), 17);
  caf::anon_send(first, actors::Join{});  // no node handle to answer: passed on to the GridMaster, which drops it
  caf::anon_send(first, actors::RoundDone{});  // for a LineMaster, not a node
  cluster.sim().run();
  CHECK(cluster.state(1).bad_messages == 2);
  CHECK(cluster.grid_master().bad_messages == 1);
  CHECK(cluster.stats(1).bad_messages == 2);  // as the node reports them
  cluster.add(2, make_store(64, 2.0f));
  CHECK(cluster.members() == std::vector<std::uint64_t>{1, 2});
  CHECK(members_listed(cluster) == 2);
}

// -- in real time: a real connection, and a seed address nobody answers at ------------------------------------

// A seed passes a Join on to the GridMaster, which dies before it reads it (killed with the Join in its mailbox).
// The seed tells the joiner to try again; the Join used to be lost without a word, and its joiner waited out its
// join timeout (10 s by default) and gave up.
TEST_CASE("a Join the GridMaster dies with gets its joiner a 'try again' from the seed that passed it on") {
  DeterministicCluster cluster(cluster_config(2, 1.0));
  cluster.add(1, make_store(64, 1.0f), true);
  cluster.add(2, make_store(64, 2.0f), true);
  auto through_2 = cluster.setup(5, make_store(64, 5.0f), true);
  through_2.seed_node = cluster.node(2);
  cluster.start(std::move(through_2));
  cluster.sim().run();
  REQUIRE(cluster.outcome(5).result == actors::JoinResult::welcomed);
  CHECK(cluster.state(2).passed_joins.empty());  // the GridMaster took that Join in: the seed holds none
  const caf::actor me = cluster.sim().recorder("joiner");
  const caf::actor grid_master = cluster.grid_master_actor();
  caf::anon_send(cluster.node(2), recorded_join(me, 9, *cluster.store(1)));
  REQUIRE(cluster.sim().run_until([&] { return !cluster.state(2).passed_joins.empty(); }, 100));
  // Ahead of the Join in its mailbox, as a crash comes between two messages.
  caf::anon_send<caf::message_priority::high>(grid_master, caf::exit_msg{nullptr, caf::exit_reason::kill});
  cluster.sim().run();
  CHECK(received<actors::JoinChallenge>(me).empty());
  const auto rejects = take<actors::Reject>(me);
  REQUIRE(rejects.size() == 1);
  CHECK(rejects[0].node_id == 9);
  CHECK(rejects[0].not_a_member);
  CHECK_MESSAGE(rejects[0].reason.find("try again") != std::string::npos, rejects[0].reason);
}

// The same after the challenge: the joiner has answered it, and the GridMaster dies before it reads the answer.
// The joiner watches whoever holds its Join (the seed, then the GridMaster that challenged it) and asks its seed
// again, every 500 ms while the seed says "try again"; the members elect a successor, which lets it in. It used to
// wait out its join timeout for an answer that could not come, and give up.
TEST_CASE("a joiner whose GridMaster dies after the challenge asks again, and gets in under the successor") {
  DeterministicCluster cluster(cluster_config(2, 1.0));
  for (std::uint64_t id : {1, 2, 4}) cluster.add(id, make_store(64, static_cast<float>(id)), true);
  cluster.sim().run();
  const caf::actor grid_master = cluster.grid_master_actor();
  auto setup = cluster.setup(3, make_store(64, 3.0f), true);
  setup.seed_node = cluster.node(2);
  cluster.start(std::move(setup));
  // Until it has answered the challenge: its proof is in the GridMaster's mailbox.
  REQUIRE(cluster.sim().run_until(
      [&] { return cluster.state(3).join_requests > 0 && cluster.state(3).pending_joins.empty(); }, 1000));
  // Ahead of the answer in its mailbox, as a crash comes between two messages.
  caf::anon_send<caf::message_priority::high>(grid_master, caf::exit_msg{nullptr, caf::exit_reason::kill});
  cluster.sim().run();
  REQUIRE(cluster.ended(1));
  // Within its join timeout (10 s): the successor's election takes the members a few walks.
  for (int ms = 0; ms < 9000 && cluster.outcome(3).result == actors::JoinResult::pending; ms += 50) {
    cluster.sim().advance_time(std::chrono::milliseconds(50));
    cluster.sim().run();
  }
  const auto outcome = cluster.outcome(3);
  CHECK_MESSAGE(outcome.result == actors::JoinResult::welcomed, outcome.reason);
  CHECK(cluster.state(3).grid_master != grid_master);
}

// A "not a member" answer is never the cluster's: a seed that lost its cluster, or has not joined one yet, may be a
// member a moment later. One that comes while the joiner waits to ask its seeds again (an answer to an earlier pass,
// held up on the way) used to end the join as rejected: gridnode then exits 3, "restarting will not help", and the
// service unit does not restart it. Here node 3 asks node 2 while node 2 is still joining, is told "not a member",
// and in its pause gets another such answer; it asks again after the pause and gets in.
TEST_CASE("a stray 'not a member' answer while a joiner waits to ask again does not end its join") {
  DeterministicCluster cluster(cluster_config(2, 1.0));
  cluster.add(1, make_store(64, 1.0f), true);
  auto second = cluster.setup(2, make_store(64, 2.0f), true);
  second.seed_node = cluster.node(1);
  cluster.start(std::move(second));
  auto third = cluster.setup(3, make_store(64, 3.0f), true);
  third.seed_node = cluster.node(2);
  cluster.start(std::move(third));
  // Node 3 has asked node 2, which was no member yet, and waits to ask again.
  REQUIRE(cluster.sim().run_until(
      [&] { return cluster.state(3).join_requests > 0 && cluster.state(3).seed_next == 0; }, 1000));
  REQUIRE(cluster.outcome(3).result == actors::JoinResult::pending);
  caf::anon_send(cluster.node(3), actors::Reject{3, "the seed is not a member of a cluster", true});
  cluster.sim().run();
  CHECK(cluster.outcome(3).result == actors::JoinResult::pending);
  for (int ms = 0; ms < 3000 && cluster.outcome(3).result == actors::JoinResult::pending; ms += 100) {
    cluster.sim().advance_time(std::chrono::milliseconds(100));
    cluster.sim().run();
  }
  const auto outcome = cluster.outcome(3);
  CHECK_MESSAGE(outcome.result == actors::JoinResult::welcomed, outcome.reason);
}

// The seed itself dies with the Join unread. The joiner, watching it, asks again (the next seed at once; here, its
// only seed, after the pause) rather than waiting for an answer that cannot come; with no seed alive it gives up at
// its join timeout, saying what happened.
TEST_CASE("a joiner whose seed dies with its Join asks again, and says so if nobody lets it in") {
  DeterministicCluster cluster(cluster_config(2, 1.0));
  for (std::uint64_t id : {1, 2}) cluster.add(id, make_store(64, static_cast<float>(id)), true);
  cluster.sim().run();
  auto setup = cluster.setup(3, make_store(64, 3.0f), true);
  setup.seed_node = cluster.node(2);
  cluster.start(std::move(setup));
  REQUIRE(cluster.sim().run_until([&] { return cluster.state(3).join_requests > 0; }, 100));
  caf::anon_send<caf::message_priority::high>(cluster.node(2), caf::exit_msg{nullptr, caf::exit_reason::kill});
  cluster.sim().run();
  REQUIRE(cluster.ended(2));
  cluster.sim().advance_time(std::chrono::milliseconds(600));  // its only seed: the list again after the pause
  cluster.sim().run();
  CHECK(cluster.state(3).join_requests >= 2);
  cluster.sim().advance_time(std::chrono::seconds(11));
  cluster.sim().run();
  const auto outcome = cluster.outcome(3);
  CHECK(outcome.result == actors::JoinResult::unreachable);
  CHECK_MESSAGE(outcome.reason.find("the seed went down before it answered") != std::string::npos, outcome.reason);
}

TEST_CASE("a seed that cannot be reached ends the join as unreachable") {
  auto config = cluster_config(2, 1.0);
  actors::SystemConfig system_config{config};
  caf::actor_system system{system_config};
  EndNodesAtExit running;
  actors::NodeOptions o;
  o.config = config;
  o.store = make_store(8, 1.0f);
  o.listen = false;
  o.seeds = {config::HostPort{"127.0.0.1", 1}};  // nothing listens on port 1
  auto node = running.hold(actors::start_node(system, o));
  REQUIRE(node.ok());
  const auto outcome = node.value().wait_joined();
  CHECK(outcome.result == actors::JoinResult::unreachable);
  CHECK(outcome.reason.find("127.0.0.1:1") != std::string::npos);
  node.value().wait();
}

TEST_CASE("a list of seeds is tried in order: the first that is a member lets the node in") {
  auto config = cluster_config(1, 1.0);
  actors::SystemConfig config_a{config}, config_b{config};
  caf::actor_system a{config_a}, b{config_b};
  EndNodesAtExit running;
  actors::NodeOptions first = node_options(config, 1, make_store(8, 1.0f));
  auto bootstrap = running.hold(start_welcomed(a, first));

  // Nothing listens on port 1; then the member.
  actors::NodeOptions second = joiner_options(first, 2, make_store(8, 2.0f), {1, bootstrap.port()});
  auto joined = running.hold(start_welcomed(b, second));

  // Two seeds, neither reachable: the reason names both.
  actors::NodeOptions third = joiner_options(first, 3, first.store, {1, 2});
  third.listen = false;
  auto lost = running.hold(actors::start_node(b, third));
  REQUIRE(lost.ok());
  const auto outcome = lost.value().wait_joined();
  CHECK(outcome.result == actors::JoinResult::unreachable);
  CHECK(outcome.reason.find("127.0.0.1:1") != std::string::npos);
  CHECK(outcome.reason.find("127.0.0.1:2") != std::string::npos);
  lost.value().wait();
  joined.stop();
  joined.wait();
  bootstrap.stop();
  bootstrap.wait();
}

// The first seed is a stalled machine: it takes the TCP connection (its kernel still answers) and never says a word.
// The joiner gives it the gate's handshake time (5 s), then asks the next seed, well within its join timeout (10 s).
TEST_CASE("a stalled seed first in the list costs a joiner the handshake time; the next seed lets it in") {
  const auto [silent, silent_port] = bind_loopback();
  REQUIRE(::listen(silent, 8) == 0);
  auto config = cluster_config(1, 1.0);
  actors::SystemConfig config_a{config}, config_b{config};
  caf::actor_system a{config_a}, b{config_b};
  EndNodesAtExit running;
  actors::NodeOptions first = node_options(config, 1, make_store(8, 1.0f));
  auto bootstrap = running.hold(start_welcomed(a, first));

  actors::NodeOptions second = joiner_options(first, 2, make_store(8, 2.0f), {silent_port, bootstrap.port()});
  const auto asked = std::chrono::steady_clock::now();
  auto joined = running.hold(actors::start_node(b, second));
  REQUIRE_OK(joined);
  const auto outcome = joined.value().wait_joined();
  const auto took = std::chrono::steady_clock::now() - asked;
  ::close(silent);
  CHECK_MESSAGE(outcome.result == actors::JoinResult::welcomed, outcome.reason);
  CHECK(took >= actors::kGateHandshakeTimeout);  // it did wait for the stalled seed first
  joined.value().stop();
  joined.value().wait();
  bootstrap.stop();
  bootstrap.wait();
}

// Two nodes start before the machine that will bootstrap their cluster runs. Their seeds are the first node (its
// own list holds itself too, as a boot script's list of the cluster's machines does) and that third machine: the
// first node answers "not a member", the third cannot be reached yet. A seed that says "not a member" may be one a
// moment later, so they ask again (every 500 ms, until the join timeout); once the third bootstraps a cluster, both
// get in. They used to give up at the end of the first pass. (The first node is listening before the second
// starts, so that the second always finds it: a seed that cannot be reached is no reason to ask again.)
TEST_CASE("nodes whose seeds are not members yet ask them again, and join once one of them bootstraps") {
  const std::uint16_t port_a = free_port(), port_c = free_port();
  auto options = [](std::uint64_t id, std::uint16_t port, std::vector<std::uint16_t> seeds) {
    actors::NodeOptions o = node_options(cluster_config(1, 1.0), id, make_store(8, static_cast<float>(id)));
    o.config.cluster.listen = config::HostPort{"127.0.0.1", port};
    for (std::uint16_t seed : seeds) o.seeds.push_back(config::HostPort{"127.0.0.1", seed});
    return o;
  };
  const auto config = cluster_config(1, 1.0);
  actors::SystemConfig config_a{config}, config_b{config}, config_c{config};
  caf::actor_system a{config_a}, b{config_b}, c{config_c};
  EndNodesAtExit running;
  auto first = running.hold(actors::start_node(a, options(1, port_a, {port_a, port_c})));
  REQUIRE_OK(first);
  auto second = running.hold(actors::start_node(b, options(2, 0, {port_a, port_c})));
  REQUIRE_OK(second);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // three passes each, at least
  auto bootstrap = running.hold(start_welcomed(c, options(3, port_c, {})));
  const auto joined_first = first.value().wait_joined();
  const auto joined_second = second.value().wait_joined();
  CHECK_MESSAGE(joined_first.result == actors::JoinResult::welcomed, joined_first.reason);
  CHECK_MESSAGE(joined_second.result == actors::JoinResult::welcomed, joined_second.reason);
  CHECK(eventually([&] { return actors::query_grid_view(c, bootstrap.actor()).value().nodes.size() == 3; }));
  for (actors::NodeHandle* n : {&first.value(), &second.value(), &bootstrap}) {
    n->stop();
    n->wait();
  }
}

TEST_CASE("nodes in two actor systems join over TCP, show in status, and average their parameters") {
  auto config = cluster_config(1, 1.0);
  actors::SystemConfig config_a{config}, config_b{config};
  caf::actor_system a{config_a}, b{config_b};
  EndNodesAtExit running;
  actors::NodeOptions first = node_options(config, 1, make_store(1000, 1.0f));
  auto bootstrap = running.hold(start_welcomed(a, first));
  REQUIRE(bootstrap.port() != 0);

  actors::NodeOptions second = joiner_options(first, 2, make_store(1000, 3.0f), {bootstrap.port()});
  auto joined = running.hold(start_welcomed(b, second));

  // Rounds run freely; with α = 1 both hold the mean after the first: base 2 + (j % 7).
  const auto mean = read(*make_store(1000, 2.0f));
  CHECK(eventually([&] { return read(*first.store) == mean && read(*second.store) == mean; }));
  const auto status = actors::query_grid_view(b, config::HostPort{"127.0.0.1", joined.port()}, {});
  REQUIRE(status.ok());
  CHECK(status.value().nodes.size() == 2);
  CHECK(status.value().nodes[1].place.address == joined.address());
  CHECK(eventually([&] {
    const auto s = actors::query_grid_view(b, joined.actor());
    return s.ok() && s.value().nodes.size() == 2 && s.value().nodes[0].figures.rounds_done > 0 &&
           s.value().nodes[1].param_distance == 0;
  }));

  joined.stop();
  joined.wait();
  CHECK(eventually([&] { return actors::query_grid_view(a, bootstrap.actor()).value().nodes.size() == 1; }));
  bootstrap.stop();
  bootstrap.wait();
}

TEST_CASE("a node joining over TCP copies a member's model with warm_start; a node alone copies nobody") {
  // What gridnode run does after its join (actors::Runtime, NodeHandle::warm_start), over real connections.
  // Paced by every_steps and never allowed a round, the stores move only by the copy.
  auto config = cluster_config(1, 1.0);
  actors::Runtime a{config}, b{config};
  EndNodesAtExit running;
  actors::NodeOptions first = node_options(config, 1, make_store(1000, 1.0f));
  first.paced_by_every_steps = true;
  auto bootstrap = running.hold(a.start_node(first));
  REQUIRE(bootstrap.ok());
  REQUIRE(bootstrap.value().wait_joined().result == actors::JoinResult::welcomed);
  const auto alone = bootstrap.value().warm_start();
  REQUIRE(alone.ok());
  CHECK_FALSE(alone.value().has_value());

  actors::NodeOptions second = joiner_options(first, 2, make_store(1000, 3.0f), {bootstrap.value().port()});
  auto joined = running.hold(b.start_node(second));
  REQUIRE(joined.ok());
  REQUIRE(joined.value().wait_joined().result == actors::JoinResult::welcomed);
  REQUIRE(read(*second.store) != read(*first.store));
  const auto copied = joined.value().warm_start();
  REQUIRE_OK(copied);
  CHECK(copied.value() == std::optional<std::uint64_t>(1));
  CHECK(read(*second.store) == read(*first.store));
  const auto view = b.grid_view(config::HostPort{"127.0.0.1", bootstrap.value().port()}, {});
  REQUIRE(view.ok());
  CHECK(view.value().nodes.size() == 2);

  joined.value().stop();
  joined.value().wait();
  bootstrap.value().stop();
  bootstrap.value().wait();
}

}  // namespace gridtrain::testing
