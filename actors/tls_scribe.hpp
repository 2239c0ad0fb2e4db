#pragma once
// A CAF connection (a scribe) whose bytes go through an established TLS session: how the gate hands a connection
// to CAF's BASP broker when TLS is on (actors/gate.hpp).
//
// CAF 0.17's OpenSSL module (libcaf_openssl) makes its sessions itself, from the actor system's one certificate
// setting, and runs the TLS handshake inside CAF's multiplexer, where a failure is a closed connection and nothing
// more. The gate runs the token handshake and then TLS itself (dataplane/tls.hpp), so that a node refused for its
// certificate says why, and so that CAF sees only connections that passed both; this scribe is CAF's own stream
// over a socket (caf::io::network::stream_impl) with TLS as its read/write policy.

#include <caf/actor_system.hpp>
#include <caf/io/scribe.hpp>

#include <memory>

#include "dataplane/tls.hpp"

namespace gridtrain::actors {

// A scribe for CAF's default multiplexer over `fd` (connected, non-blocking; the scribe owns it from now on),
// reading and writing through `session` (established).
caf::io::scribe_ptr make_tls_scribe(caf::actor_system& system, int fd,
                                    std::unique_ptr<dataplane::TlsSession> session);

}  // namespace gridtrain::actors
