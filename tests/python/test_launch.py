"""examples/python/train_mlp.py launched the two other ways docs/launching.md describes:

- Python.Mpirun: `mpirun --oversubscribe -np 2 --enable-recovery python3 train_mlp.py`, no other
  set-up (MPI rank 0 starts the coordinator), as tests/mpi/mpirun_job_test.cc runs train_mlp:
  shrunk to 1 (the removed rank parks) and grown back to 2 (the same two processes), then rank
  mpi-1 SIGKILLed; the survivor finishes, mpirun exits 0, and the log matches --reference.
- Python.Agent: `elastra coordinator --workers 2` and one `elastra agent` on this host (the
  multi-host launch path, as tests/cluster/cluster_job.cc starts it); grown to 3 (the agent starts
  a worker) and shrunk to 2; the coordinator and the agent exit 0 and the log matches --reference.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from job import MPIRUN, PYTHON, SOURCE, AgentJob, MpirunJob, read_log  # noqa: E402

MLP = os.path.join(SOURCE, "examples", "python", "train_mlp.py")
COMPARE_LOGS = os.environ.get("COMPARE_LOGS", "compare_logs")
# Small; 10 ms steps (as the C++ mpirun tests pad theirs) keep the log a few hundred steps long.
ARGS = ["--hidden", "16", "--layers", "2", "--global-batch", "48", "--commit-every", "5",
        "--step-time-ms", "10"]
PROGRAM = [MLP, "--log", "{dir}/run.jsonl", "--stop-file", "{dir}/stop", "--steps", "1000000"]


def applied_layouts(path: str) -> tuple:
    """(steps applied, the dp sizes they were applied at); a step logged again keeps its last."""
    steps = read_log(path)
    return max(steps) + 1, {r["dp"] for r in steps.values()}


def match_reference(job, applied: int) -> None:
    """train_mlp.py --reference for `applied` steps, compared by compare_logs (every sample
    position once, the same loss at every step)."""
    ref = job.path("ref.jsonl")
    r = subprocess.run([PYTHON, MLP, "--reference", "--steps", str(applied), "--log", ref] + ARGS,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([COMPARE_LOGS, job.path("run.jsonl"), ref, str(applied)],
                       capture_output=True, text=True)
    print(r.stdout)
    assert r.returncode == 0, f"{r.stdout}{r.stderr}\n{job.log()}"
    result = json.loads(r.stdout)
    assert result["accounting_ok"] and result["steps"] == applied


def members(s: dict) -> dict:
    return {w["id"]: w.get("pid") for w in s.get("workers", []) if w.get("state") == "member"}


def test_mpirun_parked_grown_and_killed_run_matches_reference():
    if not os.access(MPIRUN, os.X_OK):
        pytest.skip(f"mpirun not found at {MPIRUN}")
    # A dead rank never reaches MPI_Finalize; the survivor does not wait long for it.
    flags = ["--enable-recovery", "-x", "ELASTRA_MPI_FINALIZE_TIMEOUT_MS=3000"]
    with MpirunJob(2, PROGRAM + ARGS, flags) as job:
        s = job.wait_for(lambda s: s.get("step", -1) >= 10 and len(members(s)) == 2,
                         what="2 ranks at step 10")
        start = members(s)
        assert set(start) == {"mpi-0", "mpi-1"}, s
        assert job.resize("--workers", "1")["layout"]["dp"] == 1
        job.wait_for(lambda s: sum(w.get("state") == "standby" for w in s.get("workers", [])) == 1,
                     what="the removed rank parked")
        job.wait_for_step(job.wait_for(lambda s: True)["step"] + 10)
        assert job.resize("--workers", "2")["layout"]["dp"] == 2
        s = job.wait_for(lambda s: len(members(s)) == 2, what="2 members again")
        assert members(s) == start, f"the parked rank did not come back: {s}"
        s = job.wait_for_step(s["step"] + 10)
        victim = members(s).get("mpi-1", -1)
        assert victim > 0, s
        os.kill(victim, signal.SIGKILL)
        s = job.wait_for(lambda s: s.get("state") == "running" and
                         s.get("layout", {}).get("dp") == 1 and s.get("history") and
                         s["history"][-1].get("reason") == "failure", what="failure recovery")
        job.wait_for_step(s["step"] + 5)
        open(job.path("stop"), "w").close()
        assert job.wait() == 0, job.log()
        assert "parked after step" in job.log(), job.log()
        applied, dps = applied_layouts(job.path("run.jsonl"))
        assert dps == {1, 2}, f"dp sizes seen: {dps}"
        match_reference(job, applied)


def test_agent_grown_and_shrunk_run_matches_reference():
    with AgentJob(2, PROGRAM + ARGS, slots=4) as job:
        s = job.wait_for(lambda s: s.get("step", -1) >= 10, what="step 10")
        assert [h.get("name") for h in s.get("hosts", [])] == ["pyhost"], s
        for workers in (3, 2):
            assert job.resize("--workers", str(workers))["layout"]["dp"] == workers
            job.wait_for_step(job.wait_for(lambda s: True)["step"] + 10)
        open(job.path("stop"), "w").close()
        assert job.wait() == 0, job.log()
        assert job.wait_agent() == 0, job.log()
        applied, dps = applied_layouts(job.path("run.jsonl"))
        assert dps == {2, 3}, f"dp sizes seen: {dps}"
        match_reference(job, applied)
