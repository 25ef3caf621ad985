// The journal recorder's handling of a failed write: one the journal's fence refused (a fenced
// etcd journal after another coordinator won the job's leadership, docs/ha.md) goes to the
// on_fenced handler, which `elastra coordinator` exits in; any other failure is only logged.
// The storage here refuses on demand, as EtcdJournalStorage does once the leader key is another's
// (tests/journal/etcd_election_test.cc shows etcd refusing such writes).
#include "coordinator/journal_recorder.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace elastra::coordinator {
namespace {

class RefusingStorage : public journal::JournalStorage {
 public:
  enum class Mode { kAccept, kNotTheLeader, kFull };

  const std::string& name() const override { return name_; }
  uint64_t max_payload_bytes() const override { return 1 << 20; }
  StatusOr<uint64_t> Read(uint64_t position, const journal::JournalVisitor& visit,
                          journal::JournalDamage* damage) override {
    if (!created_) return NotFoundError("no journal");
    for (uint64_t i = position; i < records_.size(); ++i) {
      if (!visit(records_[i], i + 1)) return i + 1;
    }
    if (damage != nullptr) damage->end = records_.size();
    return records_.size();
  }
  Status CutAfter(uint64_t position, bool) override {
    created_ = true;
    records_.resize(std::min<uint64_t>(position, records_.size()));
    return OkStatus();
  }
  Status Clear() override {
    created_ = true;
    records_.clear();
    return OkStatus();
  }
  Status Append(std::string_view payload) override {
    if (mode == Mode::kNotTheLeader) {
      return FailedPreconditionError("not the leader: /elastra/job/leader was created at revision 9");
    }
    if (mode == Mode::kFull) return ResourceExhaustedError("no space left on device");
    records_.emplace_back(payload);
    return OkStatus();
  }

  Mode mode = Mode::kAccept;

 private:
  std::string name_ = "refusing";
  bool created_ = false;
  std::vector<std::string> records_;
};

TEST(JournalRecorderTest, AWriteTheFenceRefusedGoesToOnFencedOtherFailuresAreLogged) {
  Membership membership;
  JournalRecorder recorder(&membership);
  auto storage = std::make_unique<RefusingStorage>();
  RefusingStorage* refusing = storage.get();
  auto journal = journal::Journal::Create(std::move(storage));
  ASSERT_TRUE(journal.ok()) << journal.status();
  ASSERT_TRUE((*journal)->RecordJob("job", 2, 4).ok());
  recorder.Attach(std::move(journal).value());
  std::vector<Status> fenced;
  recorder.set_on_fenced([&fenced](const Status& s) { fenced.push_back(s); });

  recorder.Target(3);
  EXPECT_TRUE(fenced.empty());
  refusing->mode = RefusingStorage::Mode::kFull;
  recorder.Target(4);
  EXPECT_TRUE(fenced.empty()) << "a full disk is not a lost leadership";
  refusing->mode = RefusingStorage::Mode::kNotTheLeader;
  recorder.Target(5);
  ASSERT_EQ(fenced.size(), 1u);
  EXPECT_EQ(fenced[0].code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(fenced[0].message().rfind("not the leader", 0), 0u) << fenced[0];
}

}  // namespace
}  // namespace elastra::coordinator
