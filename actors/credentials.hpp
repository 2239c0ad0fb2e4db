#pragma once
// What a node proves itself with to the others: the cluster token (cluster.token_file) and, when TLS is on, its
// certificate (cluster.tls_certificate, tls_key, tls_ca). Loaded once when a node starts; every dial and every
// gate of the node uses the same.

#include <memory>
#include <string>

#include "base/result.hpp"
#include "config/config.hpp"
#include "dataplane/tls.hpp"

namespace gridtrain::actors {

struct Credentials {
  std::string token;                                 // "" = a cluster without a token
  std::shared_ptr<const dataplane::TlsContext> tls = nullptr;  // nullptr = no TLS
};

// Reads the token file and loads the TLS files that `cluster` names. Errors name the key and the file.
Result<Credentials> load_credentials(const config::ClusterConfig& cluster);

}  // namespace gridtrain::actors
