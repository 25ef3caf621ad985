#include "journal/file_storage.h"

#include <algorithm>
#include <array>
#include <span>
#include <utility>
#include <vector>

namespace elastra::journal {
namespace {

std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

std::string Frame(std::string_view payload) {
  std::string out(FileJournalStorage::kHeaderBytes, '\0');
  auto* h = reinterpret_cast<uint8_t*>(out.data());
  PutU32(h, FileJournalStorage::kMagic);
  PutU32(h + 4, static_cast<uint32_t>(payload.size()));
  PutU32(h + 8, Crc32c(payload.data(), payload.size()));
  out += payload;
  return out;
}

// Copies `from` to `to` (mode 0600, replaced when it exists) in bounded pieces.
Status CopyFile(Env* env, const std::string& from, const std::string& to) {
  ELASTRA_ASSIGN_OR_RETURN(auto in, env->NewRandomAccessFile(from));
  ELASTRA_ASSIGN_OR_RETURN(const uint64_t size, in->Size());
  ELASTRA_ASSIGN_OR_RETURN(auto out, env->NewAppendableFile(to));
  ELASTRA_RETURN_IF_ERROR(env->TruncateFile(to, 0));
  std::vector<std::byte> buffer(std::min<uint64_t>(size, 1u << 20));
  for (uint64_t at = 0; at < size;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), size - at));
    ELASTRA_RETURN_IF_ERROR(in->Read(at, n, buffer.data()));
    ELASTRA_RETURN_IF_ERROR(out->Append(std::span<const std::byte>(buffer.data(), n)));
    at += n;
  }
  ELASTRA_RETURN_IF_ERROR(out->Sync());
  return out->Close();
}

}  // namespace

uint32_t Crc32c(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = MakeCrcTable();
  uint32_t c = 0xFFFFFFFFu;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < size; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

FileJournalStorage::FileJournalStorage(std::string path, Env* env)
    : path_(std::move(path)), env_(env) {}

FileJournalStorage::~FileJournalStorage() {
  if (file_ != nullptr) file_->Close().IgnoreError();
}

StatusOr<uint64_t> FileJournalStorage::Read(uint64_t position, const JournalVisitor& visit,
                                            JournalDamage* damage) {
  auto opened = env_->NewRandomAccessFile(path_);
  if (!opened.ok()) {
    if (opened.status().code() == StatusCode::kNotFound) {
      return NotFoundError("no journal at " + path_);
    }
    return InternalError("opening the journal " + path_ + ": " + opened.status().message());
  }
  const std::unique_ptr<RandomAccessFile> file = std::move(opened).value();
  auto size = file->Size();
  if (!size.ok()) {
    return InternalError("reading the journal " + path_ + ": " + size.status().message());
  }
  const uint64_t file_size = *size;
  if (damage != nullptr) *damage = JournalDamage{"", file_size};
  auto stop = [&](std::string why) {
    if (damage != nullptr) damage->why = std::move(why);
  };
  auto read = [&](uint64_t at, size_t n, void* out) {
    Status s = file->Read(at, n, static_cast<std::byte*>(out));
    return s.ok() ? s : InternalError("reading the journal " + path_ + ": " + s.message());
  };
  uint64_t offset = position;
  std::string payload;
  while (offset < file_size) {
    if (file_size - offset < kHeaderBytes) {
      stop("torn record header (the writer was stopped mid-write)");
      break;
    }
    uint8_t header[kHeaderBytes];
    ELASTRA_RETURN_IF_ERROR(read(offset, kHeaderBytes, header));
    const uint32_t magic = GetU32(header);
    const uint32_t length = GetU32(header + 4);
    const uint32_t crc = GetU32(header + 8);
    if (magic != kMagic) {
      stop("bad record magic");
      break;
    }
    if (length > kMaxRecordBytes) {
      stop("record length " + std::to_string(length) + " over the limit");
      break;
    }
    if (offset + kHeaderBytes + length > file_size) {
      stop("torn record (the file ends inside it; the writer was stopped mid-write)");
      break;
    }
    payload.resize(length);
    ELASTRA_RETURN_IF_ERROR(read(offset + kHeaderBytes, length, payload.data()));
    if (Crc32c(payload.data(), payload.size()) != crc) {
      stop("record checksum mismatch");
      break;
    }
    const uint64_t next = offset + kHeaderBytes + length;
    if (!visit(payload, next)) break;
    offset = next;
  }
  return offset;
}

Status FileJournalStorage::CutAfter(uint64_t position, bool keep_copy) {
  auto file = env_->NewAppendableFile(path_);
  if (!file.ok()) {
    return InternalError("opening the journal " + path_ + ": " + file.status().message());
  }
  auto size = env_->GetFileSize(path_);
  if (!size.ok()) {
    return InternalError("opening the journal " + path_ + ": " + size.status().message());
  }
  if (*size != position) {
    // Bad bytes after the consistent prefix: keep a copy for inspection, then cut them off so the
    // next record follows the last good one.
    if (keep_copy) CopyFile(env_, path_, path_ + ".corrupt").IgnoreError();
    Status cut = env_->TruncateFile(path_, position);
    if (!cut.ok()) {
      return InternalError("cutting the journal " + path_ +
                           " back to its consistent part: " + cut.message());
    }
  }
  env_->SyncDir(DirName(path_)).IgnoreError();
  if (file_ != nullptr) file_->Close().IgnoreError();
  file_ = std::move(file).value();
  size_ = position;
  return OkStatus();
}

Status FileJournalStorage::Clear() {
  auto file = env_->NewAppendableFile(path_);
  Status s = file.status();
  if (s.ok()) s = env_->TruncateFile(path_, 0);
  if (!s.ok()) return InternalError("creating the journal " + path_ + ": " + s.message());
  env_->SyncDir(DirName(path_)).IgnoreError();
  if (file_ != nullptr) file_->Close().IgnoreError();
  file_ = std::move(file).value();
  size_ = 0;
  return OkStatus();
}

Status FileJournalStorage::Append(std::string_view payload) {
  if (file_ == nullptr) {
    return FailedPreconditionError("the journal " + path_ + " is not open for appending");
  }
  if (payload.size() > kMaxRecordBytes) {
    return InvalidArgumentError("journal record of " + std::to_string(payload.size()) +
                                " bytes is over the limit");
  }
  const std::string frame = Frame(payload);
  Status s = file_->Append(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(frame.data()), frame.size()));
  if (s.ok()) s = file_->Sync();
  if (!s.ok()) {
    // Leave no part of the record behind for the next append to follow.
    env_->TruncateFile(path_, size_).IgnoreError();
    return s.WithContext("appending to the journal");
  }
  size_ += frame.size();
  return OkStatus();
}

}  // namespace elastra::journal
