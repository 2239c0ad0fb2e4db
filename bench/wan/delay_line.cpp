// A cable with a fixed one-way delay and random loss between two network namespaces (bench/wan/run), in the
// spirit of mahimahi's mm-delay and mm-loss: this kernel's tc has rate limiting (tbf, htb) but no netem, so delay
// and loss come from here. It makes one TUN device in each namespace and moves every IP packet read from one to the
// other DELAY later, both ways, losing each TCP segment (each packet, for anything else) with probability LOSS. The
// rate is not its business: tc tbf on the devices' egress sets it.
//
//   bench_wan_delay_line --left NETNS:DEVICE --right NETNS:DEVICE --delay-ms MS [--loss FRACTION] [--seed N]
//                        [--queue-mb MB] [--offload]
//
// NETNS is a name under /run/netns (`ip netns add`), or "-" for this process's own namespace. The devices are made
// here (non-persistent: they vanish when this process exits); the caller gives them addresses, MTU and routes once
// "ready" is printed. Each direction's losses come from its own generator seeded from --seed, so the n-th segment
// of a direction is lost or not the same way in every run. SIGTERM or SIGINT ends it cleanly; it then prints, per
// direction, the packets, segments and bytes carried and lost, and its CPU time. --queue-mb bounds each
// direction's packets in flight (default 64 MiB, 26 round trips of 20 ms at 1 Gbit/s); beyond it they are dropped
// and counted.
//
// --offload: the devices take TCP segmentation offload, so what crosses is the stack's sends of up to 64 KB (TSO)
// rather than packets of the MTU, as a NIC is handed them: a small part of the CPU per byte (bench/wan/run's
// header has the figures). Loss still hits segments: a send with lost segments goes on as the runs of segments
// between them, cut as the kernel's own segmentation would cut it.
//
// Cost: one read and one write per packet, nothing copied in user space but the rare send that loss cuts (a packet
// is read into its place in the queue and written from there), and one wake-up per batch of packets ready to read
// or due.

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

namespace {

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "delay_line: error: %s\n", message.c_str());
  std::exit(2);
}

std::int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

double parse_number(const std::string& option, const std::string& text, double lo, double hi) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno != 0 || !std::isfinite(v))
    fail(option + ": not a number: '" + text + "'");
  if (v < lo || v > hi) {
    char range[64];
    std::snprintf(range, sizeof range, "[%g, %g]", lo, hi);
    fail(option + ": " + text + " is out of range " + range);
  }
  return v;
}

struct End {
  std::string option, netns, device;
  int fd = -1;
};

End parse_end(const std::string& option, const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    fail(option + ": expected NETNS:DEVICE (NETNS '-' for this namespace), not '" + text + "'");
  End end{option, text.substr(0, colon), text.substr(colon + 1)};
  if (end.device.size() >= IFNAMSIZ)
    fail(option + ": device name '" + end.device + "' is longer than " + std::to_string(IFNAMSIZ - 1) + " characters");
  if (end.netns.find('/') != std::string::npos) fail(option + ": a namespace name has no '/': '" + end.netns + "'");
  return end;
}

// Makes the TUN device in its namespace. A TUN device belongs to the namespace its creator was in at TUNSETIFF,
// and its fd stays bound to it, so one process can hold ends in two namespaces.
void open_end(End& end, bool offload) {
  if (end.netns != "-") {
    const std::string path = "/run/netns/" + end.netns;
    const int ns = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0) fail(end.option + ": no network namespace '" + end.netns + "' (" + path + ": " + std::strerror(errno) + ")");
    if (setns(ns, CLONE_NEWNET) != 0) fail(end.option + ": cannot enter namespace '" + end.netns + "': " + std::strerror(errno));
    close(ns);
  }
  end.fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (end.fd < 0) fail(end.option + ": cannot open /dev/net/tun: " + std::strerror(errno));
  ifreq ifr{};
  // Bare IP packets; with offload, each behind the kernel's virtio_net_hdr, which is passed on as it came.
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI | (offload ? IFF_VNET_HDR : 0);
  std::memcpy(ifr.ifr_name, end.device.c_str(), end.device.size());
  if (ioctl(end.fd, TUNSETIFF, &ifr) != 0)
    fail(end.option + ": cannot make TUN device '" + end.device + "' in '" + end.netns + "': " + std::strerror(errno));
  if (offload && ioctl(end.fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN) != 0)
    fail(end.option + ": cannot turn on TSO on '" + end.device + "': " + std::strerror(errno));
}

