#!/usr/bin/env python3
"""bench_goodput: a train_mlp job under a seeded stream of failures and resizes, three ways.

usage: bench_goodput [--minutes M] [--seed S] [--state-mb MB] [--step-time-ms T]
                     [--min-workers A] [--max-workers B] [--kill-every-s K] [--resize-every-s R]
                     [--checkpoint-every N] [--modes elastra,restart,none]

One training job (train_mlp with --state-mb MB of state beside its model, committed, checkpointed
and moved like parameters, and steps padded to --step-time-ms), --minutes of wall clock in each
of three runs on the same schedule of events drawn from --seed: a worker SIGKILLed about every
--kill-every-s seconds (the job goes on one smaller, or is given a replacement at --min-workers),
a resize to another size in [--min-workers, --max-workers] about every --resize-every-s:
  elastra  under `elastra run`, the events applied live: the worker's pid is killed, and
           `elastra resize --wait` resizes
  restart  what torchrun does: at any failure or resize every process is killed and the job starts
           again at the new size from its last committed disk checkpoint (`elastra run --resume`),
           written every N steps: the Young/Daly interval sqrt(2 * C * MTBF) in steps, from the
           checkpoint's measured cost C and the schedule's mean time between events
  none     the same job with no events
The host loss of the namespace cluster is left out (it needs root and the testbed's cluster).

ETTR is useful step time over wall time: the steps the job reached at the end (a step undone by a
rollback or a restart and applied again counts once) times the none run's time per step (from its
first step to its end), over the run's wall clock from its launch, the job's start-up included
(ettr_after_start: from its first step). steps_per_hour likewise, from the launch.
Each run's log is checked against `train_mlp --reference` over every step it reached (the loss
within 1e-9 relative, each sample applied exactly once); a mismatch fails the benchmark.

Prints a table of the runs and where their time went, then one JSON line: ettr_elastra,
ettr_restart, ettr_none, steps_per_hour_{elastra,restart,none}, elastra_vs_restart (the
steps_per_hour ratio), checkpoint_every, checkpoint_cost_ms, and the parts of the downtime.
Needs the build directory's launch/elastra, examples/train_mlp and examples/compare_logs
(ELASTRA_BUILD, default build).
"""
import argparse
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ beside the sources
sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "common"))
import elastra_bench  # noqa: E402
from elastra_bench import ELASTRA  # noqa: E402

TRAIN = elastra_bench.build_path("examples", "train_mlp")
COMPARE = elastra_bench.build_path("examples", "compare_logs")
CALIBRATION_EVERY = 5  # checkpoint interval of the run that measures a checkpoint's cost


