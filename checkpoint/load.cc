// Loading a checkpoint (see reader.h): LoadCheckpoint, LoadCheckpointInto, LoadLatest and
// LoadLatestInto, which read the requested pieces of the state on a pool of threads through a
// CheckpointReader (reader.cc).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "checkpoint/reader.h"
#include "checkpoint/reader_internal.h"
#include "common/host_memory.h"
#include "common/logging.h"

namespace elastra::checkpoint {
namespace {

using internal::kLoadBlockBytes;
using internal::ShapeText;

}  // namespace

// A load's work, shared among its threads: blocks of the pieces that are stored regions (read
// straight into the destination), and whole pieces that are assembled from intersections.
class RegionLoader {
 public:
  RegionLoader(CheckpointReader* reader, const std::vector<std::span<std::byte>>& out)
      : reader_(reader), out_(out) {}

  // Plans the work of piece `box` of request `request`, at byte `at` of its buffer.
  void Add(size_t request, const TensorEntry& t, const Box& box, uint64_t at) {
    for (const RegionEntry& r : t.regions) {
      if (!(r.box == box) || r.bytes == 0) continue;
      const uint64_t chunks = r.chunk_checksums.size();
      const uint64_t per_block = std::max<uint64_t>(1, kLoadBlockBytes / r.chunk_bytes);
      for (uint64_t c = 0; c < chunks; c += per_block) {
        blocks_.push_back({request, &t, &r, box, at, c, std::min(chunks, c + per_block)});
      }
      return;
    }
    if (box.volume() > 0) blocks_.push_back({request, &t, nullptr, box, at, 0, 0});
  }

  // Runs every block on `threads` threads; the first error, or OK.
  Status Run(int threads) {
    // In file order, so that the threads read each file front to back together.
    std::stable_sort(blocks_.begin(), blocks_.end(), [](const Block& a, const Block& b) {
      if (a.r == nullptr || b.r == nullptr) return a.r != nullptr && b.r == nullptr;
      return a.r->file != b.r->file
                 ? a.r->file < b.r->file
                 : a.r->offset + a.c0 * a.r->chunk_bytes < b.r->offset + b.c0 * b.r->chunk_bytes;
    });
    std::atomic<size_t> next{0};
    std::mutex mu;
    Status first;
    auto work = [&] {
      for (size_t i = next++; i < blocks_.size(); i = next++) {
        {
          std::lock_guard<std::mutex> l(mu);
          if (!first.ok()) return;
        }
        Status s = RunBlock(blocks_[i]);
        if (!s.ok()) {
          std::lock_guard<std::mutex> l(mu);
          if (first.ok()) first = s;
          return;
        }
      }
    };
    const size_t n = std::min<size_t>(std::max(threads, 1), std::max<size_t>(blocks_.size(), 1));
    std::vector<std::thread> pool;
    for (size_t t = 1; t < n; ++t) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
    return first;
  }

 private:
  struct Block {
    size_t request;
    const TensorEntry* t;
    const RegionEntry* r;  // null: the piece is assembled from intersections (ReadRegion)
    Box box;               // the piece
    uint64_t at;           // the piece's first byte in the request's buffer
    uint64_t c0, c1;       // chunks of r
  };

  Status RunBlock(const Block& b) {
    std::byte* base = out_[b.request].data() + b.at;
    const size_t esize = ElementSize(b.t->dtype);
    if (b.r == nullptr) {
      return reader_->ReadRegion(b.t->name, b.box, {base, b.box.volume() * esize});
    }
    const RegionEntry& r = *b.r;
    std::byte* dst = base + b.c0 * r.chunk_bytes;
    Status s = reader_->ReadChunks(*b.t, r, b.c0, b.c1, dst);
    // A replica of the same box in another file may still be good (same chunking: the same
    // chunks; else the whole piece from it).
    for (const RegionEntry& other : b.t->regions) {
      if (s.ok()) break;
      if (&other == &r || !(other.box == r.box)) continue;
      LOG(WARNING) << s << "; trying the replica in " << reader_->manifest().files[other.file].name;
      s = other.chunk_bytes == r.chunk_bytes
              ? reader_->ReadChunks(*b.t, other, b.c0, b.c1, dst)
              : reader_->CopyIntersection(*b.t, other, b.box, {base, b.box.volume() * esize});
    }
    ELASTRA_RETURN_IF_ERROR(s);
    if (b.c1 == r.chunk_checksums.size()) reader_->CheckPaddingAfter(*b.t, r);
    return OkStatus();
  }

