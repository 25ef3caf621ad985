"""A torch.nn.Module trained with torch.optim.AdamW, kept in Elastra by elastra.torch.bind: the
program of Python.ElasticBind and Python.RaisingWorker (test_bind.py).

Its model code is plain PyTorch (model(x), loss.backward(), optimizer.step()); only the gradient
sum over the data-parallel replicas and step_end() are Elastra's. The data, the teacher and the
--log format are examples/python/train_mlp.py's, so a resized run is compared with --reference
(one process, no Elastra, the whole global batch each step) by examples/compare_logs.

--raise-file FILE: the worker of rank 1 that finds FILE removes it and raises RuntimeError in the
middle of a step (after its backward pass, before the gradient allreduce). The exception leaves
the `with elastra.Worker()` block, which closes the worker, and ends the process; with
--stay-after-raise the process catches it and lives on until --stop-file exists.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "examples", "python"))
from train_mlp import INPUTS, OUTPUTS, CountedSteps, Dataset, StepLog  # noqa: E402

import elastra  # noqa: E402
import elastra.torch  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(INPUTS, hidden)
        self.fc2 = torch.nn.Linear(hidden, OUTPUTS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


def make(args: argparse.Namespace):
    torch.manual_seed(args.seed)
    model = Net(args.hidden).double()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    return model, optimizer, Dataset(args.seed, args.dataset_size, 8)


def loss_sum(model: Net, data: Dataset, begin: int, end: int) -> torch.Tensor:
    x, target = data.rows(begin, end)
    return 0.5 * ((model(x) - target) ** 2).sum()


def run_reference(args: argparse.Namespace) -> int:
    model, optimizer, data = make(args)
    log = StepLog(args.log)
    for step in range(args.steps):
        cursor = step * args.global_batch
        optimizer.zero_grad()
        loss = loss_sum(model, data, cursor, cursor + args.global_batch)
        loss.backward()
        for p in model.parameters():
            p.grad /= args.global_batch
        optimizer.step()
        log.write(step, 0, (1, 1, 1), float(loss) / args.global_batch, cursor,
                  cursor + args.global_batch)
    return 0


def train_step(worker, model: Net, optimizer, data: Dataset, args: argparse.Namespace,
               begin: int) -> float:
    """One step on this replica's share of the global batch at cursor `begin`; the gradients and
    the loss summed over dp. Returns the global batch's mean loss."""
    layout, dp_rank = worker.layout, worker.coordinates.dp_rank
    b = args.global_batch
    optimizer.zero_grad()
    loss = loss_sum(model, data, begin + b * dp_rank // layout.dp,
                    begin + b * (dp_rank + 1) // layout.dp)
    loss.backward()
    if args.raise_file and worker.rank == 1 and os.path.exists(args.raise_file):
        os.remove(args.raise_file)
        raise RuntimeError(f"bind_mlp.py: a bug in the step, on purpose (step {worker.step})")
    elastra.torch.allreduce_gradients(worker.dp_group, model.parameters(), 1.0 / b,
                                      bucket_bytes=256)  # several buckets, as a big model has
    total = loss.detach().reshape(1).clone()
    worker.dp_group.allreduce(total)
    optimizer.step()
    return float(total) / b


def run_elastic(args: argparse.Namespace) -> int:
    # The with block closes the worker however it ends: after an uncaught exception the job
    # recovers without it at once, even while this process lives on (--stay-after-raise).
    with elastra.Worker(commit_every=args.commit_every) as worker:
        model, optimizer, data = make(args)
        elastra.torch.bind(worker, model, optimizer)
        worker.state.add_scalar("cursor", 0)
        worker.start()
        log = StepLog(args.log)
        counted = CountedSteps(args, args.commit_every, log)
        while worker.step < args.steps:
            seen = torch.tensor([int(os.path.exists(args.stop_file))], dtype=torch.int64)
            step, generation, layout = worker.step, worker.generation, worker.layout
            logs, begin, loss, error = worker.rank == 0, worker.state["cursor"], 0.0, None
            try:
                worker.world.allreduce(seen, elastra.MAX)  # all stop after the same step
                if seen.item():
                    break
                loss = train_step(worker, model, optimizer, data, args, begin)
                worker.state["cursor"] = begin + args.global_batch
            except elastra.Error as e:
                error = e
            action = worker.step_end(error)
            if worker.step == step + 1:  # applied
                if logs:
                    log.write(step, generation, layout, loss, begin, begin + args.global_batch)
                counted.add(step, generation, layout, loss, begin)
            if action == elastra.LEAVE:
                return 0
            counted.after_step_end(worker, logs, generation)
        worker.finish()
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=1000000)
    p.add_argument("--global-batch", type=int, default=48)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--dataset-size", type=int, default=1024)
    p.add_argument("--commit-every", type=int, default=5)
    p.add_argument("--log", default="")
    p.add_argument("--stop-file", default="")
    p.add_argument("--raise-file", default="")
    p.add_argument("--stay-after-raise", action="store_true",
                   help="after the raise, keep the process until --stop-file exists")
    p.add_argument("--reference", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.reference:
        return run_reference(args)
    if not args.stay_after_raise:
        return run_elastic(args)
    try:
        return run_elastic(args)
    except RuntimeError as e:
        print(f"bind_mlp.py: {e}; the worker is closed, the process stays", flush=True)
        while not os.path.exists(args.stop_file):
            time.sleep(0.1)
        return 0


if __name__ == "__main__":
    sys.exit(main())
