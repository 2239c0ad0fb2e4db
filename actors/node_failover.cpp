// Losing the cluster: the lines it ends or keeps, the rejoin walks over the members of its last GridState, its
// vote, and the election (standing as the GridMaster's successor, and stepping down) (actors/node_internal.hpp).

#include <netdb.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "actors/node_internal.hpp"
#include "config/host_port.hpp"

namespace gridtrain::actors::node_internal {

namespace {

// Calls `then` with the node actor at `address` (host:port, or "local:<id>" for a member of this process), or
// with null when it cannot be reached within rejoin_interval. `known` is its handle from the last GridState, if
// any: over a direct connection that already exists it is used as it is, since dialing a second one would give
// the pair two connections, which CAF 0.17's BASP confuses (messages one way were lost: a vote never reached the
// candidate, seen in the training failover test). A member that dialed us has its connection in the routing
// table, but not in the middleman's cache of connections we dialed, so a connect would dial again.
void reach(Self self, const std::string& address, const caf::actor& known, std::function<void(caf::actor)> then) {
  auto& s = self->state;
  if (s.grid()) {
    for (const MemberState& m : s.grid()->members)
      if (m.place.address == address && m.node && m.node.node() == self->node()) return then(m.node);
  }
  auto endpoint = config::parse_host_port(address);
  if (!endpoint) return then(nullptr);  // a node of this process that has gone
  auto dial = [self, to = endpoint.value(), then] {
    self->request(middleman(self), self->state.setup.rejoin_interval, caf::connect_atom::value, to.host, to.port)
        .then([then](caf::node_id&, caf::strong_actor_ptr& ptr,
                     std::set<std::string>&) { then(caf::actor_cast<caf::actor>(ptr)); },
              [then](caf::error&) { then(nullptr); });
  };
  if (!known || known.node() == self->node()) return dial();
  // The middleman answers an empty host for a node it reaches only through another, or not at all.
  self->request(middleman(self), s.setup.rejoin_interval, caf::get_atom::value, known.node())
      .then(
          [self, known, then, dial](caf::node_id&, std::string& host, std::uint16_t port) {
            if (host.empty() || port == 0) return dial();
            // A direct route is not proof that `known` answers: a node woken from a stall still had its old
            // connections in CAF's routing table, whose peers had long given them up, and every Join it sent
            // over them vanished (1 in 25 runs of the stalled-GridMaster test never rejoined in 30 s). A handle
            // that does not answer is dialed afresh.
            self->request(known, std::chrono::milliseconds(500), outcome_atom::value)
                .then([known, then](JoinOutcome&) { then(known); }, [dial](caf::error&) { dial(); });
          },
          [dial](caf::error&) { dial(); });
}

// Withdraws the vote it gave `voted_for`, if any (a Join that is no vote takes it back).
void withdraw_vote(Self self) {
  auto& s = self->state;
  if (s.voted_for) send_join(self, s.voted_for, false);
  s.voted_for = nullptr;
}

// No member below it answered: it stands as the successor, with a GridMaster that elects from its last state.
// Any member of that state may stand, even one not confirmed yet (a majority of the confirmed ones must vote for
// it; it does not count itself then): the others see it answer and vote for it, so if it did not stand, nobody
// would. Only one that lost the GridMaster stands: one the GridMaster took out (Removed) knows it is alive.
void stand(Self self) {
  auto& s = self->state;
  const GridState* last = s.grid();
  if (!s.lines_kept || !last ||
      std::none_of(last->members.begin(), last->members.end(),
                   [&](const MemberState& m) { return m.place.node_id == s.setup.node_id; }))
    return;
  withdraw_vote(self);
  GridState takeover = *last;
  auto& confirmed = takeover.quorum_members;
  for (std::uint64_t id : s.left_members) std::erase(confirmed, id);  // they left cleanly: their votes will not come
  spdlog::warn("node {:016x}: no member of epoch {} below it answers; it stands as the GridMaster's successor and "
               "needs the votes of {} of the {} confirmed members",
               s.setup.node_id, last->epoch, confirmed.size() / 2 + 1, confirmed.size());
  GridMasterSetup setup = grid_master_setup(self, s.cluster_config.value_or(s.setup.config), std::move(takeover));
  s.candidate = spawn_grid_master(self, std::move(setup));
  send_join(self, s.candidate, true);
  release_early_votes(self, s.candidate);
}

// The walk (node.hpp): every member of its last GridState in id order, then the lost GridMaster's address and the
// seeds it does not know as members. Made again for each walk, since the GridState may have grown meanwhile: a
// member it asks sends its own (see the rejoining Join handler in node.cpp), which may hold members this node
// never heard of.
void make_walk(NodeState& s) {
  s.walk.clear();
  auto known = [&](const std::string& address) {
    return address.empty() || address == s.address ||
           std::any_of(s.walk.begin(), s.walk.end(), [&](const auto& e) { return e.address == address; });
  };
  if (s.grid())
    for (const MemberState& m : s.grid()->members)
      if (m.place.node_id == s.setup.node_id || !known(m.place.address))
        s.walk.push_back({m.place.node_id, m.place.address, m.node});
  if (!known(s.grid_master_address)) s.walk.push_back({0, s.grid_master_address, nullptr});
  for (const config::HostPort& seed : s.setup.seeds)
    if (!known(seed.to_string())) s.walk.push_back({0, seed.to_string(), nullptr});
}

}  // namespace

// Ends the lines this node may still hold that a newer layout has no place for: a DimensionNode's line in a dimension
// the layout gave up (9 nodes in 3 x 3 down to 5 in one line), and a LineMaster's line where the layout makes this
// node master of none. No message would end them otherwise: no line starts in a dimension given up; StopLine goes
// only to a master that is alive and known (a successor that takes over restarts the layout's lines, and stops
// none of the epoch before). Kept, a member's data plane dialed its dead peers there every 2 s for good, and a
// master nudged peers (line_master.hpp) that had moved on. A line newer than `grid` is left alone (lost_atom's
// version), so a StartLine that overtook this state stays.
void end_lines_outside(Self self, const GridState& grid) {
  auto& s = self->state;
  const LayoutState& layout = grid.layout;
  std::vector<bool> masters(s.line_masters.size(), false);  // by dimension: this node masters a line there
  for (std::size_t j = 0; j < layout.master_dims.size() && j < layout.master_nodes.size(); ++j)
    if (layout.master_nodes[j] == s.setup.node_id && layout.master_dims[j] < masters.size())
      masters[layout.master_dims[j]] = true;
  for (std::size_t d = grid.dims; d < s.dimension_nodes.size(); ++d)
    self->send(s.dimension_nodes[d], lost_atom::value, grid.epoch, grid.layout_version);
  for (std::size_t d = 0; d < s.line_masters.size(); ++d)
    if (!masters[d]) self->send(s.line_masters[d], lost_atom::value, grid.epoch, grid.layout_version);
}

void abandon_candidacy(Self self, const std::string& why) {
  auto& s = self->state;
  if (!s.candidate) return;
  spdlog::info("node {:016x}: no longer stands as the GridMaster's successor: {}", s.setup.node_id, why);
  self->send(s.candidate, step_down_atom::value);
  s.candidate = nullptr;
}

// Passes the early votes to `to` (a GridMaster, which decides), or with a null `to` answers them that this node
// is no member: their walks go on.
void release_early_votes(Self self, const caf::actor& to) {
  auto& s = self->state;
  for (const Join& join : s.early_votes) {
    if (to)
      self->send(to, join);
    else if (join.node)
      self->send(join.node, Reject{join.node_id, kNotAMember, true});
  }
  s.early_votes.clear();
}

namespace {

enum class Dialed { refused, connected, no_answer };

// One connect to host:port within `timeout`.
Dialed dial_once(const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found)
    return Dialed::no_answer;
  Dialed dialed = Dialed::no_answer;
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    int error = ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 ? 0 : errno;
    if (error == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      socklen_t length = sizeof error;
      if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1 ||
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0)
        error = ETIMEDOUT;
    }
    dialed = error == 0 ? Dialed::connected : error == ECONNREFUSED ? Dialed::refused : Dialed::no_answer;
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return dialed;
}

