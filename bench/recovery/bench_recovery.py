#!/usr/bin/env python3
"""bench_recovery: a worker killed in a dp=2 x tp=2 job, recovered in the job, beside a restart.

usage: bench_recovery [--steps-between N] [--hidden H] [--ffn F] [--workers-3d W] [--reps R]

Three runs of train_mlp under `elastra run` on this machine, each resized to dp=2 x tp=2 and
losing the worker at rank 3 to SIGKILL (docs/recovery.md):
  spare    --spares 1: the standby takes the lost rank; the layout stays
  nospare  no standby: the job goes on at dp=1 x tp=2, the broken replica's survivor standby
  restart  the reference, what torchrun does: every process is killed and the job starts again
           from its last committed checkpoint (`elastra run --resume`), timed from the new
           launcher's start to its first trained step
Then runs of a 3-D job, dp=W/4 x pp=2 x tp=2 (--workers-3d W, default 16) with one spare,
losing one worker each, alternating, R of each (--reps, default 3; the figures are the run of
the median downtime; docs/recovery.md, "Rebuild only what changed"):
  keep3d   the spare takes the lost rank and the members keep every group that did not change
  full3d   the same with ELASTRA_KEEP_GROUPS=0: every group is built again, as before protocol 10
The in-job figures are the failure generation's own (status history): `downtime_ms` from the
first survivor's pause to the last member ready, `bytes_moved`, the state bytes the members
received, and the communicators built and kept. The lost worker's shard is its share of the state
at tp=2 (train_mlp's weights and two moments, float64), computed from the model's shapes.

Prints one JSON line at the end: spare_downtime_ms, nospare_downtime_ms, restart_ms,
spare_vs_restart, nospare_vs_restart, bytes_moved, lost_shard_bytes, bytes_moved_vs_lost_shard,
keep3d_downtime_ms, full3d_downtime_ms, failure_downtime_vs_full_rebuild, groups_rebuilt,
groups_kept (of the keep3d failure), full3d_groups_rebuilt, keep3d_vs_restart.
Needs the build directory's launch/elastra and examples/train_mlp (ELASTRA_BUILD, default build).
"""
import argparse
import json
import os
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
INPUTS, OUTPUTS = 16, 4  # examples/train_mlp_model.h


def lost_shard_bytes(hidden, ffn, layers):
    """Bytes a tp=2, pp=1 rank holds of train_mlp's state: three float64 copies of each tensor."""
    replicated = hidden * INPUTS + hidden + layers * hidden + OUTPUTS * hidden + OUTPUTS
    split = layers * (ffn * hidden + ffn + hidden * ffn) // 2
    return 3 * 8 * (replicated + split)


class Job:
    def __init__(self, root, name, train_args, run_args, nproc=4, env=None):
        self.dir = os.path.join(root, name)
        os.makedirs(self.dir)
        self.state = os.path.join(self.dir, "state")
        self.log = open(os.path.join(self.dir, "launcher.log"), "w")
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            [ELASTRA, "run", "--nproc", str(nproc), *run_args, "--state-dir", self.state, "--",
             TRAIN, *train_args, "--log", os.path.join(self.dir, "run.jsonl")],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, **(env or {})})

    def wait_for(self, what, condition, timeout_s=120):
        return elastra_bench.wait_for(what, condition, lambda: elastra_bench.status(self.state),
                                      self.dir, [("elastra run", self.process)], timeout_s)

    def steps(self, n):
        at = self.wait_for("a status", lambda s: True)["step"]
        return self.wait_for(f"step {at + n}", lambda s: s["step"] >= at + n)

    def resize(self, args):
        subprocess.run([ELASTRA, "resize", "--state-dir", self.state, *args, "--wait"],
                       check=True, capture_output=True)

    def kill_rank(self, status, rank):
        victim = next(w for w in status["workers"] if w["state"] == "member" and w["rank"] == rank)
        os.kill(victim["pid"], signal.SIGKILL)
        generation = status["generation"]
        return self.wait_for("the failure generation", lambda s: s["state"] == "running" and any(
            h["generation"] > generation and h["reason"] == "failure" for h in s["history"]))

    def kill_all(self):
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self):
        if self.process.poll() is None:
            self.kill_all()


