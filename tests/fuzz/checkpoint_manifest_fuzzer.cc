// Fuzz target: the checkpoint's small frames (checkpoint/format): the MANIFEST a loader reads from
// disk, the shard descriptor a worker sends the committer inside CheckpointWritten, and the 4 KiB
// shard header. A manifest that decodes passes ValidateManifest, and its encoding decodes again.
//
// Input: byte 0 picks what the rest is: 0 a whole MANIFEST file, 1 a manifest payload (wrapped in
// a valid frame here), 2 a whole descriptor, 3 a descriptor payload (wrapped), 4 a shard header,
// 5 a shard header whose checksum is made right here.
#include <string>

#include "checkpoint/format.h"
#include "tests/fuzz/checkpoint_frame.h"
#include "tests/fuzz/fuzz_util.h"

namespace elastra::fuzz {
namespace {

void Manifest(std::string_view file) {
  auto m = checkpoint::DecodeManifest(checkpoint::AsBytes(std::string(file)), "MANIFEST");
  if (!m.ok()) return;
  CHECK_OK(checkpoint::ValidateManifest(*m));
  const std::string again = checkpoint::EncodeManifest(*m);
  auto m2 = checkpoint::DecodeManifest(checkpoint::AsBytes(again), "MANIFEST");
  CHECK(m2.ok()) << "a manifest that decoded does not decode after encoding: " << m2.status();
  CHECK(checkpoint::EncodeManifest(*m2) == again);
  (void)m->total_file_bytes();
  for (const auto& t : m->tensors) {
    CHECK(m->FindTensor(t.name) == &t);
    for (const auto& r : t.regions) {
      (void)r.box.ToString();
      (void)checkpoint::Intersect(r.box, checkpoint::Box::Whole(t.shape)).volume();
    }
  }
}

void Descriptor(std::string_view file) {
  auto d = checkpoint::DecodeShardDescriptor(checkpoint::AsBytes(std::string(file)));
  if (!d.ok()) return;
  const std::string again = checkpoint::EncodeShardDescriptor(*d);
  CHECK(checkpoint::DecodeShardDescriptor(checkpoint::AsBytes(again)).ok());
}

void Header(std::string file) {
  auto h = checkpoint::DecodeShardHeader(checkpoint::AsBytes(file), "shard-00000.bin");
  if (!h.ok()) return;
  std::string again(checkpoint::kShardHeaderBytes, '\0');
  checkpoint::EncodeShardHeader(*h, reinterpret_cast<std::byte*>(again.data()));
  auto h2 = checkpoint::DecodeShardHeader(checkpoint::AsBytes(again), "shard-00000.bin");
  CHECK(h2.ok() && h2->rank == h->rank && h2->step == h->step && h2->generation == h->generation);
}

}  // namespace
}  // namespace elastra::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace elastra::fuzz;
  QuietLogs();
  Input in(data, size);
  const uint8_t mode = in.Byte() % 6;
  const std::string_view rest = in.Rest();
  switch (mode) {
    case 0:
      Manifest(rest);
      break;
    case 1:
      Manifest(CheckpointFrame(kManifestMagic, rest));
      break;
    case 2:
      Descriptor(rest);
      break;
    case 3:
      Descriptor(CheckpointFrame(kDescriptorMagic, rest));
      break;
    case 4:
      Header(std::string(rest));
      break;
    case 5: {
      std::string header(rest);
      FixShardHeaderChecksum(&header);
      Header(std::move(header));
      break;
    }
  }
  return 0;
}
