// The NCCL communicator's lifecycle: init (CreateNcclCommunicator), split, shrink, interrupt,
// quiesce, abort and release. The collectives are in nccl_collectives.cc.
#include "collectives/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "collectives/nccl/nccl_call.h"
#include "collectives/nccl/nccl_communicator_impl.h"
#include "collectives/nccl/nccl_interrupt.h"
#include "collectives/nccl/nccl_unique_ids.h"
#include "common/logging.h"

namespace elastra {
namespace {

using nccl_internal::Clock;
using nccl_internal::CudaStatus;
using nccl_internal::NcclStatus;
using nccl_internal::Poll;

// ncclCommRevoke appeared in NCCL 2.28.7, and the libnccl.so.2 a job runs with may be older than
// the header it was built with (e.g. PyTorch's): it is looked up at run time, never linked.
using RevokeFn = ncclResult_t (*)(ncclComm_t, int);
constexpr int kRevokeDefault = 0;  // NCCL_REVOKE_DEFAULT, which older headers lack

RevokeFn LookupRevoke() {
  static const RevokeFn revoke = [] {
    void* sym = dlsym(RTLD_DEFAULT, "ncclCommRevoke");
    if (sym == nullptr) {
      // A libnccl loaded outside the global scope.
      if (void* lib = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD)) {
        sym = dlsym(lib, "ncclCommRevoke");
        dlclose(lib);  // drops only the reference RTLD_NOLOAD took
      }
    }
    int version = 0;
    if (ncclGetVersion(&version) != ncclSuccess) version = 0;
    LOG(INFO) << "NCCL " << version << ": ncclCommRevoke "
              << (sym != nullptr ? "available" : "missing (interrupted worlds are not revoked)");
    return reinterpret_cast<RevokeFn>(sym);
  }();
  return revoke;
}

NcclCommState StateOf(ncclComm_t comm, ncclResult_t* async) {
  *async = ncclInternalError;
  if (ncclCommGetAsyncError(comm, async) != ncclSuccess) return NcclCommState::kError;
  if (*async == ncclSuccess) return NcclCommState::kSuccess;
  if (*async == ncclInProgress) return NcclCommState::kInProgress;
  return NcclCommState::kError;
}

ncclConfig_t NonBlockingConfig() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

}  // namespace

NcclCommunicator::Impl::~Impl() {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (comm != nullptr) {
      bool clean = false;
      if (broken.ok() && !abort_requested.load()) {
        // Finalize flushes outstanding work; bounded by the timeout, then abort.
        ncclResult_t r = ncclCommFinalize(comm);
        if (r == ncclSuccess || r == ncclInProgress) {
          Status s = Poll(comm, nullptr, Clock::now() + timeout, nullptr, "ncclCommFinalize");
          if (s.ok()) {
            clean = ncclCommDestroy(comm) == ncclSuccess;
            if (!clean) LOG(WARNING) << "ncclCommDestroy failed; the handle is lost";
            comm = nullptr;
          } else {
            LOG(WARNING) << "nccl rank " << rank << ": " << s << "; aborting";
          }
        }
      }
      if (comm != nullptr) {
        ncclResult_t r = ncclCommAbort(comm);
        if (r != ncclSuccess) LOG(WARNING) << "ncclCommAbort: " << ncclGetErrorString(r);
        comm = nullptr;
      }
    }
    ReleasePendingChildLocked();
  }
  if (scratch != nullptr || stream != nullptr) {
    if (cudaSetDevice(device) != cudaSuccess) return;
  }
  // Stream-ordered free: cudaFree would synchronize the whole device, which hangs while another
  // communicator's collective is stuck on it.
  if (scratch != nullptr) {
    cudaError_t e = cudaFreeAsync(scratch, stream);
    if (e != cudaSuccess) LOG(WARNING) << "cudaFreeAsync: " << cudaGetErrorString(e);
  }
  if (stream != nullptr) {
    cudaError_t e = cudaStreamDestroy(stream);
    if (e != cudaSuccess) LOG(WARNING) << "cudaStreamDestroy: " << cudaGetErrorString(e);
  }
}

