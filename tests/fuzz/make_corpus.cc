// Writes the seed corpus of every fuzz target (tests/fuzz/corpus/<target>/seed-*) from real
// encodings: frames made by the codec, sessions recorded against a real CoordinatorCore that
// answer its pushes as workers do, a checkpoint written by the real CheckpointWriter and committed
// by CommitCheckpoint, journals written by the real Journal, and the JSON files the real writers
// produce. Deterministic, so the committed seeds change only when an encoding does.
//
//   fuzz_make_corpus DIR   (make fuzz-corpus: DIR = tests/fuzz/corpus)
// Seeds written before are removed first; regression inputs (named after what they found, not
// seed-*) are never touched. VERSION records the encodings the seeds were written for
// (corpus_version.h; FuzzCorpus.version fails when the code's differ).
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/format.h"
#include "checkpoint/writer.h"
#include "protocol/codec.h"
#include "protocol/keys.h"
#include "coordinator/coordinator_core.h"
#include "journal/journal.h"
#include "tests/fuzz/checkpoint_frame.h"
#include "tests/fuzz/corpus_version.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/make_corpus.h"
#include "tests/fuzz/memory_env.h"
#include "tests/fuzz/payloads.h"

// The generator links the targets' helpers but none of the targets.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }

namespace elastra::fuzz {
namespace {

namespace fs = std::filesystem;

fs::path g_out;  // the corpus directory, the generator's argument

}  // namespace

void Write(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = g_out / target;
  fs::create_directories(dir);
  std::ofstream(dir / ("seed-" + name), std::ios::binary) << bytes;
}

// Removes every seed of the corpus (a seed that is no longer written would stay on an old
// encoding); regression inputs stay.
void RemoveSeeds() {
  std::error_code ec;
  for (const auto& target : fs::directory_iterator(g_out, ec)) {
    if (!target.is_directory()) continue;
    for (const auto& e : fs::directory_iterator(target.path())) {
      if (e.path().filename().string().rfind("seed-", 0) == 0) fs::remove(e.path());
    }
  }
}

// A recorded session, with the generation the coordinator reached (shown, so that a change that
// stops a session short is seen when the corpus is made again).
void Write(const std::string& target, const std::string& name, const std::string& bytes,
           uint64_t generation) {
  std::printf("%s/seed-%s: %zu bytes, the coordinator reached generation %llu\n", target.c_str(),
              name.c_str(), bytes.size(), static_cast<unsigned long long>(generation));
  Write(target, name, bytes);
}

namespace {

using proto::MessageType;

// ---- Values as real peers send them.

StateSpec SmallState() {
  StateSpec s;
  s.num_layers = 2;
  s.tensors.push_back({"embed", {64, 16}, 4, ShardingRule{0, 0, false}});
  s.tensors.push_back({"layer0.w", {16, 32}, 4, ShardingRule{1, 0, true}});
  s.tensors.push_back({"layer1.w", {32, 16}, 2, ShardingRule{0, 1, false}});
  s.tensors.push_back({"ln.bias", {16}, 4, ShardingRule{-1, -1, true}});
  return s;
}

checkpoint::ShardDescriptor Descriptor(int rank) {
  checkpoint::ShardDescriptor d;
  d.rank = rank;
  d.file = checkpoint::ShardFileName(rank);
  d.file_size = 8192;
  d.scalars = {{"step", 10}, {"cursor", 320}};
  checkpoint::TensorEntry t;
  t.name = "w";
  t.shape = {2, 256};
  t.dtype = static_cast<int32_t>(DataType::kFloat32);
  checkpoint::RegionEntry r;
  r.box = {{rank, 0}, {rank + 1, 256}};
  r.offset = 4096;
  r.bytes = 1024;
  r.chunk_bytes = 4096;
  r.chunk_checksums = {0x1234};
  t.regions.push_back(r);
  d.tensors.push_back(t);
  return d;
}

proto::JobStatus JobStatusSeed() {
  proto::JobStatus s;
  s.job = "job";
  s.state = proto::JobState::kRunning;
  s.generation = 2;
  s.layout = Layout{2, 1, 1};
  s.step = 41;
  s.workers.push_back({"w0", "a", 100, 0, proto::WorkerState::kMember, 0, 41, 12});
  s.workers.push_back({"w1", "b", 101, 1, proto::WorkerState::kMember, 1, 40, 30});
  s.workers.push_back({"w2", "b", 102, -1, proto::WorkerState::kLost, -1, 12, -1});
  s.history.push_back({1, proto::GenerationReason::kStart, {"w0"}, Layout{}, 1, 0, 1, 0});
  s.history.push_back({2, proto::GenerationReason::kResize, {"w0", "w1"}, Layout{2, 1, 1}, 35, 3,
                       20, 11, 1 << 20, 1, 2});
  s.agents.push_back({"agent-a", "a", 4});
  s.hosts.push_back({"a", "10.0.0.1", 4, 0, 1, proto::HostState::kUp, 100});
  s.target_workers = 2;
  s.malformed_frames = 1;
  s.spares_target = 1;
  return s;
}

// One payload of each type, as its sender fills it.
std::string PayloadOf(MessageType type) {
  using namespace proto;
  switch (type) {
    case MessageType::kError:
      return EncodePayload(ErrorReply{5, "worker 'w9' is unknown"});
    case MessageType::kJoin:
      // With a rendezvous endpoint (6 bytes) and a memory budget (protocol 9).
      return EncodePayload(JoinRequest{"w0", "host-a", 0, 4242, SmallState(),
                                       std::string(R"({"model":)") + kModelJson + "}",
                                       std::string("\x7f\x00\x00\x01\x1f\x90", 6), 16ll << 30});
    case MessageType::kLeave:
      return EncodePayload(LeaveRequest{LeaveReason::kQuit, "bye"});
    case MessageType::kHeartbeat:
      return EncodePayload(Heartbeat{17, 640, {{"loss", 0.25, 16}, {"lr", 1e-3, 16}}});
    case MessageType::kPaused:
      // Commits in a failed generation's layout (protocol 6), the groups' health (protocol 10).
      return EncodePayload(PausedReport{3, 20, {10, 20}, true, Layout{1, 2, 2}, 3,
                                        {{kDpGroup, 2, true, 40, {1}, {20}, {20}},
                                         {kTpGroup, 2, false, 39, {0, 2}, {5, 0}, {4, 1}}}});
    case MessageType::kGenerationReady:
      return EncodePayload(GenerationReady{3, 12.5, 40.25, 4096});
    case MessageType::kFailureReport:
      return EncodePayload(FailureReport{2, 14, "peer lost"});
    case MessageType::kCheckpointWritten: {
      CheckpointWritten w;
      w.generation = 2;
      w.step = 10;
      w.rank = 0;
      w.ranks = 2;
      w.layout = Layout{2, 1, 1};
      w.root = "/ckpt";
      w.ok = true;
      w.descriptor = checkpoint::EncodeShardDescriptor(Descriptor(0));
      return EncodePayload(w);
    }
    case MessageType::kJoinReply:
      return EncodePayload(JoinReply{"w0", 2, 200, 1500});
    case MessageType::kPauseRequest:
      return EncodePayload(PauseRequest{3, GenerationReason::kResize});
    case MessageType::kRecoverRequest:
      return EncodePayload(RecoverRequest{3, {"w1", "w2"}});
    case MessageType::kNewGeneration: {
      NewGeneration g;
      g.generation = 3;
      g.layout = Layout{1, 2, 2};
      // Addressed to w0: its own entry and the member it sends state to.
      for (int r : {0, 3}) {
        g.members.push_back({"w" + std::to_string(r), r < 2 ? "a" : "b", r % 2,
                             CoordinatesOf(g.layout, r), r != 3, r, r});
      }
      g.restore_step = 20;
      g.source_rank = 1;
      g.kv_prefix = "g3/";
      g.reason = GenerationReason::kFailure;
      g.prev_layout = Layout{2, 1, 1};
      g.prev_members = {{"w0", "a", 0, CoordinatesOf(g.prev_layout, 0), true, 0, 0}};
      g.checkpoint_dir = "/ckpt/ckpt-000000000010-g000002";
      g.scalars_source = 0;
      g.move.plan = MovePlan::kMove;
      g.move.workers = 4;
      g.move.tensors = 2;
      g.move.transfers = {{0, 0, 3, 0, 8, 0, 16}, {1, 0, 3, 0, 1, 4, 12}};
      g.nccl = {2, 2, false, false, 0, {}};
      g.build_peers = std::string("\x7f\x00\x00\x01\x1f\x91", 6);
      g.keep_groups = 1 << kDpGroup;  // protocol 10
      return EncodePayload(g);
    }
    case MessageType::kKvSet:
      return EncodePayload(KvSetRequest{"g1/rank0", "addr:1234"});
    case MessageType::kKvGet:
      return EncodePayload(KvGetRequest{"g1/rank0", 500});
    case MessageType::kKvWait:
      return EncodePayload(KvWaitRequest{{"g1/a", "g1/b"}, 500});
    case MessageType::kKvAdd:
      return EncodePayload(KvAddRequest{"g1/counter", 3});
    case MessageType::kKvReply:
      return EncodePayload(KvReply{"addr:1234", 4});
    case MessageType::kKvSetAndGet:
      return EncodePayload(
          KvSetAndGetRequest{{"g1/pair/0/1"}, {"addr:1234"}, {"g1/pair/1/0"}, 500});
    case MessageType::kKvValues:
      return EncodePayload(KvValuesReply{{"addr:1234", "addr:5678"}});
    case MessageType::kResize:
      return EncodePayload(ResizeRequest{4, true, Layout{2, 1, 2}, true, 1});  // 1 spare
    case MessageType::kResizeReply:
      return EncodePayload(
          ResizeReply{ResizePhase::kDone, 3, 4, Layout{2, 1, 2}, 30, 2, 12, 9, 400, "done"});
    case MessageType::kStatusRequest:
      return EncodePayload(StatusRequest{});
    case MessageType::kStatusReply:
      return EncodePayload(StatusReply{JobStatusSeed()});
    case MessageType::kAgentRegister:
      return EncodePayload(AgentRegister{"host-a", 4, "10.0.0.1", 2});
    case MessageType::kSpawnRequest:
      return EncodePayload(SpawnRequest{{"w5", "w6"}});
    case MessageType::kProcessExited:
      return EncodePayload(ProcessExited{"w1", 0, 9});
    case MessageType::kShutdown:
      return EncodePayload(Shutdown{0, "the job is over"});
    case MessageType::kDrain:
      return EncodePayload(DrainRequest{"host-b", true});
    case MessageType::kHeartbeatAck:
      return EncodePayload(HeartbeatAck{2});
    case MessageType::kAck:
      return EncodePayload(Ack{});
  }
  return {};
}

void CodecSeeds() {
  for (size_t i = 0; i < std::size(kMessageTypes); ++i) {
    const MessageType type = kMessageTypes[i];
    const std::string payload = PayloadOf(type);
    if (!DecodePayloadOf(type, payload)) {
      std::fprintf(stderr, "seed payload of %s does not decode\n", proto::TypeName(type));
      std::exit(1);
    }
    proto::Envelope e;
    e.type = type;
    e.job = "job";
    e.generation = 2;
    e.sender = "w0";
    e.request_id = 7;
    e.payload = payload;
    const std::string name = proto::TypeName(type);
    Write("codec", "frame-" + name, std::string(1, '\0') + proto::EncodeEnvelope(e));
    Write("codec", "payload-" + name,
          std::string(1, '\1') + std::string(1, static_cast<char>(i)) + payload);
  }
}

// ---- Sessions against a real CoordinatorCore, answered as workers answer.

class Session {
 public:
  // `setup` is the target's byte 0.
  explicit Session(uint8_t setup) : bytes_(1, static_cast<char>(setup)) {
    options_.job = "job";
    options_.initial_workers = 1 + ((setup >> 2) & 3);
    options_.max_workers = 8;
    options_.spawn_timeout = Duration(3000);
    options_.clock = &clock_;
    options_.env = &env_;
    if (setup & 1) options_.state_dir = "/state";
    core_ = std::make_unique<coordinator::CoordinatorCore>(options_);
  }

