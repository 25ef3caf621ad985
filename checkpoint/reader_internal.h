// What reader.cc (CheckpointReader) and load.cc (the loads) share. Private to checkpoint/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace elastra::checkpoint::internal {

// The bytes of one unit of work when a load or a verification shares a region among threads.
inline constexpr uint64_t kLoadBlockBytes = 16ull << 20;

// A shape for messages: "[2,3]".
std::string ShapeText(const std::vector<int64_t>& shape);

}  // namespace elastra::checkpoint::internal
