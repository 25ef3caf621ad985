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

StatusOr<uint64_t> EtcdJournalStorage::End() {
  const std::string heads = prefix_ + "r/";
  ELASTRA_ASSIGN_OR_RETURN(EtcdRangeResult last,
                           client_->Range(heads, EtcdClient::PrefixEnd(heads), 1,
                                          /*descending=*/true, /*keys_only=*/true));
  if (last.kvs.empty()) return uint64_t{0};
  uint64_t sequence = 0;
  if (!ParseSequence(last.kvs[0].key, heads, &sequence)) {
    return InternalError("journal " + name_ + ": a key that is no record: " + last.kvs[0].key);
  }
  return sequence + 1;
}

StatusOr<uint64_t> EtcdJournalStorage::Read(uint64_t position, const JournalVisitor& visit,
                                            JournalDamage* damage) {
  ELASTRA_ASSIGN_OR_RETURN(EtcdRangeResult created,
                           client_->Range(prefix_ + "created", "", 1, false, /*keys_only=*/true));
  if (created.kvs.empty()) return NotFoundError("no journal at " + name_);
  if (damage != nullptr) {
    ELASTRA_ASSIGN_OR_RETURN(const uint64_t end, End());
    *damage = JournalDamage{"", end};
  }
  auto stop = [&](std::string why) {
    if (damage != nullptr) damage->why = std::move(why);
  };
  const std::string heads = prefix_ + "r/";
  const std::string heads_end = EtcdClient::PrefixEnd(heads);
  uint64_t at = position;
  std::string payload;
  for (;;) {
    ELASTRA_ASSIGN_OR_RETURN(EtcdRangeResult page,
                             client_->Range(HeadKey(at), heads_end, kHeadsPerRead));
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
      Head head;
      if (!ParseHead(kv.value, &head)) {
        stop("corrupt record head");
        return at;
      }
      payload.assign(head.first);
      for (uint64_t i = 1; i < head.chunks; ++i) {
        ELASTRA_ASSIGN_OR_RETURN(EtcdRangeResult piece, client_->Range(ChunkKey(at, i), ""));
        if (piece.kvs.empty()) {
          stop("piece " + std::to_string(i) + " of the record is missing");
          return at;
        }
        payload += piece.kvs[0].value;
      }
      if (payload.size() != head.bytes) {
        stop("record length mismatch");
        return at;
      }
      if (Crc32c(payload.data(), payload.size()) != head.crc) {
        stop("record checksum mismatch");
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
            client_->Put(copy_prefix + kv.key.substr(prefix_.size()), kv.value));
      }
      if (!page.more || page.kvs.empty()) break;
      from = page.kvs.back().key + '\0';
    }
  }
  // The records from `position` on and every piece from there (an unfinished append's too).
  const std::string chunks = prefix_ + "c/";
  const std::vector<EtcdOp> ops = {
      {EtcdOp::Kind::kDeleteRange, HeadKey(position), "", EtcdClient::PrefixEnd(prefix_ + "r/")},
      {EtcdOp::Kind::kDeleteRange, chunks + Padded(position, kSequenceDigits), "",
       EtcdClient::PrefixEnd(chunks)},
      {EtcdOp::Kind::kPut, prefix_ + "created", "1", ""},
  };
  ELASTRA_RETURN_IF_ERROR(client_->Txn({}, ops, {}).status());
  open_ = true;
  next_ = position;
  return OkStatus();
}

Status EtcdJournalStorage::Clear() {
  const std::vector<EtcdOp> ops = {
      {EtcdOp::Kind::kDeleteRange, prefix_ + "r/", "", EtcdClient::PrefixEnd(prefix_ + "r/")},
      {EtcdOp::Kind::kDeleteRange, prefix_ + "c/", "", EtcdClient::PrefixEnd(prefix_ + "c/")},
      {EtcdOp::Kind::kPut, prefix_ + "created", "1", ""},
  };
  ELASTRA_RETURN_IF_ERROR(client_->Txn({}, ops, {}).status());
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
  // The pieces after the first go first, each a request of its own; a reader ignores them until
  // the head names them.
  for (uint64_t i = 1; i < chunks; ++i) {
    const uint64_t at = i * kChunkBytes;
    ELASTRA_RETURN_IF_ERROR(client_->Put(
        ChunkKey(next_, i), payload.substr(at, std::min(kChunkBytes, payload.size() - at))));
  }
  // The head, only if the record is new: a second writer of the job is refused here. (A leader's
  // fencing adds one compare: the election key's revision.)
  const std::string key = HeadKey(next_);
  const std::string value = HeadValue(payload, chunks);
  const EtcdCompare is_new{key, EtcdCompare::Target::kVersion, EtcdCompare::Result::kEqual, 0, ""};
  ELASTRA_ASSIGN_OR_RETURN(const EtcdTxnResult txn,
                           client_->Txn({is_new}, {{EtcdOp::Kind::kPut, key, value, ""}},
                                        {{EtcdOp::Kind::kRange, key, "", "", 1}}));
  if (!txn.succeeded) {
    // Our own head, written by a request whose answer was lost and sent again, is a success.
    const bool ours =
        !txn.ranges.empty() && !txn.ranges[0].kvs.empty() && txn.ranges[0].kvs[0].value == value;
    if (!ours) {
      return InternalError("journal " + name_ + ": record " + std::to_string(next_) +
                           " was written by another writer");
    }
  }
  ++next_;
  return OkStatus();
}

}  // namespace elastra::journal