class Job:
    """One `elastra run` of train_mlp, in a process group of its own."""

    def __init__(self, directory, nproc, train_args, run_args=()):
        os.makedirs(directory, exist_ok=True)
        self.state = os.path.join(directory, f"state.{time.monotonic_ns()}")
        self.log = open(os.path.join(directory, "launcher.log"), "a")
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            ["nice", ELASTRA, "run", "--nproc", str(nproc), *run_args, "--state-dir", self.state,
             "--", TRAIN, *train_args],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def status(self):
        return elastra_bench.status(self.state)

    def wait_for(self, what, condition, timeout_s=120, poll_s=0.05):
        return elastra_bench.wait_for_status(self.state, what, condition,
                                             [("elastra run", self.process)], timeout_s, poll_s)

    def running(self, timeout_s=120):
        return self.wait_for("a running job", lambda s: s["state"] == "running", timeout_s)

    def resize(self, workers):
        r = subprocess.run([ELASTRA, "resize", "--state-dir", self.state, "--workers",
                            str(workers), "--wait", "--timeout", "120"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"resize to {workers}: {r.stdout} {r.stderr}")
        return json.loads(r.stdout.strip().splitlines()[-1])

    def kill_all(self):
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.log.close()


def newest_committed(root):
    """The step of the newest committed checkpoint under `root` (ckpt-STEP-gGEN/MANIFEST), 0
    when there is none."""
    steps = [0]
    for name in os.listdir(root) if os.path.isdir(root) else []:
        if name.startswith("ckpt-") and os.path.exists(os.path.join(root, name, "MANIFEST")):
            steps.append(int(name.split("-")[1]))
    return max(steps)


def make_schedule(seed, seconds, args):
    """The events of a run: (time s, kind, argument), the same for every mode of one seed.

    A kill's argument is where its victim sits among the members by rank (a fraction), a resize's
    the new size. Intervals are drawn uniformly within +-50% of their mean."""
    rng = random.Random(seed)
    times = []
    for kind, every in (("kill", args.kill_every_s), ("resize", args.resize_every_s)):
        t = rng.uniform(0.5, 1.5) * every
        while t < seconds:
            times.append((t, kind))
            t += rng.uniform(0.5, 1.5) * every
    events, size = [], args.max_workers
    for t, kind in sorted(times):
        if kind == "kill":
            # At --min-workers the lost worker is replaced (the job resizes back).
            replaced = size == args.min_workers
            events.append({"t": t, "kind": "kill", "victim": rng.random(), "size_before": size,
                           "size": size if replaced else size - 1, "replaced": replaced})
        else:
            sizes = [n for n in range(args.min_workers, args.max_workers + 1) if n != size]
            events.append({"t": t, "kind": "resize", "size_before": size,
                           "size": rng.choice(sizes)})
        size = events[-1]["size"]
    return events


def train_args(args, log, extra=()):
    return ["--steps", "100000000", "--step-time-ms", str(args.step_time_ms), "--state-mb",
            str(args.state_mb), "--log", log, *extra]


def steady_step_time(job, seconds):
    """Seconds per step over `seconds` of a running job, after its first 20 steps."""
    first = job.wait_for("step 20", lambda s: s["state"] == "running" and s["step"] >= 20)
    t0 = time.monotonic()
    time.sleep(seconds)
    last = job.running()
    t1 = time.monotonic()
    return (t1 - t0) / max(1, last["step"] - first["step"])


def measure_checkpoint_cost(root, args, seconds):
    """A checkpoint's cost to training: the time per step with one every CALIBRATION_EVERY steps,
    less the time per step without, times CALIBRATION_EVERY (both runs here, one after the other,
    at --max-workers)."""
    per_step = {}
    for name, extra in (("plain", []),
                        ("ckpt", ["--checkpoint-dir", os.path.join(root, "calibration.ckpt"),
                                  "--checkpoint-every", str(CALIBRATION_EVERY)])):
        directory = os.path.join(root, f"calibration.{name}")
        job = Job(directory, args.max_workers,
                  train_args(args, os.path.join(directory, "run.jsonl"), extra),
                  ["--max-workers", str(args.max_workers)])
        try:
            per_step[name] = steady_step_time(job, seconds)
        finally:
            job.kill_all()
    cost = (per_step["ckpt"] - per_step["plain"]) * CALIBRATION_EVERY
    return cost, per_step


class Run:
    """One mode's run: its job(s), the events applied, and what each cost."""

    def __init__(self, root, mode, args, checkpoint_every=0):
        self.mode, self.args = mode, args
        self.dir = os.path.join(root, mode)
        self.log = os.path.join(self.dir, "run.jsonl")
        self.ckpt = os.path.join(self.dir, "ckpt")
        self.checkpoint_every = checkpoint_every
        self.job = None
        self.records = []       # one per event: what it cost
        self.pending = None     # restart: the launch whose first step is awaited
        self.resumed_from = 0   # restart: the step the current launch starts from
        self.first_step_s = None

    def launch(self, nproc, resume):
        extra = []
        if self.mode == "restart":
            extra = ["--checkpoint-dir", self.ckpt, "--checkpoint-every",
                     str(self.checkpoint_every)]
        run_args = ["--max-workers", str(self.args.max_workers)]
        if resume:
            run_args += ["--resume", self.ckpt]
        self.job = Job(self.dir, nproc, train_args(self.args, self.log, extra), run_args)

    # --- the events, live (elastra) ---
    def kill_live(self, event):
        s = self.job.running()
        members = sorted((w for w in s["workers"] if w["state"] == "member"),
                         key=lambda w: w["rank"])
        victim = members[min(len(members) - 1, int(event["victim"] * len(members)))]
        killed = time.monotonic()
        os.kill(victim["pid"], signal.SIGKILL)
        generation = s["generation"]
        after = self.job.wait_for("the failure's generation", lambda st: st["state"] == "running"
                                  and any(h["generation"] > generation and h["reason"] == "failure"
                                          for h in st["history"]))
        record = {"kind": "kill", "rank": victim["rank"], "step": s["step"],
                  "recovered_s": time.monotonic() - killed}
        entry = [h for h in after["history"] if h["reason"] == "failure"][-1]
        for key in ("downtime_ms", "agreement_ms", "rebuild_ms", "transfer_ms"):
            record[key] = entry[key]
        if event["replaced"]:
            record["replacement"] = self.job.resize(event["size"])
        self.records.append(record)

    def resize_live(self, event):
        asked = time.monotonic()
        reply = self.job.resize(event["size"])
        self.records.append({"kind": "resize", "to": event["size"],
                             "done_s": time.monotonic() - asked,
                             **{k: reply.get(k, 0) for k in ("downtime_ms", "agreement_ms",
                                                            "rebuild_ms", "transfer_ms")}})

    # --- the events, by restarting (restart) ---
    def restart(self, event):
        s = self.job.status() if self.pending is None else None
        step = s["step"] if s else self.resumed_from
        killed = time.monotonic()
        self.job.kill_all()
        self.resumed_from = newest_committed(self.ckpt)
        self.launch(event["size"], self.resumed_from > 0)
        self.records.append({"kind": event["kind"], "step": step,
                             "resumed_from": self.resumed_from,
                             "lost_steps": max(0, step - self.resumed_from), "killed": killed,
                             "first_step_s": None})
        self.pending = self.records[-1]

    def poll_restart(self):
        """Notes the first step of the launch after a restart (polled between events)."""
        s = self.job.status()
        if s is None or s["state"] != "running" or s["step"] <= self.resumed_from:
            return
        self.pending["first_step_s"] = time.monotonic() - self.pending["killed"]
        self.pending = None

    def idle_until(self, deadline):
        while time.monotonic() < deadline:
            if self.pending is not None:
                self.poll_restart()
                time.sleep(0.05)
            else:
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))

    def final_steps(self):
        """The step the job reached: its running status (heartbeats lag a step or two alike in
        every mode), or a restart's starting step when the deadline fell in a restart."""
        if self.pending is not None:
            self.poll_restart()
        if self.pending is not None:
            return self.resumed_from
        return self.job.running(timeout_s=30)["step"]

    def execute(self, events, seconds):
        start = time.monotonic()
        self.launch(self.args.max_workers, False)
        self.job.wait_for("the first step", lambda s: s["state"] == "running" and s["step"] > 0)
        self.first_step_s = time.monotonic() - start
        try:
            for event in events:
                if event["t"] >= seconds:
                    break
                self.idle_until(start + event["t"])
                if self.mode == "restart":
                    self.restart(event)
                elif event["kind"] == "kill":
                    self.kill_live(event)
                else:
                    self.resize_live(event)
            self.idle_until(start + seconds)
            steps = self.final_steps()
            wall = time.monotonic() - start
        finally:
            self.job.kill_all()
        return steps, wall


