// The frame around a checkpoint manifest or shard descriptor (checkpoint/format.cc,
// docs/checkpoints.md): 8-byte magic, version, reserved, payload size, XXH3-64 of the payload.
// The fuzz targets wrap their payload bytes in a valid frame, so the mutations reach the decoder
// and the validation instead of stopping at the checksum.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "checkpoint/format.h"

namespace elastra::fuzz {

inline constexpr char kManifestMagic[] = "ELCKMAN1";
inline constexpr char kDescriptorMagic[] = "ELCKSHD1";

inline std::string CheckpointFrame(const char* magic, std::string_view payload) {
  std::string out(magic, 8);
  auto put = [&](auto v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(uint32_t{checkpoint::kFormatVersion});
  put(uint32_t{0});
  put(uint64_t{payload.size()});
  put(checkpoint::Checksum(payload.data(), payload.size()));
  out.append(payload);
  return out;
}

// A shard header (the first 40 bytes of the 4 KiB) with its checksum made right.
inline void FixShardHeaderChecksum(std::string* file) {
  if (file->size() < 40) return;
  const uint64_t sum = checkpoint::Checksum(file->data(), 32);
  file->replace(32, 8, reinterpret_cast<const char*>(&sum), 8);
}

}  // namespace elastra::fuzz
