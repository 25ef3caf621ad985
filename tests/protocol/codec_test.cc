// The codec: every message round-trips, and no byte string can crash, hang or over-allocate the
// decoder.
#include "protocol/codec.h"
#include "protocol/status_json.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <sstream>

namespace elastra::proto {
namespace {

// What cereal's own binary archive writes over a std::ostream: the bytes the codec wrote before
// StringOutputArchive, which must stay the same.
template <class T>
std::string CerealBinary(const T& value) {
  std::ostringstream os(std::ios::binary);
  {
    cereal::BinaryOutputArchive ar(os);
    ar(value);
  }
  return std::move(os).str();
}

template <class T>
void ExpectRoundTrip(MessageType type, const T& payload) {
  std::string frame = MakeFrame(type, payload, "job-a", 7, "w3", 42);
  // The payload's bytes are cereal's binary archive's, and the frame is EncodeEnvelope's of it.
  EXPECT_EQ(EncodePayload(payload), CerealBinary(payload)) << TypeName(type);
  Envelope whole;
  whole.type = type;
  whole.job = "job-a";
  whole.generation = 7;
  whole.sender = "w3";
  whole.request_id = 42;
  whole.payload = EncodePayload(payload);
  EXPECT_EQ(frame, EncodeEnvelope(whole)) << TypeName(type);
  auto env = DecodeEnvelope(frame);
  ASSERT_TRUE(env.ok()) << TypeName(type) << ": " << env.status();
  EXPECT_EQ(env->type, type);
  EXPECT_EQ(env->job, "job-a");
  EXPECT_EQ(env->generation, 7u);
  EXPECT_EQ(env->sender, "w3");
  EXPECT_EQ(env->request_id, 42u);
  auto back = DecodePayload<T>(env->payload);
  ASSERT_TRUE(back.ok()) << TypeName(type) << ": " << back.status();
  // Byte equality of the re-encoding is field equality for these plain structs.
  EXPECT_EQ(EncodePayload(*back), EncodePayload(payload)) << TypeName(type);
  // Every strict prefix of the frame is refused (truncation at every length), never crashes.
  for (size_t n = 0; n < frame.size(); ++n) {
    EXPECT_FALSE(DecodeEnvelope(std::string_view(frame.data(), n)).ok()) << "prefix " << n;
  }
  // Trailing bytes after a valid frame are refused.
  auto trailing = DecodeEnvelope(frame + "x");
  EXPECT_EQ(trailing.status().code(), StatusCode::kCorrupt);
}

NewGeneration SampleGeneration() {
  NewGeneration g;
  g.generation = 5;
  g.layout = Layout{2, 1, 1};
  for (int r = 0; r < 2; ++r) {
    Member m;
    m.worker_id = "w" + std::to_string(r);
    m.host = "host" + std::to_string(r);
    m.device = r;
    m.coords = CoordinatesOf(g.layout, r);
    m.has_state = r == 0;
    m.rank = r;
    m.worker = r;
    g.members.push_back(m);
  }
  g.prev_members = {g.members[0]};
  g.scalars_source = 0;
  g.move.plan = MovePlan::kMove;
  g.move.workers = 2;
  g.move.tensors = 1;
  g.move.transfers.push_back({0, 0, 1, 0, 4, 0, 8});
  g.nccl = {4, 2, true, false, {1}};
  g.restore_step = 17;
  g.source_rank = 1;
  g.leave = true;
  g.kv_prefix = "g5/";
  g.reason = GenerationReason::kResize;
  g.build_peers = std::string("\x7f\0\0\x01\x10\x00", 6);
  return g;
}

JobStatus SampleStatus() {
  JobStatus s;
  s.job = "j";
  s.state = JobState::kRecovering;
  s.generation = 7;
  s.layout = Layout{2, 1, 2};
  s.step = 120;
  s.workers.push_back(WorkerStatus{"w1", "node-a", 42, 0, WorkerState::kMember, 3, 120, 15});
  s.workers.push_back(WorkerStatus{"w2", "node-b", 43, -1, WorkerState::kLost, -1, 99, -1});
  s.history.push_back(
      GenerationRecord{7, GenerationReason::kFailure, {"w1"}, Layout{1, 1, 1}, 5, 1, 2, 3});
  s.agents.push_back(AgentStatus{"agent-a", "node-a", 8});
  s.hosts.push_back(HostStatus{"node-a", "198.18.0.10", 8, 2, 1, HostState::kDraining, 40});
  s.target_workers = 6;
  s.malformed_frames = 2;
  s.stale_messages = 1;
  s.resize_pending = true;
  s.resize_workers = 4;
  s.resize_waiting_for_workers = true;
  s.spares_target = 2;
  return s;
}

TEST(CodecTest, EveryMessageRoundTrips) {
  ExpectRoundTrip(MessageType::kError, ErrorReply{7, "bad size"});
  ExpectRoundTrip(MessageType::kAck, Ack{});
  ExpectRoundTrip(MessageType::kJoin, JoinRequest{"w1", "node-a", 3, 4242});
  JoinRequest serving{"w2", "node-b", -1, 7};
  serving.rendezvous = std::string("\x0a\0\0\x02\x75\x30", 6);
  ExpectRoundTrip(MessageType::kJoin, serving);
  ExpectRoundTrip(MessageType::kJoinReply, JoinReply{"w1", 4, 200, 1500});
  ExpectRoundTrip(MessageType::kLeave, LeaveRequest{LeaveReason::kQuit, "parked: job finished"});
  ExpectRoundTrip(MessageType::kHeartbeat, Heartbeat{99});
  ExpectRoundTrip(MessageType::kPauseRequest, PauseRequest{3, GenerationReason::kResize});
  ExpectRoundTrip(MessageType::kRecoverRequest, RecoverRequest{4, {"w1", "w7"}});
  ExpectRoundTrip(MessageType::kPaused, PausedReport{4, 12, {8, 10, 12}, true});
  ExpectRoundTrip(MessageType::kNewGeneration, SampleGeneration());
  ExpectRoundTrip(MessageType::kGenerationReady, GenerationReady{5, 1.5, 2.25, 1 << 20});
  ExpectRoundTrip(MessageType::kFailureReport, FailureReport{5, 2, "peer lost"});
  ExpectRoundTrip(MessageType::kKvSet, KvSetRequest{"g1/k", std::string("\0v\xff", 3)});
  ExpectRoundTrip(MessageType::kKvGet, KvGetRequest{"g1/k", 500});
  ExpectRoundTrip(MessageType::kKvWait, KvWaitRequest{{"a", "b", "c"}, 100});
  ExpectRoundTrip(MessageType::kKvAdd, KvAddRequest{"n", -3});
  ExpectRoundTrip(MessageType::kKvReply, KvReply{"value", 12});
  ExpectRoundTrip(MessageType::kKvSetAndGet, KvSetAndGetRequest{{"a"}, {"1"}, {"b", "c"}, 100});
  ExpectRoundTrip(MessageType::kKvValues, KvValuesReply{{"x", ""}});
  ExpectRoundTrip(MessageType::kResize, ResizeRequest{4, true, Layout{4, 1, 1}, true});
  ExpectRoundTrip(MessageType::kResize, ResizeRequest{0, false, Layout{}, false, 3});
  ResizeReply rr;
  rr.phase = ResizePhase::kDone;
  rr.generation = 3;
  rr.workers = 4;
  rr.layout = Layout{4, 1, 1};
  rr.downtime_ms = 1.25;
  rr.agreement_ms = 0.5;
  rr.rebuild_ms = 0.25;
  rr.transfer_ms = 0.125;
  rr.total_ms = 9;
  rr.message = "ok";
  ExpectRoundTrip(MessageType::kResizeReply, rr);
  ExpectRoundTrip(MessageType::kStatusRequest, StatusRequest{});
  ExpectRoundTrip(MessageType::kStatusReply, StatusReply{SampleStatus()});
  ExpectRoundTrip(MessageType::kAgentRegister, AgentRegister{"node-a", 8, "198.18.0.10", 2});
  ExpectRoundTrip(MessageType::kDrain, DrainRequest{"node-a", true});
  ExpectRoundTrip(MessageType::kHeartbeatAck, HeartbeatAck{7});
  ExpectRoundTrip(MessageType::kSpawnRequest, SpawnRequest{{"w4", "w5"}});
  ExpectRoundTrip(MessageType::kProcessExited, ProcessExited{"w4", 0, 9});
  ExpectRoundTrip(MessageType::kShutdown, Shutdown{1, "failed"});
}

// Writes the envelope header by hand so that tests can put any number in any field.
std::string Header(uint32_t magic, uint16_t version, uint16_t type) {
  std::string out;
  out.append(reinterpret_cast<const char*>(&magic), 4);
  out.append(reinterpret_cast<const char*>(&version), 2);
  out.append(reinterpret_cast<const char*>(&type), 2);
  return out;
}

std::string U64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }

// MakeFrameShared sizes its frame from EnvelopeHeadBytes: it must be the head's length exactly.
TEST(CodecTest, EnvelopeHeadBytesIsTheHeadsLength) {
  for (const std::string& job : {std::string(), std::string("job"), std::string(300, 'j')}) {
    for (const std::string& sender : {std::string(), std::string("coordinator")}) {
      const std::string payload = EncodePayload(SampleGeneration());
      const std::string frame =
          MakeFrame(MessageType::kNewGeneration, SampleGeneration(), job, 3, sender, 9);
      EXPECT_EQ(EnvelopeHeadBytes(job.size(), sender.size()), frame.size() - payload.size())
          << "job " << job.size() << " bytes, sender " << sender;
    }
  }
}

// The coordinator encodes a change's shared NewGeneration fields once (EncodeShared) and each
// recipient's own behind them: the frame must be MakeFrame's, byte for byte, whatever the
// recipient's fields, and decode to the whole message.
TEST(CodecTest, ASharedPrefixFrameIsTheWholeMessagesFrame) {
  const NewGeneration shared_fields = SampleGeneration();
  const std::string shared = EncodeShared(shared_fields);
  NewGeneration mine = SampleGeneration();
  std::string scratch;  // one for every recipient, as the outbox keeps it: longest first
  for (int recipient = 2; recipient >= 0; --recipient) {
    mine.leave = recipient == 2;
    mine.members.resize(recipient == 1 ? 1 : 2);
    mine.move.transfers.push_back({recipient, 1, 0, 0, 2, 0, 3});
    mine.nccl.possible = recipient != 2;
    mine.nccl.exclude.assign(recipient, recipient);
    mine.build_peers = std::string(6 * recipient, 'p');
    const std::string frame = MakeFrameShared(MessageType::kNewGeneration, shared, mine, "job", 5,
                                              "coordinator", 0, &scratch);
    EXPECT_EQ(frame, MakeFrame(MessageType::kNewGeneration, mine, "job", 5, "coordinator", 0))
        << "recipient " << recipient;
    auto env = DecodeEnvelope(frame);
    ASSERT_TRUE(env.ok()) << env.status();
    auto back = DecodePayload<NewGeneration>(env->payload);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->leave, mine.leave);
    EXPECT_EQ(back->members.size(), mine.members.size());
    EXPECT_EQ(back->move.transfers.size(), mine.move.transfers.size());
    EXPECT_EQ(back->nccl.exclude, mine.nccl.exclude);
    EXPECT_EQ(back->nccl.from_world, shared_fields.nccl.from_world);
    EXPECT_EQ(back->build_peers, mine.build_peers);
    EXPECT_EQ(back->kv_prefix, "g5/");
    EXPECT_EQ(back->restore_step, 17);
  }
}

