// EtcdJournalStorage: the journal's records as keys of an etcd cluster under /elastra/JOB/
// (docs/ha.md, "Keys"). A position is a record's sequence number (0: the first). Each record is
// a head key, journal/r/<20-digit sequence>, whose value is a line "<bytes> <crc32c> <chunks>"
// followed by the payload's first piece; a payload over one piece (kChunkBytes) keeps its other
// pieces under journal/c/<sequence>/<index>, written before the head. The head is written last, in
// a transaction that requires the key to be new, so a reader sees a whole record or none: pieces
// without a head (a writer stopped mid-append) are never read and are dropped by CutAfter.
// An Append is durable when etcd acknowledged it (a majority of the cluster has it on disk).
// Not thread-safe: one journal or reader each.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

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

  // The key prefix of the job's journal: "/elastra/JOB/journal/".
  const std::string& prefix() const { return prefix_; }

 private:
  EtcdJournalStorage(std::unique_ptr<EtcdClient> client, const std::string& job);
  std::string HeadKey(uint64_t sequence) const;
  std::string ChunkKey(uint64_t sequence, uint64_t index) const;
  // The sequence number after the last head (0 when there is none).
  StatusOr<uint64_t> End();

  std::unique_ptr<EtcdClient> client_;
  std::string job_prefix_;  // /elastra/JOB/
  std::string prefix_;      // /elastra/JOB/journal/
  std::string name_;
  bool open_ = false;
  uint64_t next_ = 0;  // the sequence number of the next Append
};

}  // namespace elastra::journal
