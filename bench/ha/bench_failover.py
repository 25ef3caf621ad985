#!/usr/bin/env python3
"""bench_failover: a standby coordinator on etcd taking a job over, beside a local restart.

usage: bench_failover [--reps R] [--leader-ttl S] [--workers N] [--step-time-ms T]
                      [--etcd-puts P] [--keep]

Starts a single etcd member of its own (ELASTRA_ETCD, default /usr/bin/etcd, Debian's etcd-server
that launch/install_deps.sh installs; etcd's default heartbeat and election timeout) on free ports
of 127.0.0.1 in a temporary folder, then runs R repetitions (--reps, default 3) of each of two
scenarios, alternating, each a train_mlp job of N workers (--workers, default 2) under one
`elastra agent`, as tests/integration/etcd_coordinator_test.cc does (docs/ha.md):
  failover  `elastra coordinator --etcd URL --job NAME --leader-ttl S` twice, each with a state
            directory of its own: the first leads, the second waits as a standby; once the job
            trained 20 steps the leader is SIGKILLed, and the standby takes the job over when the
            leader's lease (S seconds, default 3) expired
  restart   the reference: a local coordinator (no etcd, the journal in --state-dir) SIGKILLed and
            started again at once with `elastra coordinator --state-dir DIR --restart` on the same
            address (what `elastra run` does, and coordinator_restart_test)
Each is timed from the SIGKILL to the first status of the new coordinator that shows a step past
the one of the kill (`elastra status --json` of its state directory, polled): the moment the job
is managed again. The workers train on through both (their commits are local, docs/journal.md,
"Restart sequence"): the steps they trained meanwhile are reported, and each repetition checks
that the new coordinator kept the generation and the worker processes. Also timed, from the
SIGKILL: the standby's "leading job" log line (failover) and each new coordinator's ready line.

etcd's write latency: P (--etcd-puts, default 100) transactions like a journal record's head
(put only if the key does not exist, 256 bytes) sent one after another to the same member through
its JSON gateway, from this script over one kept-alive connection; not the coordinator's own
journal writes (it logs no write times), so an estimate of etcd's part of one.

Prints a table of the runs and one JSON line at the end: bench, lease_ttl_s, failover_s_median,
restart_s_median, failover_vs_ttl, failover_vs_restart, aim_s (the TTL plus 2 s, issue 33),
aim_met (the median within it), aim_met_every_rep, each run's figures, etcd_put_ms_median and
etcd_put_ms_p90. etcd grants a lease of at least 1.5 election timeouts (1.5 s at its defaults), so
--leader-ttl 1 is a 2 s lease here.
Needs the build directory's launch/elastra and examples/train_mlp (ELASTRA_BUILD, default build).
"""
import argparse
import base64
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ beside the sources
sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "common"))
import elastra_bench  # noqa: E402
from elastra_bench import ELASTRA  # noqa: E402

TRAIN = elastra_bench.build_path("examples", "train_mlp")
ETCD = os.environ.get("ELASTRA_ETCD", "/usr/bin/etcd")
READY = '{"address"'  # the start of a coordinator's ready line (stdout)


def b64(text):
    return base64.b64encode(text.encode()).decode()


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def spawn(argv, log):
    """argv in a process group of its own (an agent's workers are in the agent's), its stdout and
    stderr appended to `log`."""
    with open(log, "a") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def kill_group(process):
    if process is not None and process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if process is not None:
        process.wait()