// One direction's packets in flight, in arrival order: with one fixed delay the first in is the first due, so the
// timer queue is a FIFO. Records (header, then the packet) sit back to back in one ring of bytes, allocated once.
class Fifo {
 public:
  static constexpr std::size_t kMaxPacket = 65536;  // a TUN device's largest MTU, 65535, rounded up

  explicit Fifo(std::size_t bytes) : ring_(bytes) {}

  // Where the next packet can be read to (up to kMaxPacket bytes), or nullptr while the queue is full.
  unsigned char* reserve() {
    if (count_ == 0) head_ = tail_ = 0;
    if (tail_ >= head_) {
      if (ring_.size() - tail_ >= kRecord) return ring_.data() + tail_ + sizeof(Header);
      if (head_ <= kRecord) return nullptr;
      // Not enough room before the end: the reader skips from here to the start (a header that says so, where
      // one fits; the reader skips a tail too short for a header by itself).
      if (ring_.size() - tail_ >= sizeof(Header)) header_at(tail_)->length = kWrap;
      tail_ = 0;
      return ring_.data() + sizeof(Header);
    }
    // Strictly less, so that the tail never reaches the head of a queue that is not empty.
    return head_ - tail_ > kRecord ? ring_.data() + tail_ + sizeof(Header) : nullptr;
  }

  // Queues the packet just read to reserve()'s pointer.
  void commit(std::uint32_t length, std::int64_t due_ns) {
    Header* h = header_at(tail_);
    h->due_ns = due_ns;
    h->length = length;
    tail_ += record_size(length);
    ++count_;
  }

  // The oldest packet (its header; its bytes follow), or nullptr.
  const unsigned char* front() {
    if (count_ == 0) return nullptr;
    if (ring_.size() - head_ < sizeof(Header) || header_at(head_)->length == kWrap) head_ = 0;
    return ring_.data() + head_;
  }
  static std::int64_t due(const unsigned char* record) { return reinterpret_cast<const Header*>(record)->due_ns; }
  static std::uint32_t length(const unsigned char* record) { return reinterpret_cast<const Header*>(record)->length; }
  static const unsigned char* bytes(const unsigned char* record) { return record + sizeof(Header); }

  void pop() {
    head_ += record_size(header_at(head_)->length);
    if (--count_ == 0) head_ = tail_ = 0;
  }

 private:
  struct Header {
    std::int64_t due_ns;
    std::uint32_t length;
    std::uint32_t unused;
  };
  static constexpr std::uint32_t kWrap = 0xffffffff;
  static constexpr std::size_t kRecord = sizeof(Header) + kMaxPacket;
  static std::size_t record_size(std::uint32_t length) { return (sizeof(Header) + length + 15) & ~std::size_t{15}; }
  Header* header_at(std::size_t offset) { return reinterpret_cast<Header*>(ring_.data() + offset); }

  std::vector<unsigned char> ring_;  // 16-byte records: the headers stay aligned
  std::size_t head_ = 0, tail_ = 0, count_ = 0;
};

struct Direction {
  Direction(End* from_end, End* to_end, std::size_t queue_bytes, std::uint64_t seed)
      : from(from_end), to(to_end), queue(queue_bytes), random(seed) {}
  End* from;
  End* to;
  Fifo queue;
  std::mt19937_64 random;
  std::uint64_t packets = 0, segments = 0, bytes = 0, lost = 0, segments_lost = 0, overflow = 0, write_errors = 0;
  int last_write_errno = 0;
  std::vector<std::uint32_t> lost_segments;  // of the packet at hand
};

// With offload, what a TUN device hands over is one send of the stack's, up to 64 KB (TSO), behind the kernel's
// virtio_net_hdr; a NIC would cut it into segments of gso_size bytes on the wire. (linux/virtio_net.h's struct,
// written out: that header does not compile as C++, it has a field named class.)
struct VirtioNetHeader {
  std::uint8_t flags, gso_type;
  std::uint16_t hdr_len, gso_size, csum_start, csum_offset;  // little-endian, as the host (x86, arm64)
};
static_assert(sizeof(VirtioNetHeader) == 10);  // what TUN uses unless TUNSETVNETHDRSZ says otherwise
constexpr std::uint8_t kGsoNone = 0, kGsoTcpV4 = 1, kGsoEcn = 0x80;

// A TSO send of TCP over IPv4: where its headers end and how its payload is cut. Anything else (ACKs, pings, a
// send of one segment) is one segment.
struct Send {
  std::size_t ip = sizeof(VirtioNetHeader), tcp = 0, payload = 0;  // offsets in the buffer read
  std::size_t length = 0, mss = 0;
  std::uint32_t segments = 1;
};

