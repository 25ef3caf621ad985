// Fuzz target: the wire protocol (common/codec, common/messages). Every byte a coordinator,
// worker, agent or admin client receives goes through DecodeEnvelope and then DecodePayload of
// the struct its type names; a frame that decodes must encode back to the same bytes (the
// encoding is canonical, so nothing is lost or invented in between).
//
// Input: byte 0 even: the rest is one frame (an Envelope), whose payload is decoded as its type
// says. Byte 0 odd: byte 1 picks a message type (modulo their number) and the rest is a payload
// of that type, so the payload decoders are reached without an envelope around them.
#include <iterator>
#include <string>
#include <string_view>

#include "protocol/codec.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/payloads.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace elastra;
  fuzz::QuietLogs();
  fuzz::Input in(data, size);
  if (in.Byte() % 2 == 1) {
    const auto type = fuzz::kMessageTypes[in.Byte() % std::size(fuzz::kMessageTypes)];
    fuzz::DecodePayloadOf(type, in.Rest());
    return 0;
  }
  const std::string_view frame = in.Rest();
  auto envelope = proto::DecodeEnvelope(frame);
  if (!envelope.ok()) return 0;
  const std::string again = proto::EncodeEnvelope(*envelope);
  CHECK(again == frame) << "a frame of " << frame.size() << " bytes encodes back to "
                        << again.size() << " different bytes";
  CHECK(proto::IsKnownType(static_cast<uint16_t>(envelope->type)));
  (void)proto::TypeName(envelope->type);
  fuzz::DecodePayloadOf(envelope->type, envelope->payload);
  return 0;
}