TEST(CodecTest, WrongMagicOrVersionIsProtocolMismatch) {
  std::string frame = MakeFrame(MessageType::kHeartbeat, Heartbeat{1}, "j", 1, "w", 0);
  std::string bad_magic = frame;
  bad_magic[0] ^= 0x55;
  EXPECT_EQ(DecodeEnvelope(bad_magic).status().code(), StatusCode::kProtocolMismatch);
  std::string bad_version = frame;
  bad_version[4] = static_cast<char>(kProtocolVersion + 1);
  EXPECT_EQ(DecodeEnvelope(bad_version).status().code(), StatusCode::kProtocolMismatch);
  EXPECT_NE(DecodeEnvelope(bad_version).status().message().find("version"), std::string::npos);
}

TEST(CodecTest, UnknownTypeIsInvalidArgument) {
  for (uint16_t type : {0, 2, 19, 99, 65535}) {
    std::string frame = Header(kMagic, kProtocolVersion, type) + U64(0) + U64(0) + U64(0) +
                        U64(0) + U64(0);
    auto env = DecodeEnvelope(frame);
    EXPECT_EQ(env.status().code(), StatusCode::kInvalidArgument) << type;
  }
}

TEST(CodecTest, HugeClaimedLengthInTinyFrameIsCorruptWithoutAllocating) {
  // A job name claiming 2^62 bytes in a 24-byte frame: refused before any allocation (an attempt
  // to allocate would throw bad_alloc or be killed; either way the test would not pass).
  for (uint64_t claimed : {uint64_t{1} << 62, uint64_t{1} << 40, uint64_t{1000}, ~uint64_t{0}}) {
    std::string frame = Header(kMagic, kProtocolVersion, 12) + U64(claimed) + "abcd";
    auto env = DecodeEnvelope(frame);
    EXPECT_EQ(env.status().code(), StatusCode::kCorrupt) << claimed;
  }
  // The same inside a payload: a vector of 2^50 strings.
  auto commits = DecodePayload<RecoverRequest>(U64(1) + U64(uint64_t{1} << 50));
  EXPECT_EQ(commits.status().code(), StatusCode::kCorrupt);
  auto many = DecodePayload<PausedReport>(U64(1) + U64(2) + U64(uint64_t{1} << 61));
  EXPECT_EQ(many.status().code(), StatusCode::kCorrupt);
}

