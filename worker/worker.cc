#include "elastra/worker.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "common/clock.h"
#include "common/control_client.h"
#include "common/keys.h"
#include "common/logging.h"
#include "elastra/config.h"
#include "elastra/device_buffer.h"
#include "worker/commit_store.h"
#include "worker/control_channel.h"
#include "worker/disk_checkpoints.h"
#include "worker/generation_builder.h"
#include "worker/coordinator_store.h"
#include "worker/collection_adapter.h"
#include "worker/generation.h"
#include "worker/group_manager.h"
#include "worker/mpi_bootstrap.h"

namespace elastra {
namespace {

using proto::MessageType;
using std::chrono::milliseconds;

std::string Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

}  // namespace

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
    proto::JoinRequest join = MakeJoin();
    auto reply = channel_.client().Call<proto::JoinReply>(MessageType::kJoin, join, milliseconds(10000));
    if (!reply.ok()) return reply.status().WithContext("joining the job");
    LOG(INFO) << "joined job " << options_.job << " at generation " << reply->generation
              << "; waiting for a layout";
    auto action = AwaitGeneration();
    if (!action.ok()) return action.status();
    if (*action == StepAction::kLeave) {
      return AbortedError("the coordinator removed this worker before it started");
    }
    return OkStatus();
  }

  StatusOr<StepAction> StepEnd(const Status& step_status) {
    if (left_) return FailedPreconditionError("this worker has left the job");
    if (!step_status.ok()) return Recover(step_status);
    SetStep(step() + 1);
    channel_.DrainPushes(parked_);
    if (channel_.inbox().shutdown()) return *channel_.inbox().shutdown();
    if (channel_.inbox().recover_pending()) {
      return Recover(PeerLostError("the coordinator started a recovery"));
    }
    // The one small collective per step: agree on whether to pause. Everyone contributes the
    // newest target generation it was asked to pause for, so all stop after this same step.
    int64_t flag = static_cast<int64_t>(channel_.inbox().pause_target());
    Status s = groups_.control().Allreduce(&flag, 1, DataType::kInt64, ReduceOp::kMax);
    if (!s.ok()) return Recover(s);
    if (flag > 0) return Pause(static_cast<uint64_t>(flag));
    if (step() % options_.commit_every == 0) ELASTRA_RETURN_IF_ERROR(commits_.Commit());
    checkpoints_.MaybeSnapshot(state_, step(), channel_.generation(), builder_.layout(),
                               builder_.coords());
    return StepAction::kContinue;
  }

  void Finish() {
    if (left_) return;
    proto::LeaveRequest req{proto::LeaveReason::kFinished, "finished training"};
    auto reply = channel_.client().Call<proto::Ack>(MessageType::kLeave, req, milliseconds(4000),
                                           channel_.generation());
    // A coordinator that is being restarted (docs/journal.md) may have lost the request: ask
    // again (a finished worker's Leave is acknowledged again).
    for (int attempt = 1; attempt < 4 && !reply.ok() &&
                          (reply.status().code() == StatusCode::kTimedOut ||
                           reply.status().code() == StatusCode::kUnavailable);
         ++attempt) {
      reply = channel_.client().Call<proto::Ack>(MessageType::kLeave, req, milliseconds(4000),
                                        channel_.generation());
    }
    if (!reply.ok()) LOG(WARNING) << "finish not acknowledged: " << reply.status();
    left_ = true;
    Shutdown();
  }

  void Shutdown() {
    checkpoints_.Stop();  // lets a checkpoint write in flight finish and report
    // NCCL communicators are aborted, not finalized: the peers finish and exit at their own
    // pace, and a finalize may wait for them (up to the timeout per communicator).
    groups_.Release();
    channel_.Close();
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
  proto::JoinRequest MakeJoin() const {
    proto::JoinRequest join;
    join.worker_id = options_.worker_id;
    join.host = options_.host;
    join.device = options_.device;
    join.pid = static_cast<int64_t>(getpid());
    join.state = state_.Spec();
    join.model_json = options_.model_json;
    return join;
  }

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
      if (Getenv("ELASTRA_NCCL_HOSTID_PER_WORKER") == "1") {
        setenv("NCCL_HOSTID", options_.worker_id.c_str(), 1);
      }
    }
    LOG(INFO) << "training communicators: " << BackendName(backend)
              << (options_.device >= 0 ? " on CUDA device " + std::to_string(options_.device)
                                       : std::string());
    return OkStatus();
  }

  void SetStep(int64_t s) {
    state_.SetScalar(kStepScalarName, s);
    channel_.client().SetHeartbeatStep(s);
  }

  // Makes the commits held and the step visible to the I/O thread (see the push observer).
  void PublishCommits() { channel_.Publish(step(), commits_.steps()); }

  StatusOr<StepAction> Pause(uint64_t target) {
    channel_.inbox().RaisePauseTarget(target);
    ELASTRA_RETURN_IF_ERROR(commits_.Commit());
    LOG(INFO) << "pausing after step " << step() << " for generation " << target;
    proto::PausedReport report{target, step(), commits_.steps(), false};
    answered_target_ = std::max(answered_target_, target);
    Status s = channel_.client().Send(MessageType::kPaused, proto::EncodePayload(report), channel_.generation());
    if (!s.ok()) return s;
    return AwaitGeneration();
  }

  StatusOr<StepAction> Recover(const Status& cause) {
    LOG(WARNING) << "step " << step() << " failed in generation " << channel_.generation() << ": "
                 << cause << "; recovering";
    groups_.Interrupt();
    proto::FailureReport report{channel_.generation(), static_cast<int32_t>(cause.code()),
                                cause.message()};
    channel_.client().Send(MessageType::kFailureReport, proto::EncodePayload(report), channel_.generation())
        .IgnoreError();
    return AwaitGeneration();
  }

  // Waits for the coordinator's decision: answers recovery requests, builds the next generation,
  // or leaves.
  StatusOr<StepAction> AwaitGeneration() {
    auto deadline = std::chrono::steady_clock::now() + options_.decision_timeout;
    while (parked_ || std::chrono::steady_clock::now() < deadline) {
      if (channel_.inbox().shutdown()) return *channel_.inbox().shutdown();
      if (channel_.inbox().empty()) {
        const bool polled = channel_.Poll(milliseconds(100), parked_);
        if (!polled && parked_) {
          auto over = CheckJobWhileParked();
          if (!over.ok()) return over.status();
          if (*over) return LeaveParked();
        }
        if (!polled) continue;
        if (channel_.inbox().empty()) continue;  // a pause request; nothing else to do while waiting
      }
      proto::Envelope e = channel_.inbox().Pop();
      if (e.type == MessageType::kRecoverRequest) {
        auto req = proto::DecodePayload<proto::RecoverRequest>(e.payload);
        if (!req.ok() || req->target_generation <= channel_.generation()) continue;
        groups_.Interrupt();
        answered_target_ = std::max(answered_target_, req->target_generation);
        LOG(INFO) << "recovery for generation " << req->target_generation << ": holding commits "
                  << commits_.steps().size() << " (newest step "
                  << (commits_.empty() ? -1 : commits_.newest()->step) << ")";
        if (channel_.AnsweredByIo(req->target_generation)) continue;  // answered already
        proto::PausedReport report{req->target_generation, step(), commits_.steps(), true};
        ELASTRA_RETURN_IF_ERROR(channel_.client().Send(MessageType::kPaused,
                                              proto::EncodePayload(report), channel_.generation()));
        continue;
      }
      if (parked_ && e.type == MessageType::kShutdown) {
        auto req = proto::DecodePayload<proto::Shutdown>(e.payload);
        if (req.ok() && req->exit_code == 0) return LeaveParked();
        SayLeavingParked("job ended");
        return AbortedError("the job ended while this worker was parked: " +
                            (req.ok() ? req->reason : std::string("shutdown")));
      }
      if (e.type != MessageType::kNewGeneration) {
        LOG(DEBUG) << "ignoring " << proto::TypeName(e.type) << " while waiting for a layout";
        continue;
      }
      auto gen = proto::DecodePayload<proto::NewGeneration>(e.payload);
      if (!gen.ok()) {
        LOG(ERROR) << "undecodable NewGeneration: " << gen.status();
        continue;
      }
      if (gen->generation <= channel_.generation() || gen->generation < answered_target_) {
        LOG(DEBUG) << "dropping stale generation " << gen->generation;
        continue;
      }
      if (gen->leave) {
        // Shards that only this worker holds go to their new owners before it leaves.
        Status handed = builder_.HandOff(*gen);
        if (!handed.ok()) LOG(WARNING) << "hand-off before leaving failed: " << handed;
      }
      if (gen->leave && options_.park_when_removed) {
        ELASTRA_RETURN_IF_ERROR(Park(gen->generation));
        continue;
      }
      if (gen->leave) {
        LOG(INFO) << "leaving the job at generation " << gen->generation << " after step "
                  << step();
        left_ = true;
        Shutdown();
        return StepAction::kLeave;
      }
      Status s = builder_.Apply(*gen);
      if (s.ok()) {
        parked_ = false;
        return StepAction::kReconfigured;
      }
      LOG(WARNING) << "generation " << gen->generation << " failed to build: " << s;
      groups_.Interrupt();
      proto::FailureReport report{gen->generation, static_cast<int32_t>(s.code()), s.message()};
      channel_.client().Send(MessageType::kFailureReport, proto::EncodePayload(report), gen->generation)
          .IgnoreError();
      if (s.code() == StatusCode::kFailedPrecondition || s.code() == StatusCode::kInvalidArgument) {
        return s;  // this worker cannot take part: nothing to wait for
      }
    }
    return UnavailableError("no decision from the coordinator within " +
                            std::to_string(options_.decision_timeout.count()) + " ms");
  }

  // Out of the job's generations but still in the job: the communicators and commits go (the
  // state comes back from the members at a later grow), and the worker joins again as standby
  // under its own id, so the coordinator uses it first when the job grows.
  Status Park(uint64_t generation) {
    groups_.Release();
    commits_.Release();
    state_.ReleaseShards();  // host and GPU memory go back while parked
    checkpoints_.Stop();     // and the checkpoint writer's (page-locked) image
    proto::JoinRequest join = MakeJoin();
    auto reply = channel_.client().Call<proto::JoinReply>(MessageType::kJoin, join, milliseconds(10000));
    if (!reply.ok()) return reply.status().WithContext("parking as standby");
    parked_ = true;
    parked_since_check_ = std::chrono::steady_clock::now();
    status_failures_ = 0;
    logging::SetTag("worker " + options_.worker_id + " parked");
    LOG(INFO) << "parked after step " << step() << " (removed by generation " << generation
              << "); waiting to be brought back";
    if (options_.on_park) options_.on_park();  // the program's own memory goes back too
    return OkStatus();
  }

  // While parked, about once a second: true when the job finished (nothing to come back to),
  // kAborted when it failed, kUnavailable when the coordinator stopped answering.
  StatusOr<bool> CheckJobWhileParked() {
    auto now = std::chrono::steady_clock::now();
    if (now - parked_since_check_ < milliseconds(1000)) return false;
    parked_since_check_ = now;
    auto st = channel_.client().Call<proto::StatusReply>(MessageType::kStatusRequest, proto::StatusRequest{},
                                                milliseconds(2000));
    if (!st.ok()) {
      if (++status_failures_ >= 5) {
        return UnavailableError("the coordinator stopped answering while this worker was parked: " +
                                st.status().ToString());
      }
      return false;
    }
    status_failures_ = 0;
    if (st->status.state == proto::JobState::kFailed) {
      SayLeavingParked("job failed");
      return AbortedError("the job failed while this worker was parked");
    }
    return st->status.state == proto::JobState::kFinished;
  }

  // Tells the coordinator this standby worker is gone, so a host waiting for the job's workers
  // to leave (MPI rank 0 keeping its coordinator up) need not wait out its deadline.
  void SayLeavingParked(const std::string& why) {
    proto::LeaveRequest req{proto::LeaveReason::kQuit, "parked: " + why};
    channel_.client().Call<proto::Ack>(MessageType::kLeave, req, milliseconds(1000), channel_.generation())
        .status()
        .IgnoreError();
  }

  StatusOr<StepAction> LeaveParked() {
    LOG(INFO) << "the job finished while this worker was parked; leaving";
    SayLeavingParked("job finished");
    parked_ = false;
    left_ = true;
    Shutdown();
    return StepAction::kLeave;
  }

  WorkerOptions options_;
  TensorCollection state_;

  GroupManager groups_;
  // Its I/O thread interrupts the communicators above when a RecoverRequest lands.
  ControlChannel channel_{[this] { groups_.Interrupt(); }};
  CommitStore commits_{&state_, [this] { PublishCommits(); }};
  DiskCheckpoints checkpoints_{options_};
  GenerationBuilder builder_{options_, &state_, &channel_, &groups_, &commits_, &checkpoints_};
  uint64_t answered_target_ = 0;  // newest target we reported Paused for
  bool left_ = false;
  bool parked_ = false;  // removed by a shrink, standing by (park_when_removed)
  std::chrono::steady_clock::time_point parked_since_check_;
  int status_failures_ = 0;  // status requests in a row that got no answer while parked
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
StatusOr<StepAction> Worker::StepEnd(const Status& s) { return impl_->StepEnd(s); }
void Worker::Finish() { impl_->Finish(); }
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
