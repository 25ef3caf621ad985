// The step log of train_mlp (--log FILE): one JSON line per applied step with its loss, layout,
// generation and samples; log_check.h reads it back to check a run against its --reference.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "elastra/layout.h"

namespace train_mlp {

class StepLog {
 public:
  // Appends to `path`; an empty path logs nothing. Exits with status 1 when the file cannot be
  // opened.
  explicit StepLog(const std::string& path);
  ~StepLog();
  StepLog(const StepLog&) = delete;
  StepLog& operator=(const StepLog&) = delete;

  void Write(int64_t step, uint64_t generation, const elastra::Layout& layout, double loss,
             int64_t begin, int64_t end);

 private:
  std::FILE* file_ = nullptr;
};

}  // namespace train_mlp
