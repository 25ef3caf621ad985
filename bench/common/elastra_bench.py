"""elastra_bench: what the benchmark scripts share (bench/*/bench_*.py).

Where the build is (ELASTRA_BUILD, default `build`), a job's `elastra status --json`, the poll
that waits for a status to satisfy a condition while the job's processes live, and a free port.
Each script imports it from `../common` beside its own folder: bench/common/ in the source tree,
build/bench/common/ in the build (bench/CMakeLists.txt copies it there), so a script runs the same
from either:

    sys.dont_write_bytecode = True  # no __pycache__ beside the sources
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "common"))
    import elastra_bench
"""
import json
import os
import socket
import subprocess
import time

# The build directory the scripts take their binaries from (an absolute path: a script may run
# its children from another directory).
BUILD = os.path.abspath(os.environ.get("ELASTRA_BUILD", "build"))
ELASTRA = os.path.join(BUILD, "launch", "elastra")


def build_path(*parts):
    """A file of the build, e.g. build_path("examples", "train_mlp")."""
    return os.path.join(BUILD, *parts)


def status(state_dir, timeout=None):
    """The job's `elastra status --state-dir STATE_DIR --json`, or None when it did not answer
    (no coordinator yet, or one that is gone) or answered no JSON. `timeout` (a --timeout value,
    e.g. "2s") bounds the wait for an answer."""
    cmd = [ELASTRA, "status", "--state-dir", state_dir, "--json"]
    if timeout is not None:
        cmd += ["--timeout", timeout]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None
    try:
        return json.loads(r.stdout)
    except ValueError:
        return None


def wait_for(what, condition, poll, where, processes=(), timeout_s=120, poll_s=0.02):
    """Calls poll() (a status, or None when there is none yet) every poll_s seconds until
    condition(status) holds, and returns that status. Raises RuntimeError naming `where` (the
    job's folder or state directory) when one of `processes`, (name, Popen) pairs that must live
    meanwhile, exited, or after timeout_s seconds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for name, process in processes:
            if process.poll() is not None:
                raise RuntimeError(f"{where}: {name} exited while waiting for {what}")
        s = poll()
        if s is not None and condition(s):
            return s
        time.sleep(poll_s)
    raise RuntimeError(f"{where}: no {what} within {timeout_s} s")


def wait_for_status(state_dir, what, condition, processes=(), timeout_s=120, poll_s=0.02):
    """wait_for over the `elastra status` of the job whose state directory is `state_dir`."""
    return wait_for(what, condition, lambda: status(state_dir), state_dir, processes, timeout_s,
                    poll_s)


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (the caller binds it, or retries)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