std::uint16_t load16(const unsigned char* p) { return static_cast<std::uint16_t>(p[0] << 8 | p[1]); }
void store16(unsigned char* p, std::uint16_t v) {
  p[0] = static_cast<unsigned char>(v >> 8);
  p[1] = static_cast<unsigned char>(v);
}
std::uint32_t load32(const unsigned char* p) { return std::uint32_t{load16(p)} << 16 | load16(p + 2); }
void store32(unsigned char* p, std::uint32_t v) {
  store16(p, static_cast<std::uint16_t>(v >> 16));
  store16(p + 2, static_cast<std::uint16_t>(v));
}

Send parse_send(const unsigned char* buffer, std::size_t length) {
  Send s;
  s.length = length;
  VirtioNetHeader h;
  if (length < sizeof h + 40) return s;
  std::memcpy(&h, buffer, sizeof h);
  if ((h.gso_type & ~kGsoEcn) != kGsoTcpV4 || h.gso_size == 0) return s;
  const unsigned char* ip = buffer + s.ip;
  if (ip[0] >> 4 != 4 || ip[9] != 6) return s;
  s.tcp = s.ip + (ip[0] & 0x0f) * 4u;
  if (s.tcp + 20 > length) return s;
  s.payload = s.tcp + (buffer[s.tcp + 12] >> 4) * 4u;
  if (s.payload >= length) return s;
  s.mss = h.gso_size;
  s.segments = static_cast<std::uint32_t>((length - s.payload + s.mss - 1) / s.mss);
  return s;
}

// The one's-complement sum of 16-bit words, not yet folded.
std::uint32_t sum16(const unsigned char* p, std::size_t n, std::uint32_t sum = 0) {
  for (std::size_t i = 0; i + 1 < n; i += 2) sum += load16(p + i);
  if (n & 1) sum += std::uint32_t{p[n - 1]} << 8;
  return sum;
}
std::uint16_t fold(std::uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<std::uint16_t>(sum);
}

// Writes to `out` the part of TSO send `in` made of its segments [first, end), as the kernel's own segmentation
// would have made them: the TCP sequence number and the IP identifier advanced, FIN and PSH only on the last
// segment and CWR only on the first, the IP length and checksum redone, and the TCP checksum field holding the
// pseudo-header's sum for the new length (the device still completes the checksum: NEEDS_CSUM). Returns its length.
std::size_t cut(const unsigned char* in, const Send& s, std::uint32_t first, std::uint32_t end, unsigned char* out) {
  const std::size_t from = s.payload + first * s.mss;
  const std::size_t to = std::min(s.length, s.payload + end * s.mss);
  std::memcpy(out, in, s.payload);
  std::memcpy(out + s.payload, in + from, to - from);
  const std::size_t length = s.payload + (to - from);

  VirtioNetHeader h;
  std::memcpy(&h, out, sizeof h);
  h.hdr_len = static_cast<std::uint16_t>(s.payload - sizeof h);
  if (end - first == 1) h.gso_type = kGsoNone, h.gso_size = 0;  // one segment: no longer a TSO send
  std::memcpy(out, &h, sizeof h);

  unsigned char* ip = out + s.ip;
  unsigned char* tcp = out + s.tcp;
  store16(ip + 2, static_cast<std::uint16_t>(length - s.ip));
  store16(ip + 4, static_cast<std::uint16_t>(load16(ip + 4) + first));
  store16(ip + 10, 0);
  store16(ip + 10, static_cast<std::uint16_t>(~fold(sum16(ip, s.tcp - s.ip))));
  store32(tcp + 4, load32(tcp + 4) + first * static_cast<std::uint32_t>(s.mss));
  constexpr unsigned char kFin = 0x01, kPsh = 0x08, kCwr = 0x80;
  if (end != s.segments) tcp[13] &= static_cast<unsigned char>(~(kFin | kPsh));
  if (first != 0) tcp[13] &= static_cast<unsigned char>(~kCwr);
  const std::uint32_t pseudo = sum16(ip + 12, 8) + 6 + static_cast<std::uint32_t>(length - s.tcp);
  store16(tcp + 16, fold(pseudo));
  return length;
}

struct Options {
  End left, right;
  double delay_ms = -1, loss = 0, queue_mb = 64;
  std::uint64_t seed = 1;
  bool offload = false;
};

