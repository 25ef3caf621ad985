// What the two files of StreamMesh share (stream_mesh.cc: connections; stream_mesh_exchange.cc:
// the transfers): the wire's constants and the private structs. Private to the Gloo backend.
#ifndef ELASTRA_COLLECTIVES_GLOO_STREAM_MESH_INTERNAL_H_
#define ELASTRA_COLLECTIVES_GLOO_STREAM_MESH_INTERNAL_H_

#include <limits.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/gloo/stream_mesh.h"

namespace elastra {
namespace stream_mesh_internal {

inline constexpr uint32_t kHelloMagic = 0x454c5348;   // "ELSH"
inline constexpr uint32_t kHeaderMagic = 0x454c5358;  // "ELSX"
inline constexpr size_t kHelloBytes = 16;
inline constexpr size_t kHeaderBytes = 16;
// Segments per sendmsg/recvmsg.
inline constexpr size_t kMaxIov = IOV_MAX;

}  // namespace stream_mesh_internal

// One direction of one peer in one call: its header, then its segments.
struct StreamMesh::Flow {
  int peer = -1;
  bool send = false;
  uint64_t bytes = 0;  // of the payload
  uint8_t header[stream_mesh_internal::kHeaderBytes];
  size_t header_done = 0;
  std::vector<iovec> iov;  // the payload's segments, cut as they are consumed
  size_t first = 0;        // first segment not yet consumed
  bool done() const {
    return header_done == stream_mesh_internal::kHeaderBytes && first == iov.size();
  }
};

// An accepted connection whose hello is not read yet.
struct StreamMesh::Pending {
  int fd = -1;
  bool local = false;  // accepted on the Unix socket
  uint8_t hello[stream_mesh_internal::kHelloBytes];
  size_t got = 0;
};

}  // namespace elastra

#endif  // ELASTRA_COLLECTIVES_GLOO_STREAM_MESH_INTERNAL_H_
