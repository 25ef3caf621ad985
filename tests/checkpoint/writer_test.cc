// Writing checkpoints: asynchronous snapshots that hold their values while training goes on, the
// write following the device copy block by block, a busy writer, bad snapshots refused, device
// shards copied through the hooks into a pinned image, and pruning to the newest K.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/checkpoint/checkpoint_test_util.h"

namespace elastra::checkpoint {
namespace {

namespace fs = std::filesystem;

// An Env over the real filesystem whose writable files (buffered or direct) call BeforeAppend()
// and AfterAppend() around every append, for tests that hold or watch appends.
class WrappingEnv : public FaultInjectionEnv {
 public:
  WrappingEnv() : FaultInjectionEnv(Env::Default()) {}
  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    ELASTRA_ASSIGN_OR_RETURN(auto base, FaultInjectionEnv::NewWritableFile(path));
    return std::unique_ptr<WritableFile>(new File(this, std::move(base)));
  }
  StatusOr<std::unique_ptr<WritableFile>> NewDirectWritableFile(const std::string& path) override {
    ELASTRA_ASSIGN_OR_RETURN(auto base, FaultInjectionEnv::NewDirectWritableFile(path));
    return std::unique_ptr<WritableFile>(new File(this, std::move(base)));
  }

 protected:
  virtual void BeforeAppend() {}
  virtual void AfterAppend() {}

 private:
  class File : public WritableFile {
   public:
    File(WrappingEnv* env, std::unique_ptr<WritableFile> base)
        : env_(env), base_(std::move(base)) {}
    Status Append(std::span<const std::byte> d) override {
      env_->BeforeAppend();
      Status s = base_->Append(d);
      env_->AfterAppend();
      return s;
    }
    Status Sync() override { return base_->Sync(); }
    Status Close() override { return base_->Close(); }

   private:
    WrappingEnv* env_;
    std::unique_ptr<WritableFile> base_;
  };
};

// An Env whose appends block until released, to hold a write in flight.
class GateEnv : public WrappingEnv {
 public:
  void Open() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  void BeforeAppend() override {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return open_; });
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

TEST(CheckpointAsyncTest, SnapshotHoldsValuesWhileCallerMutates) {
  TempDir root;
  GateEnv env;
  State s(7);
  const State original = s;
  std::atomic<int> written{0};
  WriterOptions o;
  o.env = &env;
  o.root = root.str();
  o.reserve_bytes = 1 << 20;
  o.on_written = [&](const CheckpointId& id, const StatusOr<ShardDescriptor>& d, double seconds) {
    EXPECT_GE(seconds, 0.0);
    if (d.ok() && id.step == 7) written++;
  };
  auto w = CheckpointWriter::Create(o);
  ASSERT_TRUE(w.ok());
  auto r = (*w)->Snapshot({"job", 7, 1}, s.View());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, CheckpointWriter::SnapshotResult::kStarted);
  // Snapshot returned while the file write is held: the step did not wait for the disk.
  EXPECT_TRUE((*w)->in_flight());
  EXPECT_FALSE(fs::exists(JoinPath(DirOf(root.str(), 7), "shard-00000.bin")));
  // Training goes on and changes everything.
  std::fill(s.w.begin(), s.w.end(), -1.0f);
  std::fill(s.b.begin(), s.b.end(), -1.0);
  s.counts.assign(7, -1);
  env.Open();
  auto d = (*w)->WaitForWrite();
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(written.load(), 1);
  ASSERT_TRUE(CommitCheckpoint({&env, root.str(), 3}, {"job", 7, 1}, {}, {*d}).ok());
  auto loaded = LoadLatest(&env, root.str(), original.Requests());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(original.Matches(*loaded));
}

// An Env that counts appends, so a test can see the write start.
class CountingEnv : public WrappingEnv {
 public:
  // Waits until at least one append happened; false after `timeout`.
  bool WaitForAppend(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, timeout, [&] { return appends_ > 0; });
  }

 private:
  void AfterAppend() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      ++appends_;
    }
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  int appends_ = 0;
};

