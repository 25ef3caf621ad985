// EtcdJournalStorage: the journal's records as keys of an etcd cluster under /elastra/JOB/
// (docs/ha.md, "Keys"). A position is a record's sequence number (0: the first). Each record is
// a head key, journal/r/<20-digit sequence>, whose value is a line "<bytes> <crc32c> <chunks>"
// followed by the payload's first piece; a payload over one piece (kChunkBytes) keeps its other
// pieces under journal/c/<sequence>/<index>, written before the head. The head is written last, in
// a transaction that requires the key to be new, so a reader sees a whole record or none: pieces
// without a head (a writer stopped mid-append) are never read and are dropped by CutAfter.
// An Append is durable when etcd acknowledged it (a majority of the cluster has it on disk).
// Compact replaces the records before a position with a snapshot (journal/snapshot, in pieces as
// a record), and a leader's storage is fenced: each of its writes requires the election key it
// created (SetFence; docs/ha.md, "Fencing" and "Compaction"). Not thread-safe: one journal or reader each.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "journal/etcd_client.h"
#include "journal/storage.h"

namespace elastra::journal {

class EtcdJournalStorage : public JournalStorage {
 public:
  // Each request to etcd stays under this many payload bytes, well below etcd's default request
  // limit (--max-request-bytes, 1.5 MiB).
  static constexpr uint64_t kChunkBytes = 1u << 20;
  // As the file's (FileJournalStorage::kMaxRecordBytes): a change of 65536 workers fits.
  static constexpr uint64_t kMaxRecordBytes = 16u << 20;
  // Head keys read per request when reading: at most this many chunks in one answer.
  static constexpr int64_t kHeadsPerRead = 4;

  // The journal of job `job` on the cluster `client` talks to. kInvalidArgument for a job name
  // that is empty or holds '/'. Nothing is read until a call needs it.
  static StatusOr<std::unique_ptr<EtcdJournalStorage>> Create(std::unique_ptr<EtcdClient> client,
                                                              const std::string& job);
  // The same, with a client of `options`.
  static StatusOr<std::unique_ptr<EtcdJournalStorage>> Create(EtcdOptions options,
                                                              const std::string& job);
  EtcdJournalStorage(const EtcdJournalStorage&) = delete;
  EtcdJournalStorage& operator=(const EtcdJournalStorage&) = delete;

  // "etcd:/elastra/JOB/journal/"
  const std::string& name() const override { return name_; }
  uint64_t max_payload_bytes() const override { return kMaxRecordBytes; }
  // kNotFound when the job has no journal (no journal/created key); kUnavailable when etcd cannot
  // be reached, kInternal when it refuses. A record is damaged when its head cannot be parsed, a
  // piece is missing, or its length or CRC-32C does not match; a missing sequence number too.
  StatusOr<uint64_t> Read(uint64_t position, const JournalVisitor& visit,
                          JournalDamage* damage) override;
  // Deletes the records from `position` on (and pieces left by an unfinished append), first
  // copying every key of the journal under /elastra/JOB/corrupt/<revision>/ when `keep_copy` and
  // a record is dropped. Errors as Read's.
  Status CutAfter(uint64_t position, bool keep_copy) override;
  Status Clear() override;
  // kInternal when the record's sequence number is taken already (another writer appended).
  Status Append(std::string_view payload) override;

  // From now on every write (Append with its pieces, CutAfter with its copy, Clear, Compact) is a
  // transaction that also requires `fence.key` to have the create revision
  // `fence.create_revision` (the election key this leader created: EtcdElection::Campaign). A
  // write the fence refuses answers kFailedPrecondition ("not the leader: ...") and writes
  // nothing.
  void SetFence(EtcdFence fence);
  // Writes unfenced again (a journal with one writer and no election).
  void ClearFence();

  // Replaces the records before `position` (at most the end) with `snapshot`, a payload the
  // caller built of the state those records replay to, and deletes them: the snapshot's head with
  // its first piece and the deletes are one transaction (its other pieces are written before, as
  // a record's). Read then visits the snapshot first, as the payload ending at `position`, when
  // it starts before `position`. A second Compact replaces the first snapshot. kInvalidArgument
  // for a position past the end or before the last snapshot's, or a snapshot over
  // max_payload_bytes(); kFailedPrecondition before CutAfter or Clear, or when the fence refused
  // it; kInternal when another writer compacted meanwhile; else errors as Append's.
  Status Compact(uint64_t position, std::string_view snapshot) override;
  // The position the snapshot ends at (a Read from before it visits the snapshot's payload
  // first); 0 when the journal was never compacted. Errors as Read's.
  StatusOr<uint64_t> Compacted() override;

  // The key prefix of the job's journal: "/elastra/JOB/journal/".
  const std::string& prefix() const { return prefix_; }

 private:
  EtcdJournalStorage(std::unique_ptr<EtcdClient> client, const std::string& job);
  std::string HeadKey(uint64_t sequence) const;
  std::string ChunkKey(uint64_t sequence, uint64_t index) const;
  // The sequence number after the last head, or the snapshot's position when that is later (0
  // when there is neither), at the store's `revision` (0: now).
  StatusOr<uint64_t> End(int64_t revision = 0);
  // The compares every write carries: the fence's, when there is one.
  std::vector<EtcdCompare> Fenced(std::vector<EtcdCompare> compares) const;
  // The failure branch's reads: `reads`, then the fence key's, when there is a fence.
  std::vector<EtcdOp> FailureReads(std::vector<EtcdOp> reads) const;
  // kFailedPrecondition when `txn` failed because of the fence (read by FailureReads), else OK.
  Status FenceRefused(const EtcdTxnResult& txn, const std::string& what) const;
  // A put under the fence; its store revision.
  StatusOr<int64_t> FencedPut(const std::string& key, std::string_view value,
                              std::vector<EtcdCompare> compares, const std::string& what);
  // Writes pieces 1.. of `payload` under `key(i)`, each under the fence and `compares`; adds to
  // `written` a compare that each piece is still the one written, for the final transaction.
  Status PutPieces(std::string_view payload, const std::function<std::string(uint64_t)>& key,
                   const std::vector<EtcdCompare>& compares, const std::string& what,
                   std::vector<EtcdCompare>* written);
  struct Snapshot {
    uint64_t position = 0;     // the records before it are what it stands for; 0: no snapshot
    std::string payload;       // when read with_payload
    int64_t mod_revision = 0;  // of the snapshot key; 0 when none
  };
  // The snapshot at `revision` (0: now), its payload too when `with_payload`. `damage` gets why
  // the snapshot cannot be read, when it cannot.
  StatusOr<Snapshot> ReadSnapshot(int64_t revision, bool with_payload, std::string* damage);
  // The payload a head value describes into `payload`, its pieces read from `piece_key(i)` at
  // `revision`; false with why in `damage` when the head cannot be parsed, a piece is missing or
  // the whole does not match its length and CRC-32C.
  StatusOr<bool> ReadPayload(std::string_view head, int64_t revision,
                             const std::function<std::string(uint64_t)>& piece_key,
                             std::string* payload, std::string* damage);
  std::string SnapshotKey() const { return prefix_ + "snapshot"; }
  std::string SnapshotPieceKey(uint64_t position, uint64_t index) const;

  std::unique_ptr<EtcdClient> client_;
  std::string job_prefix_;  // /elastra/JOB/
  std::string prefix_;      // /elastra/JOB/journal/
  std::string name_;
  std::optional<EtcdFence> fence_;
  bool open_ = false;
  uint64_t next_ = 0;  // the sequence number of the next Append
};

}  // namespace elastra::journal