StatusOr<std::unique_ptr<NcclCommunicator::Impl>> NcclCommunicator::Impl::Wrap(
    ncclComm_t c, int device, Communicator::Timeout t, Communicator::Timeout ct) {
  auto impl = std::make_unique<Impl>();
  impl->comm = c;  // from here on the destructor releases it
  impl->device = device;
  impl->timeout = t;
  impl->connect_timeout = ct;
  ELASTRA_NCCL_RETURN(ncclCommUserRank(c, &impl->rank), c);
  ELASTRA_NCCL_RETURN(ncclCommCount(c, &impl->size), c);
  ELASTRA_CUDA_RETURN(cudaSetDevice(device));
  ELASTRA_CUDA_RETURN(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
  ELASTRA_CUDA_RETURN(cudaMallocAsync(&impl->scratch, 8, impl->stream));
  ELASTRA_CUDA_RETURN(cudaMemsetAsync(impl->scratch, 0, 8, impl->stream));
  ELASTRA_CUDA_RETURN(cudaStreamSynchronize(impl->stream));
  return impl;
}

Status NcclCommunicator::Impl::BeginCall(bool allow_broken) {
  std::lock_guard<std::mutex> lock(mu);
  if (abort_requested.load()) {
    AbortLocked("Abort() was called");
    return broken;
  }
  if (comm == nullptr) return broken.ok() ? AbortedError("communicator released") : broken;
  if (!broken.ok() && !allow_broken) return broken;
  in_call = true;
  return OkStatus();
}

Status NcclCommunicator::Impl::EndCall(Status s) {
  std::lock_guard<std::mutex> lock(mu);
  in_call = false;
  if (abort_requested.load() || s.code() == StatusCode::kAborted) {
    AbortLocked(s.ok() ? std::string("Abort() was called") : s.message());
    return broken;
  }
  if (!s.ok() && s.code() != StatusCode::kInvalidArgument) {
    if (broken.ok()) {
      broken = s;
      LOG(WARNING) << "nccl rank " << rank << "/" << size << " broken: " << s;
    }
    // A call that timed out or saw a peer's error may leave its kernel spinning on the caller's
    // buffers, and a cudaFree of them (a device reshard unwinding) would wait for it forever. So
    // the failure takes Interrupt()'s step now: revoke (the kernel stops, the handle stays
    // shrinkable) or, when NCCL reports an error, release.
    interrupt_requested.store(true, std::memory_order_release);
  }
  // Interrupt() during this call left its NCCL part to us (one thread per communicator).
  if (interrupt_requested.load(std::memory_order_acquire) && comm != nullptr) InterruptLocked();
  return s;
}

InterruptStep NcclCommunicator::Impl::InterruptLocked(bool may_release) {
  if (broken.ok()) broken = PeerLostError("interrupted (the job is recovering)");
  if (comm == nullptr) return InterruptStep::kRelease;
  ncclResult_t async = ncclSuccess;
  const NcclCommState state = StateOf(comm, &async);
  const RevokeFn revoke = LookupRevoke();
  const InterruptStep step = NextInterruptStep(state, revoke != nullptr, revoke_issued);
  if (step == InterruptStep::kRevoke) {
    // Sets NCCL's abort flags at once (the kernel of a hung call leaves its spin loop), then NCCL's
    // thread drains the streams and stops the proxy; the state is ncclInProgress until then.
    revoke_issued = true;
    const ncclResult_t r = revoke(comm, kRevokeDefault);
    if (r == ncclSuccess || r == ncclInProgress) {
      LOG(INFO) << "nccl rank " << rank << "/" << size << ": interrupted communicator revoked";
    } else {
      // Refused up front (state unchanged: polling goes on without a revoke), or failed (NCCL
      // stored the error: the next step releases the communicator).
      LOG(WARNING) << "nccl rank " << rank << "/" << size
                   << ": ncclCommRevoke: " << ncclGetErrorString(r);
    }
    return InterruptStep::kWait;
  }
  if (step == InterruptStep::kRelease && !may_release) return InterruptStep::kWait;
  if (step == InterruptStep::kRelease) {
    LOG(WARNING) << "nccl rank " << rank << "/" << size << ": NCCL reports "
                 << ncclGetErrorString(async)
                 << " on the interrupted communicator, which it will never shrink; releasing it";
    broken =
        PeerLostError(broken.message() + "; released, NCCL reported: " + ncclGetErrorString(async));
    const ncclResult_t r = ncclCommAbort(comm);
    if (r != ncclSuccess) LOG(WARNING) << "ncclCommAbort: " << ncclGetErrorString(r);
    comm = nullptr;
    ReleasePendingChildLocked();
  }
  return step;
}

void NcclCommunicator::Impl::AbortLocked(const std::string& why) {
  if (comm != nullptr) {
    ncclResult_t r = ncclCommAbort(comm);
    if (r != ncclSuccess) LOG(WARNING) << "ncclCommAbort: " << ncclGetErrorString(r);
    comm = nullptr;
  }
  ReleasePendingChildLocked();
  if (broken.code() != StatusCode::kAborted) broken = AbortedError(why);
}

void NcclCommunicator::Impl::ReleasePendingChildLocked() {
  ncclComm_t child = __atomic_exchange_n(&pending_child, nullptr, __ATOMIC_ACQ_REL);
  if (child != nullptr) ncclCommAbort(child);
}

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Impl::FinishChild(
    ncclResult_t r, const char* what, bool release_parent) {
  const Clock::time_point deadline = Clock::now() + connect_timeout;
  Status s = NcclStatus(r, comm, what);
  // The parent is in progress until the collective part of split/shrink is over; the child's init
  // result (success or not) is the parent's state then. The child's own state says nothing of it.
  if (s.ok()) s = Poll(comm, nullptr, deadline, &abort_requested, what);
  ncclComm_t child = nullptr;
  if (s.code() != StatusCode::kTimedOut && s.code() != StatusCode::kAborted) {
    // NCCL's thread is done (or never started): the handle, if any, is final.
    child = __atomic_exchange_n(&pending_child, nullptr, __ATOMIC_ACQ_REL);
  }
  if (s.ok() && child != nullptr) s = Poll(child, nullptr, deadline, &abort_requested, what);
  if (!s.ok()) {
    if (child != nullptr) ncclCommAbort(child);  // teardown: the error that matters is `s`
    if (s.code() == StatusCode::kInvalidArgument) s = PeerLostError(s.message());
  }
  if (release_parent) {
    std::lock_guard<std::mutex> lock(mu);
    in_call = false;
    AbortLocked("released after an abortive shrink");
    if (!s.ok()) return s;
  } else if (!s.ok()) {
    return EndCall(std::move(s));
  }
  if (child == nullptr) {
    if (release_parent) return InternalError(std::string(what) + " returned no communicator");
    ELASTRA_RETURN_IF_ERROR(EndCall(OkStatus()));
    return std::unique_ptr<NcclCommunicator>();  // NCCL_SPLIT_NOCOLOR
  }
  auto impl = Wrap(child, device, timeout, connect_timeout);
  if (!impl.ok()) {
    // Wrap owns `child` once it got past allocation; a failure there is local (CUDA), the parent
    // stays as it was.
    if (!release_parent) EndCall(OkStatus()).IgnoreError();
    return impl.status();
  }
  if (!release_parent) ELASTRA_RETURN_IF_ERROR(EndCall(OkStatus()));
  return std::make_unique<NcclCommunicator>(std::move(impl).value());
}

// ---------------------------------------------------------------------------------------------

NcclCommunicator::NcclCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NcclCommunicator::~NcclCommunicator() = default;

int NcclCommunicator::rank() const { return impl_->rank; }
int NcclCommunicator::size() const { return impl_->size; }
Communicator::Timeout NcclCommunicator::default_timeout() const { return impl_->timeout; }
CUstream_st* NcclCommunicator::stream() const { return impl_->stream; }
int NcclCommunicator::device() const { return impl_->device; }

Status NcclCommunicator::health() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->abort_requested.load() && impl_->broken.ok()) return AbortedError("Abort() was called");
  return impl_->broken;
}