// The write follows the copy block by block instead of waiting for the whole snapshot: while the
// last tensor is still being copied (here, held in the copy hook), the first blocks are already
// appended to the file. The file is still exactly the snapshot.
TEST(CheckpointAsyncTest, WriteStartsWhileTheCopyIsStillRunning) {
  TempDir root;
  CountingEnv env;
  State s(9);
  StateView v = s.View();
  for (auto& t : v.tensors) t.on_device = true;  // every copy goes through the hook
  const std::byte* last = v.tensors.back().data.data();
  std::atomic<bool> saw_append_during_copy{false};
  WriterOptions o;
  o.env = &env;
  o.root = root.str();
  o.write_block_bytes = 4096;
  o.write_while_copying = true;
  o.copy_from_device = [&](std::byte* dst, const std::byte* src, size_t n) {
    if (src == last) saw_append_during_copy = env.WaitForAppend(std::chrono::seconds(10));
    std::memcpy(dst, src, n);
    return OkStatus();
  };
  auto w = CheckpointWriter::Create(o);
  ASSERT_TRUE(w.ok());
  auto d = (*w)->Write({"job", 9, 1}, v);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(saw_append_during_copy.load());
  ASSERT_TRUE(CommitCheckpoint({&env, root.str(), 3}, {"job", 9, 1}, {}, {*d}).ok());
  auto loaded = LoadLatest(&env, root.str(), s.Requests());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(s.Matches(*loaded));
}

// By default the write waits for the whole copy (the copy the step waits for keeps the memory
// bandwidth): while the last tensor is being copied, nothing has been appended.
TEST(CheckpointAsyncTest, ByDefaultTheWriteStartsOnceTheCopyIsDone) {
  TempDir root;
  CountingEnv env;
  State s(9);
  StateView v = s.View();
  for (auto& t : v.tensors) t.on_device = true;  // every copy goes through the hook
  const std::byte* last = v.tensors.back().data.data();
  std::atomic<bool> saw_append_during_copy{true};
  WriterOptions o;
  o.env = &env;
  o.root = root.str();
  o.write_block_bytes = 4096;
  ASSERT_FALSE(o.write_while_copying);
  o.copy_from_device = [&](std::byte* dst, const std::byte* src, size_t n) {
    // The writer could append the header and the first tensors by now if it did not wait.
    if (src == last) saw_append_during_copy = env.WaitForAppend(std::chrono::milliseconds(300));
    std::memcpy(dst, src, n);
    return OkStatus();
  };
  auto w = CheckpointWriter::Create(o);
  ASSERT_TRUE(w.ok());
  auto d = (*w)->Write({"job", 9, 1}, v);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(saw_append_during_copy.load());
  ASSERT_TRUE(CommitCheckpoint({&env, root.str(), 3}, {"job", 9, 1}, {}, {*d}).ok());
  auto loaded = LoadLatest(&env, root.str(), s.Requests());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(s.Matches(*loaded));
}