TEST(CodecTest, APayloadOverAMillionBytesDecodes) {
  // Rank 0's first NewGeneration at 2,048 workers and 16 tensors lists 32,768 transfers: a 1.5 MB
  // payload, a string longer than the element cap of containers. It must decode (a byte of frame
  // is a byte of memory); only the frame bound applies.
  NewGeneration ng;
  ng.generation = 1;
  ng.move.plan = MovePlan::kMove;
  for (int32_t i = 0; i < 40000; ++i) ng.move.transfers.push_back({i % 16, 0, i / 16, 0, 8, 0, 8});
  const std::string frame = MakeFrame(MessageType::kNewGeneration, ng, "job", 1, "coordinator", 7);
  ASSERT_GT(frame.size(), kMaxDecodedElements);
  auto env = DecodeEnvelope(frame);
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  auto back = DecodePayload<NewGeneration>(env->payload);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->move.transfers.size(), ng.move.transfers.size());
  EXPECT_EQ(back->move.transfers.back().dst, 39999 / 16);
  // A container is still capped by its element count, whatever bytes are left: 2^20 + 1 empty
  // strings (8 bytes each in the frame, 32 bytes each once decoded).
  const uint64_t count = kMaxDecodedElements + 1;
  std::string payload = U64(1) + U64(count) + std::string(count * 8, '\0');
  auto many = DecodePayload<RecoverRequest>(payload);
  EXPECT_EQ(many.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(many.status().message().find("elements"), std::string::npos) << many.status().ToString();
}

