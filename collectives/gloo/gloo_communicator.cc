// The Gloo backend. Every gloo call runs inside Run(), which turns gloo's exceptions into Status,
// marks the communicator broken on the first error and shuts down this rank's sockets so that
// peers blocked on it fail at once instead of waiting out their own timeouts.
//
// Breaking a blocked call. In this gloo (Debian 0.0~git20220518) tcp::Pair::close() closes the fd
// but wakes no thread waiting on an unbound buffer, and the package lacks gloo/common/memory.h,
// so <gloo/transport/tcp/pair.h> cannot even be included. What does work is shutdown(2) on the
// pair's connected socket: the device loop reads EOF, signals an IoException to every buffer
// pending on that pair (waking the blocked thread), and the peer reads EOF too. We find each
// pair's socket once, right after connecting, by address (see FindPairSockets) and keep a dup()
// of it, so later shutdowns can never hit a reused fd number. The context is destroyed only after
// every call has left it.
#include "collectives/gloo/gloo_communicator.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "collectives/gloo/gloo_errors.h"
#include "collectives/gloo/gloo_store.h"
#include "common/logging.h"

namespace elastra {
namespace {

// Slot prefix for Send/Recv: gloo's collectives use 0x01..0x08.
constexpr uint8_t kPointToPointSlotPrefix = 0x40;
// Slot prefix for the small allreduce exchange (see SmallAllreduce).
constexpr uint8_t kSmallAllreduceSlotPrefix = 0x41;
// Allreduces of at most this many bytes per rank, in groups of at most kSmallAllreduceRanks, run
// as an exchange over unbound buffers that Abort() can wake.
constexpr size_t kSmallAllreduceBytes = 64u << 10;
constexpr int kSmallAllreduceRanks = 16;
// Slot prefix for the ring allreduce and reduce-scatter (see RingReduce).
constexpr uint8_t kRingSlotPrefix = 0x42;

// Records what connectFullMesh reads from the store: each peer's blob of listening addresses.
class RecordingStore : public gloo::rendezvous::Store {
 public:
  explicit RecordingStore(gloo::rendezvous::Store& inner) : inner_(inner) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    inner_.set(key, data);
  }
  std::vector<char> get(const std::string& key) override {
    std::vector<char> value = inner_.get(key);
    gets_[key] = value;
    return value;
  }
  void wait(const std::vector<std::string>& keys) override { inner_.wait(keys); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    inner_.wait(keys, timeout);
  }
  const std::map<std::string, std::vector<char>>& gets() const { return gets_; }

 private:
  gloo::rendezvous::Store& inner_;
  std::map<std::string, std::vector<char>> gets_;
};

// extractAddress is protected; a pointer to member formed in a derived class may call it.
struct ContextInternals : gloo::rendezvous::Context {
  static std::vector<char> ExtractAddress(gloo::rendezvous::Context& context,
                                          std::vector<char>& all, int peer) {
    return (context.*(&ContextInternals::extractAddress))(all, peer);
  }
};

bool SameEndpoint(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    const auto& x = reinterpret_cast<const sockaddr_in&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in&>(b);
    return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
    return x.sin6_port == y.sin6_port &&
           std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof(x.sin6_addr)) == 0;
  }
  return false;
}

sockaddr_storage SockaddrOf(const std::vector<char>& address_bytes) {
  return gloo::transport::tcp::Address(address_bytes).getSockaddr();
}

// True when `fd` is a connected socket from `local` (the side that accepted) or to `remote` (the
// side that connected).
bool IsPairSocket(int fd, const sockaddr_storage& local, const sockaddr_storage& remote) {
  sockaddr_storage self{}, peer{};
  socklen_t len = sizeof(self);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len) != 0) return false;
  len = sizeof(peer);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) return false;
  return SameEndpoint(self, local) || SameEndpoint(peer, remote);
}

