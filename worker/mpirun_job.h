// Ending the mpirun job from MPI rank 0, whose coordinator ended the Elastra job: what Open MPI
// 4.1.4's mpirun does not do by itself after ranks were lost (docs/mpi.md, "When ranks were
// lost"). Internal to the mpirun bootstrap (mpi_bootstrap.cc). Call from MPI rank 0 only, after
// MPI_Init.
#pragma once

#include "elastra/status.h"

namespace elastra {

// Ends the mpirun job: asks Open MPI's runtime to halt its daemons, which kill what is left of the
// job, and mpirun exits (with 0 under --enable-recovery: it then ignores the ranks' exit codes).
// Why it is needed: with --enable-recovery, Open MPI 4.1.4's orted tells mpirun about only the
// first of its ranks that ends abnormally (killed, or exited without MPI_Finalize) and never
// reports the others, so once a rank on a host mpirun does not run on died, mpirun waits for that
// host's survivors forever, even after they exited (docs/mpi.md, "When ranks were lost"). The
// request goes through the PMIx client that MPI_Init started in this process (PMIx_Job_control
// with PMIX_JOB_CTRL_TERMINATE and no target); the library is looked up, not linked, so that only
// the instance Open MPI loaded is used. kUnavailable when there is none (an Open MPI built with its
// own internal PMIx, or no PMIx headers at build time).
Status EndMpirunJob();

// Makes mpirun exit non-zero for a job that failed. Under --enable-recovery, Open MPI 4.1.4's
// mpirun exits 0 whatever its ranks return, so rank 0, when mpirun is its parent (rank 0 runs on
// mpirun's host, as it does unless the host list says otherwise), sends it SIGTERM while it still
// waits for rank 0: mpirun stops what is left of the job and exits 1. Elsewhere the ranks' own
// exit codes already fail the mpirun job, and a rank 0 that is not mpirun's child only warns.
void FailMpirunJob();

}  // namespace elastra