TEST(CodecTest, OversizedFrameIsRefused) {
  std::string frame(kMaxFrameBytes + 1, 'x');
  EXPECT_EQ(DecodeEnvelope(frame).status().code(), StatusCode::kInvalidArgument);
}

TEST(CodecTest, OverlongNamesAreRefused) {
  Envelope e;
  e.type = MessageType::kHeartbeat;
  e.job = std::string(kMaxNameBytes + 1, 'j');
  EXPECT_EQ(DecodeEnvelope(EncodeEnvelope(e)).status().code(), StatusCode::kCorrupt);
  e.job = "j";
  e.sender = std::string(kMaxNameBytes + 1, 's');
  EXPECT_EQ(DecodeEnvelope(EncodeEnvelope(e)).status().code(), StatusCode::kCorrupt);
}

TEST(CodecTest, PayloadTrailingBytesAndTruncationAreCorrupt) {
  std::string payload = EncodePayload(JoinRequest{"w1", "h", 0, 1});
  EXPECT_EQ(DecodePayload<JoinRequest>(payload + "zz").status().code(), StatusCode::kCorrupt);
  for (size_t n = 0; n < payload.size(); ++n) {
    EXPECT_EQ(DecodePayload<JoinRequest>(payload.substr(0, n)).status().code(),
              StatusCode::kCorrupt)
        << n;
  }
}