// For every peer, a dup() of the socket of its pair, or -1 where none was found. Each tcp pair
// listens on its own address: the accepting side's socket has that address as its local end, the
// connecting side's socket has the peer pair's listening address (read from the store blob the
// peer published) as its remote end. Both are unique per connection, even with ranks as threads.
std::vector<int> FindPairSockets(gloo::rendezvous::Context& context, const RecordingStore& store) {
  const int rank = context.rank;
  const int size = context.size;
  std::vector<sockaddr_storage> local(size), remote(size);
  std::vector<bool> known(size, false);
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    // connectFullMesh publishes rank j's pair addresses under key "j" ("rank_j" holds its
    // hostname, used for local ranks).
    auto it = store.gets().find(std::to_string(peer));
    if (it == store.gets().end()) continue;
    std::vector<char> blob = it->second;
    local[peer] = SockaddrOf(context.getPair(peer)->address().bytes());
    remote[peer] = SockaddrOf(ContextInternals::ExtractAddress(context, blob, peer));
    known[peer] = true;
  }
  std::vector<int> fds(size, -1);
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return fds;
  const int dir_fd = ::dirfd(dir);
  while (dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dir_fd) continue;
    struct stat st;
    if (::fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    for (int peer = 0; peer < size; ++peer) {
      if (!known[peer] || fds[peer] >= 0) continue;
      if (!IsPairSocket(static_cast<int>(fd), local[peer], remote[peer])) continue;
      // Check again on our own duplicate: the number may have been reused in between.
      const int dup_fd = ::fcntl(static_cast<int>(fd), F_DUPFD_CLOEXEC, 0);
      if (dup_fd < 0) continue;
      if (IsPairSocket(dup_fd, local[peer], remote[peer])) {
        fds[peer] = dup_fd;
      } else {
        ::close(dup_fd);
      }
      break;
    }
  }
  ::closedir(dir);
  return fds;
}

// gloo writes to its sockets with writev(2), without MSG_NOSIGNAL: a write to a peer that just
// died raises SIGPIPE, whose default action kills this process (seen in the SIGKILL test). The
// whole point of this backend is to turn that into kPeerLost, so SIGPIPE is ignored process-wide
// (write then fails with EPIPE) unless the program already installed its own disposition.
void IgnoreSigpipeOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;
      ::sigemptyset(&ignore.sa_mask);
      ::sigaction(SIGPIPE, &ignore, nullptr);
    }
  });
}

// One gloo tcp device per bind address, shared by every context of the process while any of them
// holds it. Each tcp::Device owns an epoll loop thread, and in this gloo that loop only "ticks"
// every 10 ms when idle: a device's destructor joins the thread (up to 10 ms), so a device per
// context made every reconfiguration pay device creation plus up to 10 ms per context destroyed
// (a 1-D layout has three contexts: the world and the size-1 pp and tp groups). Sharing is safe:
// in this gloo every pair listens on and connects its own sockets; the device only multiplexes
// them (PyTorch's ProcessGroupGloo shares devices the same way). Held weakly, so the device goes
// when the last communicator on it does (a worker keeps the old generation's communicators until
// the new ones are built, so a reconfiguration reuses the device).
std::shared_ptr<gloo::transport::Device> SharedDevice(const std::string& hostname) {
  static std::mutex mu;
  static auto* devices = new std::map<std::string, std::weak_ptr<gloo::transport::Device>>();
  std::lock_guard<std::mutex> lock(mu);
  std::weak_ptr<gloo::transport::Device>& slot = (*devices)[hostname];
  if (std::shared_ptr<gloo::transport::Device> device = slot.lock()) return device;
  gloo::transport::tcp::attr attr;
  attr.hostname = hostname;
  std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
  slot = device;
  return device;
}

template <typename T>
gloo::AllreduceOptions::Func ReduceFunc(ReduceOp op) {
  using Fn = void (*)(void*, const void*, const void*, size_t);
  switch (op) {
    case ReduceOp::kSum: return static_cast<Fn>(&gloo::sum<T>);
    case ReduceOp::kMax: return static_cast<Fn>(&gloo::max<T>);
    case ReduceOp::kMin: return static_cast<Fn>(&gloo::min<T>);
  }
  return nullptr;
}

bool ValidType(DataType type) {
  switch (type) {
    case DataType::kFloat32:
    case DataType::kFloat64:
    case DataType::kInt64:
    case DataType::kUint8: return true;
  }
  return false;
}

bool ValidOp(ReduceOp op) {
  return op == ReduceOp::kSum || op == ReduceOp::kMax || op == ReduceOp::kMin;
}

