#pragma once
// A node's listen address is also the address it gives the other nodes (its gate's, and with cluster.data_port its
// data plane's): they dial it. Checked before the node starts, so that a node the others cannot reach never joins.

#include <string>
#include <vector>

#include "base/result.hpp"
#include "config/host_port.hpp"

namespace gridtrain::app {

// Errors (naming `source`, where the address came from: "--listen", or the config file with key cluster.listen):
// - the host is a wildcard (0.0.0.0, ::): it reaches no other machine, and every node would dial itself;
// - the host is loopback (127.0.0.0/8, ::1, localhost) while a seed is on another machine: the cluster's nodes
//   there could not reach this one. A seed whose name does not resolve is left to the join to report.
// Either node would join and show in `gridnode status`, and then never average with a peer on another machine:
// its data connections dial the wrong machine, and only info lines of failed connections would say so.
Status check_listen_address(const config::HostPort& listen, const Error& source,
                            const std::vector<config::HostPort>& seeds);

}  // namespace gridtrain::app
