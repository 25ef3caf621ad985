"""The worker side of test_api.py: `api_worker.py SCENARIO OUT_DIR`, run by `elastra run`.

Each scenario checks what it can from inside the worker and writes OUT_DIR/<phase>.<rank>.json
({"ok": bool, "problems": [...], ...}); test_api.py drives the job (resizes, stop file) and reads
those files.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback

import torch

import elastra

OUT = sys.argv[2]


def write(phase: str, rank: int, problems: list, **extra: object) -> None:
    tmp = os.path.join(OUT, f".{phase}.{rank}.tmp")
    with open(tmp, "w") as f:
        json.dump({"ok": not problems, "problems": problems, **extra}, f)
    os.rename(tmp, os.path.join(OUT, f"{phase}.{rank}.json"))


def expect(problems: list, cond: bool, what: str) -> None:
    if not cond:
        problems.append(what)


def raises(problems: list, exc: type, call, what: str) -> None:
    """Expects call() to raise `exc` (and says what it raised otherwise)."""
    try:
        call()
    except exc:
        return
    except BaseException as e:  # noqa: B902 - any other exception is the problem reported
        problems.append(f"{what}: raised {type(e).__name__}: {e}, expected {exc.__name__}")
        return
    problems.append(f"{what}: raised nothing, expected {exc.__name__}")


# ---------------------------------------------------------------------------------------------
# layouts: collectives on every group and views across dp=2 -> pp=2 -> tp=2.

Z_SHAPE, T_SHAPE = (6, 5), (6, 4)


def expected_view(w: elastra.Worker, name: str, shape: tuple, stamp: int) -> torch.Tensor:
    """What view(name) must hold when every rank last wrote arange + 1000 * stamp into its
    shard: the global tensor's values in this rank's region."""
    r = w.state.region(name)
    whole = torch.arange(shape[0] * shape[1], dtype=torch.float64).view(shape) + 1000 * stamp
    box = whole[r.row_begin:r.row_end, r.col_begin:r.col_end].reshape(-1)
    return box[r.flat_begin:r.flat_end].reshape(r.local_shape)


def fill_views(w: elastra.Worker, stamp: int) -> None:
    for name, shape in (("z", Z_SHAPE), ("t", T_SHAPE)):
        w.state.view(name).copy_(expected_view(w, name, shape, stamp))


def dp_checks(w: elastra.Worker, problems: list) -> None:
    g, r = w.dp_group, w.dp_group.rank
    expect(problems, g.size == 2, f"dp_group.size {g.size}")
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32):
        t = torch.full((7,), r + 1, dtype=dtype)
        g.allreduce(t)
        expect(problems, t.tolist() == [3] * 7, f"allreduce sum {dtype}: {t.tolist()}")
        t = torch.full((3,), r + 1, dtype=dtype)
        g.allreduce(t, elastra.MAX)
        expect(problems, t.tolist() == [2] * 3, f"allreduce max {dtype}: {t.tolist()}")
    t = torch.full((4,), float(r))
    g.broadcast(t, root=1)
    expect(problems, t.tolist() == [1.0] * 4, f"broadcast: {t.tolist()}")
    out = torch.zeros(6, dtype=torch.int32)
    g.allgather(out, torch.full((3,), r + 5, dtype=torch.int32))
    expect(problems, out.tolist() == [5, 5, 5, 6, 6, 6], f"allgather: {out.tolist()}")
    out = torch.zeros(2, dtype=torch.float64)
    g.reduce_scatter(out, torch.arange(4, dtype=torch.float64) * (r + 1))
    want = [0.0, 3.0] if r == 0 else [6.0, 9.0]
    expect(problems, out.tolist() == want, f"reduce_scatter: {out.tolist()}, want {want}")


def send_recv_checks(g: elastra.Group, problems: list) -> None:
    """Rank 0 of the group sends to rank 1, which answers with the value doubled."""
    expect(problems, g.size == 2, f"{g.name}.size {g.size}")
    t = torch.arange(5, dtype=torch.bfloat16)
    if g.rank == 0:
        g.send(t, peer=1, tag=7)
        back = torch.zeros(5, dtype=torch.bfloat16)
        g.recv(back, peer=1, tag=8)
        expect(problems, back.tolist() == (t * 2).tolist(), f"{g.name} recv: {back.tolist()}")
    else:
        got = torch.zeros(5, dtype=torch.bfloat16)
        g.recv(got, peer=0, tag=7)
        expect(problems, got.tolist() == t.tolist(), f"{g.name} recv: {got.tolist()}")
        g.send(got * 2, peer=0, tag=8)
    s = torch.tensor([g.rank + 1.0])
    g.allreduce(s)
    expect(problems, s.item() == 3.0, f"{g.name}.allreduce {s.item()}")


def layouts() -> int:
    w = elastra.Worker()
    w.state.set_num_layers(2)
    w.state.add_tensor("z", Z_SHAPE, torch.float64, elastra.replicated().with_zero())
    w.state.add_tensor("t", T_SHAPE, torch.float64, elastra.split_over_tp(1))
    w.state.add_tensor("h", (3,), torch.bfloat16)
    w.state.add_tensor("l1", (2, 2), torch.float32, elastra.owned_by_layer(1))
    w.state.add_scalar("marker", 0)
    problems: list = []
    # Before start() every tensor is whole, and a view is Elastra's memory itself.
    v1, v2 = w.state.view("z"), w.state.view("z")
    expect(problems, tuple(v1.shape) == Z_SHAPE, f"whole view shape {tuple(v1.shape)}")
    expect(problems, v1.data_ptr() == v2.data_ptr(), "two views of z do not share memory")
    v1[0, 0] = 42.0
    expect(problems, v2[0, 0].item() == 42.0, "a write through one view is not in the other")
    expect(problems, w.state.view("h").dtype == torch.bfloat16, "view of h is not bfloat16")
    w.start()
    fill_views(w, w.step)
    w.state["marker"] = 7
    stop = os.path.join(OUT, "stop")
    done: set = set()
    checked_after_change = 0
    while True:
        layout = tuple(w.layout)
        phase = {(2, 1, 1): "dp", (1, 2, 1): "pp", (1, 1, 2): "tp"}.get(layout)
        if phase is not None and phase not in done:
            if phase == "dp":
                dp_checks(w, problems)
            else:
                send_recv_checks(w.pp_group if phase == "pp" else w.tp_group, problems)
                l1 = w.state.region("l1")
                holds = l1.flat_end > l1.flat_begin
                expect(problems, holds == (phase != "pp" or w.coordinates.pp_rank == 1),
                       f"{phase}: l1 held: {holds}, stage {w.coordinates.pp_rank}")
            write(phase, w.rank, problems, layout=layout, coordinates=tuple(w.coordinates),
                  checked_after_change=checked_after_change)
            done.add(phase)
        seen = torch.tensor([int(os.path.exists(stop))], dtype=torch.int64)
        w.world.allreduce(seen, elastra.MAX)
        if seen.item():
            break
        time.sleep(0.005)  # share the machine's cores
        stamp = w.step
        fill_views(w, stamp)
        action = w.step_end()
        if action == elastra.LEAVE:
            return 0
        if action == elastra.RECONFIGURED:
            # The shards moved: the views fetched again hold what every rank wrote at the last
            # applied step, in this rank's new region.
            for name, shape in (("z", Z_SHAPE), ("t", T_SHAPE)):
                v, want = w.state.view(name), expected_view(w, name, shape, w.step - 1)
                expect(problems, tuple(v.shape) == tuple(want.shape) and torch.equal(v, want),
                       f"after reconfiguration to {tuple(w.layout)}, view {name} holds "
                       f"{v.tolist()}, expected {want.tolist()}")
            expect(problems, w.state["marker"] == 7, f"marker {w.state['marker']}")
            checked_after_change += 1
    w.finish()
    return 0


# ---------------------------------------------------------------------------------------------
# errors: bad arguments and failures raise the named exceptions.

def errors() -> int:
    problems: list = []
    raises(problems, TypeError, lambda: elastra.Worker(no_such_option=1), "unknown keyword")
    raises(problems, TypeError, lambda: elastra.Worker(commit_every="3"), "str for an int")
    raises(problems, elastra.InvalidArgument, lambda: elastra.Worker(commit_every=0),
           "commit_every=0")
    raises(problems, ValueError, lambda: elastra.Worker(backend="tpu"), "backend=tpu")
    w = elastra.Worker(collective_timeout_ms=20000)
    s = w.state
    raises(problems, TypeError, lambda: s.add_tensor("c", (2,), torch.complex64), "complex dtype")
    raises(problems, TypeError, lambda: s.add_tensor("c", (2,), "float32"), "dtype as a string")
    raises(problems, TypeError, lambda: s.add_tensor("c", (2.5,), torch.float32), "float shape")
    raises(problems, elastra.InvalidArgument, lambda: s.add_tensor("c", (2, 2, 2)), "3-D shape")
    raises(problems, elastra.InvalidArgument, lambda: s.add_tensor("c", (0,)), "zero dimension")
    raises(problems, elastra.InvalidArgument,
           lambda: s.add_tensor("c", (4,), sharding=elastra.split_over_tp(1)), "split dim 1 of 1-D")
    raises(problems, TypeError, lambda: s.add_tensor("c", (4,), sharding="tp"), "sharding str")
    s.add_tensor("a", (4, 4), torch.float32)
    raises(problems, elastra.InvalidArgument, lambda: s.add_tensor("a", (4,)), "duplicate name")
    raises(problems, ValueError, lambda: s.view("nope"), "view of an unknown tensor")
    raises(problems, ValueError, lambda: s["nope"], "unknown scalar")
    raises(problems, elastra.FailedPrecondition, lambda: w.dp_group.allreduce(torch.ones(2)),
           "collective before start()")
    raises(problems, elastra.FailedPrecondition, lambda: w.step_end(), "step_end before start()")
    w.start()
    rank = w.rank
    raises(problems, elastra.FailedPrecondition, lambda: s.add_tensor("late", (2,)),
           "add_tensor after start()")
    g = w.world
    raises(problems, TypeError, lambda: g.allreduce([1.0, 2.0]), "a list")
    raises(problems, ValueError, lambda: g.allreduce(torch.ones(4, 4).T), "non-contiguous")
    raises(problems, TypeError, lambda: g.allreduce(torch.ones(2, dtype=torch.bool)), "bool")
    raises(problems, ValueError, lambda: g.allreduce(torch.ones(2), op=7), "unknown op")
    raises(problems, ValueError, lambda: g.allgather(torch.ones(5), torch.ones(3)),
           "allgather size mismatch")
    raises(problems, TypeError,
           lambda: g.allgather(torch.ones(6), torch.ones(3, dtype=torch.float64)),
           "allgather dtype mismatch")
    raises(problems, ValueError, lambda: g.reduce_scatter(torch.ones(3), torch.ones(5)),
           "reduce_scatter size mismatch")
    raises(problems, elastra.InvalidArgument, lambda: g.send(torch.ones(1), peer=9), "bad peer")
    raises(problems, elastra.InvalidArgument, lambda: w.report("bad name!", 1.0), "report name")
    raises(problems, elastra.InvalidArgument, lambda: w.report_samples(-1), "negative samples")
    raises(problems, TypeError, lambda: w.step_end("oops"), "step_end(str)")
    # A peer that dies: its collectives' survivors see PeerLost (or Aborted, when the
    # coordinator's interrupt of the group, on hearing of the exit, came first).
    g.barrier()
    if rank == 1:
        write("errors", rank, problems)
        os._exit(3)
    lost = None
    try:
        g.allreduce(torch.ones(1 << 16))
    except (elastra.PeerLost, elastra.Aborted) as e:
        lost = e
    except BaseException as e:  # noqa: B902
        problems.append(f"allreduce with a dead peer raised {type(e).__name__}: {e}")
    if lost is not None:
        expect(problems, lost.code in (elastra.PeerLost.code, elastra.Aborted.code),
               f"code {lost.code}")
        expect(problems, isinstance(lost, elastra.Error) and lost.message != "", "no message")
        # Handed to step_end, the failure is recovered: the job goes on at dp=1.
        action = w.step_end(lost)
        expect(problems, action == elastra.RECONFIGURED, f"step_end after the loss: {action}")
        expect(problems, tuple(w.layout) == (1, 1, 1), f"layout after the loss {w.layout}")
    write("errors", rank, problems, lost=type(lost).__name__)
    w.finish()
    return 0


# ---------------------------------------------------------------------------------------------
# interrupt: Ctrl-C while a recv waits for a send that never comes.

def calling(pid: int) -> bool:
    """Whether process `pid` has a blocking call in flight."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
            # "TID (comm) STATE ...": a thread that ended but is still listed is Z or X.
            name, state = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2]
            if name == "elastra-call" and state not in "ZX":
                return True
        except OSError:
            pass  # the thread ended meanwhile
    return False


