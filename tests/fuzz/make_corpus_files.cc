// The seeds of the files the real writers produce, for fuzz_make_corpus (make_corpus.cc): a
// checkpoint written and committed into memory, journals, model descriptions and keys.
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/format.h"
#include "checkpoint/writer.h"
#include "journal/journal.h"
#include "tests/fuzz/make_corpus.h"
#include "tests/fuzz/memory_env.h"

namespace elastra::fuzz {

// ---- A checkpoint written and committed by the real writer, into memory.

void CheckpointSeeds() {
  MemoryEnv env;
  const checkpoint::CheckpointId id{"job", 10, 2};
  std::vector<checkpoint::ShardDescriptor> descriptors;
  std::vector<float> w(8 * 12), b(12);
  std::vector<int64_t> counts(3);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.5f * static_cast<float>(i);
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = static_cast<int64_t>(i) * 7;
  for (int rank = 0; rank < 2; ++rank) {
    checkpoint::WriterOptions o;
    o.env = &env;
    o.root = "/ckpt";
    o.rank = rank;
    o.chunk_bytes = checkpoint::kMinChunkBytes;
    o.direct_io = false;
    auto writer = checkpoint::CheckpointWriter::Create(o);
    if (!writer.ok()) std::exit(1);
    checkpoint::StateView view;
    auto bytes = [](const auto& v, size_t from, size_t n) {
      return std::span<const std::byte>(reinterpret_cast<const std::byte*>(v.data() + from),
                                        n * sizeof(v[0]));
    };
    // w: rows split over the two ranks; b: a ZeRO flat split; counts: replicated.
    checkpoint::TensorShard ws{"w",
                               {8, 12},
                               DataType::kFloat32,
                               {0, -1, false},
                               {{rank * 4, 0}, {rank * 4 + 4, 12}},
                               bytes(w, rank * 48, 48)};
    checkpoint::TensorShard bs{"b",
                               {12},
                               DataType::kFloat32,
                               {-1, -1, true},
                               {{rank * 6}, {rank * 6 + 6}},
                               bytes(b, rank * 6, 6)};
    checkpoint::TensorShard cs{"counts", {3},        DataType::kInt64,
                               {},       {{0}, {3}}, bytes(counts, 0, 3)};
    view.tensors = {ws, bs, cs};
    view.scalars = {{"step", 10}, {"cursor", 320}};
    auto d = (*writer)->Write(id, view);
    if (!d.ok()) {
      std::fprintf(stderr, "writing the seed checkpoint: %s\n", d.status().ToString().c_str());
      std::exit(1);
    }
    descriptors.push_back(*d);
  }
  checkpoint::CommitOptions c;
  c.env = &env;
  c.root = "/ckpt";
  auto dir = checkpoint::CommitCheckpoint(c, id, Layout{2, 1, 1}, descriptors);
  if (!dir.ok()) {
    std::fprintf(stderr, "committing the seed checkpoint: %s\n", dir.status().ToString().c_str());
    std::exit(1);
  }
  // The commit time is the one field that changes from run to run: fixed, so the seeds do not.
  auto committed =
      checkpoint::DecodeManifest(checkpoint::AsBytes(*env.GetFile(*dir + "/MANIFEST")), "MANIFEST");
  if (!committed.ok()) std::exit(1);
  committed->created_unix_ms = 1767225600000;
  const std::string manifest = checkpoint::EncodeManifest(*committed);
  const std::string shard0 = *env.GetFile(*dir + "/shard-00000.bin");
  const std::string shard1 = *env.GetFile(*dir + "/shard-00001.bin");
  const std::string payload = manifest.substr(32);
  const std::string descriptor = checkpoint::EncodeShardDescriptor(descriptors[0]);

  Write("checkpoint_manifest", "manifest", std::string(1, '\0') + manifest);
  Write("checkpoint_manifest", "manifest-payload", std::string(1, '\1') + payload);
  Write("checkpoint_manifest", "descriptor", std::string(1, '\2') + descriptor);
  Write("checkpoint_manifest", "descriptor-payload", std::string(1, '\3') + descriptor.substr(32));
  Write("checkpoint_manifest", "shard-header", std::string(1, '\4') + shard0.substr(0, 4096));
  Write("checkpoint_manifest", "shard-header-fixed", std::string(1, '\5') + shard0.substr(0, 64));

  Write("checkpoint_reader", "two-ranks",
        std::string(1, '\1') + manifest + "%%%%" + shard0 + "%%%%" + shard1);
  Write("checkpoint_reader", "two-ranks-payload",
        std::string(1, '\2') + payload + "%%%%" + shard0 + "%%%%" + shard1);
}

// ---- Journals written by the real Journal.

void JournalSeeds() {
  MemoryEnv env;
  auto j = journal::Journal::Create("/state/journal.bin", &env);
  if (!j.ok()) std::exit(1);
  journal::Journal& journal = **j;
  const journal::JournalWorker a{"w0", "host-a", 0, 100}, b{"w1", "host-b", 1, 101};
  bool ok = journal.RecordJob("job", 2, 8).ok() && journal.RecordJoin(a).ok() &&
            journal.RecordJoin(b).ok() &&
            journal.RecordChangeBegun(1, journal::ChangeKind::kBuild, {a, b}).ok();
  journal::JournalGeneration g;
  g.generation = 1;
  g.reason = proto::GenerationReason::kStart;
  g.layout = Layout{2, 1, 1};
  g.members = {a, b};
  g.downtime_ms = 12.5;
  ok = ok && journal.RecordCommit(g).ok() &&
       journal.RecordCheckpoint(10, 1, "/ckpt/ckpt-000000000010-g000001").ok() &&
       journal.RecordResize({1, true, Layout{1, 1, 1}}).ok() &&
       journal.RecordChangeBegun(2, journal::ChangeKind::kPause, {a, b}).ok() &&
       journal.RecordWorkerState("w1", journal::JournalWorkerState::kLost).ok() &&
       journal.RecordIds({"w0", "w1", "w2"}).ok();
  StateSpec spec;
  spec.tensors = {TensorSpec{"w", {8, 16}, 4, {}}, TensorSpec{"b", {16}, 4, {}}};
  ok = ok && journal.RecordState(spec).ok();
  const std::string running = *env.GetFile("/state/journal.bin");
  g.generation = 2;
  g.reason = proto::GenerationReason::kResize;
  g.layout = Layout{1, 1, 1};
  g.members = {a};
  ok = ok && journal.RecordCommit(g).ok() && journal.RecordResizeEnd(true, 2).ok() &&
       journal.RecordWorkerState("w1", journal::JournalWorkerState::kRemoved).ok() &&
       journal.RecordWorkerState("w0", journal::JournalWorkerState::kFinished).ok() &&
       journal.RecordEnd(journal::JobOutcome::kFinished, "training finished").ok();
  if (!ok) {
    std::fprintf(stderr, "writing the seed journal failed\n");
    std::exit(1);
  }
  const std::string ended = *env.GetFile("/state/journal.bin");
  // The JSON records alone, one per line, for the framed mode.
  std::string lines;
  for (size_t at = 0; at + journal::Journal::kHeaderBytes <= ended.size();) {
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i)
      n |= static_cast<uint32_t>(static_cast<uint8_t>(ended[at + 4 + i])) << (8 * i);
    lines += ended.substr(at + journal::Journal::kHeaderBytes, n) + "\n";
    at += journal::Journal::kHeaderBytes + n;
  }
  lines.pop_back();
  Write("journal", "running-raw", std::string("\x01\x00", 2) + running);
  Write("journal", "running-raw-restore", std::string("\x0d\x00", 2) + running);
  Write("journal", "ended-raw-torn-open", std::string("\x07\x05", 2) + ended);
  Write("journal", "ended-records", std::string("\x00\x00", 2) + lines);
  Write("journal", "ended-records-open-restore", std::string("\x0c\x00", 2) + lines);
}

