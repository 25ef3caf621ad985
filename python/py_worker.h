// PyWorker: the elastra::Worker as the Python package sees it (python/elastra/__init__.py wraps
// it in the public classes). It adds what the C++ API leaves to its caller and Python cannot:
// checks that turn programming errors (an unknown tensor name, a group before start()) into
// exceptions instead of CHECK failures, blocking calls that release the GIL and give way to
// Ctrl-C (blocking_call.h), and DLPack views of the local shards. Errors are thrown as
// StatusError, which the module turns into the elastra.Error subclass of the code.
//
// Memory handed in by address (the collectives' tensors) is the Python side's to check: it passes
// a CPU, contiguous tensor's data_ptr() with its element count and dtype. Not thread-safe: one
// Python thread drives a worker, as one training thread drives a C++ Worker.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>

#include "elastra/host_bytes.h"
#include "elastra/status.h"
#include "elastra/worker.h"

namespace elastra::python {

// A failed call: the Python module raises the elastra.Error subclass of status.code().
struct StatusError : std::exception {
  explicit StatusError(Status s) : status(std::move(s)), text(status.ToString()) {}
  const char* what() const noexcept override { return text.c_str(); }
  Status status;
  std::string text;
};

// Which of the worker's communicators a call goes to.
enum class Group : int { kWorld = 0, kDp = 1, kPp = 2, kTp = 3 };

// A WorkerOptions field set from Python (Worker(**overrides)); the names are WorkerOptions'
// fields, durations in milliseconds with an _ms suffix.
struct Override {
  std::string name;
  std::string text;     // string fields
  int64_t number = 0;   // integer and boolean fields
  bool is_text = false;
};

// One tensor's place in the current layout, for Python (state.region(name)).
struct RegionInfo {
  std::vector<int64_t> global_shape;
  int64_t row_begin, row_end, col_begin, col_end;  // the box, in the matrix view
  int64_t flat_begin, flat_end;                    // the flat range of the box this rank holds
  std::vector<int64_t> local_shape;                // the shape of view(name)
};

class PyWorker {
 public:
  // WorkerOptions::FromEnvironment, then `overrides`. With a "coordinator" override the
  // environment may lack ELASTRA_COORDINATOR. Throws StatusError (kInvalidArgument for an unknown
  // or malformed override), or KeyboardInterrupt's error_already_set.
  explicit PyWorker(const std::vector<Override>& overrides);
  ~PyWorker();

  // State (before start()).
  void AddTensor(const std::string& name, const std::vector<int64_t>& shape, int dtype,
                 int tp_split_dim, int layer, bool zero);
  void AddScalar(const std::string& name, int64_t value);
  void SetNumLayers(int layers);
  int64_t GetScalar(const std::string& name) const;
  void SetScalar(const std::string& name, int64_t value);
  std::vector<std::string> TensorNames() const;
  RegionInfo Region(const std::string& name);
  int TensorDtype(const std::string& name);
  // A "dltensor" capsule viewing the local shard of `name` (no copy). `owner` (the Python object
  // holding this PyWorker) is kept alive until the consumer releases the view.
  pybind11::capsule View(const std::string& name, pybind11::object owner);

  // Leaves the job at once without finishing: the worker tells the coordinator (Worker::Leave),
  // which goes on without it at once (the others recover), and its communicators and connection
  // close. The shards' memory stays, so views held by Python remain readable; every later call but
  // Close() throws kFailedPrecondition.
  void Close();

  // The loop.
  // Returns StepAction::kContinue as an int, or kLeave when the coordinator dismissed this worker
  // before it held a rank (Worker::dismissed(); the worker is then done). Other errors throw.
  int Start();
  // `code` is the step's outcome (0: OK). Returns the StepAction as an int.
  int StepEnd(int code, const std::string& message);
  void Finish();
  void Report(const std::string& name, double value);
  void ReportSamples(int64_t samples);

  int64_t step() const { return (CheckUsable(), worker_->step()); }
  uint64_t generation() const { return (CheckUsable(), worker_->generation()); }
  Layout layout() const;
  Coordinates coordinates() const;
  int rank() const { return (CheckUsable(), worker_->rank()); }
  int world_size() const { return (CheckUsable(), worker_->world_size()); }
  std::string worker_id() const { return (CheckUsable(), worker_->worker_id()); }
  bool started() const { return phase_ == Phase::kTraining; }

  // Collectives on host memory of the current generation's group `group`, with the worker's
  // collective timeout. Raise StatusError: kFailedPrecondition outside start()..leave/finish.
  int GroupRank(int group);
  int GroupSize(int group);
  void Allreduce(int group, uintptr_t data, int64_t count, int dtype, int op);
  void Broadcast(int group, uintptr_t data, int64_t count, int dtype, int root);
  void Allgather(int group, uintptr_t send, uintptr_t recv, int64_t count, int dtype);
  void ReduceScatter(int group, uintptr_t send, uintptr_t recv, int64_t count, int dtype, int op);
  void Barrier(int group);
  void Send(int group, uintptr_t data, int64_t bytes, int peer, uint32_t tag);
  void Recv(int group, uintptr_t data, int64_t bytes, int peer, uint32_t tag);

 private:
  // kCreated: registering state; kTraining: between start() and a LEAVE or finish();
  // kDone: left or finished; kBroken: a call was abandoned to Ctrl-C and may still run;
  // kClosed: Close() destroyed the worker.
  enum class Phase { kCreated, kTraining, kDone, kBroken, kClosed };

  // What every worker call needs: a worker that is not in use by an abandoned call.
  void CheckUsable() const;
  void CheckPhase(Phase wanted, const char* what) const;
  TensorCollection::Tensor& FindTensor(const std::string& name);
  Communicator& GroupOf(int group);
  // Runs `call` (a Status-returning call on the worker or a communicator) as a blocking call; a
  // Ctrl-C calls `interrupt` and waits (communicators), or abandons it and marks this worker
  // broken (worker calls). Throws StatusError for a failed status.
  void Blocking(std::function<Status()> call, Communicator* interruptible);

  // Shared with an abandoned call's thread: the worker lives until that call returns.
  std::shared_ptr<std::unique_ptr<Worker>> holder_;
  Worker* worker_ = nullptr;
  Phase phase_ = Phase::kCreated;
  // The shards' memory after Close(): views handed to Python may still point into it.
  std::vector<HostBytes> closed_shards_;
};

// Throws StatusError when `s` is not OK.
void ThrowIfError(const Status& s);

}  // namespace elastra::python