  // Client `client` (worker id "w<client>") sends `payload` after `wait_100ms` x 100 ms.
  template <class T>
  void Send(int client, bool admin, int wait_100ms, MessageType type, const T& payload) {
    Raw(client, admin, wait_100ms,
        proto::MakeFrame(type, payload, "job", core_->generation(), "w" + std::to_string(client),
                         ++request_id_));
  }
  void Raw(int client, bool admin, int wait_100ms, const std::string& frame) {
    const uint8_t flags = static_cast<uint8_t>(client | (admin ? 8 : 0) | (wait_100ms << 4));
    bytes_ += static_cast<char>(flags);
    bytes_ += static_cast<char>(frame.size() & 0xFF);
    bytes_ += static_cast<char>(frame.size() >> 8);
    bytes_ += frame;
    clock_.Advance(Duration(100 * wait_100ms));
    const std::string identity = "client-" + std::to_string(client);
    auto e = proto::DecodeEnvelope(frame);
    Collect(e.ok() ? core_->Handle(identity, admin ? proto::Role::kAdmin : proto::Role::kWorker, *e)
                   : core_->HandleMalformed(identity, e.status()));
    Collect(core_->Tick());
  }

  // Answers what the workers in `clients` were pushed, as a worker does: a NewGeneration with
  // GenerationReady, a PauseRequest or RecoverRequest with PausedReport at `step`.
  void Answer(const std::vector<int>& clients, int64_t step) {
    for (int round = 0; round < 4; ++round) {
      bool any = false;
      for (int c : clients) {
        auto& q = pushed_[c];
        while (!q.empty()) {
          const proto::Envelope e = q.front();
          q.pop_front();
          any = true;
          if (e.type == MessageType::kNewGeneration) {
            auto g = proto::DecodePayload<proto::NewGeneration>(e.payload);
            if (g.ok() && !g->leave) {
              Send(c, false, 0, MessageType::kGenerationReady,
                   proto::GenerationReady{g->generation, 5, 7, 1024});
            }
          } else if (e.type == MessageType::kPauseRequest) {
            auto p = proto::DecodePayload<proto::PauseRequest>(e.payload);
            if (p.ok()) {
              Send(c, false, 0, MessageType::kPaused,
                   proto::PausedReport{p->target_generation, step, {step}, false});
            }
          } else if (e.type == MessageType::kRecoverRequest) {
            auto p = proto::DecodePayload<proto::RecoverRequest>(e.payload);
            if (p.ok()) {
              Send(c, false, 0, MessageType::kPaused,
                   proto::PausedReport{p->target_generation, step, {step}, true});
            }
          }
        }
      }
      if (!any) break;
    }
  }

