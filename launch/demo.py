#!/usr/bin/env python3
"""make demo: a local elastic training job, resized and losing a worker, checked against its reference.

usage: demo.py [BUILD]      (BUILD: the build directory, default build)

train_mlp runs under `elastra run` on 4 workers and is resized 4 -> 2 -> 3 with `elastra resize`,
then to 4 workers laid out as 2 pipeline stages x 2 tensor-parallel ranks, then as 2 data-parallel
replicas x 2 tensor-parallel ranks; then one worker is killed with SIGKILL and the job recovers
without it, keeping tp=2 (dp=1), the broken replica's survivor a standby. Each worker declares a
memory budget (--device-memory-mb) that every layout is checked against. One line per phase, then a report: each generation with its layout and downtime, and
the largest relative loss difference against `train_mlp --reference`. Exits 0 when the job
finished and matches the reference, 1 otherwise.

DEMO_DIR (default out/demo) receives the logs, the resize replies and the job's state directory;
DEMO_STEPS (default 600, 15 s of training at 25 ms a step) sets the length of the run: enough
for the five changes to happen while it trains, also on a busy machine.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
ELASTRA = f"{BUILD}/launch/elastra"
TRAIN = f"{BUILD}/examples/train_mlp"
COMPARE = f"{BUILD}/examples/compare_logs"
OUT = os.environ.get("DEMO_DIR", "out/demo")
STEPS = int(os.environ.get("DEMO_STEPS", "600"))
STATE = f"{OUT}/state"
TRAIN_ARGS = ["--steps", str(STEPS), "--step-time-ms", "25", "--global-batch", "96", "--hidden",
              "48", "--ffn", "96", "--layers", "4", "--commit-every", "10"]
# What each worker may hold of the job's state (its weights and two moments, 0.88 MiB whole):
# every layout of the demo fits, and the coordinator checks each one against it
# (docs/recovery.md).
MEMORY_ARGS = ["--device-memory-mb", "1"]


class DemoError(Exception):
    pass


def say(line):
    print(f"demo: {line}", flush=True)


def describe(generation):
    """A history entry of the job's status, or the reply of `elastra resize --wait`, in words."""
    workers = generation["workers"]
    count = len(workers) if isinstance(workers, list) else workers
    layout = "dp={dp},pp={pp},tp={tp}".format(**generation["layout"])
    return (f"generation {generation['generation']}, {count} workers, {layout}, "
            f"downtime {generation['downtime_ms']:.1f} ms")


def recovery_after(status, generation):
    """The first generation after `generation` that a failure made, or None."""
    return next((h for h in status["history"]
                 if h["generation"] > generation and h["reason"] == "failure"), None)


