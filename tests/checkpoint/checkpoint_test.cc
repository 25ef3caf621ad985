// The checkpoint engine: round trips, every kind of corruption detected before a tensor changes
// with fallback to the previous checkpoint, injected write failures, full disks and power cuts,
// asynchronous snapshots, pruning, and `elastra ckpt` exit codes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <numeric>
#include <thread>

#include "launch/commands.h"
#include "checkpoint/env.h"
#include "checkpoint/format.h"
#include "checkpoint/reader.h"
#include "checkpoint/writer.h"

namespace elastra::checkpoint {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("elastra_ckpt_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

// A small replicated training state: a 2-D float matrix, a float64 vector, an int64 vector.
struct State {
  std::vector<float> w;
  std::vector<double> b;
  std::vector<int64_t> counts;
  int64_t step = 0;
  int64_t cursor = 0;

  explicit State(int seed, size_t rows = 64, size_t cols = 48) : w(rows * cols), b(100), counts(7) {
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(seed * 1000 + i);
    for (size_t i = 0; i < b.size(); ++i) b[i] = seed + 0.5 * i;
    for (size_t i = 0; i < counts.size(); ++i) counts[i] = seed * 10 + i;
    step = seed;
    cursor = seed * 32;
    rows_ = rows;
    cols_ = cols;
  }

  StateView View() const {
    StateView v;
    auto add = [&](const std::string& name, std::vector<int64_t> shape, DataType dt,
                   const void* p, size_t n) {
      TensorShard t;
      t.name = name;
      t.shape = shape;
      t.dtype = dt;
      t.region = Box::Whole(shape);
      t.data = {static_cast<const std::byte*>(p), n};
      v.tensors.push_back(t);
    };
    add("w", {static_cast<int64_t>(rows_), static_cast<int64_t>(cols_)}, DataType::kFloat32,
        w.data(), w.size() * 4);
    add("b", {100}, DataType::kFloat64, b.data(), b.size() * 8);
    add("counts", {7}, DataType::kInt64, counts.data(), counts.size() * 8);
    v.scalars = {{"elastra.step", step}, {"data.cursor", cursor}};
    return v;
  }

  std::vector<RegionRequest> Requests() const {
    const std::vector<int64_t> ws = {static_cast<int64_t>(rows_), static_cast<int64_t>(cols_)};
    return {{"w", {Box::Whole(ws)}, ws, DataType::kFloat32},
            {"b", {Box::Whole({100})}, {100}, DataType::kFloat64},
            {"counts", {Box::Whole({7})}, {7}, DataType::kInt64}};
  }

  // True when `loaded` holds exactly this state.
  bool Matches(const LoadedState& loaded) const {
    if (loaded.regions.size() != 3) return false;
    auto same = [](const std::vector<uint8_t>& got, const void* p, size_t n) {
      return got.size() == n && std::memcmp(got.data(), p, n) == 0;
    };
    int64_t s = -1, c = -1;
    for (const auto& [name, value] : loaded.scalars) {
      if (name == "elastra.step") s = value;
      if (name == "data.cursor") c = value;
    }
    return same(loaded.regions[0], w.data(), w.size() * 4) &&
           same(loaded.regions[1], b.data(), b.size() * 8) &&
           same(loaded.regions[2], counts.data(), counts.size() * 8) && s == step &&
           c == cursor && loaded.step == step;
  }

  size_t rows_, cols_;
};

// Writes `state` as a one-rank checkpoint at step state.step and commits it.
Status SaveAndCommit(Env* env, const std::string& root, const State& state, int keep = 5,
                     uint64_t chunk = kDefaultChunkBytes) {
  WriterOptions o;
  o.env = env;
  o.root = root;
  o.chunk_bytes = chunk;
  auto writer = CheckpointWriter::Create(o);
  if (!writer.ok()) return writer.status();
  CheckpointId id{"job", state.step, 1};
  auto d = (*writer)->Write(id, state.View());
  if (!d.ok()) return d.status();
  CommitOptions c;
  c.env = env;
  c.root = root;
  c.keep_last = keep;
  auto dir = CommitCheckpoint(c, id, Layout{1, 1, 1}, {*d});
  return dir.ok() ? OkStatus() : dir.status();
}

std::string DirOf(const std::string& root, int64_t step) {
  return JoinPath(root, CheckpointDirName(step, 1));
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.read(&c, 1);
  c ^= 0x5a;
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

std::vector<std::byte> ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  std::memcpy(out.data(), c.data(), c.size());
  return out;
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

bool HasTmpFiles(const std::string& root) {
  for (auto& e : fs::recursive_directory_iterator(root)) {
    if (e.path().filename().string().find(".tmp") != std::string::npos) return true;
  }
  return false;
}

TEST(CheckpointTest, RoundTrip) {
  TempDir root;
  State s(3);
  ASSERT_TRUE(SaveAndCommit(Env::Default(), root.str(), s).ok());
  auto loaded = LoadLatest(Env::Default(), root.str(), s.Requests());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(s.Matches(*loaded));
  EXPECT_TRUE(loaded->skipped.empty());

  // A direct load of the same directory gives the same bytes; VerifyAll passes.
  auto direct = LoadCheckpoint(Env::Default(), DirOf(root.str(), 3), s.Requests());
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_TRUE(s.Matches(*direct));
  auto reader = CheckpointReader::Open(Env::Default(), DirOf(root.str(), 3));
  ASSERT_TRUE(reader.ok());
  uint64_t checked = 0;
  EXPECT_TRUE((*reader)->VerifyAll(&checked).ok());
  EXPECT_EQ(checked, s.w.size() * 4 + 800 + 56);
}

TEST(CheckpointTest, ManifestAndDescriptorEncodingRoundTrip) {
  Manifest m;
  m.job = "j";
  m.step = 7;
  m.generation = 2;
  m.layout = {2, 1, 2};
  m.scalars = {{"elastra.step", 7}};
  m.files = {{"shard-00000.bin", 0, 4096 + 16}};
  m.tensors = {{"t", {4}, 0, {}, {{Box::Whole({4}), 0, 4096, 16, 4096, {123}}}}};
  std::string bytes = EncodeManifest(m);
  auto back = DecodeManifest(AsBytes(bytes), "M");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->layout, m.layout);
  EXPECT_EQ(back->tensors[0].regions[0].chunk_checksums[0], 123u);

  // Every truncation of a valid manifest is refused cleanly.
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeManifest(AsBytes(bytes.substr(0, n)), "M").ok()) << n;
  }
  // A lying payload size is bounded before anything is allocated.
  std::string huge = bytes;
  uint64_t big = 1ull << 60;
  std::memcpy(huge.data() + 16, &big, 8);
  auto h = DecodeManifest(AsBytes(huge), "M");
  EXPECT_EQ(h.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(h.status().message().find("exceeds the limit"), std::string::npos);

  ShardDescriptor d;
  d.rank = 3;
  d.file = "shard-00003.bin";
  d.tensors = m.tensors;
  auto dd = DecodeShardDescriptor(AsBytes(EncodeShardDescriptor(d)));
  ASSERT_TRUE(dd.ok()) << dd.status();
  EXPECT_EQ(dd->rank, 3);
  EXPECT_FALSE(DecodeShardDescriptor(AsBytes(bytes)).ok());  // a manifest is not a descriptor
}

// Every single-byte change of a manifest's payload, with the frame checksum recomputed so the
// decoder and the validator see it, is either refused with an error or still a consistent
// manifest: never a crash, a huge allocation or an out-of-range read (run under ASan too).
TEST(CheckpointTest, MutatedManifestsNeverCrash) {
  TempDir root;
  ASSERT_TRUE(SaveAndCommit(Env::Default(), root.str(), State(4), 5, 4096).ok());
  const std::string path = JoinPath(DirOf(root.str(), 4), kManifestName);
  std::vector<std::byte> good = ReadAll(path);
  ASSERT_TRUE(DecodeManifest(good, path).ok());
  int refused = 0, accepted = 0;
  for (size_t pos = 32; pos < good.size(); ++pos) {
    for (uint8_t x : {0x01, 0x80, 0xff}) {
      std::vector<std::byte> bad = good;
      bad[pos] ^= std::byte{x};
      const uint64_t sum = Checksum(bad.data() + 32, bad.size() - 32);
      std::memcpy(bad.data() + 24, &sum, 8);
      auto m = DecodeManifest(bad, path);
      if (m.ok()) {
        ++accepted;
        EXPECT_TRUE(ValidateManifest(*m).ok());
      } else {
        ++refused;
        EXPECT_FALSE(m.status().message().empty());
      }
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(accepted, 0);  // e.g. a changed checksum value or scalar is still well-formed
}

// Two ranks each hold a column block (TP-like split along dim 1) of a [rows, cols] tensor; any
// box can be loaded, reading only the chunks it touches.
TEST(CheckpointTest, ShardedRegionsLoadAnyBoxWithPartialReads) {
  TempDir root;
  const int64_t rows = 256, cols = 512;  // 512 KiB of float32
  std::vector<float> full(rows * cols);
  std::iota(full.begin(), full.end(), 0.0f);
  std::vector<ShardDescriptor> descs;
  for (int rank = 0; rank < 2; ++rank) {
    const int64_t c0 = rank * cols / 2, c1 = (rank + 1) * cols / 2;
    std::vector<float> local;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = c0; c < c1; ++c) local.push_back(full[r * cols + c]);
    }
    WriterOptions o;
    o.root = root.str();
    o.rank = rank;
    o.chunk_bytes = 4096;
    auto w = CheckpointWriter::Create(o);
    ASSERT_TRUE(w.ok());
    StateView v;
    TensorShard t;
    t.name = "tp.weight";
    t.shape = {rows, cols};
    t.rule = {1, -1, false};
    t.region = Box{{0, c0}, {rows, c1}};
    t.data = {reinterpret_cast<const std::byte*>(local.data()), local.size() * 4};
    v.tensors.push_back(t);
    auto d = (*w)->Write({"job", 5, 2}, v);
    ASSERT_TRUE(d.ok()) << d.status();
    descs.push_back(*d);
  }
  // One region missing: the commit refuses (sizes do not add up).
  auto partial = CommitCheckpoint({nullptr, root.str(), 2}, {"job", 5, 2}, {1, 1, 2}, {descs[0]});
  EXPECT_EQ(partial.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(partial.status().message().find("cover"), std::string::npos) << partial.status();
  ASSERT_TRUE(CommitCheckpoint({nullptr, root.str(), 2}, {"job", 5, 2}, {1, 1, 2}, descs).ok());

  auto reader =
      CheckpointReader::Open(Env::Default(), JoinPath(root.str(), CheckpointDirName(5, 2)));
  ASSERT_TRUE(reader.ok()) << reader.status();
  // A box across both files: rows 10..20, columns 250..262.
  Box want{{10, 250}, {20, 262}};
  std::vector<float> got(want.volume());
  ASSERT_TRUE((*reader)->ReadRegion("tp.weight", want,
                                    {reinterpret_cast<std::byte*>(got.data()), got.size() * 4})
                  .ok());
  for (int64_t r = 10; r < 20; ++r) {
    for (int64_t c = 250; c < 262; ++c) {
      ASSERT_EQ(got[(r - 10) * 12 + (c - 250)], full[r * cols + c]) << r << "," << c;
    }
  }
  // Only the chunks spanning rows 10..20 of each file were read, far less than the files.
  EXPECT_LT((*reader)->bytes_read(), 12u * 4096u);
  EXPECT_GT((*reader)->bytes_read(), 0u);
  // A different layout: the whole tensor (both regions), as a 1-rank restart would need.
  std::vector<float> all(rows * cols);
  ASSERT_TRUE((*reader)->ReadRegion("tp.weight", Box::Whole({rows, cols}),
                                    {reinterpret_cast<std::byte*>(all.data()), all.size() * 4})
                  .ok());
  EXPECT_EQ(all, full);
  EXPECT_TRUE((*reader)->VerifyAll().ok());
  // Bad requests are refused, not crashed on.
  std::vector<std::byte> small(8);
  EXPECT_EQ((*reader)->ReadRegion("tp.weight", want, small).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*reader)->ReadRegion("nope", want, small).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*reader)->ReadRegion("tp.weight", Box{{0, 0}, {1, 999}}, small).code(),
            StatusCode::kInvalidArgument);
}

