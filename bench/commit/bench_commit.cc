// bench_commit: what the pause's in-memory commit costs the critical path, beside a memcpy of the
// same bytes in the same run. A worker that pauses commits its state before it reports paused;
// that commit used to be a copy of every shard on the training thread (Commit()), and is now
// started on another thread (CommitInBackground()) and waited for only before the state moves,
// after the round trip to the coordinator and the rebuild of the groups.
//
// Per repetition, in this order: a memcpy of the state's bytes into a buffer already touched
// (the reference), a synchronous Commit() of a new step, a CommitInBackground() of the next step
// (the stall: until it returns) and its Settle() right away (the copy: what a pause whose round
// trip took no time would wait for before the state moves). The commit images are the store's
// own, reused from one commit to the next as in a worker that has run a while (warm-up first).
//
//   bench_commit [--mb N (64)] [--tensors T (8)] [--reps R (10)]
// Last line: {"bench":"commit", ..., "commit_vs_memcpy": x, "stall_vs_memcpy": y,
// "copy_vs_memcpy": z} with medians.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "elastra/tensor_collection.h"
#include "state/tensor_collection_access.h"
#include "worker/commit_store.h"

namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bench_commit: %s\n", what.c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  int mb = 64, tensors = 8, reps = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (f == "--mb") mb = v;
    else if (f == "--tensors") tensors = v;
    else if (f == "--reps") reps = v;
    else Die("unknown flag " + f + " (flags: --mb N --tensors T --reps R)");
  }
  if (argc % 2 == 0 || mb < 1 || tensors < 1 || reps < 1) Die("every flag takes a positive value");
  const int64_t per_tensor = (static_cast<int64_t>(mb) << 20) / tensors / 4;  // float32 elements
  elastra::TensorCollection state;
  for (int t = 0; t < tensors; ++t) {
    if (!state.AddTensor("t" + std::to_string(t), {per_tensor}, elastra::DataType::kFloat32).ok()) {
      Die("cannot register the state");
    }
  }
  if (!state.AddScalar(elastra::kStepScalarName, 0).ok()) Die("cannot register the step");
  for (auto& t : elastra::TensorCollectionAccess::Tensors(state)) {
    std::memset(t.data.data(), 1, t.data.size());
  }
  const size_t bytes = state.bytes();
  std::vector<uint8_t> dst(bytes, 2);  // the memcpy reference's destination, touched

  elastra::CommitStore store(&state, nullptr);
  int64_t step = 0;
  auto next_step = [&] {
    state.SetScalar(elastra::kStepScalarName, ++step);
    for (auto& t : elastra::TensorCollectionAccess::Tensors(state)) {
      t.data[0] = static_cast<uint8_t>(step);
    }
  };
  for (int i = 0; i < 3; ++i) {  // warm-up: both images exist and are reused from now on
    next_step();
    if (!store.Commit().ok()) Die("commit failed");
  }
  std::vector<double> memcpy_ms, commit_ms, stall_ms, copy_ms;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    size_t at = 0;
    for (const auto& t : state.tensors()) {
      std::memcpy(dst.data() + at, t.data.data(), t.data.size());
      at += t.data.size();
    }
    memcpy_ms.push_back(MsSince(t0));

    next_step();
    t0 = Clock::now();
    if (!store.Commit().ok()) Die("commit failed");
    commit_ms.push_back(MsSince(t0));

    next_step();
    t0 = Clock::now();
    if (!store.CommitInBackground().ok()) Die("background commit failed");
    stall_ms.push_back(MsSince(t0));
    store.Settle();
    copy_ms.push_back(MsSince(t0));
    if (store.steps().back() != step) Die("the background commit is not the newest");
    std::fprintf(stderr, "rep %d: memcpy %.2f ms, commit %.2f ms, background: stall %.3f ms, "
                 "copy %.2f ms\n", r, memcpy_ms.back(), commit_ms.back(), stall_ms.back(),
                 copy_ms.back());
  }
  const double mc = Median(memcpy_ms);
  nlohmann::ordered_json out;
  out["bench"] = "commit";
  out["bytes"] = bytes;
  out["tensors"] = tensors;
  out["reps"] = reps;
  out["memcpy_ms"] = mc;
  out["commit_ms"] = Median(commit_ms);
  out["stall_ms"] = Median(stall_ms);
  out["copy_ms"] = Median(copy_ms);
  out["commit_vs_memcpy"] = Median(commit_ms) / mc;
  out["stall_vs_memcpy"] = Median(stall_ms) / mc;
  out["copy_vs_memcpy"] = Median(copy_ms) / mc;
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
