// Encoding and decoding of Envelopes and payloads. Decoding validates everything before it
// allocates and never throws: bad bytes come back as a Status (kCorrupt for malformed or truncated
// frames, kProtocolMismatch for a wrong magic or version, kInvalidArgument for an unknown type or
// an oversized frame). Thread-safe (no shared state).
#pragma once

#include <cereal/archives/binary.hpp>
#include <cstring>
#include <string>
#include <string_view>

#include "common/bounded_archive.h"
#include "protocol/messages.h"
#include "common/string_archive.h"
#include "elastra/status.h"

namespace elastra::proto {

// Longest job name or sender id accepted in an envelope.
inline constexpr size_t kMaxNameBytes = 256;

std::string EncodeEnvelope(const Envelope& envelope);
// The envelope's fields up to its payload through `ar` into `frame`, then 8 bytes for the
// payload's length tag, whose offset it returns (MakeFrame fills it once the payload is in).
size_t EncodeEnvelopeHead(MessageType type, const std::string& job, uint64_t generation,
                          const std::string& sender, uint64_t request_id, StringOutputArchive* ar,
                          std::string* frame);
// The bytes EncodeEnvelopeHead writes for `job` and `sender`, its length tag included.
constexpr size_t EnvelopeHeadBytes(size_t job_bytes, size_t sender_bytes) {
  // magic, version, type, job (size tag + bytes), generation, sender (likewise), request id,
  // the payload's length tag.
  return sizeof(kMagic) + sizeof(kProtocolVersion) + sizeof(uint16_t) + sizeof(uint64_t) +
         job_bytes + sizeof(uint64_t) + sizeof(uint64_t) + sender_bytes + sizeof(uint64_t) +
         sizeof(uint64_t);
}
StatusOr<Envelope> DecodeEnvelope(std::string_view frame);

template <class T>
std::string EncodePayload(const T& payload) {
  std::string out;
  StringOutputArchive ar(&out);
  ar(payload);
  return out;
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
  // EncodeEnvelope's bytes with the payload encoded in place behind its length tag, which is
  // filled in after: one string, no copy of the payload.
  std::string frame;
  StringOutputArchive ar(&frame);
  const size_t length_at = EncodeEnvelopeHead(type, job, generation, sender, request_id, &ar, &frame);
  ar(payload);
  const uint64_t length = frame.size() - length_at - sizeof(uint64_t);
  std::memcpy(frame.data() + length_at, &length, sizeof(length));
  return frame;
}

// A payload's shared fields (T::SerializeShared), encoded once for many recipients.
template <class T>
std::string EncodeShared(const T& payload) {
  std::string out;
  StringOutputArchive ar(&out);
  const_cast<T&>(payload).SerializeShared(ar);  // writes only: cereal's output convention
  return out;
}

// MakeFrame's bytes for a payload whose shared fields are already encoded: `shared` (from
// EncodeShared of a payload with the same shared fields) is copied in, and only `payload`'s own
// fields (T::SerializeOwn) are encoded. A change's NewGenerations share most of their bytes.
// The own fields go to `*scratch` first (its capacity kept from call to call), so the frame is
// allocated once at its size instead of growing through the appends.
template <class T>
std::string MakeFrameShared(MessageType type, std::string_view shared, const T& payload,
                            const std::string& job, uint64_t generation, const std::string& sender,
                            uint64_t request_id, std::string* scratch) {
  scratch->clear();
  StringOutputArchive own(scratch);
  const_cast<T&>(payload).SerializeOwn(own);  // writes only: cereal's output convention
  std::string frame;
  frame.reserve(EnvelopeHeadBytes(job.size(), sender.size()) + shared.size() + scratch->size());
  StringOutputArchive ar(&frame);
  const size_t length_at = EncodeEnvelopeHead(type, job, generation, sender, request_id, &ar, &frame);
  frame.append(shared);
  frame.append(*scratch);
  const uint64_t length = frame.size() - length_at - sizeof(uint64_t);
  std::memcpy(frame.data() + length_at, &length, sizeof(length));
  return frame;
}

}  // namespace elastra::proto
