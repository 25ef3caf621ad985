"""Elastra from Python: an elastic PyTorch training loop (docs/python.md).

A program keeps its training state in the worker's state (``w.state``), reads it through torch
views that share Elastra's memory, and ends every step with ``w.step_end()``::

    import elastra, torch

    w = elastra.Worker()                      # from the environment `elastra run` gives
    w.state.add_tensor("w", (64, 64), torch.float32)
    w.start()
    while w.step < 100:
        weights = w.state.view("w")           # fetch views afresh: they move at a resize
        grad = torch.ones_like(weights)
        w.dp_group.allreduce(grad)
        weights -= 0.01 * grad
        if w.step_end() == elastra.LEAVE:
            break
    else:
        w.finish()

Every failing call raises an :class:`Error` subclass named after the C++ status code
(:class:`PeerLost`, :class:`TimedOut`, ...); a bad argument raises ``ValueError`` or
``TypeError``; Ctrl-C during a blocking call raises ``KeyboardInterrupt``.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional, Sequence, Tuple

# Imported as _torch: the name elastra.torch is the submodule of bind() (elastra/torch.py).
import torch as _torch
import torch.utils.dlpack as _dlpack

from elastra import _elastra

__all__ = [
    "Worker", "State", "Group", "Layout", "Coordinates", "Region", "Sharding",
    "replicated", "split_over_tp", "owned_by_layer",
    "CONTINUE", "RECONFIGURED", "LEAVE", "SUM", "MAX", "MIN",
    "Error", "TimedOut", "PeerLost", "MembershipChanged", "StaleGeneration",
    "ProtocolMismatch", "Corrupt", "InvalidArgument", "Unauthenticated", "NotFound", "Aborted",
    "Unavailable", "ResourceExhausted", "FailedPrecondition", "Internal", "Busy",
]

# What step_end() returns (elastra::StepAction).
CONTINUE = 0      # nothing changed: go on with w.step
RECONFIGURED = 1  # a new generation: layout, groups, views and possibly w.step changed
LEAVE = 2         # this worker was removed by a shrink; its state is handed off: exit 0

# Reductions (elastra::ReduceOp).
SUM = 0
MAX = 1
MIN = 2


# ---------------------------------------------------------------------------------------------
# Errors: one class per elastra::StatusCode, raised by the extension's translator.

class Error(RuntimeError):
    """A failed Elastra call. ``code`` is the C++ StatusCode number, ``message`` its text."""

    code: int = -1

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{_elastra.status_code_name(code)}: {message}")
        self.code = code
        self.message = message


class TimedOut(Error):
    """A deadline passed (a collective, the rendezvous, a request)."""


class PeerLost(Error):
    """A peer process or connection is gone."""


class MembershipChanged(Error):
    """The job's membership changed."""


class StaleGeneration(Error):
    """Something belongs to an older generation."""


class ProtocolMismatch(Error):
    """Wrong magic or protocol version."""


class Corrupt(Error):
    """Malformed bytes: a frame, a file, a checksum."""


class InvalidArgument(Error, ValueError):
    """A caller's mistake the C++ side found; also a ValueError."""


class Unauthenticated(Error):
    """A wrong or missing key."""


class NotFound(Error):
    """Something named does not exist."""


class Aborted(Error):
    """The operation was aborted on purpose (a communicator's abort, a Ctrl-C)."""


class Unavailable(Error):
    """The service cannot be reached now."""


class ResourceExhausted(Error):
    """Out of memory, disk or a limit."""


class FailedPrecondition(Error):
    """The worker is not in a state that allows the call (a collective before start())."""


class Internal(Error):
    """An internal error."""


class Busy(Error):
    """Another change is in flight."""


_ERRORS = {1: TimedOut, 2: PeerLost, 3: MembershipChanged, 4: StaleGeneration,
           5: ProtocolMismatch, 6: Corrupt, 7: InvalidArgument, 8: Unauthenticated, 9: NotFound,
           10: Aborted, 11: Unavailable, 12: ResourceExhausted, 13: FailedPrecondition,
           14: Internal, 15: Busy}
for _code, _cls in _ERRORS.items():
    _cls.code = _code
_elastra._register_errors(_ERRORS)

# ---------------------------------------------------------------------------------------------
# Data types: torch dtype <-> elastra::DataType.

_DTYPES = {_torch.float32: 0, _torch.float64: 1, _torch.int64: 2, _torch.uint8: 3,
           _torch.bfloat16: 4, _torch.float16: 5, _torch.int32: 6}
