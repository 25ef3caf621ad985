"""A worker of Python.BindViews (test_bind.py): a module with a tensor-parallel split, a 3-D and a
0-D parameter, and AdamW, bound with elastra.torch.bind. Every parameter starts at a value known
everywhere (`initial`), and each step adds 1 to every parameter and to every AdamW moment
through the module and the optimizer (not through the state), and AdamW's step count counts
the steps. After start() and after every RECONFIGURED the worker checks that each parameter and
each optimizer state tensor is the view of its shard (the same memory) and holds the right part
of the global value (initial + steps), and writes what it found to DIR/check.<pid>.jsonl.
"""

from __future__ import annotations

import json
import math
import os
import sys

import torch

import elastra
import elastra.torch

RULES = {"split.weight": elastra.split_over_tp(0), "split.bias": elastra.split_over_tp(0),
         "cols.weight": elastra.split_over_tp(1)}


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.split = torch.nn.Linear(4, 6)   # weight [6, 4] and bias [6] split over tp by rows
        self.cols = torch.nn.Linear(6, 2)    # weight [2, 6] split over tp by columns
        self.kernel = torch.nn.Parameter(torch.zeros(4, 3, 2))  # 3-D, replicated
        self.scale = torch.nn.Parameter(torch.zeros(()))         # 0-D, replicated


GLOBAL_SHAPES = {name: tuple(p.shape) for name, p in Net().named_parameters()}


def initial(name: str) -> torch.Tensor:
    """The global value `name` starts from: distinct for every element of every parameter."""
    shape = GLOBAL_SHAPES[name]
    base = 1000.0 * (1 + sorted(GLOBAL_SHAPES).index(name))
    return base + torch.arange(math.prod(shape), dtype=torch.float32).view(shape)


def expected(name: str, region: elastra.Region, step: int) -> torch.Tensor:
    """This rank's part of the global value after `step` steps: the region of the tensor as the
    state keeps it (a scalar as one element, a 3-D tensor as [dim 0, the rest])."""
    value, shape = initial(name) + step, GLOBAL_SHAPES[name]
    if len(shape) <= 1:
        part = value.reshape(-1)[region.col_begin:region.col_end]
        return part.view(()) if len(shape) == 0 else part
    part = value.reshape(shape[0], -1)[region.row_begin:region.row_end,
                                       region.col_begin:region.col_end]
    return part if len(shape) == 2 else part.reshape((-1,) + shape[1:])


def check(worker: elastra.Worker, model: Net, optimizer, binding) -> dict:
    """What differs from the expected memory and values (an empty list: all good)."""
    wrong, step = [], worker.step
    for name, param in model.named_parameters():
        state_name = binding.names[name]
        want = expected(name, worker.state.region(state_name), step)
        if param.data_ptr() != worker.state.view(state_name).data_ptr():
            wrong.append(f"{name}: not the view's memory")
        if not torch.equal(param.detach(), want):
            wrong.append(f"{name}: {param.detach().tolist()} != {want.tolist()}")
        opt = optimizer.state[param]
        for key in ("exp_avg", "exp_avg_sq", "step"):
            if opt[key].data_ptr() != worker.state.view(f"{state_name}.{key}").data_ptr():
                wrong.append(f"{name}.{key}: not the view's memory")
        for key in ("exp_avg", "exp_avg_sq"):
            if not torch.equal(opt[key], torch.full_like(want, float(step))):
                wrong.append(f"{name}.{key}: {opt[key].tolist()} != {step}")
        if float(opt["step"]) != step:
            wrong.append(f"{name}.step: {float(opt['step'])} != {step}")
    return {"pid": os.getpid(), "generation": worker.generation, "step": step,
            "layout": list(worker.layout), "rank": worker.rank, "wrong": wrong,
            "split_rows": model.split.weight.shape[0], "cols_cols": model.cols.weight.shape[1]}


def refused_binds(worker: elastra.Worker) -> list:
    """Binds that must raise and register nothing: what went otherwise."""
    wrong, model = [], Net()
    cases = [({"optimizer": torch.optim.RMSprop(model.parameters())}, TypeError),
             ({"rules": {"kernel": elastra.split_over_tp(1)}}, ValueError),
             ({"rules": {"split.bias": elastra.split_over_tp(1)}}, ValueError),
             ({"rules": {"split.weight": elastra.split_over_tp(0).with_zero()}}, ValueError),
             ({"rules": {"no.such": elastra.replicated()}}, ValueError),
             ({"rules": lambda name: "replicated"}, TypeError)]
    for kwargs, error in cases:
        try:
            elastra.torch.bind(worker, model, **kwargs)
            wrong.append(f"{kwargs}: no error")
        except error:
            pass
        if worker.state.names():
            wrong.append(f"{kwargs}: registered {worker.state.names()}")
    return wrong


def main() -> int:
    out_dir, stop_file = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    worker = elastra.Worker(commit_every=1)
    model = Net()
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(initial(name))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    refused_wrong = refused_binds(worker)
    binding = elastra.torch.bind(worker, model, optimizer, RULES)
    worker.start()
    results = open(os.path.join(out_dir, f"check.{os.getpid()}.jsonl"), "a")

    def record() -> None:
        found = check(worker, model, optimizer, binding)
        found["refused_wrong"] = refused_wrong
        results.write(json.dumps(found) + "\n")
        results.flush()

    record()
    while True:
        seen = torch.tensor([int(os.path.exists(stop_file))], dtype=torch.int64)
        worker.world.allreduce(seen, elastra.MAX)
        if seen.item():
            break
        with torch.no_grad():
            for param in model.parameters():
                param.add_(1)  # through the module: the state itself changes
                for key in ("exp_avg", "exp_avg_sq", "step"):
                    optimizer.state[param][key].add_(1)
        action = worker.step_end()
        if action == elastra.LEAVE:
            return 0
        if action == elastra.RECONFIGURED:
            record()
    worker.finish()
    # Closed, the worker refuses calls but its memory stays: the module is still readable.
    before = [p.detach().clone() for p in model.parameters()]
    worker.close()
    after_close = [] if all(torch.equal(a, p.detach()) for a, p in
                            zip(before, model.parameters())) else ["parameters changed"]
    try:
        worker.step
        after_close.append("step after close(): no error")
    except elastra.FailedPrecondition:
        pass
    worker.close()  # again: nothing
    results.write(json.dumps({"pid": os.getpid(), "after_close": after_close}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
