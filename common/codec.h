// Encoding and decoding of Envelopes and payloads. Decoding validates everything before it
// allocates and never throws: bad bytes come back as a Status (kCorrupt for malformed or truncated
// frames, kProtocolMismatch for a wrong magic or version, kInvalidArgument for an unknown type or
// an oversized frame). Thread-safe (no shared state).
#pragma once

#include <cereal/archives/binary.hpp>
#include <sstream>
#include <string>
#include <string_view>

#include "common/bounded_archive.h"
#include "common/messages.h"
#include "elastra/status.h"

namespace elastra::proto {

// Longest job name or sender id accepted in an envelope.
inline constexpr size_t kMaxNameBytes = 256;

std::string EncodeEnvelope(const Envelope& envelope);
StatusOr<Envelope> DecodeEnvelope(std::string_view frame);

template <class T>
std::string EncodePayload(const T& payload) {
  std::ostringstream os(std::ios::binary);
  {
    cereal::BinaryOutputArchive ar(os);
    ar(payload);
  }
  return std::move(os).str();
}

template <class T>
StatusOr<T> DecodePayload(std::string_view bytes) {
  T out;
  try {
    BoundedInputArchive ar(bytes.data(), bytes.size());
    ar(out);
    if (ar.remaining() != 0) {
      return CorruptError("payload has " + std::to_string(ar.remaining()) + " trailing bytes");
    }
  } catch (const std::exception& e) {
    return CorruptError(std::string("malformed payload: ") + e.what());
  }
  return out;
}

// Builds a frame in one call.
template <class T>
std::string MakeFrame(MessageType type, const T& payload, const std::string& job,
                      uint64_t generation, const std::string& sender, uint64_t request_id) {
  Envelope e;
  e.type = type;
  e.job = job;
  e.generation = generation;
  e.sender = sender;
  e.request_id = request_id;
  e.payload = EncodePayload(payload);
  return EncodeEnvelope(e);
}

}  // namespace elastra::proto
