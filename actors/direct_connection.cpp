#include "actors/direct_connection.hpp"

#include <caf/io/middleman.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <set>

#include "actors/gate.hpp"
#include "config/host_port.hpp"

namespace gridtrain::actors {

void connect_directly(caf::event_based_actor* self, const Credentials& credentials, std::uint64_t our_id,
                      std::uint64_t peer_id, const caf::actor& peer, const std::string& address) {
  if (our_id >= peer_id || !peer || peer.node() == self->node()) return;
  auto endpoint = config::parse_host_port(address);
  if (!endpoint.ok() || endpoint.value().port == 0) return;  // "local:..." : a node that does not listen
  const config::HostPort to = endpoint.value();
  auto middleman = gate_middleman(self->system(), credentials);
  // The middleman answers an empty host for a node it reaches only through another.
  self->request(middleman, std::chrono::seconds(10), caf::get_atom::value, peer.node())
      .then(
          [self, middleman, to](caf::node_id&, std::string& host, std::uint16_t port) {
            if (!host.empty() && port != 0) return;
            self->request(middleman, std::chrono::seconds(10), caf::connect_atom::value, to.host, to.port)
                .then([](caf::node_id&, caf::strong_actor_ptr&, std::set<std::string>&) {},
                      [self, to](caf::error& e) {
                        spdlog::warn("no direct connection to {}: {}; its messages go through another node",
                                     to.to_string(), self->system().render(e));
                      });
          },
          [](caf::error&) {});
}

}  // namespace gridtrain::actors