// Hot spares (protocol 10): a resize's spares and the status's spares_target are on the wire,
// last in their messages.
TEST(CodecTest, TheSparesTravel) {
  auto resize = DecodePayload<ResizeRequest>(EncodePayload(ResizeRequest{0, false, {}, false, 3}));
  ASSERT_TRUE(resize.ok()) << resize.status();
  EXPECT_EQ(resize->spares, 3);
  EXPECT_EQ(ResizeRequest{}.spares, -1) << "unchanged unless named";
  auto status = DecodePayload<JobStatus>(EncodePayload(SampleStatus()));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->spares_target, 2);
}

TEST(CodecTest, EnumOutOfRangeIsCorrupt) {
  // Each enum is one byte on the wire: a byte the enum does not have is a malformed payload.
  std::string payload = EncodePayload(PauseRequest{3, GenerationReason::kResize});
  payload.back() = static_cast<char>(static_cast<uint8_t>(kLastEnumerator<GenerationReason>) + 1);
  EXPECT_EQ(DecodePayload<PauseRequest>(payload).status().code(), StatusCode::kCorrupt);
  payload.back() = static_cast<char>(0xff);
  EXPECT_EQ(DecodePayload<PauseRequest>(payload).status().code(), StatusCode::kCorrupt);
  ResizeReply rr;
  std::string reply = EncodePayload(rr);
  reply[0] = static_cast<char>(static_cast<uint8_t>(kLastEnumerator<ResizePhase>) + 1);
  EXPECT_EQ(DecodePayload<ResizeReply>(reply).status().code(), StatusCode::kCorrupt);
  for (int v = 0; v <= static_cast<int>(kLastEnumerator<JobState>); ++v) {
    JobStatus s;
    s.state = static_cast<JobState>(v);
    auto back = DecodePayload<JobStatus>(EncodePayload(s));
    ASSERT_TRUE(back.ok()) << v;
    EXPECT_EQ(back->state, s.state);
  }
}