TEST(CheckpointTest, FlatRangePieces) {
  const Box m{{0, 0}, {6, 10}};
  auto p = FlatRangePieces(m, 17, 41);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0], (Box{{1, 7}, {2, 10}}));
  EXPECT_EQ(p[1], (Box{{2, 0}, {4, 10}}));
  EXPECT_EQ(p[2], (Box{{4, 0}, {5, 1}}));
  EXPECT_EQ(FlatRangePieces(m, 20, 40), (std::vector<Box>{Box{{2, 0}, {4, 10}}}));
  EXPECT_EQ(FlatRangePieces(m, 3, 5), (std::vector<Box>{Box{{0, 3}, {1, 5}}}));
  EXPECT_TRUE(FlatRangePieces(m, 5, 5).empty());
  // Offset boxes (a TP shard further split over DP).
  EXPECT_EQ(FlatRangePieces(Box{{2, 4}, {4, 8}}, 2, 6),
            (std::vector<Box>{Box{{2, 6}, {3, 8}}, Box{{3, 4}, {4, 6}}}));
}

// ZeRO: three DP ranks each save an uneven flat range of a [6, 10] tensor (up to three boxes
// each); two ranks of a new layout load their own flat ranges.
TEST(CheckpointTest, ZeroShardsReloadAtAnotherDegree) {
  TempDir root;
  std::vector<float> full(60);
  std::iota(full.begin(), full.end(), 100.0f);
  const Box whole{{0, 0}, {6, 10}};
  const int64_t cuts[] = {0, 17, 41, 60};
  std::vector<ShardDescriptor> descs;
  for (int rank = 0; rank < 3; ++rank) {
    WriterOptions o;
    o.root = root.str();
    o.rank = rank;
    auto w = CheckpointWriter::Create(o);
    ASSERT_TRUE(w.ok());
    StateView v;
    int64_t at = cuts[rank];
    for (const Box& b : FlatRangePieces(whole, cuts[rank], cuts[rank + 1])) {
      TensorShard t;
      t.name = "adam.exp_avg";
      t.shape = {6, 10};
      t.rule = {-1, -1, true};
      t.region = b;
      t.data = {reinterpret_cast<const std::byte*>(full.data() + at), b.volume() * 4};
      at += static_cast<int64_t>(b.volume());
      v.tensors.push_back(t);
    }
    ASSERT_EQ(at, cuts[rank + 1]);
    v.scalars = {{"elastra.step", 9}};
    auto d = (*w)->Write({"job", 9, 4}, v);
    ASSERT_TRUE(d.ok()) << d.status();
    descs.push_back(*d);
  }
  ASSERT_TRUE(CommitCheckpoint({nullptr, root.str(), 2}, {"job", 9, 4}, {3, 1, 1}, descs).ok());
  for (auto [fb, fe] : {std::pair<int64_t, int64_t>{0, 30}, {30, 60}}) {
    RegionRequest q{"adam.exp_avg", FlatRangePieces(whole, fb, fe), {6, 10}, DataType::kFloat32};
    auto loaded = LoadLatest(Env::Default(), root.str(), {q});
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    ASSERT_EQ(loaded->regions[0].size(), static_cast<size_t>(fe - fb) * 4);
    EXPECT_EQ(std::memcmp(loaded->regions[0].data(), full.data() + fb, (fe - fb) * 4), 0);
    EXPECT_EQ(loaded->layout, (Layout{3, 1, 1}));
  }
  // A request outside the tensor is refused before any allocation.
  RegionRequest bad{"adam.exp_avg", {Box{{0, 0}, {1000000, 1000000}}}, {}, DataType::kFloat32};
  auto r = LoadCheckpoint(Env::Default(), JoinPath(root.str(), CheckpointDirName(9, 4)), {bad});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

// The corruption tests: step 10 (good) and step 20 (damaged by `damage`). Loading must refuse 20
// with `reason` naming `file`, and load 10.
void ExpectFallback(const std::function<void(const std::string& dir20)>& damage,
                    const std::string& file, const std::string& reason, bool listed = true) {
  TempDir root;
  State s10(10), s20(20);
  ASSERT_TRUE(SaveAndCommit(Env::Default(), root.str(), s10, 5, 4096).ok());
  ASSERT_TRUE(SaveAndCommit(Env::Default(), root.str(), s20, 5, 4096).ok());
  const std::string dir20 = DirOf(root.str(), 20);
  damage(dir20);

  auto direct = LoadCheckpoint(Env::Default(), dir20, s20.Requests());
  ASSERT_FALSE(direct.ok());
  EXPECT_NE(direct.status().message().find(file), std::string::npos) << direct.status();
  EXPECT_NE(direct.status().message().find(reason), std::string::npos) << direct.status();

  auto loaded = LoadLatest(Env::Default(), root.str(), s20.Requests());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(s10.Matches(*loaded));
  if (listed) {
    ASSERT_EQ(loaded->skipped.size(), 1u);
    EXPECT_NE(loaded->skipped[0].find(reason), std::string::npos) << loaded->skipped[0];
  }
  // `elastra ckpt verify` names the fault and fails; the good one alone passes.
  if (listed) {
    testing::internal::CaptureStdout();
    EXPECT_EQ(launch::CkptCommand({"verify", root.str()}), 1);
    std::string out = testing::internal::GetCapturedStdout();
    EXPECT_NE(out.find(file), std::string::npos) << out;
  }
  EXPECT_EQ(launch::CkptCommand({"verify", DirOf(root.str(), 10)}), 0);
}

TEST(CheckpointCorruptionTest, FlippedByteInShard) {
  ExpectFallback([](const std::string& d) { FlipByte(JoinPath(d, "shard-00000.bin"), 4096 + 5000); },
                 "shard-00000.bin", "checksum mismatch");
}

TEST(CheckpointCorruptionTest, TruncatedShard) {
  ExpectFallback([](const std::string& d) { fs::resize_file(JoinPath(d, "shard-00000.bin"), 9000); },
                 "shard-00000.bin", "truncated");
}

TEST(CheckpointCorruptionTest, DeletedManifestMeansNotCommitted) {
  ExpectFallback([](const std::string& d) { fs::remove(JoinPath(d, kManifestName)); },
                 kManifestName, "not a committed checkpoint", /*listed=*/false);
}

TEST(CheckpointCorruptionTest, UnknownVersion) {
  ExpectFallback(
      [](const std::string& d) {
        const std::string p = JoinPath(d, kManifestName);
        auto bytes = ReadAll(p);
        uint32_t v = 99;
        std::memcpy(bytes.data() + 8, &v, 4);
        WriteAll(p, std::string(reinterpret_cast<char*>(bytes.data()), bytes.size()));
      },
      kManifestName, "unknown format version 99");
}

TEST(CheckpointCorruptionTest, ManifestNamesMissingFile) {
  ExpectFallback([](const std::string& d) { fs::remove(JoinPath(d, "shard-00000.bin")); },
                 "shard-00000.bin", "missing");
}

TEST(CheckpointCorruptionTest, SizesThatDoNotAddUp) {
  // A well-formed, correctly checksummed manifest whose region claims more bytes than its box.
  ExpectFallback(
      [](const std::string& d) {
        const std::string p = JoinPath(d, kManifestName);
        auto m = DecodeManifest(ReadAll(p), p);
        ASSERT_TRUE(m.ok());
        m->tensors[1].regions[0].bytes += 8;
        WriteAll(p, EncodeManifest(*m));
      },
      kManifestName, "sizes do not add up");
}

TEST(CheckpointCorruptionTest, ManifestLiesAboutFileSize) {
  ExpectFallback(
      [](const std::string& d) {
        const std::string p = JoinPath(d, kManifestName);
        auto m = DecodeManifest(ReadAll(p), p);
        ASSERT_TRUE(m.ok());
        m->files[0].size += 4096;
        WriteAll(p, EncodeManifest(*m));
      },
      "shard-00000.bin", "truncated");
}

TEST(CheckpointCorruptionTest, CorruptionIsFoundBeforeAnyTensorChanges) {
  TempDir root;
  State s10(10), s20(20);
  ASSERT_TRUE(SaveAndCommit(Env::Default(), root.str(), s10, 5, 4096).ok());
  ASSERT_TRUE(SaveAndCommit(Env::Default(), root.str(), s20, 5, 4096).ok());
  // Damage the LAST tensor of step 20: the earlier ones read fine, yet nothing may be applied.
  auto m = DecodeManifest(ReadAll(JoinPath(DirOf(root.str(), 20), kManifestName)), "M");
  ASSERT_TRUE(m.ok());
  FlipByte(JoinPath(DirOf(root.str(), 20), "shard-00000.bin"),
           m->tensors[2].regions[0].offset + 3);
  auto bad = LoadCheckpoint(Env::Default(), DirOf(root.str(), 20), s20.Requests());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'counts'"), std::string::npos) << bad.status();
  // The load hands out nothing on a fault, so nothing can have been applied; the fallback is 10.
  auto good = LoadLatest(Env::Default(), root.str(), s20.Requests());
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE(s10.Matches(*good));
  ASSERT_EQ(good->skipped.size(), 1u);
  EXPECT_NE(good->skipped[0].find("'counts'"), std::string::npos);
}

// After each injected fault: the error is reported, step 10 still loads, step 20 is not listed,
// and no temporary file is left visible.
void ExpectPreviousSurvives(FaultInjectionEnv* env, const std::string& root) {
  ASSERT_TRUE(env->SimulatePowerLoss().ok());
  env->Reset();
  auto list = ListCheckpoints(env, root);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ(list->front().step, 10);
  auto loaded = LoadLatest(env, root, State(10).Requests());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(State(10).Matches(*loaded));
  EXPECT_TRUE(loaded->skipped.empty());
  EXPECT_FALSE(fs::exists(JoinPath(DirOf(root, 20), "shard-00000.bin")) &&
               fs::exists(JoinPath(DirOf(root, 20), kManifestName)));
  // A later checkpoint commits normally and prunes the debris.
  ASSERT_TRUE(SaveAndCommit(env, root, State(30)).ok());
  EXPECT_FALSE(fs::exists(DirOf(root, 20)));
  EXPECT_FALSE(HasTmpFiles(root));
}

TEST(CheckpointFaultTest, FailedWrite) {
  TempDir root;
  FaultInjectionEnv env(Env::Default());
  ASSERT_TRUE(SaveAndCommit(&env, root.str(), State(10)).ok());
  env.FailNthWrite(1);
  Status s = SaveAndCommit(&env, root.str(), State(20));
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("injected failure"), std::string::npos) << s;
  EXPECT_FALSE(HasTmpFiles(root.str()));
  ExpectPreviousSurvives(&env, root.str());
}

