#pragma once
// Admission: the handshakes a port has under way, in all and per source address, so that one address can hold
// only its own share of the door.
//
// A handshake is a few small fixed-size messages; a connection that sends none of them holds its slot until the
// handshake's timeout. Bounded in total only, one address that keeps opening idle connections held every slot, and
// a joining node, or `gridnode status`, was turned away for as long as it liked (1,500 idle connections kept a node
// closed to new members). So each address may hold at most `per_address` of the `total` slots: a flood from one
// address fills its own share, and every other address still finds the rest free.
//
//   auto admission = std::make_shared<Admission>(64, 16);
//   auto ticket = admission->admit(peer_address);      // nullopt: busy (say so, then close)
//   ...                                                 // the ticket frees its slot when destroyed
//
// Not thread-safe: the port's one I/O thread uses it.

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace gridtrain::dataplane {

class Admission : public std::enable_shared_from_this<Admission> {
 public:
  // Why a connection was not admitted.
  enum class Busy { address, total };

  // A slot held: freed when the ticket goes, even after the port that gave it (a handshake left pending when its
  // port closes is destroyed with its I/O context, later).
  class Ticket {
   public:
    Ticket(std::shared_ptr<Admission> admission, std::string address);
    Ticket(Ticket&& other) noexcept = default;
    Ticket& operator=(Ticket&&) = delete;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket();

   private:
    std::shared_ptr<Admission> admission_;
    std::string address_;
  };

  // REQUIRES: 1 <= per_address <= total.
  Admission(std::size_t total, std::size_t per_address);

  // A slot for a handshake from `address`, or why there is none.
  struct Result {
    std::optional<Ticket> ticket;
    Busy busy = Busy::total;  // when there is no ticket
  };
  Result admit(const std::string& address);

  std::size_t pending() const { return pending_; }
  std::size_t pending_from(const std::string& address) const;
  std::size_t total() const { return total_; }
  std::size_t per_address() const { return per_address_; }

 private:
  void release(const std::string& address);

  std::size_t total_;
  std::size_t per_address_;
  std::size_t pending_ = 0;
  std::map<std::string, std::size_t> by_address_;  // only addresses with a handshake under way
};

}  // namespace gridtrain::dataplane