  CheckpointReader* reader_;
  const std::vector<std::span<std::byte>>& out_;
  std::vector<Block> blocks_;
};

namespace {

// The checks of `requests` against the manifest of `reader` (cheap, before anything is
// allocated): every tensor known, shapes and dtypes as expected, boxes inside. The entries and
// the bytes of each request.
Status CheckRequests(const CheckpointReader& reader, const std::vector<RegionRequest>& requests,
                     std::vector<const TensorEntry*>* entries, std::vector<uint64_t>* totals) {
  const Manifest& m = reader.manifest();
  for (const RegionRequest& q : requests) {
    const TensorEntry* t = m.FindTensor(q.tensor);
    if (t == nullptr) return CorruptError(reader.dir() + ": has no tensor '" + q.tensor + "'");
    if (!q.shape.empty() &&
        (t->shape != q.shape || t->dtype != static_cast<int32_t>(q.dtype))) {
      // A checkpoint loads only into the type it was written in: no silent conversion.
      return InvalidArgumentError(reader.dir() + ": tensor '" + q.tensor + "' is " +
                                  ShapeText(t->shape) + " " +
                                  DataTypeName(static_cast<DataType>(t->dtype)) +
                                  " in the checkpoint, " + ShapeText(q.shape) + " " +
                                  DataTypeName(q.dtype) + " expected");
    }
    const size_t esize = ElementSize(t->dtype);
    uint64_t total = 0;
    for (const Box& b : q.pieces) {
      bool inside = b.begin.size() == t->shape.size() && b.end.size() == t->shape.size();
      for (size_t d = 0; inside && d < t->shape.size(); ++d) {
        inside = b.begin[d] >= 0 && b.begin[d] <= b.end[d] && b.end[d] <= t->shape[d];
      }
      if (!inside) {  // checked before the volume is trusted for an allocation
        return InvalidArgumentError("box " + b.ToString() + " does not fit tensor '" + q.tensor +
                                    "' of shape " + ShapeText(t->shape));
      }
      total += b.volume() * esize;
    }
    totals->push_back(total);
    entries->push_back(t);
  }
  return OkStatus();
}

// Runs fn(i) for i in [0, n) on up to `threads` threads.
template <class Fn>
void ParallelFor(size_t n, int threads, Fn fn) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) fn(i);
  };
  std::vector<std::thread> pool;
  const size_t count = std::min<size_t>(std::max(threads, 1), std::max<size_t>(n, 1));
  for (size_t t = 1; t < count; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

LoadedState Describe(const CheckpointReader& reader) {
  const Manifest& m = reader.manifest();
  LoadedState out;
  out.dir = reader.dir();
  out.job = m.job;
  out.step = m.step;
  out.generation = m.generation;
  out.layout = m.layout;
  out.scalars = m.scalars;
  return out;
}

// Every piece of every request into `into` (checked to fit), in parallel; the outside faults the
// load came across into `out->warnings`.
Status LoadPieces(CheckpointReader* reader, const std::vector<RegionRequest>& requests,
                  const std::vector<const TensorEntry*>& entries,
                  const std::vector<std::span<std::byte>>& into, int threads, LoadedState* out) {
  RegionLoader loader(reader, into);
  for (size_t i = 0; i < requests.size(); ++i) {
    const size_t esize = ElementSize(entries[i]->dtype);
    uint64_t at = 0;
    for (const Box& b : requests[i].pieces) {
      loader.Add(i, *entries[i], b, at);
      at += b.volume() * esize;
    }
  }
  ELASTRA_RETURN_IF_ERROR(loader.Run(threads));
  out->warnings = reader->outside_faults();
  return OkStatus();
}

}  // namespace