_TORCH_DTYPES = {v: k for k, v in _DTYPES.items()}
# What the Communicator reduces and moves (docs/collectives.md).
_COLLECTIVE_DTYPES = (_torch.float32, _torch.float64, _torch.bfloat16, _torch.float16,
                      _torch.int32, _torch.int64, _torch.uint8)


def _dtype_code(dtype: _torch.dtype, what: str) -> int:
    if not isinstance(dtype, _torch.dtype):
        raise TypeError(f"{what}: dtype must be a torch.dtype, got {dtype!r}")
    if dtype not in _DTYPES:
        names = ", ".join(str(d) for d in _DTYPES)
        raise TypeError(f"{what}: dtype {dtype} is not supported (one of {names})")
    return _DTYPES[dtype]


# ---------------------------------------------------------------------------------------------
# Sharding rules (include/elastra/sharding.h).

@dataclasses.dataclass(frozen=True)
class Sharding:
    """How a tensor is laid out over the layout (dp, pp, tp).

    ``tp_split_dim``: -1 replicated over tensor parallelism, else the dimension split over the tp
    ranks in balanced contiguous parts. ``layer``: -1 on every pipeline stage, else only on the
    stage that holds that layer. ``zero``: ZeRO-1, the rank's box further split flat over the dp
    ranks (its view is then 1-D).
    """

    tp_split_dim: int = -1
    layer: int = -1
    zero: bool = False

    def with_zero(self) -> "Sharding":
        """The same rule, ZeRO-1 sharded over data parallelism."""
        return dataclasses.replace(self, zero=True)


def replicated() -> Sharding:
    """Held whole by every rank."""
    return Sharding()


def split_over_tp(dim: int, layer: int = -1) -> Sharding:
    """Split along ``dim`` over the tp ranks; on the stage of ``layer`` when it is >= 0."""
    return Sharding(tp_split_dim=dim, layer=layer)


def owned_by_layer(layer: int) -> Sharding:
    """Held whole by the pipeline stage that holds ``layer``."""
    return Sharding(layer=layer)


# ---------------------------------------------------------------------------------------------
# Small value types.

class Layout(tuple):
    """(dp, pp, tp)."""

    def __new__(cls, dp: int, pp: int, tp: int) -> "Layout":
        return super().__new__(cls, (dp, pp, tp))

    dp = property(lambda self: self[0])
    pp = property(lambda self: self[1])
    tp = property(lambda self: self[2])

    def __repr__(self) -> str:
        return f"Layout(dp={self[0]}, pp={self[1]}, tp={self[2]})"


class Coordinates(tuple):
    """(rank, dp_rank, pp_rank, tp_rank): this worker's place in the layout."""

    def __new__(cls, rank: int, dp_rank: int, pp_rank: int, tp_rank: int) -> "Coordinates":
        return super().__new__(cls, (rank, dp_rank, pp_rank, tp_rank))

    rank = property(lambda self: self[0])
    dp_rank = property(lambda self: self[1])
    pp_rank = property(lambda self: self[2])
    tp_rank = property(lambda self: self[3])

    def __repr__(self) -> str:
        return (f"Coordinates(rank={self[0]}, dp_rank={self[1]}, pp_rank={self[2]}, "
                f"tp_rank={self[3]})")


@dataclasses.dataclass(frozen=True)
class Region:
    """The part of a global tensor this rank holds: rows [row_begin, row_end) x columns
    [col_begin, col_end) of its matrix view (a 1-D tensor is one row), and of that box, in
    row-major order, the elements [flat_begin, flat_end). ``local_shape`` is view()'s shape."""

    global_shape: Tuple[int, ...]
    row_begin: int
    row_end: int
    col_begin: int
    col_end: int
    flat_begin: int
    flat_end: int
    local_shape: Tuple[int, ...]


# ---------------------------------------------------------------------------------------------
# The state.

