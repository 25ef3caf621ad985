// JournalStorage: where the journal's records are kept, as an append-only sequence of payloads
// (one record's text each). The Journal (journal/journal.h) encodes, checks and applies records;
// a storage only keeps their bytes and tells an intact record from a damaged one. The file of
// checksummed records (journal/file_storage.h) is one; a second backend (a key-value store) is
// another, without a change to the records. Not thread-safe: one journal or reader each.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "elastra/status.h"

namespace elastra::journal {

// Why reading stopped before the storage's end.
struct JournalDamage {
  // The record at the position Read returned is torn (the writer was stopped mid-write) or
  // corrupt, in words ("record checksum mismatch"); empty when Read met no such record.
  std::string why;
  // Where the storage ends (a file: its size in bytes), as positions count.
  uint64_t end = 0;
};

// Called with each whole, intact payload in order, and the position just past it (the next
// record's). The payload is valid during the call only. Returns false to stop before this record:
// it is not accepted.
using JournalVisitor = std::function<bool(std::string_view payload, uint64_t next)>;

class JournalStorage {
 public:
  virtual ~JournalStorage() = default;

  // What the journal is called in warnings and errors (a file: its path).
  virtual const std::string& name() const = 0;
  // The largest payload Append takes.
  virtual uint64_t max_payload_bytes() const = 0;

  // Visits the records from `position` (0: the first; else a position a visit or Read returned)
  // in order until `visit` returns false, a record is torn or corrupt (then `damage->why` says
  // so), or the storage ends. Returns the position after the last record accepted; `damage` (may
  // be null) gets where the storage ends. Reads a bounded amount at a time, never a whole journal.
  // kNotFound when there is no journal, kInternal when it cannot be read.
  virtual StatusOr<uint64_t> Read(uint64_t position, const JournalVisitor& visit,
                                  JournalDamage* damage) = 0;
  // Readies the storage for appending after `position`, the end of its consistent prefix (what
  // Read returned from 0): drops what follows it, first keeping a copy of the whole when
  // `keep_copy` and anything is dropped (a file: <path>.corrupt), and creates an empty journal
  // when there is none. kInternal when it cannot be opened or cut.
  virtual Status CutAfter(uint64_t position, bool keep_copy) = 0;
  // Drops every record (a new journal) and readies the storage for appending. kInternal on
  // failure.
  virtual Status Clear() = 0;
  // Appends one payload after the last record, durable when this returns OK. On an error no part
  // of it stays: the next Append follows the last record. The storage's error (a file:
  // kResourceExhausted for a full disk, kInternal otherwise); kInvalidArgument for a payload over
  // max_payload_bytes(); kFailedPrecondition before CutAfter or Clear.
  virtual Status Append(std::string_view payload) = 0;

  // Replaces the records before `position` with `snapshot`, a payload of the state they replay
  // to (docs/ha.md, "Compaction"); Read from before `position` then visits it first, as the
  // payload ending there. A storage that cannot compact (the file) answers kFailedPrecondition.
  virtual Status Compact(uint64_t position, std::string_view snapshot) {
    (void)position;
    (void)snapshot;
    return FailedPreconditionError("the journal " + name() + " cannot be compacted");
  }
  // The position the snapshot ends at (Read from 0 visits it first); 0 when never compacted.
  virtual StatusOr<uint64_t> Compacted() { return uint64_t{0}; }
};

}  // namespace elastra::journal