StatusOr<LoadedState> LoadCheckpoint(Env* env, const std::string& dir,
                                     const std::vector<RegionRequest>& requests, int threads) {
  ELASTRA_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader,
                           CheckpointReader::Open(env, dir));
  std::vector<const TensorEntry*> entries;
  std::vector<uint64_t> totals;
  ELASTRA_RETURN_IF_ERROR(CheckRequests(*reader, requests, &entries, &totals));
  LoadedState out = Describe(*reader);
  // The buffers are allocated (and their pages faulted in) in parallel too.
  out.regions.resize(requests.size());
  ParallelFor(requests.size(), threads,
              [&](size_t i) { out.regions[i] = NewHostBuffer(totals[i]); });
  std::vector<std::span<std::byte>> into;
  for (auto& r : out.regions) into.push_back({reinterpret_cast<std::byte*>(r.data()), r.size()});
  ELASTRA_RETURN_IF_ERROR(LoadPieces(reader.get(), requests, entries, into, threads, &out));
  return out;
}

StatusOr<LoadedState> LoadCheckpointInto(Env* env, const std::string& dir,
                                         const std::vector<RegionRequest>& requests,
                                         const std::vector<std::span<std::byte>>& into,
                                         int threads) {
  if (into.size() != requests.size()) {
    return InvalidArgumentError(std::to_string(into.size()) + " buffers for " +
                                std::to_string(requests.size()) + " requests");
  }
  ELASTRA_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader,
                           CheckpointReader::Open(env, dir));
  std::vector<const TensorEntry*> entries;
  std::vector<uint64_t> totals;
  ELASTRA_RETURN_IF_ERROR(CheckRequests(*reader, requests, &entries, &totals));
  for (size_t i = 0; i < requests.size(); ++i) {
    if (into[i].size() != totals[i]) {
      return InvalidArgumentError("buffer of " + std::to_string(into[i].size()) +
                                  " bytes for tensor '" + requests[i].tensor + "' (" +
                                  std::to_string(totals[i]) + " requested)");
    }
  }
  LoadedState out = Describe(*reader);
  ELASTRA_RETURN_IF_ERROR(LoadPieces(reader.get(), requests, entries, into, threads, &out));
  return out;
}

namespace {

StatusOr<LoadedState> LoadNewest(
    Env* env, const std::string& root,
    const std::function<StatusOr<LoadedState>(const std::string& dir)>& load) {
  std::vector<std::string> faults;
  ELASTRA_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> list, ListCheckpoints(env, root, &faults));
  for (const std::string& f : faults) LOG(WARNING) << "refusing checkpoint: " << f;
  for (const CheckpointInfo& info : list) {
    auto loaded = load(info.dir);
    if (loaded.ok()) {
      if (!faults.empty()) {
        LOG(WARNING) << "loaded the older checkpoint " << info.dir << " (step " << info.step
                     << ") after " << faults.size() << " refused";
      }
      loaded->skipped = faults;
      return loaded;
    }
    LOG(WARNING) << "refusing checkpoint " << info.dir << ": " << loaded.status();
    faults.push_back(info.dir + ": " + loaded.status().ToString());
  }
  if (faults.empty()) return NotFoundError("no committed checkpoint under " + root);
  std::string all;
  for (const std::string& f : faults) all += "\n  " + f;
  return CorruptError("no committed checkpoint under " + root + " loads:" + all);
}

}  // namespace

StatusOr<LoadedState> LoadLatest(Env* env, const std::string& root,
                                 const std::vector<RegionRequest>& requests, int threads) {
  return LoadNewest(env, root, [&](const std::string& dir) {
    return LoadCheckpoint(env, dir, requests, threads);
  });
}

StatusOr<LoadedState> LoadLatestInto(Env* env, const std::string& root,
                                     const std::vector<RegionRequest>& requests,
                                     const std::vector<std::span<std::byte>>& into, int threads) {
  return LoadNewest(env, root, [&](const std::string& dir) {
    return LoadCheckpointInto(env, dir, requests, into, threads);
  });
}

}  // namespace elastra::checkpoint