class State:
    """The training state the worker owns and moves (elastra::TensorCollection).

    Register every tensor and scalar before ``Worker.start()``, in the same order on every
    rank; until then each tensor is held whole, so initialize it through ``view()`` (the job
    starts from global rank 0's values). From ``start()`` on a rank holds only its shard, and
    ``view()`` returns that shard. After a ``step_end()`` that returns ``RECONFIGURED`` the shards
    moved: fetch the views again (an older view must not be used).
    """

    def __init__(self, worker: "Worker") -> None:
        self._worker = worker

    def add_tensor(self, name: str, shape: Sequence[int], dtype: _torch.dtype = _torch.float32,
                   sharding: Sharding = Sharding()) -> None:
        """Registers a zero-filled tensor of 1 or 2 dimensions. Raises TypeError for a bad
        dtype or sharding, ValueError (InvalidArgument) for a bad shape, name or rule."""
        if not isinstance(name, str) or not name:
            raise ValueError("add_tensor: name must be a non-empty string")
        if not isinstance(sharding, Sharding):
            raise TypeError(f"add_tensor: sharding must be an elastra.Sharding, got {sharding!r}")
        shape = tuple(shape)
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            raise TypeError(f"add_tensor: shape must be integers, got {shape!r}")
        self._worker._w.add_tensor(name, list(shape), _dtype_code(dtype, "add_tensor"),
                                   sharding.tp_split_dim, sharding.layer, bool(sharding.zero))

    def add_scalar(self, name: str, value: int = 0) -> None:
        """Registers an int64 scalar (a data cursor, a seed, a counter)."""
        self._worker._w.add_scalar(name, int(value))

    def set_num_layers(self, layers: int) -> None:
        """The number of layers that layer-owned rules refer to (default 1); before adding
        layer-owned tensors."""
        self._worker._w.set_num_layers(int(layers))

    def view(self, name: str) -> _torch.Tensor:
        """A torch tensor that views this rank's shard of ``name`` in Elastra's memory (no
        copy): writing to it changes the state Elastra commits and moves. Its shape is
        ``region(name).local_shape``. Valid until the next step_end() that returns
        RECONFIGURED. Raises ValueError (InvalidArgument) for an unknown name."""
        capsule = self._worker._w.view(name, self._worker)
        return _dlpack.from_dlpack(capsule)

    def region(self, name: str) -> Region:
        """Which part of the global tensor ``name`` this rank holds now."""
        r = self._worker._w.region(name)
        return Region(tuple(r.global_shape), r.row_begin, r.row_end, r.col_begin, r.col_end,
                      r.flat_begin, r.flat_end, tuple(r.local_shape))

    def dtype(self, name: str) -> _torch.dtype:
        return _TORCH_DTYPES[self._worker._w.tensor_dtype(name)]

    def names(self) -> Tuple[str, ...]:
        """The tensors' names in registration order."""
        return tuple(self._worker._w.tensor_names())

    def __getitem__(self, name: str) -> int:
        """The value of scalar ``name``."""
        return self._worker._w.get_scalar(name)

    def __setitem__(self, name: str, value: int) -> None:
        self._worker._w.set_scalar(name, int(value))


# ---------------------------------------------------------------------------------------------
# Collectives.