class Job:
    """The `elastra run` of the demo and what the demo asks it."""

    def __init__(self):
        self.log = open(f"{OUT}/launcher.log", "w")
        self.process = subprocess.Popen(
            [ELASTRA, "run", "--nproc", "4", "--state-dir", STATE, "--", TRAIN, *TRAIN_ARGS,
             *MEMORY_ARGS, "--log", f"{OUT}/run.jsonl"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def running(self):
        return self.process.poll() is None

    def status(self):
        """`elastra status --json`, or None while no coordinator answers (not up yet, or gone)."""
        r = subprocess.run([ELASTRA, "status", "--state-dir", STATE, "--json"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return None
        try:
            return json.loads(r.stdout)
        except ValueError:
            return None

    def wait_for(self, what, condition, timeout_s=300):
        """The job's status once `condition` holds for it; DemoError if the job ends first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.running():
                raise DemoError(f"elastra run exited with {self.process.returncode} while the "
                                f"demo waited for {what}")
            status = self.status()
            if status is not None and condition(status):
                return status
            time.sleep(0.05)
        raise DemoError(f"no {what} within {timeout_s} s")

    def wait_steps(self, steps):
        start = self.wait_for("the job's status", lambda s: True)["step"]
        return self.wait_for(f"step {start + steps}", lambda s: s["step"] >= start + steps)

    def resize(self, name, workers, layout=None):
        """`elastra resize --wait`; its reply is kept in OUT/NAME.json."""
        command = [ELASTRA, "resize", "--state-dir", STATE, "--workers", str(workers), "--wait"]
        if layout:
            command += ["--layout", layout]
        r = subprocess.run(command, capture_output=True, text=True)
        with open(f"{OUT}/{name}.json", "w") as f:
            f.write(r.stdout)
        if r.returncode != 0:
            raise DemoError(f"elastra {' '.join(command[1:])} exited with {r.returncode}: "
                            f"{r.stderr.strip()}")
        step = self.wait_for("the job's status", lambda s: True)["step"]
        say(f"step {step}: resized to {describe(json.loads(r.stdout))}")

    def stop(self):
        if self.running():
            self.process.terminate()
            self.process.wait()


def run_job():
    """Runs the job through its phases; returns elastra run's exit code."""
    job = Job()
    try:
        status = job.wait_for("the job to start training",
                              lambda s: s["state"] == "running" and s["step"] > 0)
        layout = "dp={dp},pp={pp},tp={tp}".format(**status["layout"])
        say(f"started train_mlp for {STEPS} steps under elastra run: generation "
            f"{status['generation']}, {len(status['workers'])} workers, {layout}; logs in {OUT}")
        job.wait_for("step 40", lambda s: s["step"] >= 40)
        job.resize("resize_2", 2)
        job.wait_steps(40)
        job.resize("resize_3", 3)
        job.wait_steps(40)
        job.resize("resize_pp_tp", 4, "dp=1,pp=2,tp=2")
        job.wait_steps(40)
        job.resize("resize_dp_tp", 4, "dp=2,pp=1,tp=2")
        status = job.wait_steps(40)

        victim = next((w for w in status["workers"]
                       if w["state"] == "member" and w["rank"] == 1), None)
        if victim is None:
            raise DemoError("no worker holds rank 1")
        os.kill(victim["pid"], signal.SIGKILL)
        recovery = None
        while recovery is None and job.running():
            now = job.status()
            recovery = recovery_after(now, status["generation"]) if now else None
            time.sleep(0.05)
        # The recovery keeps tp=2: the broken replica's survivor stays in the job as a standby.
        standby = []
        while not standby and job.running():
            now = job.status()
            standby = [w["id"] for w in (now or {}).get("workers", []) if w["state"] == "standby"]
            time.sleep(0.05)
        code = job.process.wait()
    finally:
        job.stop()
    # The job's last status, written by elastra run as it exits.
    final_path = f"{STATE}/status.json"
    if not os.path.exists(final_path):
        raise DemoError(f"elastra run exited with {code} and left no {final_path}")
    with open(final_path) as f:
        final = json.load(f)
    recovery = recovery or recovery_after(final, status["generation"])
    say(f"step {status['step']}: killed rank 1 (worker {victim['id']}, pid {victim['pid']}); " +
        (f"recovered in {describe(recovery)}" if recovery else "no recovery recorded") +
        (f"; standby: {', '.join(standby)}" if standby else ""))
    say(f"elastra run exited with {code}: job {final['state']}")
    return code, final


def report(final):
    """The generations and the comparison against --reference; True when it matches."""
    subprocess.run([TRAIN, "--reference", *TRAIN_ARGS, "--log", f"{OUT}/ref.jsonl"],
                   stdout=subprocess.DEVNULL, check=True)
    print()
    print("== report")
    print(f"{'generation':>10}  {'reason':<8} {'workers':>7}  {'layout':<16} {'downtime':>12}")
    for h in final.get("history", []):
        l = h["layout"]
        n = len(h["workers"]) if isinstance(h["workers"], list) else h["workers"]
        print(f"{h['generation']:>10}  {h['reason']:<8} {n:>7}  "
              f"dp={l['dp']},pp={l['pp']},tp={l['tp']:<6} {h['downtime_ms']:>9.1f} ms")
    standby = [w["id"] for w in final.get("workers", []) if w["state"] == "standby"]
    print(f"standby workers at the end: {', '.join(standby) if standby else 'none'}")
    compare = subprocess.run([COMPARE, f"{OUT}/run.jsonl", f"{OUT}/ref.jsonl", str(STEPS)],
                             capture_output=True, text=True)
    print(f"against --reference: {compare.stdout.strip() or compare.stderr.strip()}")
    try:
        c = json.loads(compare.stdout)
        print(f"largest relative loss difference at equal steps: {c['max_rel_loss_diff']:.3g} "
              f"over {c['steps']} steps")
        print(f"sample accounting exact: {c['accounting_ok']} ({c['reapplied']} steps re-applied "
              f"after the rollback)")
    except (ValueError, KeyError):
        pass  # shown as it came above
    return compare.returncode == 0


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    try:
        code, final = run_job()
        matches = report(final)
    except (DemoError, subprocess.CalledProcessError) as e:
        print(f"demo: {e}\ndemo: the launcher's log is {OUT}/launcher.log", file=sys.stderr)
        return 1
    return 0 if code == 0 and matches else 1


if __name__ == "__main__":
    sys.exit(main())
