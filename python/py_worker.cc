#include "python/py_worker.h"

#include <unistd.h>

#include <chrono>
#include <string>
#include <utility>

#include "python/blocking_call.h"
#include "python/dlpack.h"

namespace py = pybind11;

namespace elastra::python {
namespace {

Status CheckDtype(int dtype) {
  if (!IsKnownDataType(dtype)) {
    return InvalidArgumentError("unknown data type " + std::to_string(dtype));
  }
  return OkStatus();
}

Status ApplyOverride(const Override& o, WorkerOptions* options) {
  auto text = [&o](std::string* field) -> Status {
    if (!o.is_text) return InvalidArgumentError(o.name + " must be a string");
    *field = o.text;
    return OkStatus();
  };
  auto number = [&o](auto* field, int64_t low) -> Status {
    if (o.is_text) return InvalidArgumentError(o.name + " must be an integer");
    if (o.number < low) {
      return InvalidArgumentError(o.name + " must be >= " + std::to_string(low) + ", got " +
                                  std::to_string(o.number));
    }
    *field = static_cast<std::remove_pointer_t<decltype(field)>>(o.number);
    return OkStatus();
  };
  auto millis = [&o](std::chrono::milliseconds* field) -> Status {
    if (o.is_text || o.number < 1) return InvalidArgumentError(o.name + " must be an integer >= 1");
    *field = std::chrono::milliseconds(o.number);
    return OkStatus();
  };
  if (o.name == "coordinator") return text(&options->coordinator);
  if (o.name == "job") return text(&options->job);
  if (o.name == "worker_id") return text(&options->worker_id);
  if (o.name == "host") return text(&options->host);
  if (o.name == "bind_host") return text(&options->bind_host);
  if (o.name == "checkpoint_dir") return text(&options->checkpoint_dir);
  if (o.name == "model_json") return text(&options->model_json);
  if (o.name == "commit_every") return number(&options->commit_every, 1);
  if (o.name == "checkpoint_every") return number(&options->checkpoint_every, 0);
  if (o.name == "device_memory_bytes") return number(&options->device_memory_bytes, 0);
  if (o.name == "park_when_removed") return number(&options->park_when_removed, 0);
  if (o.name == "collective_timeout_ms") return millis(&options->collective_timeout);
  if (o.name == "decision_timeout_ms") return millis(&options->decision_timeout);
  if (o.name == "heartbeat_interval_ms") return millis(&options->heartbeat_interval);
  if (o.name == "backend") {
    if (!o.is_text) return InvalidArgumentError("backend must be a string");
    if (o.text == "gloo") {
      options->backend = Backend::kGloo;
    } else if (o.text == "nccl") {
      options->backend = Backend::kNccl;
    } else if (o.text == "auto") {
      options->backend.reset();
    } else {
      return InvalidArgumentError("backend must be gloo, nccl or auto, got '" + o.text + "'");
    }
    return OkStatus();
  }
  return InvalidArgumentError("Worker() got an unknown option '" + o.name + "'");
}

DLDataType DlpackType(DataType type) {
  switch (type) {
    case DataType::kFloat32: return {kDLFloat, 32, 1};
    case DataType::kFloat64: return {kDLFloat, 64, 1};
    case DataType::kInt64: return {kDLInt, 64, 1};
    case DataType::kUint8: return {kDLUInt, 8, 1};
    case DataType::kBFloat16: return {kDLBfloat, 16, 1};
    case DataType::kFloat16: return {kDLFloat, 16, 1};
    case DataType::kInt32: return {kDLInt, 32, 1};
  }
  return {kDLUInt, 8, 1};
}

// The DLManagedTensor of one view and what it points into: the shape and strides arrays, and a
// reference to the Python object that owns the worker (so that the worker, and the shard, live
// at least as long as the view's consumer holds it).
struct ViewContext {
  DLManagedTensor managed{};
  int64_t shape[2] = {0, 0};
  int64_t strides[2] = {1, 1};
  PyObject* owner = nullptr;
};

void DeleteView(DLManagedTensor* managed) {
  auto* ctx = static_cast<ViewContext*>(managed->manager_ctx);
  // torch may free a tensor on a thread without the GIL (its autograd engine's).
  if (Py_IsInitialized()) {
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_XDECREF(ctx->owner);
    PyGILState_Release(gil);
  }
  delete ctx;
}

// A capsule's destructor: the view was never consumed (its name is still "dltensor"), so it is
// ours to delete; a consumer renames it "used_dltensor" and deletes the tensor itself.
void DestroyCapsule(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (managed != nullptr) managed->deleter(managed);
  }
}

// The place of an empty shard's view: a valid address torch never reads (0 elements).
double empty_shard_anchor = 0;

}  // namespace

