#include "elastra/communicator.h"

namespace elastra {

const char* BackendName(Backend backend) {
  switch (backend) {
    case Backend::kGloo: return "gloo";
    case Backend::kNccl: return "nccl";
    case Backend::kMpi: return "mpi";
  }
  return "unknown";
}

}  // namespace elastra