TEST(CheckpointFaultTest, FullDiskDuringShardWrite) {
  TempDir root;
  FaultInjectionEnv env(Env::Default());
  ASSERT_TRUE(SaveAndCommit(&env, root.str(), State(10)).ok());
  env.SetDiskSpace(6000);  // less than one shard file
  Status s = SaveAndCommit(&env, root.str(), State(20));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("No space left"), std::string::npos) << s;
  EXPECT_FALSE(HasTmpFiles(root.str()));
  ExpectPreviousSurvives(&env, root.str());
}

TEST(CheckpointFaultTest, FullDiskDuringManifestCommit) {
  TempDir root;
  FaultInjectionEnv env(Env::Default());
  ASSERT_TRUE(SaveAndCommit(&env, root.str(), State(10)).ok());
  WriterOptions o;
  o.env = &env;
  o.root = root.str();
  auto w = CheckpointWriter::Create(o);
  ASSERT_TRUE(w.ok());
  auto d = (*w)->Write({"job", 20, 1}, State(20).View());
  ASSERT_TRUE(d.ok());
  env.SetDiskSpace(10);
  auto c = CommitCheckpoint({&env, root.str(), 5}, {"job", 20, 1}, {}, {*d});
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted) << c.status();
  EXPECT_FALSE(fs::exists(JoinPath(DirOf(root.str(), 20), kManifestName)));
  EXPECT_FALSE(HasTmpFiles(root.str()));
  ExpectPreviousSurvives(&env, root.str());
}

