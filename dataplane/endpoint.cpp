// Endpoints: one node's part of the data plane (dataplane/service_internals.hpp): its line runners, the links to
// its lines' peers (opened and closed as its lines change), frames of a peer in this process delivered through
// memory, and Endpoint, the thread-safe handle that posts its calls to the service's thread.

#include <algorithm>
#include <cstring>

#include "dataplane/service_internals.hpp"

namespace gridtrain::dataplane {

EndpointState::EndpointState(Service::Impl& service, EndpointSetup s) : service(service), setup(std::move(s)) {
  for (std::uint32_t d = 0; d < kMaxLineDims; ++d)
    runners[d] = std::make_unique<LineRunner>(d, setup.node_id, setup.model, *this,
                                              [this](const RoundEvent& e) {
                                                if (!closed && setup.on_event) setup.on_event(e);
                                              },
                                              counters[d]);
}

bool EndpointState::kernel_reads_payload(std::uint64_t node) const {
  const auto it = links.find({node, 0});
  return it != links.end() && !it->second->local && !service.service.options().tls;
}

void EndpointState::send(std::uint64_t node, const FrameHeader& header, std::span<const std::byte> payload,
                         SlotTag tag, std::uint32_t chunk) {
  const auto n = streams.find(node);
  const auto stream = static_cast<std::uint16_t>(n == streams.end() ? 0 : chunk % n->second);
  auto it = links.find({node, stream});
  if (it == links.end()) it = links.find({node, 0});
  if (it == links.end()) {
    ++counters[std::min(tag.dim, kMaxLineDims - 1)].frames_unsent;
    return;
  }
  it->second->enqueue(header, payload, tag);
}

void EndpointState::retire(SlotTag tag) {
  for (auto& [key, link] : links) link->retire(tag);
}

bool EndpointState::wanted(std::uint64_t peer) const {
  for (const auto& r : runners)
    if (const LineSpec* line = r->line())
      if (std::find(line->peers.begin(), line->peers.end(), peer) != line->peers.end()) return true;
  return false;
}

// Links to the peers of our lines, and none to others.
void EndpointState::update_links() {
  for (auto it = links.begin(); it != links.end();) {
    if (wanted(it->first.first)) {
      ++it;
      continue;
    }
    it->second->close();
    it = links.erase(it);
  }
  std::erase_if(streams, [this](const auto& s) { return !wanted(s.first); });
  std::set<std::uint64_t> peers;
  for (const auto& r : runners)
    if (const LineSpec* line = r->line())
      for (std::uint64_t p : line->peers)
        if (p != setup.node_id) peers.insert(p);
  for (std::uint64_t p : peers) {
    if (links.count({p, 0})) continue;
    const bool local = service.endpoint(p) != nullptr;
    if (local) {
      auto link = std::make_shared<Link>(*this, p, 0, true);
      link->state = Link::State::open;
      links.emplace(std::pair{p, std::uint16_t{0}}, link);
      streams[p] = 1;
    } else if (setup.node_id < p) {
      set_streams(p, service.service.options().streams);
    } else {
      set_streams(p, streams.count(p) ? streams[p] : std::uint16_t{1});  // until its dialer's hello says
    }
  }
}

void EndpointState::set_streams(std::uint64_t peer, std::uint16_t count) {
  streams[peer] = count;
  for (auto it = links.lower_bound({peer, count}); it != links.end() && it->first.first == peer;) {
    it->second->close();
    it = links.erase(it);
  }
  for (std::uint16_t k = 0; k < count; ++k) {
    if (links.count({peer, k})) continue;
    auto link = std::make_shared<Link>(*this, peer, k, false);
    links.emplace(std::pair{peer, k}, link);
    if (link->dialer()) {
      link->unreachable_since = std::chrono::steady_clock::now();
      link->dial();
    }
  }
}

void EndpointState::resume_waiting(std::uint32_t dim) {
  for (auto& [key, link] : links)
    if (link->paused && link->current.key.dim == dim) link->resume();
  // Local frames held for this dimension's new line: land them now, or hold them on.
  std::deque<Held> waiting;
  waiting.swap(held);
  for (Held& h : waiting) {
    if (h.header.key.dim == dim)
      deliver_local(h.from, h.header, std::move(h.payload));
    else
      held.push_back(std::move(h));
  }
}

void EndpointState::attach_inbound(const Hello& hello, tcp::socket socket, std::unique_ptr<TlsSession> tls) {
  // Its dialer decides how many connections there are. A peer that dials before our line with it started: keep
  // the connection; the line will want it.
  const auto n = streams.find(hello.from_node);
  if (n == streams.end() || n->second != hello.streams) set_streams(hello.from_node, hello.streams);
  links.at({hello.from_node, hello.stream})->open_with(std::move(socket), std::move(tls));
}

void EndpointState::deliver_local(std::uint64_t from, const FrameHeader& header, std::vector<std::byte> payload) {
  if (closed) return;
  LineRunner* r = runner(header.key.dim);
  if (!r || payload.size() != header.payload_bytes()) return;
  const Landing landing = r->land(from, header);
  switch (landing.kind) {
    case Landing::Kind::wait:
      if (held.size() < kMaxHeldLocalFrames) held.push_back({from, header, std::move(payload)});
      return;
    case Landing::Kind::direct:
      if (header.wire == allreduce::WireFormat::fp32) {
        std::memcpy(landing.into.data(), payload.data(), payload.size());
        r->landed(header, landing);
      } else {
        r->landed(header, landing, payload);
      }
      return;
    case Landing::Kind::refuse: ++refused.oversized; return;
    case Landing::Kind::drain: return;
  }
}

void EndpointState::close() {
  if (closed) return;
  closed = true;
  for (auto& r : runners) r->drop_line();
  for (auto& [key, link] : links) link->close();
  links.clear();
  streams.clear();
  held.clear();
  service.endpoints.erase(setup.node_id);
}

Endpoint::Endpoint(std::shared_ptr<Service> service, std::shared_ptr<EndpointState> state)
    : service_(std::move(service)), state_(std::move(state)) {}

Endpoint::~Endpoint() { close(); }

std::uint64_t Endpoint::node_id() const { return state_->setup.node_id; }

void Endpoint::start_line(LineSpec spec, std::vector<std::string> data_addresses) {
  service_->post([s = state_, spec = std::move(spec), data_addresses = std::move(data_addresses)]() {
    if (s->closed || spec.dim >= kMaxLineDims) return;
    for (std::size_t i = 0; i < spec.peers.size() && i < data_addresses.size(); ++i)
      s->addresses[spec.peers[i]] = data_addresses[i];
    const std::uint32_t dim = spec.dim;
    if (!s->runners[dim]->start_line(spec)) return;
    s->update_links();
    s->resume_waiting(dim);
  });
}

void Endpoint::drop_line(std::uint32_t dim, std::optional<std::pair<std::uint64_t, std::uint64_t>> older_than) {
  service_->post([s = state_, dim, older_than] {
    if (s->closed || dim >= kMaxLineDims) return;
    s->runners[dim]->drop_line(older_than);
    s->update_links();
  });
}

void Endpoint::start_round(const allreduce::RoundKey& key) {
  service_->post([s = state_, key] {
    if (!s->closed && key.dim < kMaxLineDims) s->runners[key.dim]->start_round(key);
  });
}

void Endpoint::deadline(const allreduce::RoundKey& key) {
  service_->post([s = state_, key] {
    if (!s->closed && key.dim < kMaxLineDims) s->runners[key.dim]->deadline(key);
  });
}

const DimensionCounters& Endpoint::counters(std::uint32_t dim) const { return state_->counters[dim]; }

std::shared_ptr<const std::array<DimensionCounters, kMaxLineDims>> Endpoint::shared_counters() const {
  return state_->shared_counters;
}

std::uint32_t Endpoint::unreachable_peers() const { return state_->unreachable.load(); }

std::uint32_t Endpoint::connections() const { return state_->connections.load(); }

LinkRefusals Endpoint::refusals() const {
  const auto& r = state_->refused;
  return {r.handshakes.load(), r.bad_frames.load(), r.oversized.load(), r.truncated.load()};
}

void Endpoint::close() {
  if (!state_) return;
  service_->post([s = state_] { s->close(); });
}

}  // namespace gridtrain::dataplane
