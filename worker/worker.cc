// Worker: the public API (include/elastra/worker.h) and the wiring of its parts, each a file pair
// of its own in worker/:
//   worker_options.cc      WorkerOptions::FromEnvironment
//   control_channel        the line to the coordinator; the I/O thread's answer to RecoverRequest
//   group_manager          the generation's communicators and their lifecycle
//   commit_store           in-memory commits and their images
//   disk_checkpoints       the checkpoint writer and loading from disk
//   generation_builder     entering a generation (communicators, rollback, state move, commit)
//   reconfiguration_loop   StepEnd, pause, recover, wait for a decision, park, leave; the fence
//   fencing                what a fenced worker does once the coordinator answers
// Not thread-safe (the training thread's), except for what the I/O thread does through
// ControlChannel and GroupManager.
#include "elastra/worker.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/logging.h"
#include "protocol/messages.h"
#include "elastra/config.h"
#include "elastra/device_buffer.h"
#include "worker/commit_store.h"
#include "worker/control_channel.h"
#include "worker/disk_checkpoints.h"
#include "worker/generation_builder.h"
#include "worker/group_manager.h"
#include "worker/mpi_bootstrap.h"
#include "worker/reconfiguration_loop.h"

namespace elastra {

class Worker::Impl {
 public:
  explicit Impl(const WorkerOptions& options) : options_(options) {}

  Status Connect() {
    ELASTRA_RETURN_IF_ERROR(channel_.Connect(options_));
    return state_.AddScalar(kStepScalarName, 0);
  }

  Status Start() {
    logging::SetTag("worker " + options_.worker_id);
    ELASTRA_RETURN_IF_ERROR(ResolveBackend());
    return loop_.Join();
  }

  StatusOr<StepAction> StepEnd(const Status& step_status) { return loop_.StepEnd(step_status); }
  void Finish() { loop_.Finish(); }
  void Shutdown() { loop_.Shutdown(); }
  bool dismissed() const { return loop_.dismissed(); }
  void Leave(std::string_view why) { loop_.Quit(std::string(why)); }

  Status Report(std::string_view name, double value) {
    if (!proto::IsValidMetricName(name)) {
      return InvalidArgumentError("Report: the name '" + std::string(name) +
                                  "' is not [A-Za-z_][A-Za-z0-9_]* of at most 64 bytes");
    }
    if (!std::isfinite(value)) {
      return InvalidArgumentError("Report: the value of '" + std::string(name) + "' is not finite");
    }
    auto it = std::find_if(metrics_.begin(), metrics_.end(),
                           [&](const proto::TrainingMetric& m) { return m.name == name; });
    if (it == metrics_.end()) {
      if (metrics_.size() >= proto::kMaxTrainingMetrics) {
        return InvalidArgumentError("Report: at most " +
                                    std::to_string(proto::kMaxTrainingMetrics) + " names");
      }
      it = metrics_.insert(metrics_.end(), proto::TrainingMetric{std::string(name), 0, -1});
    }
    it->value = value;
    it->step = step();
    channel_.client().SetHeartbeatTraining(samples_, metrics_);
    return OkStatus();
  }

  Status ReportSamples(int64_t samples) {
    if (samples < 0) return InvalidArgumentError("ReportSamples: a negative count");
    samples_ += samples;
    channel_.client().SetHeartbeatTraining(samples_, metrics_);
    return OkStatus();
  }

  TensorCollection& state() { return state_; }
  int64_t step() const { return state_.GetScalar(kStepScalarName); }
  uint64_t generation() const { return channel_.generation(); }
  const Layout& layout() const { return builder_.layout(); }
  int rank() const { return builder_.rank(); }
  int world_size() const { return builder_.layout().world(); }
  const std::string& worker_id() const { return options_.worker_id; }
  Communicator& dp_group() { return groups_.dp(); }
  Communicator& pp_group() { return groups_.pp(); }
  Communicator& tp_group() { return groups_.tp(); }
  const Coordinates& coordinates() const { return builder_.coords(); }

  Communicator& world() { return groups_.world(); }
  Backend backend() const { return builder_.backend(); }