TEST(CheckpointFaultTest, PowerCutBetweenShardWriteAndRename) {
  TempDir root;
  FaultInjectionEnv env(Env::Default());
  ASSERT_TRUE(SaveAndCommit(&env, root.str(), State(10)).ok());
  env.CutPowerBeforeNthRename(1);
  Status s = SaveAndCommit(&env, root.str(), State(20));
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
  EXPECT_TRUE(env.power_cut());
  ExpectPreviousSurvives(&env, root.str());
}

TEST(CheckpointFaultTest, PowerCutBetweenManifestWriteAndRename) {
  TempDir root;
  FaultInjectionEnv env(Env::Default());
  ASSERT_TRUE(SaveAndCommit(&env, root.str(), State(10)).ok());
  env.CutPowerBeforeNthRename(2);  // the shard's rename happens, the manifest's does not
  Status s = SaveAndCommit(&env, root.str(), State(20));
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find(kManifestName), std::string::npos) << s;
  ExpectPreviousSurvives(&env, root.str());
}

TEST(CheckpointFaultTest, PowerLossDropsUnsyncedData) {
  // The seam itself: unsynced appends vanish, synced ones stay.
  TempDir root;
  FaultInjectionEnv env(Env::Default());
  const std::string p = JoinPath(root.str(), "f");
  auto f = env.NewWritableFile(p);
  ASSERT_TRUE(f.ok());
  std::string a(100, 'a'), b(50, 'b');
  ASSERT_TRUE((*f)->Append(AsBytes(a)).ok());
  ASSERT_TRUE((*f)->Sync().ok());
  ASSERT_TRUE(env.SyncDir(root.str()).ok());
  ASSERT_TRUE((*f)->Append(AsBytes(b)).ok());
  ASSERT_TRUE((*f)->Close().ok());
  ASSERT_TRUE(env.SimulatePowerLoss().ok());
  EXPECT_EQ(fs::file_size(p), 100u);
  // A file whose directory was never synced disappears.
  auto g = env.NewWritableFile(JoinPath(root.str(), "g"));
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE((*g)->Append(AsBytes(a)).ok());
  ASSERT_TRUE((*g)->Sync().ok());
  ASSERT_TRUE(env.SimulatePowerLoss().ok());
  EXPECT_FALSE(fs::exists(JoinPath(root.str(), "g")));
}

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
  o.on_written = [&](const CheckpointId& id, const StatusOr<ShardDescriptor>& d) {
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

TEST(CkptCommandTest, ExitCodes) {
  TempDir root;
  ASSERT_TRUE(SaveAndCommit(Env::Default(), root.str(), State(5)).ok());
  ASSERT_TRUE(SaveAndCommit(Env::Default(), root.str(), State(6)).ok());
  testing::internal::CaptureStdout();
  EXPECT_EQ(launch::CkptCommand({"list", root.str()}), 0);
  std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("dp=1,pp=1,tp=1"), std::string::npos) << out;
  EXPECT_NE(out.find(CheckpointDirName(6, 1)), std::string::npos) << out;
  testing::internal::CaptureStdout();
  EXPECT_EQ(launch::CkptCommand({"inspect", root.str()}), 0);
  out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("counts int64 [7] sharding=replicated"), std::string::npos) << out;
  EXPECT_NE(out.find("step 6"), std::string::npos) << out;
  testing::internal::CaptureStdout();
  EXPECT_EQ(launch::CkptCommand({"verify", root.str()}), 0);
  testing::internal::GetCapturedStdout();
  EXPECT_EQ(launch::CkptCommand({"bogus", root.str()}), 2);
  EXPECT_EQ(launch::CkptCommand({"verify"}), 2);
  EXPECT_EQ(launch::CkptCommand({"verify", root.str() + "/nonexistent"}), 1);
  EXPECT_EQ(launch::CkptCommand({"inspect", root.str() + "/nonexistent"}), 1);
  FlipByte(JoinPath(DirOf(root.str(), 5), "shard-00000.bin"), 4100);
  testing::internal::CaptureStdout();
  EXPECT_EQ(launch::CkptCommand({"verify", root.str()}), 1);
  out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("shard-00000.bin"), std::string::npos) << out;
  EXPECT_NE(out.find("checksum mismatch"), std::string::npos) << out;
}

}  // namespace
}  // namespace elastra::checkpoint