class Etcd:
    """A single-member etcd on free ports of 127.0.0.1, its data under `root`."""

    def __init__(self, root):
        if not os.access(ETCD, os.X_OK):
            sys.exit(f"bench_failover: no etcd at {ETCD} (install Debian's etcd-server: "
                     "launch/install_deps.sh; or set ELASTRA_ETCD)")
        self.process = None
        for attempt in range(5):  # a free port taken meanwhile: new ports
            client, peer = elastra_bench.free_port(), elastra_bench.free_port()
            self.port = client
            self.url = f"http://127.0.0.1:{client}"
            peer_url = f"http://127.0.0.1:{peer}"
            self.log = os.path.join(root, "etcd.log")
            self.process = spawn(
                [ETCD, "--name", "b", "--data-dir", os.path.join(root, f"etcd-{attempt}"),
                 "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
                 "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                 "--initial-cluster", f"b={peer_url}", "--initial-cluster-state", "new"],
                self.log)
            if self.wait_until_serving():
                return
            kill_group(self.process)
        raise RuntimeError(f"etcd did not start; its log ends:\n{read(self.log)[-2000:]}")

    def request(self, conn, path, body):
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"etcd {path}: HTTP {r.status} {data[:300]!r}")
        return json.loads(data)

    def wait_until_serving(self, timeout_s=30):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                self.request(conn, "/v3/kv/range", {"key": b64("/health-probe")})
                conn.close()
                return True
            except (OSError, RuntimeError, ValueError, http.client.HTTPException):
                time.sleep(0.05)
        return False

    def put_latencies_ms(self, count):
        """`count` transactions like a journal head's: put a new key only if it does not exist."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        value = b64("x" * 256)
        ms = []
        for i in range(count):
            key = b64(f"/bench_failover/put/{i:020d}")
            body = {"compare": [{"key": key, "target": "VERSION", "result": "EQUAL",
                                 "version": "0"}],
                    "success": [{"request_put": {"key": key, "value": value}}],
                    "failure": [{"request_range": {"key": key}}]}
            start = time.perf_counter()
            answer = self.request(conn, "/v3/kv/txn", body)
            ms.append((time.perf_counter() - start) * 1e3)
            if not answer.get("succeeded"):
                raise RuntimeError(f"etcd txn {i} did not succeed: {answer}")
        conn.close()
        return ms

    def stop(self):
        kill_group(self.process)


class Scenario:
    """One repetition: a coordinator (two on etcd), an agent with its workers, the kill, and the
    new coordinator's first step."""

    def __init__(self, root, mode, rep, args, etcd_url):
        self.mode, self.args, self.etcd_url = mode, args, etcd_url
        self.dir = os.path.join(root, f"{mode}.{rep}")
        os.makedirs(self.dir)
        self.job = f"failover{rep}"
        self.first = os.path.join(self.dir, "first")      # the state directory of the killed one
        self.second = os.path.join(self.dir, "second")    # the standby's, or the restarted one's
        self.processes = {}

    def coordinator(self, state_dir, log, restart=False):
        if restart:
            argv = [ELASTRA, "coordinator", "--state-dir", state_dir, "--restart"]
        else:
            argv = [ELASTRA, "coordinator", "--state-dir", state_dir, "--workers",
                    str(self.args.workers), "--job", self.job]
            if self.mode == "failover":
                argv += ["--etcd", self.etcd_url, "--leader-ttl", str(self.args.leader_ttl)]
        return spawn(argv, os.path.join(self.dir, log))

    def wait_log(self, log, text, what, timeout_s=60):
        path = os.path.join(self.dir, log)
        return elastra_bench.wait_for(what, lambda found: found, lambda: text in read(path) or None,
                                      self.dir, self.alive(), timeout_s, 0.01)

    def alive(self):
        return [(name, p) for name, p in self.processes.items() if p is not None]

    def start(self):
        """The job trained 20 steps under its first coordinator: its status then."""
        self.processes["coordinator"] = self.coordinator(self.first, "first.log")
        self.wait_log("first.log", READY, "the coordinator's ready line")
        if self.mode == "failover":
            self.processes["standby"] = self.coordinator(self.second, "second.log")
            self.wait_log("second.log", f"standby: job {self.job} is led by", "the standby")
        shutil.copy(os.path.join(self.first, "join.json"), os.path.join(self.dir, "join.json"))
        train = ["--steps", "1000000000", "--step-time-ms", str(self.args.step_time_ms),
                 "--global-batch", "48", "--hidden", "24", "--commit-every", "5",
                 "--log", os.path.join(self.dir, "run.jsonl")]
        self.processes["agent"] = spawn(
            [ELASTRA, "agent", "--join", os.path.join(self.dir, "join.json"), "--name", "hostA",
             "--slots", str(self.args.workers), "--", TRAIN, *train],
            os.path.join(self.dir, "agent.log"))
        return elastra_bench.wait_for_status(
            self.first, "20 steps", lambda s: s["state"] == "running" and s["step"] >= 20,
            self.alive())

    def kill_and_time(self, before):
        """SIGKILLs the first coordinator; the seconds from then to the new one's milestones."""
        victim = self.processes.pop("coordinator")
        os.kill(victim.pid, signal.SIGKILL)
        killed = time.monotonic()
        victim.wait()
        if self.mode == "restart":
            self.processes["restarted"] = self.coordinator(self.first, "second.log", restart=True)
            state = self.first
        else:
            state = self.second
        result = {}
        if self.mode == "failover":
            self.wait_log("second.log", f"leading job {self.job}", "the standby's leadership")
            result["lead_s"] = time.monotonic() - killed
        self.wait_log("second.log", READY, "the new coordinator's ready line")
        result["serving_s"] = time.monotonic() - killed
        after = elastra_bench.wait_for_status(
            state, "a step past the kill", lambda s: s["state"] == "running" and
            s["step"] > before["step"], self.alive(), timeout_s=60, poll_s=0.01)
        result["first_step_s"] = time.monotonic() - killed
        result["steps_meanwhile"] = after["step"] - before["step"]
        result["same_job"] = (after["generation"] == before["generation"] and
                              member_pids(after) == member_pids(before))
        return result

    def stop(self):
        for process in self.processes.values():
            kill_group(process)