def logged_steps(run_log):
    """One past the highest step in a --log file (0 when it has none)."""
    last = -1
    with open(run_log) as f:
        for line in f:
            try:
                last = max(last, json.loads(line)["step"])
            except (ValueError, KeyError):
                pass  # a writer killed mid-line; compare_logs counts these
    return last + 1


def check_log(run_log, reference, steps):
    """compare_logs over every step the log holds (also steps a restart applied and then lost,
    which must match too)."""
    r = subprocess.run([COMPARE, run_log, reference, str(steps), "1e-9"], capture_output=True,
                       text=True)
    try:
        result = json.loads(r.stdout)
    except ValueError:
        result = {"problem": r.stderr.strip()}
    result["ok"] = r.returncode == 0
    return result


def downtime_parts(run, per_step_s):
    """Where a run's time went besides useful steps, in seconds."""
    parts = {"startup_s": run["first_step_s"]}
    records = run["records"]
    if run["mode"] == "elastra":
        parts["event_downtime_s"] = sum(r["downtime_ms"] for r in records) / 1e3
        parts["replacements_downtime_s"] = sum(
            r["replacement"]["downtime_ms"] for r in records if "replacement" in r) / 1e3
        parts["kill_to_recovered_s"] = sum(r["recovered_s"] for r in records
                                           if r["kind"] == "kill")
        parts["reapplied_steps_s"] = run["check"].get("reapplied", 0) * per_step_s
    elif run["mode"] == "restart":
        parts["restarts_to_first_step_s"] = sum(r["first_step_s"] or 0 for r in records)
        parts["reapplied_steps_s"] = sum(r["lost_steps"] for r in records) * per_step_s
    return {k: round(v, 3) for k, v in parts.items()}