  void Join(int client, bool with_state) {
    proto::JoinRequest j{
        "w" + std::to_string(client), client < 2 ? "a" : "b", client % 2, 1000 + client, {}, ""};
    if (with_state) {
      j.state = SmallState();
      j.model_json = std::string(R"({"model":)") + kModelJson + R"(,"pins":{"tp":0}})";
    }
    Send(client, false, 0, MessageType::kJoin, j);
  }

  void Heartbeats(const std::vector<int>& clients, int64_t step) {
    for (int c : clients) {
      Send(c, false, 1, MessageType::kHeartbeat,
           proto::Heartbeat{step, 64 * (step + 1), {{"loss", 1.0 / (step + 2), step}}});
    }
  }

  uint64_t generation() const { return core_->generation(); }
  const std::string& bytes() const { return bytes_; }

 private:
  void Collect(const std::vector<coordinator::Outgoing>& out) {
    for (const auto& o : out) {
      auto e = proto::DecodeEnvelope(o.frame);
      if (!e.ok() || e->request_id != 0) continue;  // only pushes need an answer
      const int client = std::stoi(o.identity.substr(o.identity.find('-') + 1));
      pushed_[client].push_back(*e);
    }
  }

  std::string bytes_;
  MemoryEnv env_;
  FakeClock clock_;
  coordinator::CoordinatorOptions options_;
  std::unique_ptr<coordinator::CoordinatorCore> core_;
  std::map<int, std::deque<proto::Envelope>> pushed_;
  uint64_t request_id_ = 0;
};

void CoreSeeds() {
  // Two workers form generation 1, train, checkpoint, and ask for the status.
  auto start = [](uint8_t setup) {
    auto s = std::make_unique<Session>(setup);
    s->Join(0, true);
    s->Join(1, true);
    s->Answer({0, 1}, 0);
    s->Heartbeats({0, 1}, 5);
    return s;
  };
  {
    auto s = start(0x04);
    for (int rank = 0; rank < 2; ++rank) {
      proto::CheckpointWritten w;
      w.generation = s->generation();
      w.step = 10;
      w.rank = rank;
      w.ranks = 2;
      w.layout = Layout{2, 1, 1};
      w.root = "/ckpt";
      w.ok = true;
      w.descriptor = checkpoint::EncodeShardDescriptor(Descriptor(rank));
      s->Send(rank, false, 0, MessageType::kCheckpointWritten, w);
    }
    s->Send(5, true, 0, MessageType::kStatusRequest, proto::StatusRequest{});
    Write("coordinator_core", "start-checkpoint-status", s->bytes(), s->generation());
  }
  // A third worker joins and an admin grows the job to 3, then shrinks it to 1.
  {
    auto s = start(0x05);
    s->Join(2, false);
    s->Send(7, true, 0, MessageType::kResize, proto::ResizeRequest{3, false, {}, true});
    s->Answer({0, 1, 2}, 8);
    s->Heartbeats({0, 1, 2}, 9);
    s->Send(7, true, 0, MessageType::kResize, proto::ResizeRequest{1, true, Layout{1, 1, 1}, true});
    s->Answer({0, 1, 2}, 12);
    s->Send(7, true, 0, MessageType::kStatusRequest, proto::StatusRequest{});
    Write("coordinator_core", "resize-grow-shrink-journal", s->bytes(), s->generation());
  }
  // A worker fails: a report, its process exit seen by the agent, the survivors recover; then a
  // restart takes the job back from the journal.
  {
    auto s = start(0x07);
    s->Send(6, true, 0, MessageType::kAgentRegister, proto::AgentRegister{"a", 4, "10.0.0.1", 0});
    s->Send(0, false, 0, MessageType::kFailureReport,
            proto::FailureReport{s->generation(), 14, "peer lost"});
    s->Send(6, true, 0, MessageType::kProcessExited, proto::ProcessExited{"w1", 0, 9});
    s->Answer({0}, 6);
    s->Heartbeats({0}, 7);
    s->Send(0, false, 0, MessageType::kLeave,
            proto::LeaveRequest{proto::LeaveReason::kFinished, ""});
    Write("coordinator_core", "failure-recovery-restart", s->bytes(), s->generation());
  }
  // A silent worker is declared lost by its heartbeat deadline.
  {
    auto s = start(0x04);
    for (int i = 0; i < 3; ++i) s->Send(0, false, 9, MessageType::kHeartbeat, proto::Heartbeat{6});
    s->Answer({0}, 6);
    Write("coordinator_core", "heartbeat-timeout", s->bytes(), s->generation());
  }
  // The rendezvous store, a worker key asking for a resize, a frame of another job, and garbage.
  {
    Session s(0x00);
    s.Join(0, false);
    s.Answer({0}, 0);
    s.Send(0, false, 0, MessageType::kKvSet, proto::KvSetRequest{"g1/rank0", "addr"});
    s.Send(0, false, 0, MessageType::kKvGet, proto::KvGetRequest{"g1/rank0", 100});
    s.Send(0, false, 0, MessageType::kKvAdd, proto::KvAddRequest{"g1/n", 2});
    s.Send(0, false, 0, MessageType::kKvWait, proto::KvWaitRequest{{"g1/rank0", "g1/x"}, 300});
    s.Send(0, false, 5, MessageType::kKvGet, proto::KvGetRequest{"g1/missing", 200});
    s.Send(0, false, 0, MessageType::kResize, proto::ResizeRequest{2, false, {}, false});
    s.Raw(1, false, 0,
          proto::MakeFrame(MessageType::kHeartbeat, proto::Heartbeat{1}, "other", 1, "w1", 3));
    s.Raw(2, false, 0, std::string("\x54\x53\x4c\x45garbage", 11));
    Write("coordinator_core", "kv-and-refusals", s.bytes(), s.generation());
  }
}

}  // namespace
}  // namespace elastra::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  using namespace elastra::fuzz;
  QuietLogs();
  g_out = argv[1];
  RemoveSeeds();
  CodecSeeds();
  CoreSeeds();
  CheckpointSeeds();
  JournalSeeds();
  ModelSeeds();
  KeySeeds();
  HttpSeeds();
  std::ofstream(g_out / "VERSION") << CorpusVersion();
  std::printf("seeds written under %s\n", argv[1]);
  return 0;
}
