// Small helpers of the collectives' own wire protocols (collectives/gloo/stream_mesh.cc,
// collectives/record_server.cc): fixed-width values in a byte buffer, in this machine's byte
// order (both ends of a job run one build on one architecture), and errno as text.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

namespace elastra::wire {

template <class T>
inline void Put(uint8_t* at, T v) {
  std::memcpy(at, &v, sizeof(T));
}

template <class T>
inline T Get(const uint8_t* at) {
  T v;
  std::memcpy(&v, at, sizeof(T));
  return v;
}

// "what: <strerror(errno)>".
inline std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace elastra::wire