// The command line; fails (exit 2) on what it cannot take. Exits 0 after --help.
Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string option = argv[i];
    if (option == "--help" || option == "-h") {
      std::printf("usage: %s --left NETNS:DEVICE --right NETNS:DEVICE --delay-ms MS [--loss FRACTION] [--seed N] "
                  "[--queue-mb MB] [--offload]\n", argv[0]);
      std::exit(0);
    }
    if (option == "--offload") {
      o.offload = true;
      continue;
    }
    if (option != "--left" && option != "--right" && option != "--delay-ms" && option != "--loss" &&
        option != "--queue-mb" && option != "--seed")
      fail("unknown option '" + option + "' (--help lists them)");
    if (++i >= argc) fail(option + ": missing value");
    const std::string value = argv[i];
    if (option == "--left") o.left = parse_end(option, value);
    else if (option == "--right") o.right = parse_end(option, value);
    else if (option == "--delay-ms") o.delay_ms = parse_number(option, value, 0, 10'000);
    else if (option == "--loss") o.loss = parse_number(option, value, 0, 0.999);
    else if (option == "--queue-mb") o.queue_mb = parse_number(option, value, 1, 4096);
    else {
      char* end = nullptr;
      errno = 0;
      o.seed = std::strtoull(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || errno != 0 || value[0] == '-')
        fail("--seed: not a non-negative integer: '" + value + "'");
    }
  }
  if (o.left.device.empty()) fail("--left NETNS:DEVICE is required");
  if (o.right.device.empty()) fail("--right NETNS:DEVICE is required");
  if (o.delay_ms < 0) fail("--delay-ms MS is required");
  if (o.left.netns == o.right.netns && o.left.device == o.right.device)
    fail("--left and --right name the same device");
  return o;
}

// Writes every packet of `d` that is due by `now` to its far end; returns when the next one is due (-1: none).
std::int64_t send_due(Direction& d, std::int64_t now) {
  while (const unsigned char* r = d.queue.front()) {
    if (Fifo::due(r) > now) return Fifo::due(r);
    if (write(d.to->fd, Fifo::bytes(r), Fifo::length(r)) < 0) {
      // The device is down or the stack refused the packet: a lost packet, as on a cable.
      ++d.write_errors;
      d.last_write_errno = errno;
    }
    d.queue.pop();
  }
  return -1;
}

// How a direction takes what its near end hands over: each segment lost when a draw is below loss · 2^64, the
// rest queued to go out after the delay.
struct Intake {
  bool offload = false;
  double loss = 0;
  std::uint64_t threshold = 0;  // loss · 2^64
  std::int64_t delay_ns = 0;
  std::vector<unsigned char> discard = std::vector<unsigned char>(Fifo::kMaxPacket);  // a packet over the queue
  std::vector<unsigned char> scratch;  // a TSO send being cut

  // Queues what is left of a send that lost some of its segments (d.lost_segments): the runs between them, each
  // a send of its own.
  void queue_survivors(Direction& d, const Send& send, const unsigned char* in, std::size_t n) {
    scratch.assign(in, in + n);
    d.lost_segments.push_back(send.segments);
    std::uint32_t first = 0;
    for (std::uint32_t lost : d.lost_segments) {
      if (lost > first) {
        unsigned char* part = d.queue.reserve();
        if (!part) {
          ++d.overflow;
          break;
        }
        const std::size_t length = cut(scratch.data(), send, first, lost, part);
        d.queue.commit(static_cast<std::uint32_t>(length), now_ns() + delay_ns);
        d.segments += lost - first;
        d.bytes += length;
      }
      first = lost + 1;
    }
  }

  // Reads what is there, a bounded batch so that the other direction's due packets do not wait behind it.
  void read_batch(Direction& d) {
    for (int batch = 0; batch < 256; ++batch) {
      unsigned char* into = d.queue.reserve();
      const ssize_t n = read(d.from->fd, into ? into : discard.data(), Fifo::kMaxPacket);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) break;
        fail("read from " + d.from->device + ": " + std::strerror(errno));
      }
      if (n == 0) break;
      if (!into) {
        ++d.overflow;
        continue;
      }
      const Send send = offload ? parse_send(into, static_cast<std::size_t>(n)) : Send{};
      d.lost_segments.clear();
      if (loss > 0)
        for (std::uint32_t k = 0; k < send.segments; ++k)
          if (d.random() < threshold) d.lost_segments.push_back(k);
      if (!d.lost_segments.empty()) {
        ++d.lost;
        d.segments_lost += d.lost_segments.size();
        if (d.lost_segments.size() == send.segments) continue;
        queue_survivors(d, send, into, static_cast<std::size_t>(n));
        ++d.packets;
        continue;
      }
      d.segments += send.segments;
      d.queue.commit(static_cast<std::uint32_t>(n), now_ns() + delay_ns);
      ++d.packets;
      d.bytes += static_cast<std::uint64_t>(n);
    }
  }
};

