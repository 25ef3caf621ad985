// Where a coordinator keeps its job's journal (docs/ha.md, "The coordinator on etcd"): the keys of
// an etcd cluster under /elastra/JOB/ when CoordinatorOptions::etcd names one, else the file
// <state_dir>/journal.bin (docs/journal.md). Every reader and the writer open their own storage
// here (the restore at start, the restart's replay, each GET /v1/events stream), so they all read
// the one journal the options chose. Stateless: thread-safe.
#pragma once

#include <memory>
#include <string>

#include "coordinator/options.h"
#include "elastra/status.h"
#include "journal/storage.h"

namespace elastra::coordinator {

// A new storage of the job's journal; nothing is read or connected yet. Over etcd:
// kInvalidArgument for a job name etcd cannot key (empty or holding '/') or a malformed endpoint
// list. Over etcd with options.etcd_fence_key, every write of the storage is fenced on it. The
// file's storage goes through options.env.
StatusOr<std::unique_ptr<journal::JournalStorage>> OpenJournalStorage(
    const CoordinatorOptions& options);

// Where the journal is, for the log and `elastra coordinator`'s ready line:
// "etcd http://127.0.0.1:2379 /elastra/JOB/" or "file <state_dir>/journal.bin".
std::string JournalLocation(const CoordinatorOptions& options);

}  // namespace elastra::coordinator
