"""The elastra package's API against real jobs: `elastra run --nproc 2` with api_worker.py.

Collectives on the dp, pp and tp groups and zero-copy views across dp=2 -> pp=2 -> tp=2; every
error path raising its named exception; Ctrl-C inside a blocking call."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from job import PYTHON, Job  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "api_worker.py")


def result(job: Job, phase: str, rank: int) -> dict:
    path = job.path(f"{phase}.{rank}.json")
    job.wait_for_file(path)
    with open(path) as f:
        r = json.load(f)
    assert r["ok"], f"{phase} on rank {rank}: {r['problems']}\n{job.log()}"
    return r


def test_worker_without_a_job_raises_invalid_argument():
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELASTRA_")}
    code = ("import elastra\n"
            "try:\n    elastra.Worker()\n"
            "except elastra.InvalidArgument as e:\n"
            "    assert isinstance(e, ValueError) and e.code == 7, e\n"
            "    print('ok', e.message)\n")
    r = subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stdout + r.stderr
    assert "ELASTRA_COORDINATOR" in r.stdout


def test_collectives_and_views_across_layouts():
    with Job(2, [WORKER, "layouts", "{dir}"]) as job:
        for rank in (0, 1):
            assert tuple(result(job, "dp", rank)["layout"]) == (2, 1, 1)
        job.resize("--workers", "2", "--layout", "dp=1,pp=2,tp=1")
        for rank in (0, 1):
            r = result(job, "pp", rank)
            assert r["checked_after_change"] >= 1
        job.resize("--workers", "2", "--layout", "dp=1,pp=1,tp=2")
        for rank in (0, 1):
            assert result(job, "tp", rank)["checked_after_change"] >= 2
        open(job.path("stop"), "w").close()
        assert job.wait() == 0, job.log()


def test_errors_raise_named_exceptions():
    with Job(2, [WORKER, "errors", "{dir}"], env={"ELASTRA_COMMIT_EVERY": "1"}) as job:
        result(job, "errors", 1)
        r = result(job, "errors", 0)
        assert r["lost"] in ("PeerLost", "Aborted")


def test_ctrl_c_interrupts_a_blocking_recv():
    with Job(2, [WORKER, "interrupt", "{dir}"]) as job:
        result(job, "interrupt", 1)
        result(job, "interrupt", 0)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
