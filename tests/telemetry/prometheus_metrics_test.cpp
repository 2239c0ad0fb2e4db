#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "telemetry/prometheus_metrics.hpp"

namespace gridtrain::telemetry {

namespace {

// GET /metrics over loopback with a plain socket; the whole response, headers included.
std::string http_get_metrics(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  REQUIRE(::send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size()));
  std::string response;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) response.append(buffer, static_cast<std::size_t>(n));
  ::close(fd);
  return response;
}

}  // namespace

TEST_CASE("the Prometheus endpoint serves rounds per dimension, drops, tau, throughput, loss, accuracy and refusals") {
  auto started = PrometheusMetrics::start(config::HostPort{"127.0.0.1", 0}, "n7");
  REQUIRE(started.ok());
  auto& metrics = *started.value();
  REQUIRE(metrics.port() != 0);
  actors::NodeStats stats;
  stats.dims.resize(2);
  stats.dims[0].rounds.rounds_done = 5;
  stats.dims[1].rounds.rounds_done = 3;
  stats.dims[1].rounds.stale_dropped = 2;
  stats.dims[1].rounds.bytes_sent = 5;
  stats.gate.bad_proof = 2;
  stats.gate.not_handshake = 64;
  stats.gate.accepted = 3;
  stats.data_plane = {
      .handshakes = 1, .bad_frames = 2, .oversized = 3, .truncated = 4, .strangers = 5, .unreachable_peers = 2};
  stats.joins = {.rejected = 6, .replayed = 7, .bad_messages = 1};
  stats.bad_messages = 9;
  stats.refused_payloads = 1;
  metrics.update(stats);
  stats.dims[0].rounds.rounds_done = 9;  // cumulative: the counter gains 4
  metrics.update(stats);
  metrics.update(learner::EpochReport{.epoch = 1, .samples = 1000, .samples_per_s = 250, .loss = 0.5,
                                     .test_accuracy = 0.75, .tau = 1.5, .rounds = 12});
  auto page = http_get_metrics(metrics.port());
  INFO(page);
  CHECK(page.find("200 OK") != std::string::npos);
  CHECK(page.find(R"(gridtrain_rounds_total{dim="0",node="n7"} 9)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_rounds_total{dim="1",node="n7"} 3)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_stale_dropped_total{node="n7"} 2)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_bytes_sent_total{node="n7"} 5)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_tau{node="n7"} 1.5)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_samples_per_second{node="n7"} 250)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_train_loss{node="n7"} 0.5)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_test_accuracy{node="n7"} 0.75)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_samples_total{node="n7"} 1000)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_connections_refused_total{node="n7",reason="bad_proof"} 2)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_connections_refused_total{node="n7",reason="not_handshake"} 64)") !=
        std::string::npos);
  CHECK(page.find(R"(gridtrain_connections_accepted_total{node="n7"} 3)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_data_refused_total{node="n7",reason="handshake"} 1)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_data_refused_total{node="n7",reason="bad_frame"} 2)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_data_refused_total{node="n7",reason="oversized"} 3)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_data_refused_total{node="n7",reason="truncated"} 4)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_data_refused_total{node="n7",reason="stranger"} 5)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_data_peers_unreachable{node="n7"} 2)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_joins_refused_total{node="n7",reason="rejected"} 6)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_joins_refused_total{node="n7",reason="replayed"} 7)") != std::string::npos);
  CHECK(page.find(R"(gridtrain_messages_dropped_total{node="n7"} 11)") != std::string::npos);
}

}  // namespace gridtrain::telemetry
