#pragma once
// Line peers talk over their own connection, never relayed through a third node.
//
// A node learns of its line peers through the GridMaster. CAF 0.17 then reaches them THROUGH the GridMaster's
// node (BASP's indirect routes): that node would carry every line's traffic and take it down with it. Measured
// with three actor systems (B and C learn of each other through A):
// - middleman.enable-automatic-connections, CAF's own remedy, is racy in 0.17.6: 1 run in 60 stayed relayed;
// - an explicit connect on top of it lost messages in 1 run of 100, and so did B and C dialing each other at
//   the same moment: two connections between one pair of nodes confuse 0.17's BASP;
// - automatic connections off and ONE side dialing the other's advertised address: direct in 100 of 100 runs.
// So: automatic connections off (SystemConfig), and of each pair of nodes only the one with the lower node id
// dials, and only if there is no direct connection yet (the joiner's connection to its seed may be one).

#include <caf/all.hpp>

#include <cstdint>
#include <string>

#include "actors/credentials.hpp"

namespace gridtrain::actors {

// If `our_id` < `peer_id`, `peer` lives in another process and `address` is host:port: opens a direct
// connection from this process to the node listening there, unless one exists. Asynchronous; a failure is
// logged, and messages keep going by the indirect route.
// The dial passes the peer's gate with `credentials` (actors/gate.hpp).
void connect_directly(caf::event_based_actor* self, const Credentials& credentials, std::uint64_t our_id,
                      std::uint64_t peer_id, const caf::actor& peer, const std::string& address);

// The GridMaster and each member check the route between them again every this many reports (4 s at the
// default 250 ms): a direct connection can close while both ends live, and a death behind a relay goes
// unreported (a killed member stayed in the grid for good in a 30-minute chaos run).
inline constexpr std::uint64_t kRouteCheckEvery = 16;

}  // namespace gridtrain::actors