def member_pids(status):
    return sorted((w["rank"], w["pid"]) for w in status["workers"] if w["state"] == "member")


def run_scenario(root, mode, rep, args, etcd_url):
    scenario = Scenario(root, mode, rep, args, etcd_url)
    try:
        before = scenario.start()
        return scenario.kill_and_time(before)
    finally:
        scenario.stop()


def print_table(runs):
    print(f"{'scenario':9} {'rep':>3} {'leads s':>8} {'serving s':>9} {'first step s':>12} "
          f"{'steps meanwhile':>15} {'same job':>8}")
    for mode, rep, r in runs:
        lead = f"{r['lead_s']:.2f}" if "lead_s" in r else "-"
        print(f"{mode:9} {rep:>3} {lead:>8} {r['serving_s']:>9.2f} {r['first_step_s']:>12.2f} "
              f"{r['steps_meanwhile']:>15} {str(r['same_job']):>8}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="runs of each scenario, alternating")
    parser.add_argument("--leader-ttl", type=int, default=3,
                        help="the coordinators' --leader-ttl, seconds (elastra's default: 3)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--step-time-ms", type=int, default=15)
    parser.add_argument("--etcd-puts", type=int, default=100,
                        help="transactions timed for etcd's write latency (0: none)")
    parser.add_argument("--keep", action="store_true", help="keep the runs' files")
    args = parser.parse_args()
    if args.reps < 1 or args.leader_ttl < 1 or args.workers < 1 or args.etcd_puts < 0:
        parser.error("--reps, --leader-ttl and --workers >= 1, --etcd-puts >= 0")
    root = tempfile.mkdtemp(prefix="bench_failover.")
    etcd = None
    runs = []
    puts = []
    try:
        etcd = Etcd(root)
        for rep in range(args.reps):
            for mode in ("failover", "restart") if rep % 2 == 0 else ("restart", "failover"):
                runs.append((mode, rep, run_scenario(root, mode, rep, args, etcd.url)))
                print(f"{mode} {rep}: {runs[-1][2]['first_step_s']:.2f} s", file=sys.stderr,
                      flush=True)
        if args.etcd_puts:
            puts = sorted(etcd.put_latencies_ms(args.etcd_puts))
    except BaseException:
        args.keep = True  # the coordinators' logs say why
        raise
    finally:
        if etcd is not None:
            etcd.stop()
        if args.keep:
            print(f"files kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    print_table(runs)
    figures = {m: [r for mode, _, r in runs if mode == m] for m in ("failover", "restart")}
    failover = statistics.median(r["first_step_s"] for r in figures["failover"])
    restart = statistics.median(r["first_step_s"] for r in figures["restart"])
    aim = args.leader_ttl + 2
    result = {
        "bench": "failover",
        "lease_ttl_s": args.leader_ttl,
        "failover_s_median": round(failover, 3),
        "restart_s_median": round(restart, 3),
        "failover_vs_ttl": round(failover / args.leader_ttl, 3),
        "failover_vs_restart": round(failover / restart, 2),
        "aim_s": aim,
        "aim_met": failover <= aim,
        "aim_met_every_rep": max(r["first_step_s"] for r in figures["failover"]) <= aim,
        "failover_s": [round(r["first_step_s"], 3) for r in figures["failover"]],
        "restart_s": [round(r["first_step_s"], 3) for r in figures["restart"]],
        "failover_lead_s_median": round(statistics.median(r["lead_s"]
                                                          for r in figures["failover"]), 3),
        "failover_serving_s_median": round(statistics.median(r["serving_s"]
                                                             for r in figures["failover"]), 3),
        "restart_serving_s_median": round(statistics.median(r["serving_s"]
                                                            for r in figures["restart"]), 3),
        "steps_meanwhile_failover": [r["steps_meanwhile"] for r in figures["failover"]],
        "steps_meanwhile_restart": [r["steps_meanwhile"] for r in figures["restart"]],
        "same_job": all(r["same_job"] for _, _, r in runs),
        "workers": args.workers,
        "reps": args.reps,
    }
    if puts:
        result["etcd_put_ms_median"] = round(statistics.median(puts), 3)
        result["etcd_put_ms_p90"] = round(puts[int(0.9 * (len(puts) - 1))], 3)
    print(json.dumps(result), flush=True)
    return 0 if result["same_job"] else 1


if __name__ == "__main__":
    sys.exit(main())
