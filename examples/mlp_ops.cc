// Array, MlpOps::Allocate and OpsCollectives; see mlp_ops.h.
#include "examples/mlp_ops.h"

#include <string_view>
#include <utility>

namespace elastra::examples {

Array::~Array() {
  if (data_ != nullptr) ops_->Free(data_);
}

Array& Array::operator=(Array&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ops_->Free(data_);
    ops_ = std::exchange(other.ops_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

Array MlpOps::Allocate(size_t n) {
  if (n == 0) return Array();
  return Array(this, AllocateRaw(n), n);
}

namespace {

bool TakesDeviceMemory(const Communicator& comm) {
  return comm.backend() == Backend::kNccl;
}

}  // namespace

double* OpsCollectives::Stage(const Communicator& comm, Span x, bool copy_in, Status* status) {
  if (!ops_->status().ok()) {
    *status = ops_->status();
    return nullptr;
  }
  if (!ops_->on_device()) {
    if (TakesDeviceMemory(comm)) {
      *status = FailedPreconditionError(
          "the nccl backend takes device buffers: run train_mlp with --device cuda, or set "
          "ELASTRA_BACKEND=gloo");
      return nullptr;
    }
    return x.data;
  }
  if (TakesDeviceMemory(comm)) {
    ops_->Synchronize();  // NCCL runs on its own stream: our writes to x must be done
  } else {
    host_.resize(x.size);
    if (copy_in) ops_->CopyToHost(x, host_.data());
  }
  // A kernel that failed before shows up at the synchronization or the copy.
  if (!ops_->status().ok()) {
    *status = ops_->status();
    return nullptr;
  }
  return TakesDeviceMemory(comm) ? x.data : host_.data();
}

void OpsCollectives::Unstage(const double* staged, Span x) {
  if (staged != x.data) ops_->CopyFromHost(staged, x);
}

void OpsCollectives::ReleaseMemory() { std::vector<double>().swap(host_); }

Status OpsCollectives::AllreduceSum(Communicator& comm, Span x) {
  Status s;
  double* p = Stage(comm, x, /*copy_in=*/true, &s);
  if (p == nullptr && !s.ok()) return s;
  s = comm.Allreduce(p, x.size, DataType::kFloat64, ReduceOp::kSum);
  if (s.ok()) Unstage(p, x);
  return s;
}

Status OpsCollectives::Send(Communicator& comm, Span x, int peer, uint32_t tag) {
  Status s;
  double* p = Stage(comm, x, /*copy_in=*/true, &s);
  if (p == nullptr && !s.ok()) return s;
  return comm.Send(p, x.size * sizeof(double), peer, tag, comm.default_timeout());
}

Status OpsCollectives::Recv(Communicator& comm, Span x, int peer, uint32_t tag) {
  Status s;
  double* p = Stage(comm, x, /*copy_in=*/false, &s);
  if (p == nullptr && !s.ok()) return s;
  s = comm.Recv(p, x.size * sizeof(double), peer, tag, comm.default_timeout());
  if (s.ok()) Unstage(p, x);
  return s;
}

}  // namespace elastra::examples
