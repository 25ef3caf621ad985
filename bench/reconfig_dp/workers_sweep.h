// bench_reconfig_dp --workers-sweep: a worker's own Gloo world at 2..32 workers, ours beside raw
// Gloo's full mesh (see workers_sweep.cc).
#pragma once

#include <cstdint>
#include <string>

// The sweep: runs `self` --sweep-rank for every rank of every size up to `max_workers`, `reps`
// times each side; prints the table and one JSON line. 0 on success.
int RunWorkersSweep(const std::string& self, int iters, int reps, int max_workers);

// One rank of one side ("ours" or "raw") of one size, over the store in `dir`: writes a byte to
// `ready_fd`, starts when a byte arrives on `go_fd`, and writes its figures to dir/result_<rank>.
// 0 on success.
int RunSweepRank(const std::string& side, const std::string& dir, int rank, int size, int iters,
                 int ready_fd, int go_fd);