def failure_entry(status):
    return [h for h in status["history"] if h["reason"] == "failure"][-1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps-between", type=int, default=20)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--ffn", type=int, default=512)
    parser.add_argument("--workers-3d", type=int, default=16)
    parser.add_argument("--reps", type=int, default=3,
                        help="3-D runs of each kind (keep3d, full3d), alternating; medians")
    args = parser.parse_args()
    if args.workers_3d < 8 or args.workers_3d % 4 != 0:
        parser.error("--workers-3d must be a multiple of 4, at least 8 (dp >= 2 at pp=2 x tp=2)")
    layers = 4
    train = ["--steps", "1000000", "--step-time-ms", "5", "--global-batch", "32", "--hidden",
             str(args.hidden), "--ffn", str(args.ffn), "--layers", str(layers), "--commit-every",
             "5"]
    root = tempfile.mkdtemp(prefix="bench_recovery.")
    jobs = []
    result = {}
    try:
        for name, run_args in (("spare", ["--spares", "1"]), ("nospare", [])):
            job = Job(root, name, train, run_args)
            jobs.append(job)
            job.wait_for("training", lambda s: s["state"] == "running" and s["step"] > 0)
            job.resize(["--workers", "4", "--layout", "dp=2,pp=1,tp=2"])
            status = job.steps(args.steps_between)
            recovered = failure_entry(job.kill_rank(status, 3))
            result[f"{name}_downtime_ms"] = recovered["downtime_ms"]
            result[f"{name}_layout"] = "dp={dp},pp={pp},tp={tp}".format(**recovered["layout"])
            if name == "spare":
                result["bytes_moved"] = recovered.get("bytes_moved", 0)
            job.kill_all()

        # A 3-D job losing one worker with a spare: groups kept, then every group built again,
        # alternating, --reps times each; the medians (the rep of the median downtime).
        layout_3d = f"dp={args.workers_3d // 4},pp=2,tp=2"
        runs_3d = {"keep3d": [], "full3d": []}
        for rep in range(args.reps):
            for name, env in (("keep3d", {}), ("full3d", {"ELASTRA_KEEP_GROUPS": "0"})):
                job = Job(root, f"{name}.{rep}", train, ["--spares", "1"], nproc=args.workers_3d,
                          env=env)
                jobs.append(job)
                job.wait_for("training", lambda s: s["state"] == "running" and s["step"] > 0)
                job.resize(["--workers", str(args.workers_3d), "--layout", layout_3d])
                status = job.steps(args.steps_between)
                # A rank in the middle: its dp, pp and tp groups are none of the first ones.
                runs_3d[name].append(failure_entry(job.kill_rank(status, args.workers_3d // 2 + 1)))
                job.kill_all()
        for name, runs in runs_3d.items():
            runs.sort(key=lambda h: h["downtime_ms"])
            median = runs[len(runs) // 2]
            result[f"{name}_downtime_ms"] = median["downtime_ms"]
            result[f"{name}_downtimes_ms"] = [round(h["downtime_ms"], 1) for h in runs]
            result[f"{name}_layout"] = "dp={dp},pp={pp},tp={tp}".format(**median["layout"])
            result[f"{name}_groups_rebuilt"] = median.get("groups_rebuilt", 0)
            result[f"{name}_groups_kept"] = median.get("groups_kept", 0)

        # The reference: the whole job killed and started again from its last checkpoint.
        ckpt = os.path.join(root, "ckpt")
        saving = train + ["--checkpoint-dir", ckpt, "--checkpoint-every", "10"]
        job = Job(root, "checkpointed", saving, [])
        jobs.append(job)
        job.wait_for("training", lambda s: s["state"] == "running" and s["step"] > 0)
        job.resize(["--workers", "4", "--layout", "dp=2,pp=1,tp=2"])
        job.wait_for("a committed checkpoint",
                     lambda s: (s.get("checkpoints") or {}).get("committed_step", -1) >= 10)
        job.kill_all()
        restarted = Job(root, "restart", saving, ["--resume", ckpt])
        jobs.append(restarted)
        first = restarted.wait_for("the resumed job's first step",
                                   lambda s: s["state"] == "running" and s["step"] > 0 and any(
                                       h["reason"] == "resume" for h in s["history"]))
        result["restart_ms"] = (time.monotonic() - restarted.started) * 1e3
        result["restart_resumed_at_step"] = first["step"]
        restarted.kill_all()
    finally:
        for job in jobs:
            job.stop()
        shutil.rmtree(root, ignore_errors=True)

    lost = lost_shard_bytes(args.hidden, args.ffn, layers)
    result["lost_shard_bytes"] = lost
    result["bytes_moved_vs_lost_shard"] = round(result["bytes_moved"] / lost, 4)
    result["spare_vs_restart"] = round(result["spare_downtime_ms"] / result["restart_ms"], 4)
    result["nospare_vs_restart"] = round(result["nospare_downtime_ms"] / result["restart_ms"], 4)
    result["failure_downtime_vs_full_rebuild"] = round(
        result["keep3d_downtime_ms"] / result["full3d_downtime_ms"], 4)
    result["keep3d_vs_restart"] = round(result["keep3d_downtime_ms"] / result["restart_ms"], 4)
    result["groups_rebuilt"] = result["keep3d_groups_rebuilt"]
    result["groups_kept"] = result["keep3d_groups_kept"]
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