void ThrowIfError(const Status& s) {
  if (!s.ok()) throw StatusError(s);
}

PyWorker::PyWorker(const std::vector<Override>& overrides) {
  bool has_coordinator = false;
  for (const Override& o : overrides) has_coordinator |= o.name == "coordinator";
  auto from_env = WorkerOptions::FromEnvironment();
  WorkerOptions options;
  if (from_env.ok()) {
    options = std::move(from_env).value();
  } else if (!has_coordinator) {
    throw StatusError(from_env.status().WithContext(
        "elastra.Worker() (run it under `elastra run`, an agent or mpirun, or pass coordinator=)"));
  } else {
    options.worker_id = "python-" + std::to_string(getpid());
  }
  for (const Override& o : overrides) ThrowIfError(ApplyOverride(o, &options));
  auto created = std::make_shared<StatusOr<std::unique_ptr<Worker>>>(InvalidArgumentError(""));
  // Create() connects to the coordinator: a blocking call like the others.
  RunBlocking([created, options] { *created = Worker::Create(options); }, {},
              OnInterrupt::kAbandon);
  ThrowIfError(created->status());
  holder_ = std::make_shared<std::unique_ptr<Worker>>(std::move(*created).value());
  worker_ = holder_->get();
}

PyWorker::~PyWorker() {
  // Closing the worker's sockets and threads may wait a little; other Python threads may run.
  py::gil_scoped_release release;
  holder_.reset();
}

void PyWorker::CheckUsable() const {
  if (phase_ == Phase::kClosed) {
    throw StatusError(FailedPreconditionError("this Worker is closed"));
  }
  if (phase_ == Phase::kBroken) {
    throw StatusError(AbortedError(
        "this Worker is unusable: a Ctrl-C interrupted its start() or step_end(), which may "
        "still be running; end the process"));
  }
}

void PyWorker::CheckPhase(Phase wanted, const char* what) const {
  CheckUsable();
  if (phase_ == wanted) return;
  const char* now = phase_ == Phase::kCreated    ? "before start()"
                    : phase_ == Phase::kTraining ? "after start()"
                                                 : "after the worker left or finished";
  throw StatusError(FailedPreconditionError(std::string(what) + " is not allowed " + now));
}

TensorCollection::Tensor& PyWorker::FindTensor(const std::string& name) {
  CheckUsable();
  if (!worker_->state().HasTensor(name)) {
    throw StatusError(InvalidArgumentError("no tensor named '" + name + "'"));
  }
  return worker_->state().tensor(name);
}

void PyWorker::AddTensor(const std::string& name, const std::vector<int64_t>& shape, int dtype,
                         int tp_split_dim, int layer, bool zero) {
  CheckPhase(Phase::kCreated, "add_tensor()");
  ThrowIfError(CheckDtype(dtype));
  ThrowIfError(worker_->state().AddTensor(name, shape, static_cast<DataType>(dtype),
                                          ShardingRule{tp_split_dim, layer, zero}));
}

void PyWorker::AddScalar(const std::string& name, int64_t value) {
  CheckPhase(Phase::kCreated, "add_scalar()");
  ThrowIfError(worker_->state().AddScalar(name, value));
}

void PyWorker::SetNumLayers(int layers) {
  CheckPhase(Phase::kCreated, "set_num_layers()");
  ThrowIfError(worker_->state().SetNumLayers(layers));
}

int64_t PyWorker::GetScalar(const std::string& name) const {
  CheckUsable();
  for (const auto& s : worker_->state().scalars()) {
    if (s.first == name) return s.second;
  }
  throw StatusError(InvalidArgumentError("no scalar named '" + name + "'"));
}

void PyWorker::SetScalar(const std::string& name, int64_t value) {
  (void)GetScalar(name);  // checks the name
  worker_->state().SetScalar(name, value);
}

std::vector<std::string> PyWorker::TensorNames() const {
  CheckUsable();
  std::vector<std::string> names;
  for (const auto& t : worker_->state().tensors()) names.push_back(t.name());
  return names;
}

RegionInfo PyWorker::Region(const std::string& name) {
  const TensorCollection::Tensor& t = FindTensor(name);
  const elastra::Region& r = t.region;
  RegionInfo info{t.spec.shape,  r.box.row_begin, r.box.row_end, r.box.col_begin,
                  r.box.col_end, r.flat_begin,    r.flat_end,    {}};
  const int64_t rows = r.box.row_end - r.box.row_begin, cols = r.box.col_end - r.box.col_begin;
  if (r.empty()) {
    info.local_shape = {0};
  } else if (r.flat_begin == 0 && r.flat_end == rows * cols) {
    // The whole box: the tensor's own rank (a 1-D tensor's box is one row).
    info.local_shape = t.spec.shape.size() == 1 ? std::vector<int64_t>{cols}
                                                : std::vector<int64_t>{rows, cols};
  } else {
    info.local_shape = {r.flat_end - r.flat_begin};  // a ZeRO slice: a flat range of the box
  }
  return info;
}

