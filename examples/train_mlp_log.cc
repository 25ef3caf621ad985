// The step log of train_mlp: see train_mlp_log.h.
#include "examples/train_mlp_log.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace train_mlp {

StepLog::StepLog(const std::string& path) {
  if (!path.empty()) {
    file_ = std::fopen(path.c_str(), "a");
    if (file_ == nullptr) {
      std::fprintf(stderr, "train_mlp: cannot open log %s: %s\n", path.c_str(),
                   std::strerror(errno));
      std::exit(1);
    }
  }
}

StepLog::~StepLog() {
  if (file_) std::fclose(file_);
}

void StepLog::Write(int64_t step, uint64_t generation, const elastra::Layout& layout,
                    double loss, int64_t begin, int64_t end) {
  if (file_ == nullptr) return;
  std::fprintf(file_,
               "{\"step\":%lld,\"generation\":%llu,\"dp\":%d,\"pp\":%d,\"tp\":%d,"
               "\"loss\":%.17g,\"sample_begin\":%lld,\"sample_end\":%lld}\n",
               static_cast<long long>(step), static_cast<unsigned long long>(generation),
               layout.dp, layout.pp, layout.tp, loss, static_cast<long long>(begin),
               static_cast<long long>(end));
  std::fflush(file_);
}

}  // namespace train_mlp
