#!/usr/bin/env python3
"""train_mlp.py: examples/train_mlp's model, data and log in PyTorch, trained under Elastra.

The same MLP as the C++ train_mlp (train_mlp_model.cc): an input layer (16 -> hidden, tanh),
``--layers`` residual blocks x + fc2(tanh(fc1(x))), an output layer (hidden -> 4), float64,
learning a fixed teacher network on synthetic data drawn with splitmix64 from ``--seed``, with
Adam. The global batch is fixed and split over the data-parallel ranks by the data cursor (an
Elastra scalar), so a run that is resized or loses a worker follows the losses of ``--reference``
(one process, no Elastra, the whole global batch each step) up to floating-point grouping::

    elastra run --nproc 4 -- python3 examples/python/train_mlp.py --steps 200 --log run.jsonl
    elastra resize --workers 2 --wait
    python3 examples/python/train_mlp.py --reference --steps 200 --log ref.jsonl
    compare_logs run.jsonl ref.jsonl 200

``--log`` writes one JSON line per applied step in train_mlp's format (step, generation, dp, pp,
tp, loss, sample_begin, sample_end), which examples/compare_logs checks: the same loss at every
step, every sample position applied exactly once.

Parallelism: data and tensor parallelism. The tensors are registered with the C++ example's
sharding rules (fc1 split over tp along dim 0, fc2 along dim 1, each block owned by its layer's
stage), and with tp > 1 each block's fc1 is column-parallel and its fc2 row-parallel, the partial
sums added over the tp group (Megatron's f and g as autograd functions). Pipeline stages are not
implemented: at a layout with pp > 1 the script exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import deque
from typing import Callable, Dict, List, Optional, Tuple

import torch

INPUTS = 16
OUTPUTS = 4
MASK = (1 << 64) - 1


def mix(x: int) -> int:
    """splitmix64's finalizer (train_mlp_model.cc Mix): sample i's data does not depend on who
    computes it."""
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def uniform(key: int) -> float:
    """In [-1, 1), as train_mlp's Uniform."""
    return float(mix(key) >> 11) * (2.0 / 9007199254740992.0) - 1.0


def make_input(seed: int, index: int) -> List[float]:
    base = mix((seed * 1000003 + index) & MASK)
    return [uniform((base + i) & MASK) for i in range(INPUTS)]