int PyWorker::TensorDtype(const std::string& name) {
  return static_cast<int>(FindTensor(name).dtype);
}

py::capsule PyWorker::View(const std::string& name, py::object owner) {
  TensorCollection::Tensor& t = FindTensor(name);
  if (t.on_device) {
    throw StatusError(FailedPreconditionError(
        "tensor '" + name + "' lives in device memory; the Python package views host shards only"));
  }
  const RegionInfo info = Region(name);
  auto* ctx = new ViewContext;
  const int ndim = static_cast<int>(info.local_shape.size());
  for (int d = 0; d < ndim; ++d) ctx->shape[d] = info.local_shape[d];
  if (ndim == 2) ctx->strides[0] = ctx->shape[1];
  ctx->owner = owner.release().ptr();
  DLTensor& dl = ctx->managed.dl_tensor;
  dl.data = t.data.empty() ? static_cast<void*>(&empty_shard_anchor) : t.data.data();
  dl.device = {kDLCPU, 0};
  dl.ndim = ndim;
  dl.dtype = DlpackType(t.dtype);
  dl.shape = ctx->shape;
  dl.strides = ctx->strides;
  dl.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = &DeleteView;
  return py::capsule(&ctx->managed, "dltensor", &DestroyCapsule);
}

void PyWorker::Close() {
  if (phase_ == Phase::kClosed) return;
  if (phase_ != Phase::kBroken) {
    // Moved, not copied: the buffers, and so the views into them, stay where they are.
    TensorCollection& state = worker_->state();
    for (const std::string& name : TensorNames()) {
      closed_shards_.push_back(std::move(state.tensor(name).data));
    }
    // Telling the coordinator and closing the sockets and threads may wait a little; other Python
    // threads may run.
    py::gil_scoped_release release;
    worker_->Leave("closed by the program (Worker.close())");
    holder_.reset();
  }
  // A broken worker's abandoned call still uses it: it is destroyed with this object, or at
  // process exit.
  worker_ = nullptr;
  phase_ = Phase::kClosed;
}

void PyWorker::Blocking(std::function<Status()> call, Communicator* interruptible) {
  auto result = std::make_shared<Status>();
  auto holder = holder_;  // keeps the worker alive for an abandoned call
  try {
    RunBlocking([result, holder, call = std::move(call)] { *result = call(); },
                interruptible == nullptr ? std::function<void()>()
                                         : [interruptible] { interruptible->Abort(); },
                interruptible == nullptr ? OnInterrupt::kAbandon
                                         : OnInterrupt::kWaitAfterInterrupt);
  } catch (const py::error_already_set&) {
    if (interruptible == nullptr) phase_ = Phase::kBroken;
    throw;
  }
  ThrowIfError(*result);
}

int PyWorker::Start() {
  CheckPhase(Phase::kCreated, "start()");
  Worker* w = worker_;
  auto dismissed = std::make_shared<bool>(false);
  Blocking(
      [w, dismissed] {
        Status s = w->Start();
        *dismissed = !s.ok() && w->dismissed();
        return *dismissed ? OkStatus() : s;
      },
      nullptr);
  if (*dismissed) {
    phase_ = Phase::kDone;
    return static_cast<int>(StepAction::kLeave);
  }
  phase_ = Phase::kTraining;
  return static_cast<int>(StepAction::kContinue);
}

int PyWorker::StepEnd(int code, const std::string& message) {
  CheckPhase(Phase::kTraining, "step_end()");
  if (code < 0 || code > static_cast<int>(StatusCode::kBusy)) {
    throw StatusError(InvalidArgumentError("unknown status code " + std::to_string(code)));
  }
  const Status step_status(static_cast<StatusCode>(code), message);
  auto action = std::make_shared<StepAction>(StepAction::kContinue);
  Worker* w = worker_;
  Blocking(
      [w, step_status, action]() -> Status {
        StatusOr<StepAction> a = w->StepEnd(step_status);
        if (!a.ok()) return a.status();
        *action = *a;
        return OkStatus();
      },
      nullptr);
  if (*action == StepAction::kLeave) phase_ = Phase::kDone;
  return static_cast<int>(*action);
}