// ---- Model descriptions, keys.

void ModelSeeds() {
  Write("model_description", "file-4-workers", std::string(1, 3 << 1) + kModelJson);
  Write("model_description", "file-8-workers-2-hosts", std::string(1, (7 << 1) | 32) + kModelJson);
  Write("model_description", "join-pins",
        std::string(1, (3 << 1) | 1) + R"({"model":)" + kModelJson +
            R"(,"pins":{"tp":2,"pp":1,"only_dp":false}})");
  Write("model_description", "join-6-workers",
        std::string(1, (5 << 1) | 1 | 32) +
            R"({"model":{"layers":24,"hidden":2048,"heads":16,)"
            R"("ffn_hidden":8192,"vocab":50257,"seq_len":2048,"global_batch":512,"micro_batch":4,)"
            R"("dtype":"fp16","device_memory_gib":40}})");
}

void KeySeeds() {
  const std::string pub = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";
  const std::string sec = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6";
  const std::string key = R"({"public": ")" + pub + R"(", "secret": ")" + sec + R"("})";
  const std::string info =
      R"({"address": "tcp://127.0.0.1:40123", "job": "job", "server_public": ")" + pub +
      R"(", "admin": )" + key + R"(, "worker": )" + key + R"(, "pid": 4242})";
  const std::string join =
      R"({"address": "tcp://10.0.0.1:40123", "job": "job", "server_public": ")" + pub +
      R"(", "worker": )" + key + "}";
  Write("keys", "key-file", std::string(1, '\0') + key);
  Write("keys", "coordinator-json", std::string(1, '\1') + info);
  Write("keys", "join-file", std::string(1, '\2') + join);
  Write("keys", "join-from-coordinator-json", std::string(1, '\2') + info);
}

}  // namespace elastra::fuzz