void report(const Direction (&directions)[2]) {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  for (const auto& d : directions) {
    const double all = static_cast<double>(d.segments + d.segments_lost);
    std::fprintf(stderr, "delay_line: %s -> %s: %llu packets (%llu segments), %llu bytes carried; %llu segments "
                 "lost (%.4f%%, from %llu packets), %llu packets over the queue, %llu write errors%s%s\n",
                 d.from->device.c_str(), d.to->device.c_str(), static_cast<unsigned long long>(d.packets),
                 static_cast<unsigned long long>(d.segments), static_cast<unsigned long long>(d.bytes),
                 static_cast<unsigned long long>(d.segments_lost),
                 all > 0 ? 100.0 * static_cast<double>(d.segments_lost) / all : 0.0,
                 static_cast<unsigned long long>(d.lost), static_cast<unsigned long long>(d.overflow),
                 static_cast<unsigned long long>(d.write_errors), d.write_errors ? ", last: " : "",
                 d.write_errors ? std::strerror(d.last_write_errno) : "");
  }
  std::fprintf(stderr, "delay_line: CPU %.2f s user, %.2f s system\n",
               static_cast<double>(usage.ru_utime.tv_sec) + static_cast<double>(usage.ru_utime.tv_usec) * 1e-6,
               static_cast<double>(usage.ru_stime.tv_sec) + static_cast<double>(usage.ru_stime.tv_usec) * 1e-6);
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse_options(argc, argv);
  End& left = o.left;
  End& right = o.right;

  // SIGTERM and SIGINT arrive through a descriptor that poll watches with the devices: no handler, no race.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigprocmask(SIG_BLOCK, &stop_signals, nullptr);
  const int signals = signalfd(-1, &stop_signals, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signals < 0) fail(std::string("signalfd: ") + std::strerror(errno));

  open_end(left, o.offload);
  open_end(right, o.offload);
  // Wake-ups as close to a packet's due time as the kernel allows (the default slack is 50 µs).
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);

  const auto queue_bytes = static_cast<std::size_t>(o.queue_mb * 1024 * 1024);
  Direction directions[2] = {
      {&left, &right, queue_bytes, o.seed * 2 + 0},
      {&right, &left, queue_bytes, o.seed * 2 + 1},
  };
  std::printf("ready: %s:%s <-> %s:%s, delay %g ms each way, loss %g, seed %llu\n", left.netns.c_str(),
              left.device.c_str(), right.netns.c_str(), right.device.c_str(), o.delay_ms, o.loss,
              static_cast<unsigned long long>(o.seed));
  std::fflush(stdout);

  Intake intake;
  intake.offload = o.offload;
  intake.loss = o.loss;
  intake.threshold = static_cast<std::uint64_t>(std::ldexp(o.loss, 64));
  intake.delay_ns = static_cast<std::int64_t>(std::llround(o.delay_ms * 1e6));
  pollfd fds[3] = {{left.fd, POLLIN, 0}, {right.fd, POLLIN, 0}, {signals, POLLIN, 0}};
  for (;;) {
    // Send what is due, then sleep until the next packet is due or one arrives.
    const std::int64_t now = now_ns();
    std::int64_t next_due = -1;
    for (auto& d : directions) {
      const std::int64_t due = send_due(d, now);
      if (due >= 0 && (next_due < 0 || due < next_due)) next_due = due;
    }
    timespec timeout{};
    if (next_due >= 0) {
      const std::int64_t wait = std::max<std::int64_t>(0, next_due - now_ns());
      timeout = {static_cast<time_t>(wait / 1'000'000'000), static_cast<long>(wait % 1'000'000'000)};
    }
    if (ppoll(fds, 3, next_due >= 0 ? &timeout : nullptr, nullptr) < 0) {
      if (errno == EINTR) continue;
      fail(std::string("poll: ") + std::strerror(errno));
    }
    if (fds[2].revents & POLLIN) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].revents & (POLLERR | POLLHUP | POLLNVAL)) fail("TUN device " + directions[i].from->device + " failed");
      if (fds[i].revents & POLLIN) intake.read_batch(directions[i]);
    }
  }

  report(directions);
  close(left.fd);
  close(right.fd);
  return 0;
}