void NcclCommunicator::Abort() {
  impl_->abort_requested.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> lock(impl_->mu);
  // While a call is in flight its polling loop sees the flag and the owner aborts in EndCall:
  // NCCL calls on one communicator are never made from two threads at once.
  if (!impl_->in_call) impl_->AbortLocked("Abort() was called");
}

void NcclCommunicator::RequestAbort() {
  impl_->abort_requested.store(true, std::memory_order_release);
}

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Split(int color, int key) {
  ELASTRA_RETURN_IF_ERROR(impl_->BeginCall(/*allow_broken=*/false)
                              .WithContext("Split"));
  Status dev = CudaStatus(cudaSetDevice(impl_->device), "cudaSetDevice");
  if (!dev.ok()) return impl_->EndCall(dev);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->ReleasePendingChildLocked();  // left by an earlier split that ran past its deadline
  }
  ncclConfig_t config = NonBlockingConfig();
  ncclResult_t r = ncclCommSplit(impl_->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key,
                                 &impl_->pending_child, &config);
  return impl_->FinishChild(r, "ncclCommSplit", /*release_parent=*/false);
}

void NcclCommunicator::Interrupt() {
  impl_->interrupt_requested.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> lock(impl_->mu);
  // A call in flight sees the flag in its polling loop and takes the step in EndCall.
  if (!impl_->in_call && impl_->comm != nullptr && !impl_->abort_requested.load()) {
    impl_->InterruptLocked(/*may_release=*/false);  // Quiesce() or Abort() releases
  }
}

