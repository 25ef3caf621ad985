#include "journal/etcd_storage.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <utility>
#include <vector>

#include "journal/file_storage.h"

namespace elastra::journal {
namespace {

constexpr size_t kSequenceDigits = 20;  // every uint64_t, so that key order is sequence order

std::string Padded(uint64_t n, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*" PRIu64, digits, n);
  return buf;
}

// The record's head value: "<bytes> <crc32c> <chunks>\n" and the payload's first piece.
std::string HeadValue(std::string_view payload, uint64_t chunks) {
  std::string head = std::to_string(payload.size()) + " " +
                     std::to_string(Crc32c(payload.data(), payload.size())) + " " +
                     std::to_string(chunks) + "\n";
  head += payload.substr(0, std::min<uint64_t>(payload.size(), EtcdJournalStorage::kChunkBytes));
  return head;
}

struct Head {
  uint64_t bytes = 0;
  uint32_t crc = 0;
  uint64_t chunks = 0;
  std::string_view first;  // the first piece, in the head's value
};

bool ParseHead(std::string_view value, Head* out) {
  const size_t eol = value.find('\n');
  if (eol == std::string_view::npos || eol > 64) return false;
  const std::string line(value.substr(0, eol));
  uint64_t crc = 0;
  int used = 0;
  if (std::sscanf(line.c_str(), "%" SCNu64 " %" SCNu64 " %" SCNu64 "%n", &out->bytes, &crc,
                  &out->chunks, &used) != 3 ||
      static_cast<size_t>(used) != line.size() || crc > UINT32_MAX) {
    return false;
  }
  out->crc = static_cast<uint32_t>(crc);
  out->first = value.substr(eol + 1);
  const uint64_t want_chunks =
      out->bytes == 0
          ? 1
          : (out->bytes + EtcdJournalStorage::kChunkBytes - 1) / EtcdJournalStorage::kChunkBytes;
  return out->bytes <= EtcdJournalStorage::kMaxRecordBytes && out->chunks == want_chunks &&
         out->first.size() == std::min<uint64_t>(out->bytes, EtcdJournalStorage::kChunkBytes);
}

// The sequence number of a head key (after `heads`), or false when it is not one.
bool ParseSequence(std::string_view key, std::string_view heads, uint64_t* out) {
  if (key.substr(0, heads.size()) != heads) return false;
  const std::string_view digits = key.substr(heads.size());
  if (digits.size() != kSequenceDigits) return false;
  uint64_t n = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = n;
  return true;
}

}  // namespace

StatusOr<std::unique_ptr<EtcdJournalStorage>> EtcdJournalStorage::Create(
    std::unique_ptr<EtcdClient> client, const std::string& job) {
  if (job.empty() || job.find('/') != std::string::npos) {
    return InvalidArgumentError("job name '" + job + "' for etcd: empty or with a '/'");
  }
  return std::unique_ptr<EtcdJournalStorage>(new EtcdJournalStorage(std::move(client), job));
}

StatusOr<std::unique_ptr<EtcdJournalStorage>> EtcdJournalStorage::Create(EtcdOptions options,
                                                                         const std::string& job) {
  ELASTRA_ASSIGN_OR_RETURN(auto client, EtcdClient::Create(std::move(options)));
  return Create(std::move(client), job);
}

EtcdJournalStorage::EtcdJournalStorage(std::unique_ptr<EtcdClient> client, const std::string& job)
    : client_(std::move(client)),
      job_prefix_("/elastra/" + job + "/"),
      prefix_(job_prefix_ + "journal/"),
      name_("etcd:" + prefix_) {}

std::string EtcdJournalStorage::HeadKey(uint64_t sequence) const {
  return prefix_ + "r/" + Padded(sequence, kSequenceDigits);
}

std::string EtcdJournalStorage::ChunkKey(uint64_t sequence, uint64_t index) const {
  return prefix_ + "c/" + Padded(sequence, kSequenceDigits) + "/" + Padded(index, 4);
}

std::string EtcdJournalStorage::SnapshotPieceKey(uint64_t position, uint64_t index) const {
  return SnapshotKey() + "/" + Padded(position, kSequenceDigits) + "/" + Padded(index, 4);
}

void EtcdJournalStorage::SetFence(EtcdFence fence) { fence_ = std::move(fence); }

void EtcdJournalStorage::ClearFence() { fence_.reset(); }

std::vector<EtcdCompare> EtcdJournalStorage::Fenced(std::vector<EtcdCompare> compares) const {
  if (fence_) {
    compares.push_back({fence_->key, EtcdCompare::Target::kCreateRevision,
                        EtcdCompare::Result::kEqual, fence_->create_revision, ""});
  }
  return compares;
}

std::vector<EtcdOp> EtcdJournalStorage::FailureReads(std::vector<EtcdOp> reads) const {
  if (fence_) reads.push_back({EtcdOp::Kind::kRange, fence_->key, "", "", 1});
  return reads;
}

Status EtcdJournalStorage::FenceRefused(const EtcdTxnResult& txn, const std::string& what) const {
  if (!fence_ || txn.succeeded) return OkStatus();
  const bool gone = txn.ranges.empty() || txn.ranges.back().kvs.empty();
  const int64_t revision = gone ? 0 : txn.ranges.back().kvs[0].create_revision;
  if (revision == fence_->create_revision) return OkStatus();
  return FailedPreconditionError(
      "not the leader: journal " + name_ + ": " + what + " refused: the leader key " +
      fence_->key +
      (gone ? std::string(" does not exist") : " was created at revision " + std::to_string(revision)) +
      ", this writer won at revision " + std::to_string(fence_->create_revision));
}

StatusOr<int64_t> EtcdJournalStorage::FencedPut(const std::string& key, std::string_view value,
                                                std::vector<EtcdCompare> compares,
                                                const std::string& what) {
  ELASTRA_ASSIGN_OR_RETURN(const EtcdTxnResult txn,
                           client_->Txn(Fenced(std::move(compares)),
                                        {{EtcdOp::Kind::kPut, key, std::string(value), ""}},
                                        FailureReads({})));
  if (!txn.succeeded) {
    ELASTRA_RETURN_IF_ERROR(FenceRefused(txn, what));
    return InternalError("journal " + name_ + ": " + what + " was written by another writer");
  }
  return txn.revision;
}

Status EtcdJournalStorage::PutPieces(std::string_view payload,
                                     const std::function<std::string(uint64_t)>& key,
                                     const std::vector<EtcdCompare>& compares,
                                     const std::string& what, std::vector<EtcdCompare>* written) {
  const uint64_t chunks = payload.empty() ? 1 : (payload.size() + kChunkBytes - 1) / kChunkBytes;
  for (uint64_t i = 1; i < chunks; ++i) {
    const uint64_t at = i * kChunkBytes;
    const std::string piece_key = key(i);
    ELASTRA_ASSIGN_OR_RETURN(
        const int64_t revision,
        FencedPut(piece_key, payload.substr(at, std::min(kChunkBytes, payload.size() - at)),
                  compares, what));
    written->push_back(
        {piece_key, EtcdCompare::Target::kModRevision, EtcdCompare::Result::kEqual, revision, ""});
  }
  return OkStatus();
}

StatusOr<bool> EtcdJournalStorage::ReadPayload(
    std::string_view head_value, int64_t revision,
    const std::function<std::string(uint64_t)>& piece_key, std::string* payload,
    std::string* damage) {
  Head head;
  if (!ParseHead(head_value, &head)) {
    *damage = "corrupt record head";
    return false;
  }
  payload->assign(head.first);
  for (uint64_t i = 1; i < head.chunks; ++i) {
    ELASTRA_ASSIGN_OR_RETURN(EtcdRangeResult piece, client_->RangeAt(revision, piece_key(i), ""));
    if (piece.kvs.empty()) {
      *damage = "piece " + std::to_string(i) + " of the record is missing";
      return false;
    }
    *payload += piece.kvs[0].value;
  }
  if (payload->size() != head.bytes) {
    *damage = "record length mismatch";
    return false;
  }
  if (Crc32c(payload->data(), payload->size()) != head.crc) {
    *damage = "record checksum mismatch";
    return false;
  }
  return true;
}

StatusOr<EtcdJournalStorage::Snapshot> EtcdJournalStorage::ReadSnapshot(int64_t revision,
                                                                        bool with_payload,
                                                                        std::string* damage) {
  ELASTRA_ASSIGN_OR_RETURN(const EtcdRangeResult r, client_->RangeAt(revision, SnapshotKey(), ""));
  Snapshot out;
  if (r.kvs.empty()) return out;
  // "<position> " and a record's head value.
  const std::string_view value = r.kvs[0].value;
  out.mod_revision = r.kvs[0].mod_revision;
  const size_t space = value.find(' ');
  const std::string digits(value.substr(0, space));
  if (space == std::string_view::npos || digits.empty() || digits.size() > kSequenceDigits ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    *damage = "snapshot: corrupt head";
    return out;
  }
  out.position = std::stoull(digits);
  if (!with_payload) return out;
  std::string why;
  ELASTRA_ASSIGN_OR_RETURN(
      const bool whole,
      ReadPayload(value.substr(space + 1), revision,
                  [this, &out](uint64_t i) { return SnapshotPieceKey(out.position, i); },
                  &out.payload, &why));
  if (!whole) *damage = "snapshot: " + why;
  return out;
}

StatusOr<uint64_t> EtcdJournalStorage::Compacted() {
  std::string damage;
  ELASTRA_ASSIGN_OR_RETURN(const Snapshot snapshot, ReadSnapshot(0, false, &damage));
  if (!damage.empty()) return InternalError("journal " + name_ + ": " + damage);
  return snapshot.position;
}

StatusOr<uint64_t> EtcdJournalStorage::End(int64_t revision) {
  const std::string heads = prefix_ + "r/";
  ELASTRA_ASSIGN_OR_RETURN(EtcdRangeResult last,
                           client_->RangeAt(revision, heads, EtcdClient::PrefixEnd(heads), 1,
                                            /*descending=*/true, /*keys_only=*/true));
  std::string damage;
  ELASTRA_ASSIGN_OR_RETURN(const Snapshot snapshot, ReadSnapshot(revision, false, &damage));
  if (last.kvs.empty()) return snapshot.position;
  uint64_t sequence = 0;
  if (!ParseSequence(last.kvs[0].key, heads, &sequence)) {
    return InternalError("journal " + name_ + ": a key that is no record: " + last.kvs[0].key);
  }
  return std::max(sequence + 1, snapshot.position);
}

StatusOr<uint64_t> EtcdJournalStorage::Read(uint64_t position, const JournalVisitor& visit,
                                            JournalDamage* damage) {
  ELASTRA_ASSIGN_OR_RETURN(EtcdRangeResult created,
                           client_->Range(prefix_ + "created", "", 1, false, /*keys_only=*/true));
  if (created.kvs.empty()) return NotFoundError("no journal at " + name_);
  // Every read below is at this revision: one state of the journal, even while a writer appends
  // or compacts.
  const int64_t revision = created.revision;
  if (damage != nullptr) {
    ELASTRA_ASSIGN_OR_RETURN(const uint64_t end, End(revision));
    *damage = JournalDamage{"", end};
  }
  auto stop = [&](std::string why) {
    if (damage != nullptr) damage->why = std::move(why);
  };
  std::string why;
  uint64_t at = position;
  {
    ELASTRA_ASSIGN_OR_RETURN(const Snapshot snapshot, ReadSnapshot(revision, false, &why));
    if (!why.empty()) {
      stop(why);
      return at;
    }
    if (position < snapshot.position) {
      // The records before the snapshot's position are gone: the snapshot stands for them.
      ELASTRA_ASSIGN_OR_RETURN(const Snapshot whole, ReadSnapshot(revision, true, &why));
      if (!why.empty()) {
        stop(why);
        return at;
      }
      if (!visit(whole.payload, whole.position)) return at;
      at = whole.position;
    }
  }
  const std::string heads = prefix_ + "r/";
  const std::string heads_end = EtcdClient::PrefixEnd(heads);
  std::string payload;
  for (;;) {
    ELASTRA_ASSIGN_OR_RETURN(EtcdRangeResult page,
                             client_->RangeAt(revision, HeadKey(at), heads_end, kHeadsPerRead));
    for (const EtcdKeyValue& kv : page.kvs) {
      uint64_t sequence = 0;
      if (!ParseSequence(kv.key, heads, &sequence)) {
        stop("a key that is no record (" + kv.key + ")");
        return at;
      }
      if (sequence != at) {
        stop("record " + std::to_string(at) + " is missing");
        return at;
      }
      ELASTRA_ASSIGN_OR_RETURN(
          const bool whole,
          ReadPayload(kv.value, revision, [this, at](uint64_t i) { return ChunkKey(at, i); },
                      &payload, &why));
      if (!whole) {
        stop(why);
        return at;
      }
      if (!visit(payload, at + 1)) return at;
      ++at;
    }
    if (!page.more || page.kvs.empty()) break;
  }
  return at;
}

Status EtcdJournalStorage::CutAfter(uint64_t position, bool keep_copy) {
  ELASTRA_ASSIGN_OR_RETURN(const uint64_t end, End());
  if (position > end) {
    return InvalidArgumentError("journal " + name_ + ": cut after record " +
                                std::to_string(position) + " of " + std::to_string(end));
  }
  if (position > 0 && position < end) {
    ELASTRA_ASSIGN_OR_RETURN(const uint64_t compacted, Compacted());
    if (position < compacted) {
      return InvalidArgumentError("journal " + name_ + ": cut after record " +
                                  std::to_string(position) + ", inside the snapshot of records " +
                                  "before " + std::to_string(compacted));
    }
  }
  if (position < end && keep_copy) {
    // The whole journal, key by key, under corrupt/<revision>/ (a copy of the file's kind: for
    // inspection, never read back). Not atomic: a copy cut short by an error is still a copy.
    std::string from = prefix_;
    const std::string to = EtcdClient::PrefixEnd(prefix_);
    std::string copy_prefix;
    for (;;) {
      ELASTRA_ASSIGN_OR_RETURN(EtcdRangeResult page, client_->Range(from, to, kHeadsPerRead));
      if (copy_prefix.empty())
        copy_prefix = job_prefix_ + "corrupt/" + std::to_string(page.revision) + "/";
      for (const EtcdKeyValue& kv : page.kvs) {
        if (kv.key == prefix_ + "created") continue;
        ELASTRA_RETURN_IF_ERROR(
            FencedPut(copy_prefix + kv.key.substr(prefix_.size()), kv.value, {}, "a copy")
                .status());
      }
      if (!page.more || page.kvs.empty()) break;
      from = page.kvs.back().key + '\0';
    }
  }
  // The records from `position` on and every piece from there (an unfinished append's too); from
  // 0, the snapshot too.
  const std::string chunks = prefix_ + "c/";
  std::vector<EtcdOp> ops = {
      {EtcdOp::Kind::kDeleteRange, HeadKey(position), "", EtcdClient::PrefixEnd(prefix_ + "r/")},
      {EtcdOp::Kind::kDeleteRange, chunks + Padded(position, kSequenceDigits), "",
       EtcdClient::PrefixEnd(chunks)},
      {EtcdOp::Kind::kPut, prefix_ + "created", "1", ""},
  };
  if (position == 0) {
    ops.push_back({EtcdOp::Kind::kDeleteRange, SnapshotKey(), "",
                   EtcdClient::PrefixEnd(SnapshotKey())});
  }
  ELASTRA_ASSIGN_OR_RETURN(const EtcdTxnResult txn, client_->Txn(Fenced({}), ops, FailureReads({})));
  ELASTRA_RETURN_IF_ERROR(FenceRefused(txn, "the cut after record " + std::to_string(position)));
  open_ = true;
  next_ = position;
  return OkStatus();
}

Status EtcdJournalStorage::Clear() {
  const std::vector<EtcdOp> ops = {
      {EtcdOp::Kind::kDeleteRange, prefix_ + "r/", "", EtcdClient::PrefixEnd(prefix_ + "r/")},
      {EtcdOp::Kind::kDeleteRange, prefix_ + "c/", "", EtcdClient::PrefixEnd(prefix_ + "c/")},
      {EtcdOp::Kind::kDeleteRange, SnapshotKey(), "", EtcdClient::PrefixEnd(SnapshotKey())},
      {EtcdOp::Kind::kPut, prefix_ + "created", "1", ""},
  };
  ELASTRA_ASSIGN_OR_RETURN(const EtcdTxnResult txn, client_->Txn(Fenced({}), ops, FailureReads({})));
  ELASTRA_RETURN_IF_ERROR(FenceRefused(txn, "clearing the journal"));
  open_ = true;
  next_ = 0;
  return OkStatus();
}

Status EtcdJournalStorage::Append(std::string_view payload) {
  if (!open_) return FailedPreconditionError("the journal " + name_ + " is not open for appending");
  if (payload.size() > kMaxRecordBytes) {
    return InvalidArgumentError("journal record of " + std::to_string(payload.size()) +
                                " bytes is over the limit");
  }
  const uint64_t chunks = payload.empty() ? 1 : (payload.size() + kChunkBytes - 1) / kChunkBytes;
  const std::string what = "record " + std::to_string(next_);
  const std::string key = HeadKey(next_);
  const std::string value = HeadValue(payload, chunks);
  const EtcdCompare is_new{key, EtcdCompare::Target::kVersion, EtcdCompare::Result::kEqual, 0, ""};
  // The pieces after the first go first, each put only while the head does not exist (a record
  // written is never changed) and under the fence; the head's transaction then requires each
  // piece to be still the one put, so a rival's piece of the same number cannot slip in.
  std::vector<EtcdCompare> compares = {is_new};
  ELASTRA_RETURN_IF_ERROR(PutPieces(
      payload, [this](uint64_t i) { return ChunkKey(next_, i); }, {is_new}, what, &compares));
  // The head, only if the record is new: a second writer of the job is refused here.
  ELASTRA_ASSIGN_OR_RETURN(
      const EtcdTxnResult txn,
      client_->Txn(Fenced(std::move(compares)), {{EtcdOp::Kind::kPut, key, value, ""}},
                   FailureReads({{EtcdOp::Kind::kRange, key, "", "", 1}})));
  if (!txn.succeeded) {
    // Our own head, written by a request whose answer was lost and sent again, is a success.
    const bool ours =
        !txn.ranges.empty() && !txn.ranges[0].kvs.empty() && txn.ranges[0].kvs[0].value == value;
    if (!ours) {
      ELASTRA_RETURN_IF_ERROR(FenceRefused(txn, what));
      return InternalError("journal " + name_ + ": " + what + " was written by another writer");
    }
  }
  ++next_;
  return OkStatus();
}

Status EtcdJournalStorage::Compact(uint64_t position, std::string_view snapshot) {
  if (!open_) return FailedPreconditionError("the journal " + name_ + " is not open for writing");
  if (position == 0 || position > next_) {
    return InvalidArgumentError("journal " + name_ + ": a snapshot at record " +
                                std::to_string(position) + " of 1.." + std::to_string(next_));
  }
  if (snapshot.size() > kMaxRecordBytes) {
    return InvalidArgumentError("journal snapshot of " + std::to_string(snapshot.size()) +
                                " bytes is over the limit");
  }
  std::string damage;  // a damaged older snapshot is replaced all the same
  ELASTRA_ASSIGN_OR_RETURN(const Snapshot old, ReadSnapshot(0, false, &damage));
  if (position < old.position) {
    return InvalidArgumentError("journal " + name_ + ": a snapshot at record " +
                                std::to_string(position) + ", before the last one's " +
                                std::to_string(old.position));
  }
  // Nobody else may compact meanwhile: every write below requires the snapshot key unchanged.
  const EtcdCompare same{SnapshotKey(), EtcdCompare::Target::kModRevision,
                         EtcdCompare::Result::kEqual, old.mod_revision, ""};
  std::vector<EtcdCompare> compares = {same};
  ELASTRA_RETURN_IF_ERROR(PutPieces(
      snapshot, [this, position](uint64_t i) { return SnapshotPieceKey(position, i); }, {same},
      "the snapshot", &compares));
  const uint64_t chunks =
      snapshot.empty() ? 1 : (snapshot.size() + kChunkBytes - 1) / kChunkBytes;
  const std::string at = Padded(position, kSequenceDigits);
  const std::vector<EtcdOp> ops = {
      {EtcdOp::Kind::kPut, SnapshotKey(),
       std::to_string(position) + " " + HeadValue(snapshot, chunks), ""},
      {EtcdOp::Kind::kDeleteRange, prefix_ + "r/", "", HeadKey(position)},
      {EtcdOp::Kind::kDeleteRange, prefix_ + "c/", "", prefix_ + "c/" + at},
      // The older snapshot's pieces (a snapshot at the same position has just overwritten its).
      {EtcdOp::Kind::kDeleteRange, SnapshotKey() + "/", "", SnapshotKey() + "/" + at},
  };
  ELASTRA_ASSIGN_OR_RETURN(const EtcdTxnResult txn,
                           client_->Txn(Fenced(std::move(compares)), ops, FailureReads({})));
  if (!txn.succeeded) {
    ELASTRA_RETURN_IF_ERROR(FenceRefused(txn, "the snapshot at record " + std::to_string(position)));
    return InternalError("journal " + name_ + ": another writer compacted it meanwhile");
  }
  return OkStatus();
}

}  // namespace elastra::journal