// Calls f.template operator()<T>() with T the C++ type of `type`.
template <typename F>
void DispatchType(DataType type, F&& f) {
  switch (type) {
    case DataType::kFloat32: f.template operator()<float>(); return;
    case DataType::kFloat64: f.template operator()<double>(); return;
    case DataType::kInt64: f.template operator()<int64_t>(); return;
    case DataType::kUint8: f.template operator()<uint8_t>(); return;
  }
}

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(const GlooOptions& options, std::shared_ptr<gloo::rendezvous::Context> context,
                   std::shared_ptr<gloo::transport::Device> device, std::vector<int> sockets)
      : rank_(options.rank),
        size_(options.size),
        timeout_(options.timeout),
        prefix_(options.prefix),
        device_(std::move(device)),
        context_(std::move(context)),
        sockets_(std::move(sockets)) {}

  ~GlooCommunicator() override {
    // Thread-compatible, but the documented pattern "Abort() on one thread, then destroy" must be
    // safe while a call on another thread is still unwinding: wait for it to leave the context.
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [&] { return in_flight_ == 0; });
    lock.unlock();
    context_.reset();
    device_.reset();
    for (int fd : sockets_) {
      if (fd >= 0) ::close(fd);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "gloo"; }
  Timeout default_timeout() const override { return timeout_; }

  Status Allreduce(void* data, size_t count, DataType type, ReduceOp op,
                   Timeout timeout) override {
    ELASTRA_RETURN_IF_ERROR(CheckCommon("Allreduce", data, count, type, timeout));
    if (!ValidOp(op)) return InvalidArgumentError("Allreduce: unknown reduce op");
    if (count == 0) return OkStatus();
    if (count * DataTypeSize(type) <= kSmallAllreduceBytes && size_ <= kSmallAllreduceRanks) {
      return SmallAllreduce(data, count, type, op, timeout);
    }
    if (count >= static_cast<size_t>(size_)) {
      std::vector<size_t> begin(size_ + 1);
      for (int b = 0; b <= size_; ++b) begin[b] = count * b / size_;
      return Run("Allreduce", timeout, [&] { RingReduce(data, begin, type, op, timeout, true); });
    }
    // Fewer elements than ranks (only with more than kSmallAllreduceRanks ranks): gloo's own.
    return Run("Allreduce", timeout, [&] {
      DispatchType(type, [&]<typename T>() {
        gloo::AllreduceOptions opts(context_);
        opts.setOutput(static_cast<T*>(data), count);
        opts.setReduceFunction(ReduceFunc<T>(op));
        opts.setTimeout(timeout);
        gloo::allreduce(opts);
      });
    });
  }

  Status Broadcast(void* data, size_t count, DataType type, int root, Timeout timeout) override {
    ELASTRA_RETURN_IF_ERROR(CheckCommon("Broadcast", data, count, type, timeout));
    if (root < 0 || root >= size_) {
      return InvalidArgumentError("Broadcast: root " + std::to_string(root) + " out of [0, " +
                                  std::to_string(size_) + ")");
    }
    if (count == 0) return OkStatus();
    return Run("Broadcast", timeout, [&] {
      DispatchType(type, [&]<typename T>() {
        gloo::BroadcastOptions opts(context_);
        opts.setOutput(static_cast<T*>(data), count);
        opts.setRoot(root);
        opts.setTimeout(timeout);
        gloo::broadcast(opts);
      });
    });
  }

  Status Allgather(const void* send, void* recv, size_t count, DataType type,
                   Timeout timeout) override {
    ELASTRA_RETURN_IF_ERROR(CheckCommon("Allgather", send, count, type, timeout));
    if (recv == nullptr && count > 0) return InvalidArgumentError("Allgather: recv is null");
    if (count == 0) return OkStatus();
    return Run("Allgather", timeout, [&] {
      DispatchType(type, [&]<typename T>() {
        gloo::AllgatherOptions opts(context_);
        // gloo's allgather reads its input from `send` (const_cast: it only reads it).
        opts.setInput(const_cast<T*>(static_cast<const T*>(send)), count);
        opts.setOutput(static_cast<T*>(recv), count * size_);
        opts.setTimeout(timeout);
        gloo::allgather(opts);
      });
    });
  }

  // The ring's reduce-scatter phase on a copy of the input (this gloo's only reduce-scatter,
  // ReduceScatterHalvingDoubling, takes no timeout and waits on bound buffers abort cannot wake).
  Status ReduceScatter(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                       Timeout timeout) override {
    ELASTRA_RETURN_IF_ERROR(CheckCommon("ReduceScatter", send, count, type, timeout));
    if (recv == nullptr && count > 0) return InvalidArgumentError("ReduceScatter: recv is null");
    if (!ValidOp(op)) return InvalidArgumentError("ReduceScatter: unknown reduce op");
    if (count == 0) return OkStatus();
    const size_t elem = DataTypeSize(type);
    std::vector<char> scratch(static_cast<const char*>(send),
                              static_cast<const char*>(send) + elem * count * size_);
    std::vector<size_t> begin(size_ + 1);
    for (int b = 0; b <= size_; ++b) begin[b] = count * b;
    return Run("ReduceScatter", timeout, [&] {
      RingReduce(scratch.data(), begin, type, op, timeout, false);
      std::memcpy(recv, scratch.data() + elem * count * rank_, elem * count);
    });
  }

  Status Barrier(Timeout timeout) override {
    if (timeout.count() <= 0) return InvalidArgumentError("Barrier: timeout must be positive");
    ELASTRA_RETURN_IF_ERROR(BrokenStatus());
    return Run("Barrier", timeout, [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTimeout(timeout);
      gloo::barrier(opts);
    });
  }

  Status Send(const void* data, size_t bytes, int peer, uint32_t tag, Timeout timeout) override {
    ELASTRA_RETURN_IF_ERROR(CheckPointToPoint("Send", data, bytes, peer, timeout));
    return Run("Send", timeout, [&] {
      auto buf = context_->createUnboundBuffer(const_cast<void*>(data), bytes);
      Watch watch(this, {buf.get()});
      buf->send(peer, gloo::Slot::build(kPointToPointSlotPrefix, tag));
      if (!buf->waitSend(nullptr, timeout)) throw std::runtime_error("aborted");
    });
  }

  // Every transfer on its own unbound buffer, all posted at once (receives first), then waited
  // on: waits that Abort() can wake. Messages between two ranks share one slot and match in
  // posting order.
  bool has_exchange() const override { return true; }
  Status Exchange(const std::vector<PointToPoint>& ops, uint32_t tag, Timeout timeout) override {
    bool any = false;
    for (const PointToPoint& op : ops) {
      ELASTRA_RETURN_IF_ERROR(CheckPointToPoint(op.send ? "Exchange (send)" : "Exchange (recv)",
                                                op.data, op.bytes, op.peer, timeout));
      any |= op.bytes > 0;
    }
    if (!any) return BrokenStatus();
    const uint64_t slot = gloo::Slot::build(kPointToPointSlotPrefix, tag);
    return Run("Exchange", timeout, [&] {
      std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> bufs(ops.size());
      std::vector<gloo::transport::UnboundBuffer*> watched;
      for (size_t i = 0; i < ops.size(); ++i) {
        if (ops[i].bytes == 0) continue;
        bufs[i] = context_->createUnboundBuffer(ops[i].data, ops[i].bytes);
        watched.push_back(bufs[i].get());
      }
      Watch watch(this, watched);
      for (size_t i = 0; i < ops.size(); ++i) {
        if (bufs[i] != nullptr && !ops[i].send) bufs[i]->recv(ops[i].peer, slot);
      }
      for (size_t i = 0; i < ops.size(); ++i) {
        if (bufs[i] != nullptr && ops[i].send) bufs[i]->send(ops[i].peer, slot);
      }
      for (size_t i = 0; i < ops.size(); ++i) {
        if (bufs[i] == nullptr) continue;
        const bool done = ops[i].send ? bufs[i]->waitSend(nullptr, timeout)
                                      : bufs[i]->waitRecv(nullptr, timeout);
        if (!done) throw std::runtime_error("aborted");
      }
    });
  }

  Status Recv(void* data, size_t bytes, int peer, uint32_t tag, Timeout timeout) override {
    ELASTRA_RETURN_IF_ERROR(CheckPointToPoint("Recv", data, bytes, peer, timeout));
    return Run("Recv", timeout, [&] {
      auto buf = context_->createUnboundBuffer(data, bytes);
      Watch watch(this, {buf.get()});
      buf->recv(peer, gloo::Slot::build(kPointToPointSlotPrefix, tag));
      if (!buf->waitRecv(nullptr, timeout)) throw std::runtime_error("aborted");
    });
  }

  void Abort() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_) return;
      aborted_ = true;
      broken_ = AbortedError("communicator " + prefix_ + " was aborted");
      // gloo's waits on unbound buffers can be woken; its own collectives' cannot (their waits
      // for a peer's send notification ignore a broken pair), hence SmallAllreduce.
      for (gloo::transport::UnboundBuffer* buf : active_) {
        buf->abortWaitRecv();
        buf->abortWaitSend();
      }
    }
    ShutdownAll();
  }

 private:
  // Registers unbound buffers in use so that Abort() can wake their waits.
  class Watch {
   public:
    Watch(GlooCommunicator* comm, std::vector<gloo::transport::UnboundBuffer*> bufs)
        : comm_(comm), bufs_(std::move(bufs)) {
      std::lock_guard<std::mutex> lock(comm_->mu_);
      for (auto* b : bufs_) {
        comm_->active_.insert(b);
        if (comm_->aborted_) {
          b->abortWaitRecv();
          b->abortWaitSend();
        }
      }
    }
    ~Watch() {
      std::lock_guard<std::mutex> lock(comm_->mu_);
      for (auto* b : bufs_) comm_->active_.erase(b);
    }

   private:
    GlooCommunicator* comm_;
    std::vector<gloo::transport::UnboundBuffer*> bufs_;
  };

  // Every rank sends its contribution to every other rank over unbound buffers (one per peer and
  // direction) and reduces all of them in rank order: the same bits on every rank, whatever the
  // group, and waits that Abort() can wake. Used for the small allreduces that dominate a step's
  // synchronization (step agreement, activation sums under TP).
  Status SmallAllreduce(void* data, size_t count, DataType type, ReduceOp op, Timeout timeout) {
    const size_t bytes = count * DataTypeSize(type);
    std::vector<char> mine(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
    std::vector<char> all(bytes * size_);
    uint64_t slot = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      slot = gloo::Slot::build(kSmallAllreduceSlotPrefix, small_sequence_++);
    }
    return Run("Allreduce", timeout, [&] {
      std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> outs, ins;
      std::vector<gloo::transport::UnboundBuffer*> watched;
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        outs.push_back(context_->createUnboundBuffer(mine.data(), bytes));
        ins.push_back(context_->createUnboundBuffer(all.data() + p * bytes, bytes));
        watched.push_back(outs.back().get());
        watched.push_back(ins.back().get());
      }
      Watch watch(this, watched);
      for (int p = 0, i = 0; p < size_; ++p) {
        if (p == rank_) continue;
        ins[i]->recv(p, slot);
        outs[i]->send(p, slot);
        ++i;
      }
      for (size_t i = 0; i < ins.size(); ++i) {
        if (!ins[i]->waitRecv(nullptr, timeout)) throw std::runtime_error("aborted");
        if (!outs[i]->waitSend(nullptr, timeout)) throw std::runtime_error("aborted");
      }
      std::memcpy(all.data() + rank_ * bytes, mine.data(), bytes);
      DispatchType(type, [&]<typename T>() {
        const T* parts = reinterpret_cast<const T*>(all.data());
        T* out = static_cast<T*>(data);
        for (size_t e = 0; e < count; ++e) {
          T acc = parts[e];
          for (int r = 1; r < size_; ++r) {
            const T x = parts[r * count + e];
            acc = op == ReduceOp::kSum ? static_cast<T>(acc + x)
                  : op == ReduceOp::kMax ? std::max(acc, x)
                                         : std::min(acc, x);
          }
          out[e] = acc;
        }
      });
    });
  }

  // Ring reduction over unbound buffers, n - 1 steps per phase, each a send to the right
  // neighbour and a receive from the left one: the bandwidth-optimal schedule, with waits that
  // Abort() can wake. Block b is elements [begin[b], begin[b + 1]) of `data`. Reduce-scatter: at
  // step s rank r sends block r - s - 1 and reduces the incoming block r - s - 2 into its own, so
  // it ends holding the full reduction of block r. With `allgather`, n - 1 more steps pass the
  // reduced blocks round the ring, so every rank ends with the same bits. Throws like gloo (Run
  // maps it).
  void RingReduce(void* data, const std::vector<size_t>& begin, DataType type, ReduceOp op,
                  Timeout timeout, bool allgather) {
    const int n = size_;
    if (n == 1) return;
    const size_t elem = DataTypeSize(type);
    size_t largest = 0;
    for (int b = 0; b < n; ++b) largest = std::max(largest, begin[b + 1] - begin[b]);
    std::vector<char> incoming(std::max<size_t>(largest, 1) * elem);
    uint32_t first_slot = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      first_slot = ring_sequence_;
      ring_sequence_ += 2 * (n - 1);
    }
    auto* bytes = static_cast<char*>(data);
    auto whole = context_->createUnboundBuffer(data, begin[n] * elem);
    auto in = context_->createUnboundBuffer(incoming.data(), incoming.size());
    Watch watch(this, {whole.get(), in.get()});
    const int right = (rank_ + 1) % n;
    const int left = (rank_ + n - 1) % n;
    auto block = [n](int b) { return ((b % n) + n) % n; };
    auto wait = [&](gloo::transport::UnboundBuffer* buf, bool recv) {
      if (!(recv ? buf->waitRecv(nullptr, timeout) : buf->waitSend(nullptr, timeout))) {
        throw std::runtime_error("aborted");
      }
    };
    for (int s = 0; s < n - 1; ++s) {
      const uint64_t slot = gloo::Slot::build(kRingSlotPrefix, first_slot + s);
      const int out = block(rank_ - s - 1), into = block(rank_ - s - 2);
      const size_t out_len = (begin[out + 1] - begin[out]) * elem;
      const size_t in_len = (begin[into + 1] - begin[into]) * elem;
      in->recv(left, slot, 0, in_len);
      whole->send(right, slot, begin[out] * elem, out_len);
      wait(in.get(), true);
      DispatchType(type, [&]<typename T>() {
        T* acc = reinterpret_cast<T*>(bytes + begin[into] * elem);
        const T* x = reinterpret_cast<const T*>(incoming.data());
        const size_t m = begin[into + 1] - begin[into];
        switch (op) {
          case ReduceOp::kSum:
            for (size_t e = 0; e < m; ++e) acc[e] = static_cast<T>(acc[e] + x[e]);
            break;
          case ReduceOp::kMax:
            for (size_t e = 0; e < m; ++e) acc[e] = std::max(acc[e], x[e]);
            break;
          case ReduceOp::kMin:
            for (size_t e = 0; e < m; ++e) acc[e] = std::min(acc[e], x[e]);
            break;
        }
      });
      wait(whole.get(), false);
    }
    if (!allgather) return;
    for (int s = 0; s < n - 1; ++s) {
      const uint64_t slot = gloo::Slot::build(kRingSlotPrefix, first_slot + (n - 1) + s);
      const int out = block(rank_ - s), into = block(rank_ - s - 1);
      whole->recv(left, slot, begin[into] * elem, (begin[into + 1] - begin[into]) * elem);
      whole->send(right, slot, begin[out] * elem, (begin[out + 1] - begin[out]) * elem);
      wait(whole.get(), true);
      wait(whole.get(), false);
    }
  }

  Status BrokenStatus() {
    std::lock_guard<std::mutex> lock(mu_);
    return broken_;
  }

  Status CheckCommon(const char* op, const void* data, size_t count, DataType type,
                     Timeout timeout) {
    if (!ValidType(type)) return InvalidArgumentError(std::string(op) + ": unknown data type");
    if (data == nullptr && count > 0) return InvalidArgumentError(std::string(op) + ": null data");
    if (timeout.count() <= 0) {
      return InvalidArgumentError(std::string(op) + ": timeout must be positive");
    }
    return BrokenStatus();
  }

  Status CheckPointToPoint(const char* op, const void* data, size_t bytes, int peer,
                           Timeout timeout) {
    if (peer < 0 || peer >= size_ || peer == rank_) {
      return InvalidArgumentError(std::string(op) + ": peer " + std::to_string(peer) +
                                  " is not another rank of [0, " + std::to_string(size_) + ")");
    }
    if (data == nullptr && bytes > 0) return InvalidArgumentError(std::string(op) + ": null data");
    if (timeout.count() <= 0) {
      return InvalidArgumentError(std::string(op) + ": timeout must be positive");
    }
    return BrokenStatus();
  }

  // Runs one gloo operation. The in-flight count keeps the context alive for the destructor.
  // Every wait of the operation gets `timeout`, so a gloo timeout comes after start + timeout:
  // that deadline tells a timeout from a lost peer (both are gloo::IoException).
  Status Run(const char* op, Timeout timeout, const std::function<void()>& body) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!broken_.ok()) return broken_;
      ++in_flight_;
    }
    Status result;
    try {
      body();
    } catch (...) {
      result = StatusOfGlooFailure(std::current_exception(), op,
                                   std::chrono::steady_clock::now() >= deadline);
    }
    bool shutdown = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!result.ok()) {
        if (aborted_) {
          // A call that Abort() broke reports the abort, not the EOF it caused.
          result = broken_;
        } else if (broken_.ok()) {
          broken_ = result.WithContext("rank " + std::to_string(rank_) + " " + prefix_);
          result = broken_;
          shutdown = true;
        } else {
          result = broken_;
        }
      }
    }
    if (shutdown) {
      LOG(WARNING) << "gloo " << prefix_ << " rank " << rank_ << " broken: " << result;
      ShutdownAll();
    }
    // Last touch of `this`: the destructor may run as soon as the count drops to zero.
    {
      std::lock_guard<std::mutex> lock(mu_);
      --in_flight_;
      idle_.notify_all();
    }
    return result;
  }

  // Thread-safe: shutdown(2) on our own dup()s; the context itself is not touched.
  void ShutdownAll() {
    for (int fd : sockets_) {
      if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
    }
  }

  const int rank_;
  const int size_;
  const Timeout timeout_;
  const std::string prefix_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  const std::vector<int> sockets_;  // per peer: our dup() of the pair's socket, -1 for self

  std::mutex mu_;
  std::condition_variable idle_;
  int in_flight_ = 0;   // guarded by mu_
  bool aborted_ = false;  // guarded by mu_
  std::set<gloo::transport::UnboundBuffer*> active_;  // guarded by mu_: buffers being waited on
  uint64_t small_sequence_ = 0;  // guarded by mu_: slots of SmallAllreduce, in call order
  uint32_t ring_sequence_ = 0;   // guarded by mu_: slots of RingReduce's steps, in call order
  Status broken_;       // guarded by mu_; OK while healthy
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const GlooOptions& options) {
  if (options.store == nullptr) return InvalidArgumentError("CreateGlooCommunicator: no store");
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return InvalidArgumentError("CreateGlooCommunicator: rank " + std::to_string(options.rank) +
                                " size " + std::to_string(options.size));
  }
  if (options.timeout.count() <= 0 || options.connect_timeout.count() <= 0) {
    return InvalidArgumentError("CreateGlooCommunicator: timeouts must be positive");
  }
  IgnoreSigpipeOnce();
  const auto deadline = std::chrono::steady_clock::now() + options.connect_timeout;
  try {
    std::shared_ptr<gloo::transport::Device> device = SharedDevice(options.hostname);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    context->setTimeout(options.connect_timeout);
    GlooStore store(options.store, options.connect_timeout);
    gloo::rendezvous::PrefixStore prefixed(options.prefix, store);
    RecordingStore recording(prefixed);
    context->connectFullMesh(recording, device);
    context->setTimeout(options.timeout);
    std::vector<int> sockets = FindPairSockets(*context, recording);
    for (int peer = 0; peer < options.size; ++peer) {
      if (peer != options.rank && sockets[peer] < 0) {
        for (int fd : sockets) {
          if (fd >= 0) ::close(fd);
        }
        return InternalError("CreateGlooCommunicator " + options.prefix +
                             ": cannot find the socket to rank " + std::to_string(peer));
      }
    }
    return std::unique_ptr<Communicator>(new GlooCommunicator(
        options, std::move(context), std::move(device), std::move(sockets)));
  } catch (...) {
    return StatusOfGlooFailure(std::current_exception(), "CreateGlooCommunicator " + options.prefix,
                               std::chrono::steady_clock::now() >= deadline);
  }
}

}  // namespace elastra
