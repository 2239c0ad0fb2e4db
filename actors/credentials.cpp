#include "actors/credentials.hpp"

#include "actors/token_proof.hpp"

namespace gridtrain::actors {

Result<Credentials> load_credentials(const config::ClusterConfig& cluster) {
  auto token = read_token(cluster.token_file);
  if (!token) return token.error();
  Credentials credentials{.token = std::move(token).value()};
  if (cluster.tls_certificate.empty() && cluster.tls_key.empty() && cluster.tls_ca.empty()) return credentials;
  auto tls = dataplane::TlsContext::load({cluster.tls_certificate, cluster.tls_key, cluster.tls_ca});
  if (!tls) return tls.error();
  credentials.tls = std::move(tls).value();
  return credentials;
}

}  // namespace gridtrain::actors
