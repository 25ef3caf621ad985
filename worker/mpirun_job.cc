#include "worker/mpirun_job.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "common/logging.h"
#include "elastra/config.h"

#if ELASTRA_HAVE_MPI && ELASTRA_HAVE_PMIX_HEADERS
#include <dlfcn.h>
#include <pmix.h>
#endif

namespace elastra {

void FailMpirunJob() {
  const char* recovery = std::getenv("OMPI_MCA_orte_enable_recovery");
  if (recovery == nullptr || std::string(recovery) != "1") return;
  const pid_t parent = getppid();
  std::ifstream comm("/proc/" + std::to_string(parent) + "/comm");
  std::string name;
  std::getline(comm, name);
  if (name != "mpirun" && name != "orterun" && name != "mpiexec") {
    LOG(WARNING) << "mpirun: the job failed, but mpirun (--enable-recovery) may exit 0: MPI rank "
                    "0's parent is "
                 << (name.empty() ? "unknown" : name) << ", not mpirun";
    return;
  }
  LOG(WARNING) << "mpirun: the job failed: stopping mpirun (pid " << parent
               << ") so that it exits non-zero (under --enable-recovery it would exit 0)";
  kill(parent, SIGTERM);
}


Status EndMpirunJob() {
#if ELASTRA_HAVE_MPI && ELASTRA_HAVE_PMIX_HEADERS
  void* lib = nullptr;
  for (const char* name : {"libpmix.so.2", "libpmix.so"}) {
    if ((lib = dlopen(name, RTLD_NOW | RTLD_NOLOAD)) != nullptr) break;
  }
  if (lib == nullptr) return UnavailableError("no PMIx client library is loaded in this process");
  auto init = reinterpret_cast<decltype(&PMIx_Init)>(dlsym(lib, "PMIx_Init"));
  auto control = reinterpret_cast<decltype(&PMIx_Job_control)>(dlsym(lib, "PMIx_Job_control"));
  if (init == nullptr || control == nullptr) {
    return UnavailableError("the loaded PMIx library has no PMIx_Init / PMIx_Job_control");
  }
  pmix_proc_t me;
  std::memset(&me, 0, sizeof(me));
  // MPI_Init already connected this process; a second PMIx_Init only counts a reference.
  pmix_status_t rc = init(&me, nullptr, 0);
  if (rc != PMIX_SUCCESS) return UnavailableError("PMIx_Init failed: " + std::to_string(rc));
  pmix_info_t terminate;
  std::memset(&terminate, 0, sizeof(terminate));
  std::strncpy(terminate.key, PMIX_JOB_CTRL_TERMINATE, PMIX_MAX_KEYLEN);
  terminate.value.type = PMIX_BOOL;
  terminate.value.data.flag = true;
  pmix_info_t* results = nullptr;
  size_t nresults = 0;
  rc = control(nullptr, 0, &terminate, 1, &results, &nresults);
  if (rc != PMIX_SUCCESS && rc != PMIX_OPERATION_SUCCEEDED) {
    return UnavailableError("PMIx_Job_control(PMIX_JOB_CTRL_TERMINATE) failed: " +
                            std::to_string(rc));
  }
  return OkStatus();
#else
  return UnavailableError("this Elastra build found no PMIx headers");
#endif
}

}  // namespace elastra