void PyWorker::Finish() {
  CheckPhase(Phase::kTraining, "finish()");
  Worker* w = worker_;
  Blocking(
      [w] {
        w->Finish();
        return OkStatus();
      },
      nullptr);
  phase_ = Phase::kDone;
}

void PyWorker::Report(const std::string& name, double value) {
  CheckUsable();
  ThrowIfError(worker_->Report(name, value));
}

void PyWorker::ReportSamples(int64_t samples) {
  CheckUsable();
  ThrowIfError(worker_->ReportSamples(samples));
}

Layout PyWorker::layout() const {
  CheckUsable();
  return worker_->layout();
}

Coordinates PyWorker::coordinates() const {
  CheckUsable();
  return worker_->coordinates();
}

Communicator& PyWorker::GroupOf(int group) {
  CheckPhase(Phase::kTraining, "a collective");
  if (worker_->backend() != Backend::kGloo) {
    throw StatusError(FailedPreconditionError(
        std::string("the training groups use the ") + BackendName(worker_->backend()) +
        " backend; CPU tensors need gloo (ELASTRA_BACKEND=gloo)"));
  }
  switch (static_cast<Group>(group)) {
    case Group::kWorld: return worker_->world();
    case Group::kDp: return worker_->dp_group();
    case Group::kPp: return worker_->pp_group();
    case Group::kTp: return worker_->tp_group();
  }
  throw StatusError(InvalidArgumentError("unknown group " + std::to_string(group)));
}

int PyWorker::GroupRank(int group) { return GroupOf(group).rank(); }
int PyWorker::GroupSize(int group) { return GroupOf(group).size(); }

namespace {

void* Address(uintptr_t a) { return reinterpret_cast<void*>(a); }

void CheckCollective(int64_t count, int dtype, int op) {
  ThrowIfError(CheckDtype(dtype));
  if (count < 0) throw StatusError(InvalidArgumentError("negative element count"));
  if (op < 0 || op > static_cast<int>(ReduceOp::kMin)) {
    throw StatusError(InvalidArgumentError("unknown reduce op " + std::to_string(op)));
  }
}

}  // namespace

void PyWorker::Allreduce(int group, uintptr_t data, int64_t count, int dtype, int op) {
  CheckCollective(count, dtype, op);
  Communicator* c = &GroupOf(group);
  Blocking(
      [c, data, count, dtype, op] {
        return c->Allreduce(Address(data), count, static_cast<DataType>(dtype),
                            static_cast<ReduceOp>(op));
      },
      c);
}

void PyWorker::Broadcast(int group, uintptr_t data, int64_t count, int dtype, int root) {
  CheckCollective(count, dtype, 0);
  Communicator* c = &GroupOf(group);
  Blocking(
      [c, data, count, dtype, root] {
        return c->Broadcast(Address(data), count, static_cast<DataType>(dtype), root);
      },
      c);
}

void PyWorker::Allgather(int group, uintptr_t send, uintptr_t recv, int64_t count, int dtype) {
  CheckCollective(count, dtype, 0);
  Communicator* c = &GroupOf(group);
  Blocking(
      [c, send, recv, count, dtype] {
        return c->Allgather(Address(send), Address(recv), count, static_cast<DataType>(dtype),
                            c->default_timeout());
      },
      c);
}

void PyWorker::ReduceScatter(int group, uintptr_t send, uintptr_t recv, int64_t count, int dtype,
                             int op) {
  CheckCollective(count, dtype, op);
  Communicator* c = &GroupOf(group);
  Blocking(
      [c, send, recv, count, dtype, op] {
        return c->ReduceScatter(Address(send), Address(recv), count, static_cast<DataType>(dtype),
                                static_cast<ReduceOp>(op), c->default_timeout());
      },
      c);
}

void PyWorker::Barrier(int group) {
  Communicator* c = &GroupOf(group);
  Blocking([c] { return c->Barrier(); }, c);
}

void PyWorker::Send(int group, uintptr_t data, int64_t bytes, int peer, uint32_t tag) {
  if (bytes < 0) throw StatusError(InvalidArgumentError("negative byte count"));
  Communicator* c = &GroupOf(group);
  Blocking(
      [c, data, bytes, peer, tag] {
        return c->Send(Address(data), bytes, peer, tag, c->default_timeout());
      },
      c);
}

void PyWorker::Recv(int group, uintptr_t data, int64_t bytes, int peer, uint32_t tag) {
  if (bytes < 0) throw StatusError(InvalidArgumentError("negative byte count"));
  Communicator* c = &GroupOf(group);
  Blocking(
      [c, data, bytes, peer, tag] {
        return c->Recv(Address(data), bytes, peer, tag, c->default_timeout());
      },
      c);
}

}  // namespace elastra::python