class Dataset:
    """Every sample position's input and the teacher's target, computed once (float64)."""

    def __init__(self, seed: int, size: int, hidden: int) -> None:
        w1 = torch.tensor([1.5 / math.sqrt(INPUTS) * uniform(777000 + k)
                           for k in range(hidden * INPUTS)], dtype=torch.float64)
        w2 = torch.tensor([1.5 / math.sqrt(hidden) * uniform(888000 + k)
                           for k in range(OUTPUTS * hidden)], dtype=torch.float64)
        self.inputs = torch.tensor([make_input(seed, i) for i in range(size)], dtype=torch.float64)
        h = torch.tanh(self.inputs @ w1.view(hidden, INPUTS).T)
        self.targets = h @ w2.view(OUTPUTS, hidden).T
        self.size = size

    def rows(self, begin: int, end: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """Sample positions [begin, end) (wrapping around the dataset)."""
        index = torch.arange(begin, end, dtype=torch.int64) % self.size
        return self.inputs[index], self.targets[index]


class _SumForward(torch.autograd.Function):
    """Megatron's g: the row-parallel fc2's partial outputs summed over tp going forward; the
    gradient passes through unchanged going back."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, allreduce: Callable[[torch.Tensor], None]) -> torch.Tensor:
        y = x.clone()
        allreduce(y)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad, None


class _SumBackward(torch.autograd.Function):
    """Megatron's f: the block's input unchanged going forward; going back, the column-parallel
    fc1's partial input gradients summed over tp."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, allreduce: Callable[[torch.Tensor], None]) -> torch.Tensor:
        ctx.allreduce = allreduce
        return x.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.clone()
        ctx.allreduce(grad)
        return grad, None


class Model:
    """The parameters' names, shapes, sharding and initial values, and one training step."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        h, f, layers = args.hidden, args.ffn, args.layers
        # (name, shape, rule, init scale): train_mlp_model.cc Model::Register, in its order.
        self.params: List[Tuple[str, Tuple[int, ...], Tuple[str, int, int], float]] = [
            ("in.w", (h, INPUTS), ("layer", 0, -1), 1.0 / math.sqrt(INPUTS)),
            ("in.b", (h,), ("layer", 0, -1), 0.0)]
        for l in range(layers):
            p = f"l{l}."
            self.params += [(p + "fc1.w", (f, h), ("tp", l, 0), 1.0 / math.sqrt(h)),
                            (p + "fc1.b", (f,), ("tp", l, 0), 0.0),
                            (p + "fc2.w", (h, f), ("tp", l, 1), 0.5 / math.sqrt(f)),
                            (p + "fc2.b", (h,), ("layer", l, -1), 0.0)]
        self.params += [("out.w", (OUTPUTS, h), ("layer", layers - 1, -1), 1.0 / math.sqrt(h)),
                        ("out.b", (OUTPUTS,), ("layer", layers - 1, -1), 0.0)]
        self.names = [p[0] for p in self.params]
        self.data = Dataset(args.seed, args.dataset_size, h)

    def initial_values(self) -> Dict[str, torch.Tensor]:
        """Every parameter's whole initial value (from --seed), as train_mlp draws it."""
        values = {}
        salt = 0
        base = mix(self.args.seed)
        for name, shape, _, scale in self.params:
            n = math.prod(shape)
            values[name] = torch.tensor([scale * uniform((base + salt + k) & MASK)
                                         for k in range(n)], dtype=torch.float64).view(shape)
            salt += 1000003
        return values

    def step(self, get: Callable[[str], torch.Tensor], cursor: int, step: int, dp_rank: int,
             dp: int, allreduce: Optional[Callable[[torch.Tensor], None]],
             tp_allreduce: Optional[Callable[[torch.Tensor], None]] = None) -> float:
        """One step on this dp rank's share of the global batch: forward, backward, gradients
        (and the loss) summed over dp with `allreduce`, Adam on every local shard in place.
        With `tp_allreduce` (tp > 1) each block's fc1 is column-parallel and its fc2
        row-parallel, their partial sums added over tp (Megatron's f and g). Returns the loss:
        the mean over the global batch of 0.5 * |out - target|^2."""
        a = self.args
        begin = cursor + a.global_batch * dp_rank // dp
        end = cursor + a.global_batch * (dp_rank + 1) // dp
        params = {n: get(n) for n in self.names}
        for p in params.values():
            p.requires_grad_(True)
            p.grad = None
        x_in, target = self.data.rows(begin, end)
        x = torch.tanh(x_in @ params["in.w"].T + params["in.b"])
        for l in range(a.layers):
            p = f"l{l}."
            xin = x if tp_allreduce is None else _SumBackward.apply(x, tp_allreduce)
            hid = torch.tanh(xin @ params[p + "fc1.w"].T + params[p + "fc1.b"])
            y = hid @ params[p + "fc2.w"].T
            if tp_allreduce is not None:
                y = _SumForward.apply(y, tp_allreduce)
            x = x + (y + params[p + "fc2.b"])
        out = x @ params["out.w"].T + params["out.b"]
        loss_sum = 0.5 * ((out - target) ** 2).sum()
        loss_sum.backward()
        # One buffer: every gradient, then the loss sum; one allreduce over dp.
        flat = torch.cat([params[n].grad.reshape(-1) for n in self.names] +
                         [loss_sum.detach().reshape(1)])
        if allreduce is not None and dp > 1:
            allreduce(flat)
        flat /= a.global_batch
        t = step + 1
        b1, b2, eps = 0.9, 0.999, 1e-8
        c1, c2 = 1.0 - b1 ** t, 1.0 - b2 ** t
        offset = 0
        with torch.no_grad():
            for n in self.names:
                p = params[n]
                p.requires_grad_(False)
                g = flat[offset:offset + p.numel()].view_as(p)
                offset += p.numel()
                m, v = get("m:" + n), get("v:" + n)
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                p.sub_(a.lr * (m / c1) / ((v / c2).sqrt() + eps))
        return float(flat[-1])


class StepLog:
    """train_mlp's --log: one JSON line per applied step, flushed at once."""

    def __init__(self, path: str) -> None:
        self.file = open(path, "a") if path else None

    def write(self, step: int, generation: int, layout: Tuple[int, int, int], loss: float,
              begin: int, end: int) -> None:
        if self.file is None:
            return
        self.file.write(json.dumps({"step": step, "generation": generation, "dp": layout[0],
                                    "pp": layout[1], "tp": layout[2], "loss": loss,
                                    "sample_begin": begin, "sample_end": end}) + "\n")
        self.file.flush()


def run_reference(args: argparse.Namespace) -> int:
    model = Model(args)
    values = model.initial_values()
    state = dict(values)
    for n, v in values.items():
        state["m:" + n] = torch.zeros_like(v)
        state["v:" + n] = torch.zeros_like(v)
    log = StepLog(args.log)
    cursor, loss = 0, 0.0
    for step in range(args.steps):
        loss = model.step(state.__getitem__, cursor, step, 0, 1, None)
        log.write(step, 0, (1, 1, 1), loss, cursor, cursor + args.global_batch)
        cursor += args.global_batch
    print(f"reference: {args.steps} steps, final loss {loss:.6g}")
    return 0


class CountedSteps:
    """train_mlp.cc's CountedSteps: only rank 0 logs, and a step counts on the ranks that held
    their lease when its agreement completed; so a worker that becomes rank 0 through a change
    logs again the steps it remembers below the step its state is at (the reader keeps the
    last record of a step)."""

    def __init__(self, args: argparse.Namespace, commit_every: int, log: StepLog) -> None:
        self.args = args
        self.log = log
        self.counted: deque = deque(maxlen=2 * max(1, commit_every) + 2)

    def add(self, step: int, generation: int, layout: Tuple[int, int, int], loss: float,
            begin: int) -> None:
        self.counted.append((step, generation, layout, loss, begin))

    def after_step_end(self, worker, logged: bool, before: int) -> None:
        while self.counted and self.counted[-1][0] >= worker.step:
            self.counted.pop()  # undone by a rollback: applied (and remembered) again
        if logged or worker.rank != 0 or worker.generation == before:
            return
        for step, generation, layout, loss, begin in self.counted:
            if step < worker.step:
                self.log.write(step, generation, layout, loss, begin,
                               begin + self.args.global_batch)


def run_elastic(args: argparse.Namespace) -> int:
    import elastra

    overrides = {}
    if args.commit_every > 0:
        overrides["commit_every"] = args.commit_every
    worker = elastra.Worker(**overrides)
    model = Model(args)
    state = worker.state
    state.set_num_layers(args.layers)
    rules = {"layer": lambda l, d: elastra.owned_by_layer(l),
             "tp": lambda l, d: elastra.split_over_tp(d, l)}
    for name, shape, (kind, layer, dim), _ in model.params:
        for prefix in ("", "m:", "v:"):
            state.add_tensor(prefix + name, shape, torch.float64, rules[kind](layer, dim))
    for name, value in model.initial_values().items():
        state.view(name).copy_(value)  # whole before start(): the job starts from rank 0's
    state.add_scalar("cursor", 0)
    if worker.start() == elastra.LEAVE:  # a standby the job did not need: nothing went wrong
        print("train_mlp.py: dismissed before holding a rank", flush=True)
        return 0

    commit_every = args.commit_every or int(os.environ.get("ELASTRA_COMMIT_EVERY", "10"))
    log = StepLog(args.log)
    counted = CountedSteps(args, commit_every, log)
    loss = 0.0
    stopped_at = -1

    def recover(error: BaseException) -> bool:
        """Hands a failed collective to step_end(); False when this worker must leave."""
        logged, before = worker.rank == 0, worker.generation
        if worker.step_end(error) == elastra.LEAVE:
            return False
        counted.after_step_end(worker, logged, before)
        return True

    while worker.step < args.steps:
        layout = worker.layout
        if layout.pp != 1:
            print(f"train_mlp.py: layout {layout}: pipeline stages are not implemented",
                  file=sys.stderr)
            return 2
        if args.stop_file:
            # Every member asks at the same point of the same step, so all stop together.
            seen = torch.tensor([1 if os.path.exists(args.stop_file) else 0], dtype=torch.int64)
            try:
                worker.world.allreduce(seen, elastra.MAX)
            except elastra.Error as e:
                if not recover(e):
                    return 0
                continue
            if seen.item():
                stopped_at = worker.step
                break
        start = time.monotonic()
        step, generation, logs = worker.step, worker.generation, worker.rank == 0
        begin = state["cursor"]
        coords = worker.coordinates
        error = None
        try:
            loss = model.step(state.view, begin, step, coords.dp_rank, layout.dp,
                              worker.dp_group.allreduce,
                              worker.tp_group.allreduce if layout.tp > 1 else None)
            state["cursor"] = begin + args.global_batch
        except elastra.Error as e:
            error = e
        if error is None and args.step_time_ms > 0:
            time.sleep(max(0.0, start + args.step_time_ms / 1000 - time.monotonic()))
        action = worker.step_end(error)
        if worker.step == step + 1:  # applied (also when it then paused for a change)
            if logs:
                log.write(step, generation, layout, loss, begin, begin + args.global_batch)
            counted.add(step, generation, layout, loss, begin)
            share = (args.global_batch * (coords.dp_rank + 1) // layout.dp -
                     args.global_batch * coords.dp_rank // layout.dp)
            worker.report("loss", loss)
            worker.report_samples(share)
        if action == elastra.LEAVE:
            return 0
        counted.after_step_end(worker, logs, generation)
    if worker.rank == 0:
        steps = stopped_at if stopped_at >= 0 else args.steps
        note = " (stopped by --stop-file)" if stopped_at >= 0 else ""
        print(f"train_mlp.py: {steps} steps{note}, final loss {loss:.6g}, generation "
              f"{worker.generation}, {worker.layout}", flush=True)
    worker.finish()
    return 0


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--global-batch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--ffn", type=int, default=0, help="0: 2 x hidden")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dataset-size", type=int, default=4096)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--log", default="", help="JSONL file of applied steps (rank 0 writes)")
    p.add_argument("--reference", action="store_true",
                   help="one process without Elastra, the whole global batch each step")
    p.add_argument("--commit-every", type=int, default=0,
                   help="in-memory commit period; 0: the worker's default")
    p.add_argument("--step-time-ms", type=float, default=0, help="pad each step to this time")
    p.add_argument("--stop-file", default="",
                   help="training ends (on every worker after the same step) once FILE exists")
    args = p.parse_args(argv)
    if args.ffn == 0:
        args.ffn = 2 * args.hidden
    for name in ("steps", "global_batch", "hidden", "layers", "dataset_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.seed < 0:
        p.error("--seed must be >= 0")
    return args


def main() -> int:
    args = parse_args()
    torch.set_num_threads(1)  # one core per worker: workers share the machine's cores
    return run_reference(args) if args.reference else run_elastic(args)


if __name__ == "__main__":
    sys.exit(main())