Status NcclCommunicator::Quiesce(Timeout timeout) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + timeout;
  std::chrono::microseconds nap(100);
  while (true) {
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      if (impl_->abort_requested.load() || impl_->comm == nullptr) {
        return impl_->broken.ok() ? AbortedError("Quiesce: communicator released") : impl_->broken;
      }
      if (impl_->broken.ok() && !impl_->interrupt_requested.load()) return OkStatus();
      if (!impl_->in_call) {  // another thread's call finishes the step in its EndCall
        impl_->interrupt_requested.store(true, std::memory_order_release);
        const InterruptStep step = impl_->InterruptLocked();
        if (step == InterruptStep::kReady) return OkStatus();
        if (step == InterruptStep::kRelease) return impl_->broken;
      }
    }
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      return TimedOutError(
          "Quiesce: NCCL still in progress after " +
          std::to_string(
              std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count()) +
          " ms");
    }
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(5000));
  }
}

bool NcclCommunicator::revoked() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->revoke_issued;
}

bool NcclCommunicator::CanMakeChild() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  // Not while another thread's call is inside NCCL on this communicator.
  if (impl_->comm == nullptr || impl_->in_call || impl_->abort_requested.load()) return false;
  ncclResult_t async = ncclInProgress;
  // ncclInProgress while a revoke runs; ncclSuccess once it is quiescent.
  return StateOf(impl_->comm, &async) == NcclCommState::kSuccess;
}

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Shrink(
    std::vector<int> exclude_ranks, bool abort) {
  // Our own copy: NCCL sorts the list in place.
  std::vector<int> exclude = std::move(exclude_ranks);
  std::sort(exclude.begin(), exclude.end());
  if (std::adjacent_find(exclude.begin(), exclude.end()) != exclude.end()) {
    return InvalidArgumentError("Shrink: duplicate rank in the exclude list");
  }
  for (int r : exclude) {
    if (r < 0 || r >= size()) {
      return InvalidArgumentError("Shrink: rank " + std::to_string(r) + " out of range");
    }
    if (r == rank()) return InvalidArgumentError("Shrink: an excluded rank may not call Shrink");
  }
  if (exclude.empty()) return InvalidArgumentError("Shrink: nothing to exclude");
  {
    // NCCL_SHRINK_ABORT raises and lowers NCCL's abort flags, which a revoke in progress relies
    // on; NCCL would refuse the shrink then anyway (the state is ncclInProgress).
    std::lock_guard<std::mutex> lock(impl_->mu);
    ncclResult_t async = ncclSuccess;
    if (impl_->revoke_issued && impl_->comm != nullptr && !impl_->in_call &&
        StateOf(impl_->comm, &async) == NcclCommState::kInProgress) {
      return UnavailableError("Shrink: the communicator is still being revoked (Quiesce first)");
    }
  }
  ELASTRA_RETURN_IF_ERROR(impl_->BeginCall(/*allow_broken=*/true).WithContext("Shrink"));
  bool failure_path = abort;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    failure_path |= !impl_->broken.ok();
    impl_->ReleasePendingChildLocked();  // left by a split that ran past its deadline
  }
  Status dev = CudaStatus(cudaSetDevice(impl_->device), "cudaSetDevice");
  if (!dev.ok()) return impl_->EndCall(dev);
  ncclConfig_t config = NonBlockingConfig();
  ncclResult_t r =
      ncclCommShrink(impl_->comm, exclude.data(), static_cast<int>(exclude.size()),
                     &impl_->pending_child, &config,
                     failure_path ? NCCL_SHRINK_ABORT : NCCL_SHRINK_DEFAULT);
  // Failure path: the parent is released afterwards, as NCCL asks after an abortive shrink.
  return impl_->FinishChild(r, failure_path ? "ncclCommShrink(ABORT)" : "ncclCommShrink",
                            /*release_parent=*/failure_path);
}

