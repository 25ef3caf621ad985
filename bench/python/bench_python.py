#!/usr/bin/env python3
"""bench_python: the cost of training from Python with Elastra, beside its references.

usage: bench_python [--reps R] [--steps N] [--width W] [--mib M] [--resize-steps S]

Three figures, each measured beside its reference in the same run, alternating repetitions (R,
default 3), medians:
  overhead_vs_plain   one worker's step time of a torch MLP (4 Linear layers of --width, AdamW,
                      batch 64, float32) trained under `elastra run --nproc 1` with its module and
                      optimizer bound by elastra.torch.bind and w.step_end() every step, against
                      the same loop in a plain Python process (aim <= 1.03)
  allreduce_vs_cpp    an in-place float32 sum allreduce of --mib MiB (default 64) at 2 workers
                      over w.world from Python, against the same over Worker::world() from C++
                      (allreduce_from_cpp), both under `elastra run --nproc 2` (aim <= 1.05)
  resize_vs_cpp       the downtime of a live dp resize 4 -> 2 of examples/python/train_mlp.py,
                      against the C++ train_mlp's at the same model (the generation's downtime_ms
                      in `elastra status --json`)
Prints a table and one JSON line at the end. Needs the build directory (ELASTRA_BUILD, default
build) with the Python package (build/python), launch/elastra, examples/train_mlp and
bench/python/allreduce_from_cpp, and the interpreter that imports torch (ELASTRA_PYTHON,
default /usr/bin/python3).
"""
import argparse
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
from elastra_bench import BUILD, ELASTRA  # noqa: E402

PYTHON = os.environ.get("ELASTRA_PYTHON", "/usr/bin/python3")
SELF = os.path.abspath(__file__)
HERE = os.path.dirname(SELF)


def source_root():
    """The repository, for examples/python/train_mlp.py (the script may run from the build)."""
    for d in (os.path.join(HERE, "..", ".."), os.getcwd()):
        if os.path.exists(os.path.join(d, "examples", "python", "train_mlp.py")):
            return os.path.abspath(d)
    sys.exit("bench_python: run from the repository (examples/python/train_mlp.py not found)")


def env():
    path = os.path.join(BUILD, "python")
    old = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": path + (os.pathsep + old if old else "")}


# ---- the children: what runs in the measured processes ----

def make_model(width):
    import torch
    torch.manual_seed(1)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(width, width), torch.nn.Tanh()]
    model = torch.nn.Sequential(*layers)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def child_train(args):
    """Times --steps steps of the MLP, with Elastra (args.child == "elastra") or without."""
    import torch
    torch.set_num_threads(1)
    model, optimizer = make_model(args.width)
    worker = None
    if args.child == "elastra":
        import elastra
        import elastra.torch
        worker = elastra.Worker()
        elastra.torch.bind(worker, model, optimizer)
        worker.start()
    g = torch.Generator().manual_seed(2)
    x = torch.randn(64, args.width, generator=g)
    y = torch.randn(64, args.width, generator=g)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if worker is not None:
            action = worker.step_end()
            if action != elastra.CONTINUE:
                sys.exit(f"bench_python: step_end returned {action} in a job with no change")
        times.append(time.perf_counter() - start)
    if worker is not None:
        worker.finish()
    warm = times[len(times) // 5:]  # the first fifth warms caches and the allocator
    with open(args.out, "w") as f:
        json.dump({"step_ms": 1000 * statistics.median(warm), "loss": float(loss)}, f)


def child_allreduce(args):
    import torch
    import elastra
    w = elastra.Worker()
    w.start()
    t = torch.ones(args.mib * (1 << 20) // 4, dtype=torch.float32)
    ms = []
    for i in range(2 + args.allreduce_reps):
        start = time.perf_counter()
        w.world.allreduce(t)
        end = time.perf_counter()
        t.fill_(1.0)
        if i >= 2:
            ms.append(1000 * (end - start))
    if w.rank == 0:
        print(json.dumps({"allreduce_ms": statistics.median(ms), "world": w.world.size,
                          "mib": args.mib}), flush=True)
    w.finish()


# ---- the driver ----

def run_quiet(cmd, timeout, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env(), **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])} ... exited {r.returncode}:\n{r.stdout[-3000:]}"
                           f"\n{r.stderr[-3000:]}")
    return r.stdout


def step_time(root, mode, args, rep):
    out = os.path.join(root, f"{mode}{rep}.json")
    child = [PYTHON, SELF, "--child", mode, "--steps", str(args.steps), "--width",
             str(args.width), "--out", out]
    if mode == "elastra":
        state = os.path.join(root, f"state-{mode}{rep}")
        run_quiet([ELASTRA, "run", "--nproc", "1", "--state-dir", state, "--", *child], 600)
    else:
        run_quiet(child, 600)
    with open(out) as f:
        return json.load(f)["step_ms"]