TEST(CodecTest, BoolOtherThanZeroOrOneIsCorrupt) {
  // A bool is one byte on the wire; copied into a bool, a byte such as 42 would be a value the type
  // cannot hold (found by the coordinator_core fuzz target: ResizeRequest::has_layout).
  ResizeRequest r;
  r.has_layout = true;
  std::string payload = EncodePayload(r);
  ASSERT_EQ(payload[sizeof(int32_t)], 1);
  payload[sizeof(int32_t)] = 42;
  auto decoded = DecodePayload<ResizeRequest>(payload);
  EXPECT_EQ(decoded.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(decoded.status().message().find("neither 0 nor 1"), std::string::npos)
      << decoded.status();
  payload[sizeof(int32_t)] = 0;
  ASSERT_TRUE(DecodePayload<ResizeRequest>(payload).ok());
  EXPECT_FALSE(DecodePayload<ResizeRequest>(payload)->has_layout);
}

TEST(CodecTest, StatusJsonReplacesBytesThatAreNotUtf8) {
  // Worker ids and host names come from the wire; `elastra status --json` and `elastra run`'s
  // status.json must print them, not throw (found by the codec fuzz target).
  JobStatus s;
  s.job = "job";
  WorkerStatus w;
  w.id = std::string("w\x9e\xff", 3);
  w.host = "h\xc3";
  s.workers.push_back(w);
  std::string json;
  ASSERT_NO_THROW(json = StatusJson(s));
  EXPECT_NE(json.find("w\xef\xbf\xbd"), std::string::npos) << json;  // U+FFFD
}

TEST(CodecTest, EnumNamesRoundTrip) {
  for (int v = 0; v <= static_cast<int>(kLastEnumerator<GenerationReason>); ++v) {
    GenerationReason r = GenerationReason::kStart, back = GenerationReason::kStart;
    r = static_cast<GenerationReason>(v);
    ASSERT_TRUE(FromString(ToString(r), &back)) << v;
    EXPECT_EQ(back, r);
  }
  for (int v = 0; v <= static_cast<int>(kLastEnumerator<WorkerState>); ++v) {
    WorkerState w = static_cast<WorkerState>(v), back = WorkerState::kStandby;
    ASSERT_TRUE(FromString(ToString(w), &back)) << v;
    EXPECT_EQ(back, w);
  }
  GenerationReason unchanged = GenerationReason::kFailure;
  EXPECT_FALSE(FromString("growth", &unchanged));
  EXPECT_EQ(unchanged, GenerationReason::kFailure);
}

// Garbage gets a clear error, never a crash: random bytes never decode (they would need the
// magic), and frames with flipped bytes either fail with a decoding error or decode to an
// envelope whose payload again decodes or fails cleanly.
TEST(CodecTest, RandomGarbageNeverDecodesOrCrashes) {
  std::mt19937_64 rng(1234);
  std::string valid = MakeFrame(MessageType::kNewGeneration, SampleGeneration(), "job", 2, "w", 9);
  auto is_decoding_error = [](StatusCode c) {
    return c == StatusCode::kCorrupt || c == StatusCode::kInvalidArgument ||
           c == StatusCode::kProtocolMismatch;
  };
  for (int i = 0; i < 3000; ++i) {
    std::string frame;
    const bool random = i % 2 == 0;
    if (random) {
      frame.resize(rng() % 200);
      for (auto& c : frame) c = static_cast<char>(rng());
      if (frame.size() >= 4) std::memset(frame.data(), 0, 1);  // never the magic by chance
    } else {
      // Valid header, flipped bytes after it: exercises the length checks deep in the frame.
      frame = valid;
      for (int k = 0; k < 3; ++k) {
        size_t pos = 8 + rng() % (frame.size() - 8);
        frame[pos] = static_cast<char>(rng());
      }
    }
    auto env = DecodeEnvelope(frame);
    if (random) {
      ASSERT_FALSE(env.ok()) << "random frame " << i << " decoded";
    }
    if (!env.ok()) {
      EXPECT_TRUE(is_decoding_error(env.status().code())) << i << ": " << env.status();
      continue;
    }
    auto payload = DecodePayload<NewGeneration>(env->payload);
    if (!payload.ok()) {
      EXPECT_EQ(payload.status().code(), StatusCode::kCorrupt) << i << ": " << payload.status();
    }
  }
}

}  // namespace
}  // namespace elastra::proto
