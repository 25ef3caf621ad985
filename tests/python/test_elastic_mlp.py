"""examples/python/train_mlp.py as an elastic job:

- Python.ElasticMlp: 4 workers, resized to 2 and to 3, changed to dp=2 x tp=2 on 4, then one
  SIGKILLed; its log must match its --reference run step for step, every sample applied once
  (examples/compare_logs), as tests/integration/elastic_job_test.cc checks the C++ train_mlp.
- Python.DismissedSpare: a hot spare (`elastra run --spares 1`) that `elastra resize --spares 0`
  stops before it ever held a rank: its start() returns LEAVE and it exits 0.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from job import PYTHON, SOURCE, Job, read_log  # noqa: E402

MLP = os.path.join(SOURCE, "examples", "python", "train_mlp.py")
COMPARE_LOGS = os.environ.get("COMPARE_LOGS", "compare_logs")
# Small and quick; commits every 5 steps so that the kill rolls back a few steps at most.
ARGS = ["--hidden", "16", "--layers", "2", "--global-batch", "48", "--commit-every", "5"]


def test_resized_and_killed_run_matches_reference():
    with Job(4, [MLP, "--log", "{dir}/run.jsonl", "--stop-file", "{dir}/stop",
                 "--steps", "1000000"] + ARGS) as job:
        step = job.wait_for_step(5)["step"]
        for workers, layout in ((2, None), (3, None), (4, {"dp": 2, "pp": 1, "tp": 2})):
            extra = ["--layout", "dp=2,pp=1,tp=2"] if layout else []
            job.resize("--workers", str(workers), *extra)
            want = layout or {"dp": workers, "pp": 1, "tp": 1}
            s = job.wait_for(lambda s: s.get("state") == "running" and
                             s.get("layout") == want, what=f"layout {want}")
            step = job.wait_for_step(s["step"] + 5)["step"]
        victim = job.pid_of_rank(1)
        assert victim > 0, job.log()
        os.kill(victim, signal.SIGKILL)
        s = job.wait_for(lambda s: s.get("state") == "running" and s.get("history") and
                         s["history"][-1].get("reason") == "failure", what="failure recovery")
        job.wait_for_step(s["step"] + 5)
        open(job.path("stop"), "w").close()
        assert job.wait() == 0, job.log()

        run = read_log(job.path("run.jsonl"))
        applied = max(run) + 1
        layouts = {(r["dp"], r["tp"]) for r in run.values()}
        assert {(4, 1), (2, 1), (3, 1), (2, 2)} <= layouts, f"layouts seen: {layouts}"
        ref = job.path("ref.jsonl")
        r = subprocess.run([PYTHON, MLP, "--reference", "--steps", str(applied), "--log", ref] +
                           ARGS, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        r = subprocess.run([COMPARE_LOGS, job.path("run.jsonl"), ref, str(applied)],
                           capture_output=True, text=True)
        print(r.stdout)
        assert r.returncode == 0, f"{r.stdout}{r.stderr}\n{job.log()}"
        result = json.loads(r.stdout)
        assert result["accounting_ok"] and result["steps"] == applied


def test_a_spare_no_longer_needed_exits_0():
    with Job(2, [MLP, "--stop-file", "{dir}/stop", "--steps", "1000000"] + ARGS,
             run_args=["--spares", "1"]) as job:
        # Not before the first generation: a worker that joined first is listed as standby until
        # it forms, and may become a member.
        s = job.wait_for(lambda s: s.get("state") == "running" and
                         sum(w.get("state") == "member" for w in s.get("workers", [])) == 2 and
                         any(w.get("state") == "standby" for w in s.get("workers", [])),
                         what="a standby spare")
        spare = [w for w in s["workers"] if w.get("state") == "standby"][0]
        job.resize("--spares", "0")
        job.wait_for_log(f"worker {spare['id']} (pid {spare['pid']}) exited with ")
        assert f"worker {spare['id']} (pid {spare['pid']}) exited with 0\n" in job.log(), job.log()
        assert "train_mlp.py: dismissed before holding a rank" in job.log(), job.log()
        assert "dismissed before holding a rank: the job keeps 0 spare(s)" in job.log(), job.log()
        job.wait_for_step(job.status().get("step", 0) + 3)
        open(job.path("stop"), "w").close()
        assert job.wait() == 0, job.log()