def allreduce_time(root, mode, args, rep):
    state = os.path.join(root, f"state-ar-{mode}{rep}")
    if mode == "python":
        child = [PYTHON, SELF, "--child", "allreduce", "--mib", str(args.mib),
                 "--allreduce-reps", str(args.allreduce_reps)]
    else:
        child = [f"{BUILD}/bench/python/allreduce_from_cpp", "--mib", str(args.mib), "--reps",
                 str(args.allreduce_reps)]
    out = run_quiet([ELASTRA, "run", "--nproc", "2", "--state-dir", state, "--", *child], 600)
    for line in out.splitlines():
        line = line.strip()
        # elastra run prefixes each worker's lines with its id: the JSON is the line's tail.
        if "{" in line and "allreduce_ms" in line:
            return json.loads(line[line.index("{"):])["allreduce_ms"]
    raise RuntimeError(f"no allreduce figure in the output of {mode}:\n{out[-3000:]}")


def wait_for(process, state, what, condition, timeout_s=120):
    return elastra_bench.wait_for_status(state, what, condition, [("elastra run", process)],
                                         timeout_s)


def resize_downtime(root, mode, args, rep):
    """A 4-worker train_mlp (C++ or Python) resized to 2: the new generation's downtime_ms."""
    state = os.path.join(root, f"state-rs-{mode}{rep}")
    stop = os.path.join(root, f"stop-{mode}{rep}")
    model = ["--steps", "1000000", "--hidden", "128", "--ffn", "512", "--layers", "4",
             "--global-batch", "32", "--commit-every", "5", "--stop-file", stop]
    if mode == "python":
        program = [PYTHON, os.path.join(source_root(), "examples", "python", "train_mlp.py")]
    else:
        program = [f"{BUILD}/examples/train_mlp"]
    log = open(os.path.join(root, f"resize-{mode}{rep}.log"), "w")
    p = subprocess.Popen([ELASTRA, "run", "--nproc", "4", "--state-dir", state, "--", *program,
                          *model], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                         env=env())
    try:
        at = wait_for(p, state, "step 10", lambda s: s["step"] >= 10)
        generation = at["generation"]
        subprocess.run([ELASTRA, "resize", "--state-dir", state, "--workers", "2", "--wait"],
                       check=True, capture_output=True, timeout=120)
        s = wait_for(p, state, "the resize's generation", lambda s: any(
            h["generation"] > generation for h in s["history"]))
        entry = [h for h in s["history"] if h["generation"] > generation][-1]
        wait_for(p, state, "steps after the resize", lambda s: s["step"] >= at["step"] + 10)
        open(stop, "w").close()
        p.wait(timeout=120)
        return entry["downtime_ms"]
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        log.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--allreduce-reps", type=int, default=10)
    parser.add_argument("--child", choices=["plain", "elastra", "allreduce"], help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child in ("plain", "elastra"):
        return child_train(args)
    if args.child == "allreduce":
        return child_allreduce(args)
    if args.reps < 1 or args.steps < 10 or args.width < 1 or args.mib < 1:
        parser.error("--reps >= 1, --steps >= 10, --width and --mib >= 1")
    root = tempfile.mkdtemp(prefix="bench_python.")
    figures = {"plain": [], "elastra": [], "python": [], "cpp": [], "resize_python": [],
               "resize_cpp": []}
    try:
        for rep in range(args.reps):
            for mode in ("plain", "elastra") if rep % 2 == 0 else ("elastra", "plain"):
                figures[mode].append(step_time(root, mode, args, rep))
            for mode in ("python", "cpp") if rep % 2 == 0 else ("cpp", "python"):
                figures[mode].append(allreduce_time(root, mode, args, rep))
            for mode in ("python", "cpp") if rep % 2 == 0 else ("cpp", "python"):
                figures["resize_" + mode].append(resize_downtime(root, mode, args, rep))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in figures.items()}
    result = {
        "step_ms_plain": round(med["plain"], 3),
        "step_ms_elastra": round(med["elastra"], 3),
        "overhead_vs_plain": round(med["elastra"] / med["plain"], 4),
        "allreduce_ms_python": round(med["python"], 2),
        "allreduce_ms_cpp": round(med["cpp"], 2),
        "allreduce_vs_cpp": round(med["python"] / med["cpp"], 4),
        "resize_downtime_ms_python": round(med["resize_python"], 1),
        "resize_downtime_ms_cpp": round(med["resize_cpp"], 1),
        "resize_vs_cpp": round(med["resize_python"] / med["resize_cpp"], 4),
        "reps": args.reps,
        "runs": {k: [round(x, 3) for x in v] for k, v in figures.items()},
    }
    print(f"{'figure':<28}{'python/elastra':>16}{'reference':>12}{'ratio':>9}")
    print(f"{'step (ms)':<28}{med['elastra']:>16.3f}{med['plain']:>12.3f}"
          f"{result['overhead_vs_plain']:>9.3f}")
    print(f"{'allreduce %d MiB (ms)' % args.mib:<28}{med['python']:>16.2f}{med['cpp']:>12.2f}"
          f"{result['allreduce_vs_cpp']:>9.3f}")
    print(f"{'dp resize 4->2 downtime (ms)':<28}{med['resize_python']:>16.1f}"
          f"{med['resize_cpp']:>12.1f}{result['resize_vs_cpp']:>9.3f}")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
