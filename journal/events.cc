#include "journal/events.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "journal/file_storage.h"
#include "journal/records.h"

namespace elastra::journal {
namespace {

using nlohmann::json;

// The ids of a record's list of workers (`begin`'s workers, an older `commit`'s members).
std::vector<std::string> IdsOf(const json& r, const char* field) {
  std::vector<std::string> ids;
  for (const json& m : r.value(field, json::array())) ids.push_back(m.value("id", ""));
  return ids;
}

}  // namespace

JournalEventReader::JournalEventReader(std::string journal_path, uint64_t after)
    : JournalEventReader(std::make_unique<FileJournalStorage>(std::move(journal_path)), after) {}

JournalEventReader::JournalEventReader(std::unique_ptr<JournalStorage> storage, uint64_t after)
    : storage_(std::move(storage)), after_(after) {}

JournalEventReader::~JournalEventReader() = default;

// The event a journal record is, or an empty type when it is none.
JobEvent JournalEventReader::EventOf(const json& r) {
  JobEvent e;
  const std::string t = r.value("t", "");
  json data;
  if (t == "commit") {
    e.type = "generation";
    // A commit that refers to its build's begin record has the members that record listed.
    json members = json::array();
    if (!r.contains("begin")) {
      members = IdsOf(r, "members");
    } else if (r.value("begin", uint64_t{0}) == build_target_) {
      members = build_members_;
    }
    data = {{"generation", r.value("generation", uint64_t{0})},
            {"reason", r.value("reason", "")},
            {"layout", r.value("layout", json::object())},
            {"workers", members},
            {"downtime_ms", r.value("downtime_ms", 0.0)}};
    if (r.contains("groups_rebuilt")) {
      data["groups_rebuilt"] = r.value("groups_rebuilt", 0);
      data["groups_kept"] = r.value("groups_kept", 0);
    }
    if (r.contains("reached_step") && r.contains("restore_step")) {
      const int64_t reached = r.value("reached_step", int64_t{0});
      const int64_t restored = r.value("restore_step", int64_t{0});
      data["reached_step"] = reached;
      data["restore_step"] = restored;
      data["rolled_back_steps"] = std::max<int64_t>(0, reached - restored);
    }
  } else if (t == "worker" && r.value("state", "") == "lost") {
    e.type = "worker_lost";
    data = {{"worker", r.value("id", "")}};
  } else if (t == "waiting") {
    e.type = "waiting_for_workers";
    data = {{"why", r.value("why", "")}};
  } else if (t == "host_lost") {
    e.type = "host_lost";
    data = {{"host", r.value("host", "")},
            {"why", r.value("why", "")},
            {"workers", r.value("workers", json::array())}};
  } else if (t == "resize") {
    e.type = "resize_accepted";
    data = {{"workers", r.value("workers", 0)}};
    if (r.value("has_layout", false)) data["layout"] = r.value("layout", json::object());
  } else if (t == "resize_refused") {
    e.type = "resize_refused";
    data = {{"workers", r.value("workers", 0)}, {"error", r.value("error", "")}};
    if (r.contains("layout")) data["layout"] = r.value("layout", json::object());
    if (r.contains("host")) data["host"] = r.value("host", "");
  } else if (t == "resize_end") {
    // How it ended, the generation it formed, and which resize it was (the id of its
    // resize_accepted event): a scheduler needs no earlier event to tell (docs/http.md).
    e.type = "resize_end";
    data = json::object();
    if (r.contains("outcome")) data["outcome"] = r.value("outcome", "");
    if (r.contains("generation")) data["generation"] = r.value("generation", uint64_t{0});
    if (resize_accepted_ != 0) data["resize"] = resize_accepted_;
  } else if (t == "checkpoint") {
    e.type = "checkpoint";
    data = {{"step", r.value("step", int64_t{0})},
            {"generation", r.value("generation", uint64_t{0})},
            {"dir", r.value("dir", "")}};
    if (r.contains("bytes")) data["bytes"] = r.value("bytes", int64_t{0});
    if (r.contains("seconds")) data["seconds"] = r.value("seconds", 0.0);
  } else if (t == "end") {
    e.type = "job_end";
    data = {{"outcome", r.value("outcome", "")}, {"reason", r.value("reason", "")}};
    if (r.contains("checkpoint_step")) {  // the job's last committed checkpoint
      data["checkpoint_step"] = r.value("checkpoint_step", int64_t{0});
      data["checkpoint_dir"] = r.value("checkpoint_dir", "");
    }
  } else {
    return e;
  }
  data["type"] = e.type;
  e.data = data.dump();
  return e;
}

void JournalEventReader::Follow(const json& r) {
  const std::string t = r.value("t", "");
  if (t == "snapshot") {
    // A compacted journal's first payload (docs/ha.md, "Compaction"): no event, but the state a
    // later record refers to (the committed members, the build in flight) is in its records.
    for (const json& inner : r.value("records", json::array())) {
      if (inner.is_object()) Follow(inner);
    }
    return;
  }
  if (t == "begin" && r.value("kind", "") == "build") {
    // Kept for the commit that follows it, also when that commit is the first event after
    // `after`.
    build_target_ = r.value("target", uint64_t{0});
    if (r.contains("members_of")) {
      // Written as a difference from the committed members (docs/journal.md); the ranks up to
      // the first that is not one.
      std::vector<int32_t> dropped;
      for (const json& d : r.value("dropped", json::array())) {
        if (!d.is_number_unsigned() || d.get<uint64_t>() > INT32_MAX) break;
        dropped.push_back(static_cast<int32_t>(d.get<uint64_t>()));
      }
      build_members_ = LessDroppedThenAdded(committed_members_, dropped, IdsOf(r, "added"));
    } else {
      build_members_ = IdsOf(r, "workers");
    }
  }
  if (t == "commit") {
    // The members a later begin record may refer to, as the commit's event lists them.
    if (!r.contains("begin")) {
      committed_members_ = IdsOf(r, "members");
    } else if (r.value("begin", uint64_t{0}) == build_target_) {
      committed_members_ = build_members_;
    } else {
      committed_members_.clear();
    }
  }
  if (t == "resize") resize_accepted_ = offset_;  // its event's id
}

std::vector<JobEvent> JournalEventReader::ReadNew() {
  std::vector<JobEvent> events;
  auto visit = [&](std::string_view payload, uint64_t next) {
    const json r = json::parse(payload.begin(), payload.end(), nullptr, /*allow_exceptions=*/false);
    if (!r.is_object()) return false;
    offset_ = next;
    Follow(r);
    if (offset_ <= after_) return true;
    JobEvent e = EventOf(r);
    if (!e.type.empty()) {
      e.id = offset_;
      events.push_back(std::move(e));
    }
    return true;
  };
  // Up to the last whole, intact record (the next one may still be being written); none when the
  // journal is missing or cannot be read.
  storage_->Read(offset_, visit, nullptr).status().IgnoreError();
  return events;
}

}  // namespace elastra::journal
