"""A real elastic job for the Python tests: `elastra run` as a child process whose workers are
Python programs, driven through the real `elastra status --json`, `elastra resize` and signals
(the Python twin of tests/integration/job_harness.h). MpirunJob and AgentJob are the same job
launched by `mpirun` (tests/mpi/mpirun_job_test.cc) and by `elastra coordinator` + `elastra
agent` (tests/cluster/cluster_job.cc). Paths come from the environment CTest sets:
ELASTRA_BINARY, COMPARE_LOGS, PYTHONPATH (the build's python/), ELASTRA_PYTHON, MPIRUN."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Callable, List, Optional

ELASTRA = os.environ.get("ELASTRA_BINARY", "elastra")
PYTHON = os.environ.get("ELASTRA_PYTHON", sys.executable)
SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPIRUN = os.environ.get("MPIRUN", "mpirun")


def _fresh_dir(files: Optional[dict]) -> str:
    """A new directory holding `files` (name -> text)."""
    path = tempfile.mkdtemp(prefix="elastra_py_")
    for name, text in (files or {}).items():  # written before any worker starts
        with open(os.path.join(path, name), "w") as f:
            f.write(text)
    return path


def read_log(path: str) -> dict:
    """step -> its last record in a train_mlp log (a step undone by a rollback is logged again)."""
    steps = {}
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue  # a writer killed mid-line
            steps[r["step"]] = r
    return steps


class Job:
    """`elastra run --nproc N RUN_ARGS -- python3 PROGRAM ARGS` in a fresh directory; "{dir}" in
    PROGRAM ARGS is replaced by that directory, where `files` (name -> text) are written first."""

    def __init__(self, nproc: int, program: List[str], env: Optional[dict] = None,
                 files: Optional[dict] = None, run_args: Optional[List[str]] = None) -> None:
        self.dir = _fresh_dir(files)
        self.state_dir = os.path.join(self.dir, "state")
        self.launcher_log = os.path.join(self.dir, "launcher.log")
        argv = [ELASTRA, "run", "--nproc", str(nproc), "--state-dir", self.state_dir,
                "--max-workers", "8"] + (run_args or []) + ["--", PYTHON] + [a.replace("{dir}", self.dir) for a in program]
        full_env = dict(os.environ)
        full_env.update(env or {})
        with open(self.launcher_log, "w") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                            env=full_env)

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def status(self) -> dict:
        """`elastra status --json`; {} when it fails (no coordinator yet)."""
        if not os.path.exists(os.path.join(self.state_dir, "coordinator.json")):
            return {}
        r = subprocess.run([ELASTRA, "status", "--json", "--state-dir", self.state_dir],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return {}
        try:
            return json.loads(r.stdout)
        except ValueError:
            return {}

    def wait_for(self, pred: Callable[[dict], bool], timeout: float = 60, what: str = "") -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.status()
            if s and pred(s):
                return s
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"job never got to: {what}\n{self.log()}")

    def wait_for_step(self, step: int, timeout: float = 60) -> dict:
        return self.wait_for(lambda s: s.get("step", -1) >= step, timeout, f"step {step}")

    def wait_for_log(self, text: str, timeout: float = 60) -> None:
        """Waits until `text` is in what `elastra run` printed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log():
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"never printed: {text}\n{self.log()}")

    def wait_for_file(self, path: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.path.exists(path):
                return
            if self.process.poll() is not None and not os.path.exists(path):
                break
            time.sleep(0.05)
        raise AssertionError(f"{path} never appeared\n{self.log()}")

    def resize(self, *args: str) -> dict:
        r = subprocess.run([ELASTRA, "resize", "--state-dir", self.state_dir, *args, "--wait"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"resize {args}: {r.stdout}{r.stderr}\n{self.log()}"
        return json.loads(r.stdout.strip().splitlines()[-1])

    def pid_of_rank(self, rank: int) -> int:
        for w in self.status().get("workers", []):
            if w.get("rank") == rank and w.get("state") == "member":
                return int(w.get("pid", -1))
        return -1

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"elastra run did not exit in {timeout} s\n{self.log()}")

    def log(self) -> str:
        with open(self.launcher_log, errors="replace") as f:
            return f.read()[-20000:]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if not os.environ.get("ELASTRA_KEEP_TEST_DIRS"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "Job":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MpirunJob(Job):
    """`mpirun --oversubscribe -np N MPIRUN_ARGS python3 PROGRAM ARGS` in a fresh directory, its
    own process group, as tests/mpi/mpirun_job_test.cc starts train_mlp: MPI rank 0 starts the
    coordinator, whose coordinator.json lands in .elastra there; workers are mpi-<rank>."""

    def __init__(self, np: int, program: List[str], mpirun_args: Optional[List[str]] = None,
                 files: Optional[dict] = None) -> None:
        self.dir = _fresh_dir(files)
        self.state_dir = os.path.join(self.dir, ".elastra")
        self.launcher_log = os.path.join(self.dir, "mpirun.log")
        argv = [MPIRUN, "--oversubscribe", "-np", str(np)] + (mpirun_args or []) + \
            [PYTHON] + [a.replace("{dir}", self.dir) for a in program]
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   ELASTRA_BIN=ELASTRA)  # the coordinator rank 0 starts
        for name in ("ELASTRA_COORDINATOR", "ELASTRA_STATE_DIR"):  # nothing points elsewhere
            env.pop(name, None)
        with open(self.launcher_log, "w") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            cwd=self.dir, start_new_session=True)

    def close(self) -> None:
        if self.process.poll() is None:
            _stop_group(self.process)
        Job.close(self)


def _stop_group(process: subprocess.Popen) -> None:
    """SIGTERM to the process group `process` leads, SIGKILL 10 s later."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        process.wait()


class AgentJob(Job):
    """`elastra coordinator --workers N` and one `elastra agent --slots S -- python3 PROGRAM
    ARGS` that joins it with its join.json (the multi-host launch path on one host), in a fresh
    directory. `process` is the coordinator, `agent` the agent."""

    def __init__(self, workers: int, program: List[str], slots: int = 4,
                 files: Optional[dict] = None) -> None:
        self.dir = _fresh_dir(files)
        self.state_dir = os.path.join(self.dir, "state")
        self.launcher_log = os.path.join(self.dir, "coordinator.log")
        self.agent_log = os.path.join(self.dir, "agent.log")
        with open(self.launcher_log, "w") as log:
            self.process = subprocess.Popen(
                [ELASTRA, "coordinator", "--state-dir", self.state_dir, "--workers", str(workers),
                 "--max-workers", "8"], stdout=log, stderr=subprocess.STDOUT)
        self.agent = None
        self.wait_for_log('{"address"')  # the ready line: join.json is written
        argv = [ELASTRA, "agent", "--join", os.path.join(self.state_dir, "join.json"),
                "--name", "pyhost", "--slots", str(slots), "--coordinator-timeout", "60", "--",
                PYTHON] + [a.replace("{dir}", self.dir) for a in program]
        with open(self.agent_log, "w") as log:
            self.agent = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def log(self) -> str:
        text = "--- coordinator\n" + Job.log(self)
        if self.agent is not None:
            with open(self.agent_log, errors="replace") as f:
                text += "--- agent\n" + f.read()[-20000:]
        return text

    def wait_agent(self, timeout: float = 60) -> int:
        try:
            return self.agent.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"elastra agent did not exit in {timeout} s\n{self.log()}")

    def close(self) -> None:
        if self.agent is not None and self.agent.poll() is None:
            self.agent.kill()  # its workers get SIGTERM when it dies
            self.agent.wait()
        Job.close(self)