def print_table(runs, per_step_s):
    print(f"{'mode':8} {'events':>6} {'steps':>7} {'wall s':>7} {'steps/h':>9} {'ETTR':>6} "
          f"{'after start':>11} {'startup s':>9}  other lost time (s)")
    for run in runs:
        parts = downtime_parts(run, per_step_s)
        other = ", ".join(f"{k[:-2]} {v:.2f}" for k, v in parts.items() if k != "startup_s")
        print(f"{run['mode']:8} {len(run['records']):>6} {run['steps']:>7} {run['wall_s']:>7.1f} "
              f"{run['steps_per_hour']:>9.0f} {run['ettr']:>6.3f} {run['ettr_after_start']:>11.3f} "
              f"{parts['startup_s']:>9.2f}  "
              f"{other}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3, help="wall clock of each run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--state-mb", type=int, default=64)
    parser.add_argument("--step-time-ms", type=int, default=50)
    parser.add_argument("--min-workers", type=int, default=4)
    parser.add_argument("--max-workers", type=int, default=8)
    parser.add_argument("--kill-every-s", type=float, default=30)
    parser.add_argument("--resize-every-s", type=float, default=45)
    parser.add_argument("--checkpoint-every", type=int, default=0,
                        help="steps between the restart run's checkpoints (0: Young/Daly)")
    parser.add_argument("--calibration-s", type=float, default=15,
                        help="seconds of each of the two runs that measure a checkpoint's cost")
    parser.add_argument("--modes", default="none,elastra,restart")
    parser.add_argument("--keep", action="store_true", help="keep the runs' files")
    args = parser.parse_args()
    if not 1 < args.min_workers < args.max_workers:
        parser.error("need 1 < --min-workers < --max-workers")
    modes = args.modes.split(",")
    if "none" not in modes or not set(modes) <= {"none", "elastra", "restart"}:
        parser.error("--modes: none (the time per step) and any of elastra, restart")
    seconds = args.minutes * 60
    events = make_schedule(args.seed, seconds, args)
    mtbf_s = seconds / max(1, len(events))
    root = tempfile.mkdtemp(prefix="bench_goodput.")
    result = {"minutes": args.minutes, "seed": args.seed, "state_mb": args.state_mb,
              "step_time_ms": args.step_time_ms, "events": len(events),
              "mtbf_s": round(mtbf_s, 2)}
    runs = []
    try:
        # none first: its steady time per step is every run's unit of useful time.
        none = Run(root, "none", args)
        steps, wall = none.execute([], seconds)
        log = os.path.join(root, "none", "run.jsonl")
        runs.append({"mode": "none", "steps": steps, "wall_s": wall, "records": [],
                     "first_step_s": none.first_step_s, "log": log})
        per_step_s = (wall - none.first_step_s) / max(1, steps)
        result["step_s"] = round(per_step_s, 5)
        if "restart" in modes:
            every = args.checkpoint_every
            if every == 0:
                cost, measured = measure_checkpoint_cost(root, args, args.calibration_s)
                result["checkpoint_cost_ms"] = round(cost * 1e3, 2)
                result["calibration_step_ms"] = {k: round(v * 1e3, 2) for k, v in measured.items()}
                # A cost lost in the noise is taken as 1 ms.
                every = max(1, round(math.sqrt(2 * max(cost, 1e-3) * mtbf_s) / per_step_s))
            result["checkpoint_every"] = every
            print(f"restart: a checkpoint every {every} steps (cost "
                  f"{result.get('checkpoint_cost_ms', 'not measured')} ms, MTBF {mtbf_s:.1f} s)",
                  flush=True)
        for mode in ("elastra", "restart"):
            if mode not in modes:
                continue
            run = Run(root, mode, args, result.get("checkpoint_every", 0))
            steps, wall = run.execute(events, seconds)
            runs.append({"mode": mode, "steps": steps, "wall_s": wall, "records": run.records,
                         "first_step_s": run.first_step_s, "log": run.log})
        for run in runs:
            run["logged_steps"] = logged_steps(run["log"])
        reference = os.path.join(root, "reference.jsonl")
        subprocess.run(["nice", TRAIN, "--reference", "--steps",
                        str(max(r["logged_steps"] for r in runs)), "--log", reference],
                       check=True, capture_output=True)
        failed = []
        for run in runs:
            run["check"] = check_log(run["log"], reference, run["logged_steps"])
            if not run["check"]["ok"]:
                failed.append(f"{run['mode']}: {run['check']}")
            run["steps_per_hour"] = run["steps"] * 3600 / run["wall_s"]
            run["ettr"] = run["steps"] * per_step_s / run["wall_s"]
            run["ettr_after_start"] = (run["steps"] * per_step_s /
                                       (run["wall_s"] - run["first_step_s"]))
    except BaseException:
        args.keep = True  # the launchers' logs say why
        raise
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"files kept in {root}", file=sys.stderr)
    print_table(runs, per_step_s)
    for run in runs:
        mode = run["mode"]
        result[f"ettr_{mode}"] = round(run["ettr"], 4)
        result[f"ettr_after_start_{mode}"] = round(run["ettr_after_start"], 4)
        result[f"steps_per_hour_{mode}"] = round(run["steps_per_hour"])
        result[f"steps_{mode}"] = run["steps"]
        result[f"downtime_{mode}"] = downtime_parts(run, per_step_s)
        result[f"log_matches_{mode}"] = run["check"]["ok"]
        result[f"steps_checked_{mode}"] = run["check"].get("steps", 0)
    by_mode = {r["mode"]: r for r in runs}
    if "elastra" in by_mode:
        result["elastra_downtimes_ms"] = [round(r["downtime_ms"]) for r in
                                          by_mode["elastra"]["records"]]
    if "restart" in by_mode:
        result["restart_first_step_s"] = [round(r["first_step_s"], 2) if r["first_step_s"]
                                          else None for r in by_mode["restart"]["records"]]
    if "elastra" in by_mode and "restart" in by_mode:
        result["elastra_vs_restart"] = round(
            by_mode["elastra"]["steps_per_hour"] / by_mode["restart"]["steps_per_hour"], 4)
    if failed:
        print("bench_goodput: a run's log does not match the reference:\n  " +
              "\n  ".join(failed), file=sys.stderr)
    print(json.dumps(result, sort_keys=True))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