// Whether nothing listens at host:port: the connection is refused, so the process that listened there is gone. A
// connection that does not answer within `timeout` (a cut, a host gone) says nothing of the kind. A connection
// made is tried again a few times: a process being killed may close its connections before its listening socket,
// whose backlog still takes ours (with one connect, 4 of 30 probes in a run of 10 kills found a listener; with
// the retries, none).
bool nothing_listens(const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout) {
  constexpr int kTries = 4;
  for (int i = 0; i < kTries; ++i) {
    const Dialed dialed = dial_once(host, port, timeout);
    if (dialed != Dialed::connected) return dialed == Dialed::refused;
    if (i + 1 < kTries) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace

bool may_vote(Self self) { return self->clock().now() >= self->state.may_vote_at; }

// A kill -9 of the GridMaster's process closes its connections at once, and then the refused connection says that
// it is gone: the failover need not wait out its lease (2.5 s by default; with the probe a killed GridMaster's
// successor takes over in about 70 ms, as before the lease: BENCHMARKS.md). Asked on a thread of its own (a
// blocking actor): a cut holds the connect for its whole timeout. A live node's gate counts each probe as a
// connection gone before its handshake (no log line).
void probe_lost_grid_master(Self self) {
  auto& s = self->state;
  auto endpoint = config::parse_host_port(s.grid_master_address);
  if (!endpoint) return;  // in this process, or no address: nothing to ask
  const auto timeout = std::min(std::chrono::duration_cast<std::chrono::milliseconds>(s.setup.rejoin_interval),
                                std::chrono::milliseconds(1000));
  self->spawn(
      [](caf::blocking_actor*, caf::actor node, std::uint64_t generation, config::HostPort at,
         std::chrono::milliseconds wait) {
        caf::anon_send(node, lease_probe_atom::value, generation, nothing_listens(at.host, at.port, wait));
      },
      caf::actor_cast<caf::actor>(self), s.report_generation, endpoint.value(), timeout);
}

void lease_probed(Self self, std::uint64_t generation, bool nothing_listens_there) {
  auto& s = self->state;
  if (!nothing_listens_there || generation != s.report_generation || s.phase != NodePhase::rejoining ||
      may_vote(self))
    return;
  spdlog::info("node {:016x}: nothing listens at {}, its lost GridMaster's address: that process is gone, so it "
               "need not wait out its lease",
               s.setup.node_id, s.grid_master_address);
  s.may_vote_at = self->clock().now();
  if (!s.candidate && !s.walk_voted) start_walk(self);  // the walk under way may not vote: a new one does
}

void start_walk(Self self) {
  auto& s = self->state;
  make_walk(s);
  if (s.walks == 0 && s.walk.size() <= 1)
    spdlog::error("node {:016x}: it knows no other member to rejoin through", s.setup.node_id);
  s.walk_next = 0;
  s.walk_found_lower = false;
  s.walk_voted = false;
  ++s.walks;
  walk_step(self, ++s.walk_token);
}

// The next step of the rejoin walk (see node.hpp): its own entry, where it may stand; or a Join to the next
// member that answers, then a short wait for the answer; or, the walk done, the next walk after rejoin_interval.
void walk_step(Self self, std::uint64_t token) {
  auto& s = self->state;
  if (s.phase != NodePhase::rejoining || token != s.walk_token) return;
  if (s.walk_next >= s.walk.size()) {
    // The next walk; sooner where the lease that held its vote back runs out first.
    auto pause = std::chrono::duration_cast<std::chrono::milliseconds>(s.setup.rejoin_interval);
    const auto now = self->clock().now();
    if (s.may_vote_at > now && !s.walk_voted)
      pause = std::min(pause, std::chrono::ceil<std::chrono::milliseconds>(s.may_vote_at - now));
    self->delayed_send(self, pause, walk_atom::value, ++s.walk_token, true);
    return;
  }
  const NodeState::WalkEntry entry = s.walk[s.walk_next++];
  const std::uint64_t next = ++s.walk_token;
  // The first walk skips the node whose GridMaster it just lost: dead, it would cost nothing, but stalled it would
  // hold the walk for a whole connect timeout. Later walks ask it too (it may be alive, and we the ones cut off).
  if (s.lines_kept && s.walks == 1 && s.grid() && entry.id == s.grid()->grid_master_node &&
      entry.id != s.setup.node_id)
    return walk_step(self, next);
  if (entry.id == s.setup.node_id) {
    if (!s.walk_found_lower && !s.candidate && may_vote(self)) stand(self);
    return walk_step(self, next);
  }
  reach(self, entry.address, entry.node, [self, entry, next](caf::actor node) {
    auto& s = self->state;
    if (s.phase != NodePhase::rejoining || next != s.walk_token) return;
    if (!node) return walk_step(self, next);
    const bool lower = entry.id != 0 && entry.id < s.setup.node_id;
    if (lower) {
      s.walk_found_lower = true;
      abandon_candidacy(self, "member " + entry.address + ", below it, answers");
      release_early_votes(self, nullptr);
    }
    // A vote goes to the first (lowest) member that answers in this walk; the others only hear a Join, which a
    // live cluster's member passes on to its GridMaster.
    const bool vote = !s.candidate && !s.walk_voted && may_vote(self);
    if (vote) {
      s.walk_voted = true;
      if (s.voted_for != node) {
        withdraw_vote(self);
        spdlog::info("node {:016x}: asks member {} to let it back in, or to take over (its vote)", s.setup.node_id,
                     entry.address);
      }
      s.voted_for = node;
    }
    send_join(self, node, vote);
    self->delayed_send(self, s.setup.walk_answer_wait, walk_atom::value, next, false);
  });
}

}  // namespace gridtrain::actors::node_internal