// ---------------------------------------------------------------------------------------------

bool NcclRevokeAvailable() { return LookupRevoke() != nullptr; }

bool NcclDeviceAvailable() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

StatusOr<std::unique_ptr<NcclCommunicator>> CreateNcclCommunicator(const NcclOptions& options) {
  if (options.store == nullptr) return InvalidArgumentError("NcclOptions.store is null");
  if (options.size < 1) return InvalidArgumentError("NcclOptions.size must be >= 1");
  if (options.rank < 0 || options.rank >= options.size) {
    return InvalidArgumentError("NcclOptions.rank " + std::to_string(options.rank) +
                                " out of range for size " + std::to_string(options.size));
  }
  if (options.device < 0) return InvalidArgumentError("NcclOptions.device must be >= 0");
  if (options.timeout.count() <= 0 || options.connect_timeout.count() <= 0) {
    return InvalidArgumentError("NcclOptions timeouts must be > 0");
  }
  const Clock::time_point deadline = Clock::now() + options.connect_timeout;

  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    cudaGetLastError();
    return UnavailableError(std::string("no CUDA device: ") +
                            (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices"));
  }
  if (options.device >= devices) {
    return InvalidArgumentError("NcclOptions.device " + std::to_string(options.device) +
                                " but this process sees " + std::to_string(devices) + " devices");
  }
  ELASTRA_CUDA_RETURN(cudaSetDevice(options.device));

  // Rank 0's id carries the address of a bootstrap root thread that lives in this process; it
  // stays up while rank 0 is inside the init below, which ends only when every rank has joined.
  ELASTRA_ASSIGN_OR_RETURN(std::vector<ncclUniqueId> ids,
                           nccl_internal::UniqueIdsOf(options, deadline));

  ncclConfig_t config = NonBlockingConfig();
  ncclComm_t comm = nullptr;
  ncclResult_t r;
  const char* init = "ncclCommInitRankConfig";
  if (ids.size() > 1) {
    init = "ncclCommInitRankScalable";
    r = nccl_internal::InitRankScalable()(&comm, options.size, options.rank,
                                          static_cast<int>(ids.size()), ids.data(), &config);
  } else {
    r = ncclCommInitRankConfig(&comm, options.size, ids[0], options.rank, &config);
  }
  Status s = NcclStatus(r, comm, init);
  if (s.ok() && comm == nullptr) s = InternalError(std::string(init) + " returned no handle");
  if (s.ok()) s = Poll(comm, nullptr, deadline, nullptr, init);
  if (!s.ok()) {
    if (comm != nullptr) ncclCommAbort(comm);  // teardown: `s` is the error
    if (s.code() == StatusCode::kInvalidArgument && r == ncclInProgress) {
      s = PeerLostError(s.message());
    }
    return s.WithContext("nccl rank " + std::to_string(options.rank) + "/" +
                         std::to_string(options.size));
  }
  ELASTRA_ASSIGN_OR_RETURN(auto impl, NcclCommunicator::Impl::Wrap(comm, options.device,
                                                                   options.timeout,
                                                                   options.connect_timeout));
  return std::make_unique<NcclCommunicator>(std::move(impl));
}

}  // namespace elastra
