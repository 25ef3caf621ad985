// The job's events as GET /v1/events streams them (docs/http.md, "GET /v1/events"), read from the
// coordinator's journal (journal/journal.h): the journal already records, before their effects
// leave the coordinator, each generation formed, worker or host lost, resize accepted and ended,
// checkpoint committed and the job's end. An event's id is the byte offset in the journal just
// past its record: ids grow, a restarted coordinator appends after the records it took back (so
// old ids stay valid and no event is lost or repeated), and "after id N" is "records ending past
// N". The records are read through the journal's storage (journal/storage.h) from the position
// the last call reached. Not thread-safe: one reader per stream.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "common/job_events.h"
#include "journal/storage.h"

namespace elastra::journal {

class JournalEventReader : public JobEventSource {
 public:
  // Events with an id above `after` only, of the journal file at `journal_path`
  // (FileJournalStorage over Env::Default()).
  JournalEventReader(std::string journal_path, uint64_t after);
  // The same from any storage; an event's id is then the storage's position past its record.
  JournalEventReader(std::unique_ptr<JournalStorage> storage, uint64_t after);
  ~JournalEventReader() override;

  // The events of the records appended since the last call (all of them the first time), up to
  // the last whole, intact record; none when the journal is missing. Records that are no event
  // (joins, ids, changes begun, a compacted journal's snapshot) are skipped; a reader behind a
  // snapshot goes on from its position (the events of the records it replaced are gone).
  std::vector<JobEvent> ReadNew() override;

 private:
  JobEvent EventOf(const nlohmann::json& record);
  // Keeps what a later record refers to (a build's workers, a commit's members, a resize's
  // event id); offset_ is just past `record`.
  void Follow(const nlohmann::json& record);

  std::unique_ptr<JournalStorage> storage_;
  uint64_t after_;
  uint64_t offset_ = 0;  // the next record's start: a record boundary this reader has seen
  // The latest `build` begin record read: its target and its workers' ids, for a commit that
  // refers to it instead of listing its members.
  uint64_t build_target_ = 0;
  std::vector<std::string> build_members_;
  std::vector<std::string> committed_members_;  // of the latest commit read
  uint64_t resize_accepted_ = 0;  // the id of the latest resize_accepted event read (0: none)
};

}  // namespace elastra::journal
