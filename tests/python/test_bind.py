"""elastra.torch.bind in real `elastra run` jobs (docs/python.md):

- Python.BindViews: after start() and each reconfiguration (2 workers, then dp=2 x tp=2 on 4)
  every parameter and AdamW state tensor of a bound module is the view of its shard (the same
  memory) and holds the right part of the global value (bind_views.py checks, this test reads);
  binds with a bad optimizer or rule raise and register nothing.
- Python.ElasticBind: an nn.Module + AdamW trained through 4 -> 2 -> 3 workers and a SIGKILLed
  one matches its --reference run step for step, every sample applied once (compare_logs).
- Python.RaisingWorker: a worker whose step raises an uncaught exception leaves (its process
  exits with the traceback), and the others recover and go on; the run still matches its
  reference, every sample applied once.
- Python.ClosedWorker: the same, but the process catches the exception and lives on: the
  `with elastra.Worker()` block it left closed the worker, and the job recovers as before.
  Either way the block's close() sent the coordinator a Leave: it recovers at once, not once the
  worker's heartbeats stopped.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from job import PYTHON, Job  # noqa: E402
from test_elastic_mlp import COMPARE_LOGS, read_log  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BIND_MLP = os.path.join(HERE, "bind_mlp.py")
BIND_VIEWS = os.path.join(HERE, "bind_views.py")


def running_at(job: Job, want: dict, what: str = "") -> dict:
    return job.wait_for(lambda s: s.get("state") == "running" and s.get("layout") == want,
                        what=what or f"layout {want}")


def matches_reference(job: Job) -> None:
    """The run's log against a --reference run of as many steps: same losses, every sample
    position applied exactly once."""
    run = read_log(job.path("run.jsonl"))
    applied = max(run) + 1
    ref = job.path("ref.jsonl")
    r = subprocess.run([PYTHON, BIND_MLP, "--reference", "--steps", str(applied), "--log", ref],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([COMPARE_LOGS, job.path("run.jsonl"), ref, str(applied), "1e-9"],
                       capture_output=True, text=True)
    print(r.stdout)
    assert r.returncode == 0, f"{r.stdout}{r.stderr}\n{job.log()}"
    result = json.loads(r.stdout)
    assert result["accounting_ok"] and result["steps"] == applied


def test_parameters_are_the_views_after_a_reshard():
    with Job(2, [BIND_VIEWS, "{dir}", "{dir}/stop"]) as job:
        s = running_at(job, {"dp": 2, "pp": 1, "tp": 1})
        job.wait_for_step(s["step"] + 2)
        job.resize("--workers", "4", "--layout", "dp=2,pp=1,tp=2")
        s = running_at(job, {"dp": 2, "pp": 1, "tp": 2})
        job.wait_for_step(s["step"] + 2)
        open(job.path("stop"), "w").close()
        assert job.wait() == 0, job.log()
        records = [json.loads(line) for path in glob.glob(job.path("check.*.jsonl"))
                   for line in open(path)]
        checks = [r for r in records if "wrong" in r]
        closed = [r["after_close"] for r in records if "after_close" in r]
        assert checks, job.log()
        assert len(closed) == 4 and all(c == [] for c in closed), closed
        for c in checks:
            assert c["wrong"] == [] and c["refused_wrong"] == [], c
        at_tp2 = [c for c in checks if c["layout"] == [2, 1, 2]]
        assert len(at_tp2) == 4, checks  # every rank checked after the change
        # Each tp rank holds half of the split tensors: the module's shapes changed.
        assert all(c["split_rows"] == 3 and c["cols_cols"] == 3 for c in at_tp2), at_tp2
        assert any(c["step"] > 0 for c in at_tp2), at_tp2  # values trained before the move


def test_bound_module_resized_and_killed_matches_reference():
    with Job(4, [BIND_MLP, "--log", "{dir}/run.jsonl", "--stop-file", "{dir}/stop"]) as job:
        step = job.wait_for_step(5)["step"]
        for workers in (2, 3):
            job.resize("--workers", str(workers))
            s = running_at(job, {"dp": workers, "pp": 1, "tp": 1})
            step = job.wait_for_step(s["step"] + 5)["step"]
        victim = job.pid_of_rank(1)
        assert victim > 0, job.log()
        os.kill(victim, signal.SIGKILL)
        s = job.wait_for(lambda s: s.get("state") == "running" and s.get("history") and
                         s["history"][-1].get("reason") == "failure", what="failure recovery")
        job.wait_for_step(s["step"] + 5)
        open(job.path("stop"), "w").close()
        assert job.wait() == 0, job.log()
        layouts = {r["dp"] for r in read_log(job.path("run.jsonl")).values()}
        assert {4, 2, 3} <= layouts, f"dp sizes seen: {layouts}"
        matches_reference(job)


def raise_in_a_step(stay: bool) -> None:
    """3 workers; rank 1 raises mid-step once; the job must recover and match its reference."""
    extra = ["--stay-after-raise"] if stay else []
    with Job(3, [BIND_MLP, "--log", "{dir}/run.jsonl", "--stop-file", "{dir}/stop",
                 "--raise-file", "{dir}/raise"] + extra) as job:
        job.wait_for_step(5)
        open(job.path("raise"), "w").close()
        s = job.wait_for(lambda s: s.get("state") == "running" and s.get("history") and
                         s["history"][-1].get("reason") == "failure", what="failure recovery")
        assert not os.path.exists(job.path("raise")), "no worker raised"
        job.wait_for_step(s["step"] + 5)
        if stay:  # the raiser's process lives on, its worker closed: it is what left
            assert "the worker is closed, the process stays" in job.log(), job.log()
            assert "exited with" not in job.log(), job.log()
        # The with block's close() told the coordinator: it went on at the worker's Leave, not
        # when the worker's heartbeats stopped.
        assert "lost: left (closed by the program (Worker.close()))" in job.log(), job.log()
        assert "missed heartbeat deadline" not in job.log(), job.log()
        open(job.path("stop"), "w").close()
        assert job.wait() == 0, job.log()
        assert "RuntimeError: bind_mlp.py: a bug in the step, on purpose" in job.log() or stay
        matches_reference(job)


def test_worker_raising_mid_step_leaves_and_the_job_recovers():
    raise_in_a_step(stay=False)


def test_worker_closed_by_with_after_an_exception_while_its_process_lives():
    raise_in_a_step(stay=True)
