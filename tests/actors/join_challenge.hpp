#pragma once
// A Join sent by a test as a node sends it: first without a nonce; the GridMaster's JoinChallenge comes back to
// join.node (a recorder, from which it is taken), then the Join goes again, straight to the GridMaster, with the
// nonce and the token proof over it.

#include <caf/all.hpp>

#include <optional>
#include <string>

#include "actors/messages.hpp"
#include "actors/token_proof.hpp"
#include "deterministic_system.hpp"

namespace gridtrain::testing {

// Sends `join` to `to` (a node, which passes it on, or the GridMaster itself), runs, answers the challenge that
// came to the GridMaster `grid_master` under `token`, and runs. Returns the answer sent (to replay it), or nullopt
// when no challenge came (the Join was refused or dropped before one was asked).
inline std::optional<actors::Join> join_with_challenge(DeterministicSystem& sim, const caf::actor& to,
                                                       const caf::actor& grid_master, actors::Join join,
                                                       const std::string& token = "") {
  join.nonce = 0;
  caf::anon_send(to, join);
  sim.run();
  const auto challenges = take<actors::JoinChallenge>(join.node);
  if (challenges.empty()) return std::nullopt;
  REQUIRE(challenges.size() == 1);
  REQUIRE(challenges[0].node_id == join.node_id);
  REQUIRE(challenges[0].request == join.request);
  join.nonce = challenges[0].nonce;
  join.token_proof = actors::token_proof(token, join.node_id, join.nonce);
  caf::anon_send(grid_master, join);
  sim.run();
  return join;
}

}  // namespace gridtrain::testing
