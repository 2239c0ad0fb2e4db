#include "dataplane/admission.hpp"

#include "base/check.hpp"

namespace gridtrain::dataplane {

Admission::Ticket::Ticket(std::shared_ptr<Admission> admission, std::string address)
    : admission_(std::move(admission)), address_(std::move(address)) {}

Admission::Ticket::~Ticket() {
  if (admission_) admission_->release(address_);
}

Admission::Admission(std::size_t total, std::size_t per_address) : total_(total), per_address_(per_address) {
  if (per_address == 0 || per_address > total) precondition_violated("Admission: need 1 <= per_address <= total");
}

Admission::Result Admission::admit(const std::string& address) {
  if (pending_ >= total_) return {std::nullopt, Busy::total};
  std::size_t& mine = by_address_[address];
  if (mine >= per_address_) return {std::nullopt, Busy::address};
  ++mine;
  ++pending_;
  return {Ticket(shared_from_this(), address), Busy::total};
}

std::size_t Admission::pending_from(const std::string& address) const {
  const auto it = by_address_.find(address);
  return it == by_address_.end() ? 0 : it->second;
}

void Admission::release(const std::string& address) {
  const auto it = by_address_.find(address);
  if (it == by_address_.end()) return;
  --pending_;
  if (--it->second == 0) by_address_.erase(it);
}

}  // namespace gridtrain::dataplane
