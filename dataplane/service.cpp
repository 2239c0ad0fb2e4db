// The service: the data plane's thread, its listening socket and the admission of the connections it accepts
// (their handshakes: link_handshakes.cpp), and the endpoints of the process's nodes (endpoint.cpp).

#include "dataplane/service.hpp"

#include <pthread.h>
#include <time.h>

#include <map>

#include "base/thread_cpu.hpp"
#include "dataplane/service_internals.hpp"

namespace gridtrain::dataplane {

void Service::Impl::accept() {
  acceptor->async_accept([this](std::error_code e, tcp::socket s) {
    if (stopped) return;
    if (!e) {
      std::error_code ignored;
      const auto from = s.remote_endpoint(ignored).address().to_string();
      auto admitted = admission->admit(from);
      if (admitted.ticket) {
        start_acceptor_handshake(*this, std::move(s), std::move(*admitted.ticket));
      } else {
        ++(admitted.busy == Admission::Busy::address ? service.handshakes_busy_address_
                                                    : service.handshakes_overflowed_);
        answer_busy(s.native_handle());
        s.close(ignored);
      }
    }
    if (e != asio::error::operation_aborted) accept();
  });
}

Service::Service(ServiceOptions options) : options_(std::move(options)), impl_(std::make_unique<Impl>(*this)) {}

Result<std::shared_ptr<Service>> Service::start(ServiceOptions options) {
  std::shared_ptr<Service> service(new Service(std::move(options)));
  const ServiceOptions& o = service->options_;
  if (o.listen) {
    std::error_code e;
    const auto host = asio::ip::make_address(o.host, e);
    if (e) return Error{.message = "data plane: cannot listen on " + o.host + ": not an IP address"};
    tcp::acceptor acceptor(service->impl_->io);
    const tcp::endpoint at(host, o.port);
    acceptor.open(at.protocol(), e);
    if (!e) acceptor.set_option(tcp::acceptor::reuse_address(true), e);
    if (!e) acceptor.bind(at, e);
    if (!e) acceptor.listen(asio::socket_base::max_listen_connections, e);
    if (e)
      return Error{.message = "data plane: cannot listen on " + o.host + ":" + std::to_string(o.port) + ": " +
                              e.message()};
    const auto bound = acceptor.local_endpoint();
    service->address_ = o.host + ":" + std::to_string(bound.port());
    service->impl_->acceptor.emplace(std::move(acceptor));
    service->impl_->accept();
  }
  service->impl_->work.emplace(asio::make_work_guard(service->impl_->io));
  if (o.own_thread) {
    // The thread runs until stop() (the work guard), so its clock is valid from here until stop() replaces it by
    // its last reading. The thread touches nothing of the Service after io.run(): a Service destroyed on its own
    // thread (stop()'s detach) is gone by then.
    service->thread_ = std::thread([s = service.get()] { s->impl_->io.run(); });
    clockid_t id;
    std::lock_guard<std::mutex> hold(service->cpu_mutex_);
    if (pthread_getcpuclockid(service->thread_.native_handle(), &id) == 0) service->cpu_clock_ = id;
  }
  return service;
}

std::size_t Service::poll_one() { return impl_->io.poll_one(); }

void Service::post(std::function<void()> work) { asio::post(impl_->io, std::move(work)); }

std::chrono::nanoseconds Service::cpu_time() const {
  std::lock_guard<std::mutex> hold(cpu_mutex_);
  return cpu_clock_ ? base::thread_cpu(*cpu_clock_) : cpu_final_;
}

Service::~Service() { stop(); }

void Service::stop() {
  if (!impl_->work) return;
  {
    // While the thread surely runs (the work guard holds it): once it has ended its clock may name another thread.
    std::lock_guard<std::mutex> hold(cpu_mutex_);
    if (cpu_clock_) cpu_final_ = base::thread_cpu(*cpu_clock_);
    cpu_clock_.reset();
  }
  asio::post(impl_->io, [this] {
    impl_->stopped = true;
    if (impl_->acceptor) impl_->acceptor->close();
    for (auto& [id, weak] : std::map(impl_->endpoints))
      if (auto e = weak.lock()) e->close();
    // Handshakes under way and their timers are abandoned: their sockets close with the io_context.
    impl_->io.stop();
  });
  impl_->work.reset();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) {
    thread_.join();
  } else {
    // Polled by its owner (or, defensively, stopped from one of its own handlers): run what is left here, up to
    // the posted stop.
    impl_->io.restart();
    impl_->io.run();
    if (thread_.joinable()) thread_.detach();
  }
}

std::unique_ptr<Endpoint> Service::add_endpoint(EndpointSetup setup) {
  auto state = std::make_shared<EndpointState>(*impl_, std::move(setup));
  asio::post(impl_->io, [impl = impl_.get(), state] {
    if (!impl->stopped) impl->endpoints[state->setup.node_id] = state;
  });
  return std::make_unique<Endpoint>(shared_from_this(), std::move(state));
}

}  // namespace gridtrain::dataplane