def _check_tensor(t: object, what: str) -> _torch.Tensor:
    if not isinstance(t, _torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise ValueError(f"{what}: tensor is on {t.device}; only CPU tensors are supported yet")
    if not t.is_contiguous():
        raise ValueError(f"{what}: tensor is not contiguous (call .contiguous() on a copy)")
    if t.dtype not in _COLLECTIVE_DTYPES:
        raise TypeError(f"{what}: dtype {t.dtype} is not supported by collectives")
    return t


class Group:
    """One of the current generation's communicators (world, dp, pp or tp), resolved at each
    call, so a Group stays usable across reconfigurations. Every call works in place on CPU,
    contiguous tensors, blocks until done or the worker's collective timeout, releases the GIL,
    and raises PeerLost, TimedOut or Aborted when the group broke: hand that error to
    step_end()."""

    def __init__(self, worker: "Worker", index: int, name: str) -> None:
        self._worker = worker
        self._index = index
        self.name = name

    @property
    def rank(self) -> int:
        return self._worker._w.group_rank(self._index)

    @property
    def size(self) -> int:
        return self._worker._w.group_size(self._index)

    def allreduce(self, tensor: _torch.Tensor, op: int = SUM) -> _torch.Tensor:
        """In place: ``tensor`` becomes the reduction over the group. Returns it."""
        t = _check_tensor(tensor, f"{self.name}.allreduce")
        if op not in (SUM, MAX, MIN):
            raise ValueError(f"{self.name}.allreduce: op must be SUM, MAX or MIN, got {op!r}")
        self._worker._w.allreduce(self._index, t.data_ptr(), t.numel(), _DTYPES[t.dtype], op)
        return tensor

    def broadcast(self, tensor: _torch.Tensor, root: int = 0) -> _torch.Tensor:
        """In place: every rank's ``tensor`` becomes rank ``root``'s. Returns it."""
        t = _check_tensor(tensor, f"{self.name}.broadcast")
        self._worker._w.broadcast(self._index, t.data_ptr(), t.numel(), _DTYPES[t.dtype],
                                  int(root))
        return tensor

    def allgather(self, output: _torch.Tensor, input: _torch.Tensor) -> _torch.Tensor:
        """``output`` (size * input.numel() elements) receives every rank's ``input``, rank r's
        at offset r * input.numel(). Returns output."""
        o = _check_tensor(output, f"{self.name}.allgather output")
        i = _check_tensor(input, f"{self.name}.allgather input")
        self._check_pair(o, i, "allgather", "output", "input")
        self._worker._w.allgather(self._index, i.data_ptr(), o.data_ptr(), i.numel(),
                                  _DTYPES[i.dtype])
        return output

    def reduce_scatter(self, output: _torch.Tensor, input: _torch.Tensor,
                       op: int = SUM) -> _torch.Tensor:
        """``input`` holds size * output.numel() elements; rank r's ``output`` receives the
        reduction of block r. Returns output."""
        o = _check_tensor(output, f"{self.name}.reduce_scatter output")
        i = _check_tensor(input, f"{self.name}.reduce_scatter input")
        self._check_pair(i, o, "reduce_scatter", "input", "output")
        if op not in (SUM, MAX, MIN):
            raise ValueError(f"{self.name}.reduce_scatter: op must be SUM, MAX or MIN")
        self._worker._w.reduce_scatter(self._index, i.data_ptr(), o.data_ptr(), o.numel(),
                                       _DTYPES[o.dtype], op)
        return output

    def barrier(self) -> None:
        self._worker._w.barrier(self._index)

    def send(self, tensor: _torch.Tensor, peer: int, tag: int = 0) -> None:
        """Sends ``tensor``'s bytes to group rank ``peer``; matches its recv() with ``tag``."""
        t = _check_tensor(tensor, f"{self.name}.send")
        self._worker._w.send(self._index, t.data_ptr(), t.numel() * t.element_size(), int(peer),
                             int(tag))

    def recv(self, tensor: _torch.Tensor, peer: int, tag: int = 0) -> _torch.Tensor:
        """Receives into ``tensor`` what group rank ``peer`` sent with ``tag``. Returns it."""
        t = _check_tensor(tensor, f"{self.name}.recv")
        self._worker._w.recv(self._index, t.data_ptr(), t.numel() * t.element_size(), int(peer),
                             int(tag))
        return tensor

    def _check_pair(self, big: _torch.Tensor, small: _torch.Tensor, call: str, big_name: str,
                    small_name: str) -> None:
        if big.dtype != small.dtype:
            raise TypeError(f"{self.name}.{call}: {big_name} is {big.dtype}, "
                            f"{small_name} is {small.dtype}")
        size = self.size
        if big.numel() != size * small.numel():
            raise ValueError(f"{self.name}.{call}: {big_name} has {big.numel()} elements, "
                             f"expected {size} x {small.numel()} = {size * small.numel()}")
        if big.data_ptr() == small.data_ptr() and big.numel() > 0:
            raise ValueError(f"{self.name}.{call}: {big_name} and {small_name} overlap")


# ---------------------------------------------------------------------------------------------
# The worker.

_OVERRIDES = {
    "coordinator": str, "job": str, "worker_id": str, "host": str, "bind_host": str,
    "checkpoint_dir": str, "model_json": str, "backend": str,
    "commit_every": int, "checkpoint_every": int, "device_memory_bytes": int,
    "park_when_removed": bool, "collective_timeout_ms": int, "decision_timeout_ms": int,
    "heartbeat_interval_ms": int,
}


class Worker:
    """One process of an elastic job (elastra::Worker).

    ``Worker()`` reads the environment that ``elastra run``, an agent or the mpirun bootstrap
    gives (elastra::WorkerOptions::FromEnvironment) and connects to the coordinator; keyword
    arguments override its fields: coordinator, job, worker_id, host, bind_host, backend
    ("gloo"), commit_every, checkpoint_dir, checkpoint_every, device_memory_bytes, model_json,
    park_when_removed, collective_timeout_ms, decision_timeout_ms, heartbeat_interval_ms.
    Raises TypeError for an unknown keyword or a value of the wrong type, InvalidArgument for a
    bad value, Unavailable when the coordinator cannot be reached.

    One thread drives a worker. The worker's own threads keep running while Python runs.
    """

    def __init__(self, **overrides: object) -> None:
        items = []
        for name, value in overrides.items():
            kind = _OVERRIDES.get(name)
            if kind is None:
                raise TypeError(f"Worker() got an unexpected keyword argument '{name}'")
            if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise TypeError(f"Worker(): {name} must be an int, got {value!r}")
            if kind is bool and not isinstance(value, bool):
                raise TypeError(f"Worker(): {name} must be a bool, got {value!r}")
            if kind is str and not isinstance(value, str):
                raise TypeError(f"Worker(): {name} must be a str, got {value!r}")
            items.append(_elastra._Override(name, int(value) if kind is bool else value))
        self._w = _elastra._Worker(items)
        self.state = State(self)
        self.world = Group(self, 0, "world")
        self.dp_group = Group(self, 1, "dp_group")
        self.pp_group = Group(self, 2, "pp_group")
        self.tp_group = Group(self, 3, "tp_group")
        # Called with no argument whenever the shards may have moved: after start() and after a
        # step_end() that returns RECONFIGURED (elastra.torch.bind re-points a module there).
        self._on_reconfigured: List[Callable[[], None]] = []

    def start(self) -> int:
        """Joins the job; returns CONTINUE once this worker holds a layout, groups and the job's
        state (received from the current members when it joins a running job), or LEAVE when the
        coordinator dismissed it cleanly before it held a rank (a spare the job no longer needs,
        or the job finished while it stood by): nothing went wrong, exit 0. Raises Unavailable or
        Aborted when it is never admitted."""
        action = self._w.start()
        if action == CONTINUE:
            self._reconfigured()
        return action

    def step_end(self, error: Optional[BaseException] = None) -> int:
        """Ends a step: returns CONTINUE, RECONFIGURED or LEAVE.

        ``error`` is what went wrong in the step, if anything: an :class:`Error` raised by a
        collective (PeerLost, TimedOut, Aborted) starts the recovery of the job, which rolls this
        worker back to the last commit (``w.step`` goes back) and returns RECONFIGURED. Any other
        exception is passed as Aborted. Raises an Error only when the job cannot go on."""
        if error is None:
            action = self._w.step_end(0, "")
        elif isinstance(error, Error):
            action = self._w.step_end(error.code, error.message)
        elif isinstance(error, BaseException):
            action = self._w.step_end(Aborted.code, f"{type(error).__name__}: {error}")
        else:
            raise TypeError(f"step_end: error must be an exception or None, got {error!r}")
        if action == RECONFIGURED:
            self._reconfigured()
        return action

    def _reconfigured(self) -> None:
        for hook in self._on_reconfigured:
            hook()

    def finish(self) -> None:
        """Tells the coordinator this worker finished training (after the last step)."""
        self._w.finish()

    def close(self) -> None:
        """Leaves the job now, without finishing: the worker tells the coordinator, which goes on
        without it at once (the job recovers as from a lost worker, without waiting out its
        heartbeats), and its groups and connection close. For a process
        that goes on after an error (``with Worker() as w:`` calls it); a process that exits
        needs no close(). Views stay readable; every other call then raises
        FailedPrecondition. Calling it again does nothing."""
        self._w.close()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def report(self, name: str, value: float) -> None:
        """A number for the job's status, /metrics and dashboard (elastra::Worker::Report)."""
        self._w.report(name, float(value))

    def report_samples(self, samples: int) -> None:
        """The samples this worker's replica consumed in the step just run."""
        self._w.report_samples(int(samples))

    @property
    def step(self) -> int:
        """The number of steps applied to the state: the next step to run."""
        return self._w.step

    @property
    def generation(self) -> int:
        return self._w.generation

    @property
    def layout(self) -> Layout:
        return Layout(*self._w.layout)

    @property
    def coordinates(self) -> Coordinates:
        return Coordinates(*self._w.coordinates)

    @property
    def rank(self) -> int:
        """This worker's global rank in the current layout."""
        return self._w.rank

    @property
    def world_size(self) -> int:
        return self._w.world_size

    @property
    def worker_id(self) -> str:
        return self._w.worker_id

# elastra.torch.bind: a torch.nn.Module and its optimizer kept in the state (elastra/torch.py).
from elastra import torch  # noqa: E402  (it uses the classes above)
