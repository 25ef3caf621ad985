#include "worker/disk_checkpoints.h"

#include <utility>
#include <vector>

#include "common/host_memory.h"
#include "common/logging.h"
#include "elastra/device_buffer.h"
#include "worker/collection_adapter.h"
#include "state/tensor_collection_access.h"

namespace elastra {

using proto::MessageType;

void DiskCheckpoints::Restart(const TensorCollection& state, const Layout& layout, int rank,
                              ControlClient* client) {
  Restart(
      state, layout, rank, [client] { return !client->Fenced(); },
      [client](const proto::CheckpointWritten& report) {
        client
            ->Send(MessageType::kCheckpointWritten, proto::EncodePayload(report), report.generation)
            .IgnoreError();
      });
}

void DiskCheckpoints::Restart(const TensorCollection& state, const Layout& layout, int rank,
                              std::function<bool()> may_report,
                              std::function<void(const proto::CheckpointWritten&)> send) {
  writer_.reset();  // waits for a write in flight (reported only if reporting was on)
  last_started_ = -1;
  reporting_ = std::make_shared<std::atomic<bool>>(true);
  if (options_.checkpoint_dir.empty() || options_.checkpoint_every <= 0) return;
  checkpoint::WriterOptions wo;
  wo.root = options_.checkpoint_dir;
  wo.rank = rank;
  wo.reserve_bytes = state.bytes();
  wo.when_busy = checkpoint::WriterOptions::WhenBusy::kSkip;
  if (state.device() >= 0) {
    // Device shards: one synchronous copy per shard into a page-locked image, then the write
    // runs in the background like any other (the step waits only for the copies).
    const int device = state.device();
    wo.copy_from_device = [device](std::byte* dst, const std::byte* src, size_t n) {
      return CopyDeviceToHost(dst, src, n, device);
    };
    wo.pin_staging = [](void* p, size_t n) { return PinHostMemory(p, n); };
    wo.unpin_staging = [](void* p) { UnpinHostMemory(p); };
  }
  const int32_t ranks = layout.world();
  const std::string root = options_.checkpoint_dir;
  may_report_ = may_report;
  wo.may_publish = [reporting = reporting_, may_report]() -> Status {
    if (reporting->load() && may_report()) return OkStatus();
    return AbortedError("this worker is fenced: the shard is not published (docs/hosts.md)");
  };
  wo.on_written = [reporting = reporting_, may_report = std::move(may_report),
                   send = std::move(send), ranks, layout, root,
                   rank](const checkpoint::CheckpointId& id,
                         const StatusOr<checkpoint::ShardDescriptor>& d, double seconds) {
    if (!reporting->load() || !may_report()) {
      LOG(WARNING) << "checkpoint of step " << id.step << " (generation " << id.generation
                   << ") not reported: this worker is fenced (docs/hosts.md)";
      return;
    }
    proto::CheckpointWritten report;
    report.generation = id.generation;
    report.step = id.step;
    report.rank = rank;
    report.ranks = ranks;
    report.layout = layout;
    report.root = root;
    report.ok = d.ok();
    report.write_seconds = seconds;
    if (d.ok()) {
      report.descriptor = checkpoint::EncodeShardDescriptor(*d);
    } else {
      report.error = d.status().ToString();
    }
    send(report);
  };
  auto writer = checkpoint::CheckpointWriter::Create(wo);
  if (!writer.ok()) {
    LOG(WARNING) << "checkpoints off: " << writer.status();
    return;
  }
  writer_ = std::move(writer).value();
}

void DiskCheckpoints::MaybeSnapshot(const TensorCollection& state, int64_t step,
                                    uint64_t generation, const Layout& layout,
                                    const Coordinates& coords) {
  if (writer_ == nullptr || step % options_.checkpoint_every != 0) return;
  if (!reporting_->load() || (may_report_ && !may_report_())) {
    LOG(WARNING) << "checkpoint of step " << step << " (generation " << generation
                 << ") not started: this worker is fenced (docs/hosts.md)";
    return;
  }
  checkpoint::CheckpointId id{options_.job, step, generation};
  auto started = writer_->Snapshot(id, checkpoint::ViewOf(state, layout, coords));
  if (!started.ok()) {
    LOG(WARNING) << "checkpoint of step " << step << ": " << started.status();
  } else if (*started == checkpoint::CheckpointWriter::SnapshotResult::kStarted) {
    last_started_ = step;
  }
}

void DiskCheckpoints::Finish(const TensorCollection& state, int64_t step, uint64_t generation,
                             const Layout& layout, const Coordinates& coords) {
  if (writer_ != nullptr && step > 0 && step % options_.checkpoint_every == 0 &&
      last_started_ != step) {
    LOG(INFO) << "checkpoint of the last step, " << step << ", taken now (skipped while the "
              << "previous write was in flight)";
    writer_->WaitForWrite().status().IgnoreError();  // reported by the writer's thread
    MaybeSnapshot(state, step, generation, layout, coords);
  }
  Stop();
}

StatusOr<int64_t> LoadNewestCheckpoint(const proto::NewGeneration& gen, const Coordinates& coords,
                                       const std::string& job, Communicator& control,
                                       TensorCollection* state) {
  // The load overwrites the values.
  ELASTRA_RETURN_IF_ERROR(TensorCollectionAccess::MoveToHost(*state, /*keep_values=*/false));
  // The shards are loaded in place: a shard keeps its memory where it has the new region's size
  // already (no fresh pages to fault in), else gets a new buffer on huge pages.
  for (auto& t : TensorCollectionAccess::Tensors(*state)) {
    t.region = LocalRegion(t.spec, state->num_layers(), gen.layout, coords);
    const size_t bytes = static_cast<size_t>(t.region.elements()) * t.spec.element_size;
    if (t.data.size() != bytes) t.data = NewHostBuffer(bytes);
  }
  const std::string dir = gen.checkpoint_dir;
  const std::string root = dir.substr(0, dir.find_last_of('/'));
  std::vector<std::string> candidates;
  auto list = checkpoint::ListCheckpoints(Env::Default(), root);
  if (list.ok()) {
    bool reached = false;
    for (const auto& info : *list) {
      reached |= info.dir == dir;
      if (reached) candidates.push_back(info.dir);
    }
  }
  if (candidates.empty()) candidates.push_back(dir);
  for (const std::string& candidate : candidates) {
    auto loaded = checkpoint::LoadCheckpointInto(Env::Default(), candidate,
                                                 checkpoint::RequestsFor(*state),
                                                 checkpoint::BuffersOf(*state));
    Status mine = loaded.ok() ? OkStatus() : loaded.status();
    if (mine.ok() && loaded->job != job) {
      mine = InvalidArgumentError("checkpoint " + candidate + " belongs to job '" + loaded->job +
                                  "', not '" + job + "'");
    }
    int64_t ok = mine.ok() ? 1 : 0;
    ELASTRA_RETURN_IF_ERROR(control.Allreduce(&ok, 1, DataType::kInt64, ReduceOp::kMin));
    if (ok == 1) {
      int64_t bytes = static_cast<int64_t>(state->bytes());
      checkpoint::RestoreScalars(*loaded, state);
      LOG(INFO) << "loaded checkpoint " << candidate << " (step "
                << state->GetScalar(kStepScalarName) << ")";
      return bytes;
    }
    LOG(WARNING) << "checkpoint " << candidate << " does not load on every rank"
                 << (mine.ok() ? std::string() : ": here " + mine.ToString())
                 << "; trying the previous one";
  }
  return FailedPreconditionError("no committed checkpoint under " + root + " loads on every rank");
}

}  // namespace elastra