TEST(CheckpointAsyncTest, BusyWriterSkipsOrWaits) {
  for (auto mode : {WriterOptions::WhenBusy::kSkip, WriterOptions::WhenBusy::kWait}) {
    TempDir root;
    GateEnv env;
    WriterOptions o;
    o.env = &env;
    o.root = root.str();
    o.when_busy = mode;
    auto w = CheckpointWriter::Create(o);
    ASSERT_TRUE(w.ok());
    State s1(1), s2(2);
    ASSERT_EQ(*(*w)->Snapshot({"job", 1, 1}, s1.View()), CheckpointWriter::SnapshotResult::kStarted);
    if (mode == WriterOptions::WhenBusy::kSkip) {
      auto r = (*w)->Snapshot({"job", 2, 1}, s2.View());
      ASSERT_TRUE(r.ok());
      EXPECT_EQ(*r, CheckpointWriter::SnapshotResult::kSkipped);
      env.Open();
      auto d = (*w)->WaitForWrite();
      ASSERT_TRUE(d.ok());
      EXPECT_FALSE(fs::exists(DirOf(root.str(), 2)));  // never started
    } else {
      std::atomic<bool> returned{false};
      std::thread t([&] {
        auto r = (*w)->Snapshot({"job", 2, 1}, s2.View());
        EXPECT_TRUE(r.ok() && *r == CheckpointWriter::SnapshotResult::kStarted);
        returned = true;
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      EXPECT_FALSE(returned.load());  // waits for step 1's write
      env.Open();
      t.join();
      EXPECT_TRUE(returned.load());
      auto d = (*w)->WaitForWrite();
      ASSERT_TRUE(d.ok());
      EXPECT_TRUE(fs::exists(JoinPath(DirOf(root.str(), 2), "shard-00000.bin")));
    }
  }
}

// A write in flight when its writer may no longer publish (a worker stopped mid-write and fenced
// once it woke) fails before its file takes its final name, and leaves nothing behind.
TEST(CheckpointAsyncTest, AWriteThatMayNotPublishLeavesNoFile) {
  TempDir root;
  GateEnv env;
  std::atomic<bool> fenced{false};
  WriterOptions o;
  o.env = &env;
  o.root = root.str();
  o.may_publish = [&]() -> Status {
    return fenced ? AbortedError("fenced") : OkStatus();
  };
  auto w = CheckpointWriter::Create(o);
  ASSERT_TRUE(w.ok());
  State s(3);
  ASSERT_EQ(*(*w)->Snapshot({"job", 10, 1}, s.View()), CheckpointWriter::SnapshotResult::kStarted);
  fenced = true;  // while the write is held in its appends
  env.Open();
  auto d = (*w)->WaitForWrite();
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kAborted) << d.status();
  const fs::path dir = DirOf(root.str(), 10);
  EXPECT_FALSE(fs::exists(dir / "shard-00000.bin"));
  EXPECT_FALSE(fs::exists(dir / "shard-00000.bin.tmp"));
  fenced = false;
  ASSERT_EQ(*(*w)->Snapshot({"job", 20, 1}, s.View()), CheckpointWriter::SnapshotResult::kStarted);
  ASSERT_TRUE((*w)->WaitForWrite().ok());
  EXPECT_TRUE(fs::exists(fs::path(DirOf(root.str(), 20)) / "shard-00000.bin"));
}

TEST(CheckpointTest, BadSnapshotsAreRefused) {
  TempDir root;
  WriterOptions o;
  o.root = root.str();
  auto w = CheckpointWriter::Create(o);
  ASSERT_TRUE(w.ok());
  std::vector<float> x(10);
  StateView v;
  v.tensors.push_back({"x", {10}, DataType::kFloat32, {}, Box::Whole({10}),
                       {reinterpret_cast<const std::byte*>(x.data()), 36}});
  auto r = (*w)->Snapshot({"job", 1, 1}, v);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  v.tensors[0].data = {reinterpret_cast<const std::byte*>(x.data()), 40};
  v.tensors.push_back(v.tensors[0]);  // the same box twice
  EXPECT_EQ((*w)->Snapshot({"job", 1, 1}, v).status().code(), StatusCode::kInvalidArgument);
  v.tensors.pop_back();
  v.tensors[0].data = {reinterpret_cast<const std::byte*>(x.data()), 40};
  v.tensors[0].region = Box{{0}, {11}};
  EXPECT_EQ((*w)->Snapshot({"job", 1, 1}, v).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*w)->WaitForWrite().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(CheckpointWriter::Create(WriterOptions{}).status().code(),
            StatusCode::kInvalidArgument);
}

// Shards in device memory go through WriterOptions::copy_from_device into the staging image, which
// pin_staging page-locks once and unpin_staging releases with the writer. Here the "device" is a
// second host buffer behind the hooks (the GPU version is tests/gpu/device_state_test); what is
// checked is that the writer calls the hooks for exactly the device shards and writes their bytes.
TEST(CheckpointTest, DeviceShardsAreCopiedThroughTheHookIntoAPinnedImage) {
  TempDir root;
  State s(5);
  const std::vector<float> device_w = s.w;  // what the device holds
  StateView v = s.View();
  v.tensors[0].data = {reinterpret_cast<const std::byte*>(device_w.data()), device_w.size() * 4};
  v.tensors[0].on_device = true;
  std::fill(s.w.begin(), s.w.end(), -7.0f);  // the host copy is stale: only the hook may be used

  {
    WriterOptions o;
    o.root = root.str();
    auto w = CheckpointWriter::Create(o);
    ASSERT_TRUE(w.ok());
    EXPECT_EQ((*w)->Snapshot({"job", 5, 1}, v).status().code(), StatusCode::kInvalidArgument);
  }

  struct Calls {
    std::vector<std::pair<const std::byte*, size_t>> copies;
    std::vector<std::pair<void*, size_t>> pins;
    std::vector<void*> unpins;
  } calls;
  WriterOptions o;
  o.root = root.str();
  o.copy_from_device = [&](std::byte* dst, const std::byte* src, size_t n) {
    calls.copies.emplace_back(src, n);
    std::memcpy(dst, src, n);
    return OkStatus();
  };
  o.pin_staging = [&](void* p, size_t n) {
    calls.pins.emplace_back(p, n);
    return OkStatus();
  };
  o.unpin_staging = [&](void* p) { calls.unpins.push_back(p); };
  ShardDescriptor d;
  {
    auto w = CheckpointWriter::Create(o);
    ASSERT_TRUE(w.ok());
    auto written = (*w)->Write({"job", 5, 1}, v);
    ASSERT_TRUE(written.ok()) << written.status();
    d = *written;
    ASSERT_EQ(calls.copies.size(), 1u);
    EXPECT_EQ(calls.copies[0].first, reinterpret_cast<const std::byte*>(device_w.data()));
    EXPECT_EQ(calls.copies[0].second, device_w.size() * 4);
    ASSERT_EQ(calls.pins.size(), 1u);
    EXPECT_GE(calls.pins[0].second, device_w.size() * 4 + 800 + 56);
    EXPECT_TRUE(calls.unpins.empty());  // pinned for the writer's life, not per snapshot
  }
  ASSERT_EQ(calls.unpins.size(), 1u);
  EXPECT_EQ(calls.unpins[0], calls.pins[0].first);
  ASSERT_TRUE(CommitCheckpoint({Env::Default(), root.str(), 3}, {"job", 5, 1}, {}, {d}).ok());
  State expected(5);
  auto loaded = LoadLatest(Env::Default(), root.str(), expected.Requests());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(expected.Matches(*loaded));

  // A pin that fails leaves the image pageable (and never unpinned); a copy that fails fails the
  // snapshot with the copy's error.
  calls = Calls{};
  o.pin_staging = [](void*, size_t) { return UnavailableError("no device to pin for"); };
  o.copy_from_device = [](std::byte*, const std::byte*, size_t) {
    return InternalError("device lost");
  };
  {
    auto w = CheckpointWriter::Create(o);
    ASSERT_TRUE(w.ok());
    auto r = (*w)->Snapshot({"job", 6, 1}, v);
    EXPECT_EQ(r.status().code(), StatusCode::kInternal);
    EXPECT_NE(r.status().message().find("device lost"), std::string::npos);
  }
  EXPECT_TRUE(calls.unpins.empty());
}

TEST(CheckpointTest, KeepsNewestKAndRemovesDebris) {
  TempDir root;
  for (int step : {1, 2, 3}) ASSERT_TRUE(SaveAndCommit(Env::Default(), root.str(), State(step), 2).ok());
  // Debris: an uncommitted older directory, and an uncommitted newer one (maybe in flight).
  fs::create_directories(DirOf(root.str(), 2) + "x");  // not a checkpoint name: left alone
  fs::create_directories(DirOf(root.str(), 0));
  fs::create_directories(DirOf(root.str(), 99));
  ASSERT_TRUE(SaveAndCommit(Env::Default(), root.str(), State(4), 2).ok());
  auto list = ListCheckpoints(Env::Default(), root.str());
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].step, 4);
  EXPECT_EQ((*list)[1].step, 3);
  EXPECT_FALSE(fs::exists(DirOf(root.str(), 1)));
  EXPECT_FALSE(fs::exists(DirOf(root.str(), 2)));
  EXPECT_FALSE(fs::exists(DirOf(root.str(), 0)));
  EXPECT_TRUE(fs::exists(DirOf(root.str(), 99)));
  EXPECT_TRUE(fs::exists(DirOf(root.str(), 2) + "x"));
}

}  // namespace
}  // namespace elastra::checkpoint