 private:
  // Settles the device and the training backend from the options and the state's placement.
  Status ResolveBackend() {
    const int state_device = state_.device();
    if (state_device >= 0) {
      if (options_.device >= 0 && options_.device != state_device) {
        return InvalidArgumentError("the state lives on CUDA device " +
                                    std::to_string(state_device) + " but ELASTRA_DEVICE is " +
                                    std::to_string(options_.device));
      }
      options_.device = state_device;
      // On a GPU the job's state may use the device's memory when the program declared none.
      if (options_.device_memory_bytes == 0) {
        options_.device_memory_bytes = CudaDeviceTotalMemory(state_device);
      }
    }
    const Backend backend = options_.backend.value_or(
        state_device >= 0 && ELASTRA_HAVE_NCCL ? Backend::kNccl : Backend::kGloo);
    builder_.set_backend(backend);
    if (backend != Backend::kGloo && backend != Backend::kNccl) {
      return InvalidArgumentError(std::string("backend ") + BackendName(backend) +
                                  " (auto, gloo or nccl)");
    }
    if (backend == Backend::kNccl) {
      if (!ELASTRA_HAVE_NCCL) {
        return UnavailableError("ELASTRA_BACKEND=nccl, but this build of Elastra has no NCCL");
      }
      if (options_.device < 0) {
        return InvalidArgumentError(
            "ELASTRA_BACKEND=nccl needs a CUDA device: set ELASTRA_DEVICE or call "
            "state().SetDevice() before Start()");
      }
      // Single-GPU tests run several ranks on one device: NCCL refuses two ranks of one host on
      // one GPU, so each worker claims a host of its own.
      const char* hostid_per_worker = std::getenv("ELASTRA_NCCL_HOSTID_PER_WORKER");
      if (hostid_per_worker != nullptr && std::string(hostid_per_worker) == "1") {
        setenv("NCCL_HOSTID", options_.worker_id.c_str(), 1);
      }
    }
    LOG(INFO) << "training communicators: " << BackendName(backend)
              << (options_.device >= 0 ? " on CUDA device " + std::to_string(options_.device)
                                       : std::string());
    return OkStatus();
  }

  // Makes the commits held and the step visible to the I/O thread, which answers a
  // RecoverRequest with them (ControlChannel).
  void PublishCommits() {
    channel_.Publish(step(), commits_.steps(), commits_.place_layout(), commits_.place_rank());
  }

  // Declared in the order they depend on each other: they are destroyed the other way round, so
  // the control channel (whose I/O thread interrupts the groups) goes before the groups, and the
  // checkpoint writer (whose thread reports through the channel) before the channel. The options
  // go last: they keep the mpirun bootstrap alive.
  WorkerOptions options_;
  TensorCollection state_;
  // What the training loop reported (Report, ReportSamples), handed to the heartbeats.
  std::vector<proto::TrainingMetric> metrics_;
  int64_t samples_ = 0;
  GroupManager groups_;
  // Its I/O thread interrupts the communicators when a RecoverRequest lands.
  ControlChannel channel_{[this] { return groups_.Interrupt(); }};
  CommitStore commits_{&state_, [this] { PublishCommits(); }};
  DiskCheckpoints checkpoints_{options_};
  GenerationBuilder builder_{options_, &state_, &channel_, &groups_, &commits_, &checkpoints_};
  ReconfigurationLoop loop_{options_,  &state_,       &channel_, &groups_,
                            &commits_, &checkpoints_, &builder_};
};

StatusOr<std::unique_ptr<Worker>> Worker::Create(const WorkerOptions& options) {
  if (options.commit_every < 1) return InvalidArgumentError("commit_every must be at least 1");
  auto impl = std::make_unique<Impl>(options);
  ELASTRA_RETURN_IF_ERROR(impl->Connect());
  return std::unique_ptr<Worker>(new Worker(std::move(impl)));
}

Worker::Worker(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Worker::~Worker() { impl_->Shutdown(); }
TensorCollection& Worker::state() { return impl_->state(); }
Status Worker::Start() { return impl_->Start(); }
bool Worker::dismissed() const { return impl_->dismissed(); }
void Worker::Leave(std::string_view why) { impl_->Leave(why); }
StatusOr<StepAction> Worker::StepEnd(const Status& s) { return impl_->StepEnd(s); }
void Worker::Finish() { impl_->Finish(); }
Status Worker::Report(std::string_view name, double value) { return impl_->Report(name, value); }
Status Worker::ReportSamples(int64_t samples) { return impl_->ReportSamples(samples); }
int64_t Worker::step() const { return impl_->step(); }
uint64_t Worker::generation() const { return impl_->generation(); }
const Layout& Worker::layout() const { return impl_->layout(); }
int Worker::rank() const { return impl_->rank(); }
int Worker::world_size() const { return impl_->world_size(); }
const std::string& Worker::worker_id() const { return impl_->worker_id(); }
Backend Worker::backend() const { return impl_->backend(); }
Communicator& Worker::world() { return impl_->world(); }
Communicator& Worker::dp_group() { return impl_->dp_group(); }
Communicator& Worker::pp_group() { return impl_->pp_group(); }
Communicator& Worker::tp_group() { return impl_->tp_group(); }
const Coordinates& Worker::coordinates() const { return impl_->coordinates(); }

}  // namespace elastra
