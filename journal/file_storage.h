// FileJournalStorage: the journal as one file of checksummed records (docs/journal.md, "Record
// format"): each a 12-byte header (magic "EJR1", payload length, CRC-32C of the payload;
// little-endian) followed by the payload. Appends are fsync'ed before they return; reads are
// bounded (a header, then at most kMaxRecordBytes). All file I/O goes through an Env (the
// project's filesystem seam), so tests can fail an append or cut the power. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/env.h"
#include "journal/storage.h"

namespace elastra::journal {

// CRC-32C (Castagnoli) of `data`.
uint32_t Crc32c(const void* data, size_t size);

class FileJournalStorage : public JournalStorage {
 public:
  static constexpr uint32_t kMagic = 0x3152'4A45;  // "EJR1" in file order
  static constexpr uint32_t kHeaderBytes = 12;
  static constexpr uint32_t kMaxRecordBytes = 16u << 20;  // a change of 65536 workers fits

  // The journal at `path`; nothing is opened until a call needs it. `env` is not owned and must
  // outlive the storage.
  explicit FileJournalStorage(std::string path, Env* env = Env::Default());
  ~FileJournalStorage() override;
  FileJournalStorage(const FileJournalStorage&) = delete;
  FileJournalStorage& operator=(const FileJournalStorage&) = delete;

  const std::string& name() const override { return path_; }
  uint64_t max_payload_bytes() const override { return kMaxRecordBytes; }
  // Positions are byte offsets in the file. A record is torn when the file ends inside it, and
  // corrupt with a wrong magic, a length over kMaxRecordBytes or a CRC mismatch.
  StatusOr<uint64_t> Read(uint64_t position, const JournalVisitor& visit,
                          JournalDamage* damage) override;
  // Creates the file (mode 0600) when missing; the copy of a cut file is <path>.corrupt.
  Status CutAfter(uint64_t position, bool keep_copy) override;
  Status Clear() override;
  Status Append(std::string_view payload) override;

 private:
  std::string path_;
  Env* env_;
  std::unique_ptr<WritableFile> file_;  // null until CutAfter or Clear
  uint64_t size_ = 0;                   // bytes in the file: every record appended so far
};

}  // namespace elastra::journal
