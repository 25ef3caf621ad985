// Fuzz target: loading a checkpoint from disk (checkpoint/reader over checkpoint/format): the
// manifest, the shard files' headers and sizes, the region and chunk arithmetic, the partial reads
// a rank does for its own boxes, and the fallback over the committed checkpoints. The checkpoint
// lies in an in-memory filesystem at /ckpt/ckpt-000000000010-g000002.
//
// Input: byte 0: bit 0 takes the MANIFEST as it is (else its payload is wrapped in a valid frame
// here), bit 1 makes each shard header's checksum right. Then sections separated by "%%%%": the
// MANIFEST (or its payload), then shard-00000.bin, shard-00001.bin, ...
#include <string>
#include <vector>

#include "checkpoint/reader.h"
#include "tests/fuzz/checkpoint_frame.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/memory_env.h"

namespace elastra::fuzz {
namespace {

constexpr char kRoot[] = "/ckpt";
constexpr char kDir[] = "/ckpt/ckpt-000000000010-g000002";
// Regions larger than this are not read (the target's memory, not the reader's, is the bound).
constexpr uint64_t kMaxReadBytes = 1 << 20;
constexpr size_t kMaxShardFiles = 8;

// A box inside `shape` that cuts every dimension, so reads straddle the stored regions.
checkpoint::Box InnerBox(const std::vector<int64_t>& shape) {
  checkpoint::Box b;
  for (int64_t d : shape) {
    b.begin.push_back(d / 3);
    b.end.push_back(d - d / 4);
  }
  return b;
}

void Exercise(MemoryEnv* env) {
  std::vector<std::string> faults;
  (void)checkpoint::ListCheckpoints(env, kRoot, &faults);
  auto reader = checkpoint::CheckpointReader::Open(env, kDir);
  if (!reader.ok()) return;
  (void)(*reader)->VerifyAll();
  std::vector<checkpoint::RegionRequest> requests;
  for (const auto& t : (*reader)->manifest().tensors) {
    const uint64_t esize = checkpoint::ElementSize(t.dtype);
    for (const checkpoint::Box& box : {checkpoint::Box::Whole(t.shape), InnerBox(t.shape)}) {
      const uint64_t bytes = box.volume() * esize;
      if (bytes > kMaxReadBytes) continue;
      std::vector<std::byte> out(bytes);
      (void)(*reader)->ReadRegion(t.name, box, out);
    }
    // A ZeRO-style flat range of a 2-D tensor, as a rank loads it.
    const checkpoint::Box whole = checkpoint::Box::Whole(t.shape);
    if (t.shape.size() == 2 && whole.volume() * esize <= kMaxReadBytes && whole.volume() > 2) {
      checkpoint::RegionRequest q;
      q.tensor = t.name;
      q.pieces = checkpoint::FlatRangePieces(whole, 1, static_cast<int64_t>(whole.volume()) - 1);
      q.shape = t.shape;
      q.dtype = static_cast<DataType>(t.dtype);
      requests.push_back(std::move(q));
    }
  }
  (void)checkpoint::LoadCheckpoint(env, kDir, requests, /*threads=*/1);
  (void)checkpoint::LoadLatest(env, kRoot, requests, /*threads=*/1);
}

}  // namespace
}  // namespace elastra::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace elastra;
  fuzz::QuietLogs();
  fuzz::Input in(data, size);
  const uint8_t flags = in.Byte();
  fuzz::MemoryEnv env;
  const std::string_view manifest = in.Until("%%%%");
  env.SetFile(
      std::string(fuzz::kDir) + "/MANIFEST",
      (flags & 1) ? std::string(manifest) : fuzz::CheckpointFrame(fuzz::kManifestMagic, manifest));
  for (size_t i = 0; !in.empty() && i < fuzz::kMaxShardFiles; ++i) {
    std::string shard(in.Until("%%%%"));
    if (flags & 2) fuzz::FixShardHeaderChecksum(&shard);
    env.SetFile(std::string(fuzz::kDir) + "/" + checkpoint::ShardFileName(static_cast<int>(i)),
                std::move(shard));
  }
  fuzz::Exercise(&env);
  return 0;
}