def interrupt() -> int:
    w = elastra.Worker(collective_timeout_ms=60000)
    w.start()
    problems: list = []
    pids = torch.zeros(2, dtype=torch.int64)
    w.world.allgather(pids, torch.tensor([os.getpid()], dtype=torch.int64))
    blocked = os.path.join(OUT, "blocked")
    if w.rank == 1:
        # The SIGINT goes once rank 0 waits: a blocking call runs on a thread of its own named
        # elastra-call (python/blocking_call.h).
        while not os.path.exists(blocked) or not calling(int(pids[0])):
            time.sleep(0.01)
        os.kill(int(pids[0]), signal.SIGINT)
        # Alive until rank 0 is done: its recv must end by the Ctrl-C, not by this exit.
        while not os.path.exists(os.path.join(OUT, "interrupt.0.json")):
            time.sleep(0.01)
        write("interrupt", 1, problems)
        os._exit(0)
    open(blocked, "w").close()
    start = time.monotonic()
    where = ""
    try:
        w.world.recv(torch.zeros(4), peer=1)
        problems.append("recv returned without a send")
    except KeyboardInterrupt:
        frames = traceback.extract_tb(sys.exc_info()[2])
        where = frames[-1].name
        if where != "recv":
            problems.append("".join(traceback.format_list(frames)))
    waited = time.monotonic() - start
    expect(problems, where == "recv", f"KeyboardInterrupt raised in {where!r}, not in recv")
    expect(problems, waited < 50, f"waited {waited:.1f} s: the collective's timeout, not Ctrl-C")
    # The interrupted group is aborted: a later call fails fast with an Error.
    try:
        w.world.barrier()
        problems.append("the interrupted group still works")
    except elastra.Error:
        pass
    write("interrupt", 0, problems, waited=waited)
    os._exit(0)


if __name__ == "__main__":
    sys.exit({"layouts": layouts, "errors": errors, "interrupt": interrupt}[sys.argv[1]]())
