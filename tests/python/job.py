"""A real elastic job for the Python tests: `elastra run` as a child process whose workers are
Python programs, driven through the real `elastra status --json`, `elastra resize` and signals
(the Python twin of tests/integration/job_harness.h). Paths come from the environment CTest
sets: ELASTRA_BINARY, COMPARE_LOGS, PYTHONPATH (the build's python/), ELASTRA_PYTHON."""

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


class Job:
    """`elastra run --nproc N RUN_ARGS -- python3 PROGRAM ARGS` in a fresh directory; "{dir}" in
    PROGRAM ARGS is replaced by that directory, where `files` (name -> text) are written first."""

    def __init__(self, nproc: int, program: List[str], env: Optional[dict] = None,
                 files: Optional[dict] = None, run_args: Optional[List[str]] = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="elastra_py_")
        for name, text in (files or {}).items():  # written before any worker starts
            with open(os.path.join(self.dir, name), "w") as f:
                f.write(text)
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
