"""elastra.torch: a torch.nn.Module and its optimizer kept in a Worker's state (docs/python.md).

``bind(worker, module, optimizer, rules)`` is the Python twin of the C++ ``elastra::torch``
(torch_interop/torch_state.h): it registers every parameter of the module, and the optimizer's
per-parameter state, with a sharding rule each, copies their values in, and makes the module's
parameters and the optimizer's state *be* views of Elastra's memory. The worker then moves them
at a resize, a layout change or a lost worker, and after each such change the binding points
them at their new shards, so the model and optimizer code does not change::

    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    w = elastra.Worker()
    elastra.torch.bind(w, model, optimizer, {"fc1.weight": elastra.split_over_tp(0)})
    w.start()                    # from here on model's parameters are this rank's shards
    while w.step < steps:
        loss = model(x).sum(); loss.backward(); ...; optimizer.step(); optimizer.zero_grad()
        w.step_end()             # on RECONFIGURED the binding has re-pointed them already

Optimizers: Adam and AdamW (``exp_avg``, ``exp_avg_sq``, ``max_exp_avg_sq`` with amsgrad, and
the ``step`` count), created eagerly at bind time (zeros, as their first step would) so that
they are registered before ``start()``; SGD without momentum, which keeps no state; or None.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Tuple, Union

import torch

import elastra

__all__ = ["bind", "Binding", "allreduce_gradients"]

Rules = Union[None, Mapping[str, "elastra.Sharding"],
              Callable[[str], Optional["elastra.Sharding"]]]

# The per-parameter state each supported optimizer keeps: name -> whether it has the
# parameter's shape (else it is AdamW's one-element step count).
_ADAM_STATE = {"step": False, "exp_avg": True, "exp_avg_sq": True}


def _state_spec(optimizer: torch.optim.Optimizer, group: dict) -> Dict[str, bool]:
    if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        spec = dict(_ADAM_STATE)
        if group.get("amsgrad"):
            spec["max_exp_avg_sq"] = True
        return spec
    if type(optimizer) is torch.optim.SGD and not group.get("momentum"):
        return {}
    raise TypeError(f"bind: optimizer {type(optimizer).__name__} is not supported (Adam, AdamW, "
                    "or SGD without momentum)")


def _registered_shape(name: str, shape: Tuple[int, ...],
                      rule: "elastra.Sharding") -> Tuple[int, ...]:
    """The 1-D or 2-D shape a parameter is kept as: a scalar as (1,), a tensor of more than two
    dimensions as (shape[0], the product of the rest), which only rules that do not split a
    dimension past the first keep whole."""
    if len(shape) == 0:
        return (1,)
    if len(shape) <= 2:
        return shape
    if rule.tp_split_dim > 0:
        raise ValueError(f"bind: parameter '{name}' of shape {list(shape)}: a rule can split "
                         f"only its dimension 0, got split_over_tp({rule.tp_split_dim})")
    return (shape[0], math.prod(shape[1:]))


class Binding:
    """What ``bind`` registered, and how to point the module and optimizer at their shards.

    ``names`` maps each parameter's name in the module to its tensor's name in the state; the
    optimizer's state for parameter ``n`` is ``names[n] + "." + key`` (``.exp_avg``,
    ``.exp_avg_sq``, ``.step``). The worker calls ``rebind()`` itself after ``start()`` and after
    every ``step_end()`` that returns RECONFIGURED.
    """

    def __init__(self, worker: "elastra.Worker", module: torch.nn.Module,
                 optimizer: Optional[torch.optim.Optimizer]) -> None:
        self.worker = worker
        self.module = module
        self.optimizer = optimizer
        self.names: Dict[str, str] = {}
        # (parameter, its state name, its shape in the module)
        self._params: List[Tuple[torch.nn.Parameter, str, Tuple[int, ...]]] = []
        # (parameter, its state name, its shape, {optimizer state key: has the parameter's shape})
        self._opt_state: List[Tuple[torch.nn.Parameter, str, Tuple[int, ...], Dict[str, bool]]] = []

    def rebind(self) -> None:
        """Points every parameter (``param.data``) and every optimizer state tensor at the
        view of its current shard; drops the gradients, whose shapes may have changed. A
        parameter this rank holds nothing of (a layer on another pipeline stage) becomes an
        empty tensor. Raises ValueError when a shard has no view of the parameter's shape."""
        state = self.worker.state
        with torch.no_grad():
            for param, name, shape in self._params:
                param.data = self._view(name, shape)
                param.grad = None
        if self.optimizer is None:
            return
        for param, name, shape, spec in self._opt_state:
            self.optimizer.state[param] = {
                key: self._view(f"{name}.{key}", shape) if like_param else
                state.view(f"{name}.{key}") for key, like_param in spec.items()}

    def _view(self, name: str, shape: Tuple[int, ...]) -> torch.Tensor:
        view = self.worker.state.view(name)
        if view.numel() == 0:
            return view
        if len(shape) == 0:
            return view.view(())
        if len(shape) <= 2:
            return view
        return view.view((view.shape[0],) + shape[1:])


def _rule_of(rules: Rules, names: List[str]) -> Callable[[str], "elastra.Sharding"]:
    if rules is None:
        return lambda _: elastra.replicated()
    if callable(rules):
        def call(name: str) -> "elastra.Sharding":
            rule = rules(name)
            return elastra.replicated() if rule is None else rule
        return call
    if isinstance(rules, Mapping):
        unknown = sorted(set(rules) - set(names))
        if unknown:
            raise ValueError(f"bind: rules name parameters the module does not have: {unknown}")
        return lambda name: rules.get(name, elastra.replicated())
    raise TypeError(f"bind: rules must be None, a dict or a callable, got {type(rules).__name__}")


def bind(worker: "elastra.Worker", module: torch.nn.Module,
         optimizer: Optional[torch.optim.Optimizer] = None, rules: Rules = None,
         prefix: str = "") -> Binding:
    """Keeps ``module``'s parameters and ``optimizer``'s state in ``worker``'s state.

    Call before ``worker.start()``, with the module built at its full (global) size on the CPU;
    every rank must bind the same module with the same rules. ``rules`` gives each parameter's
    sharding by its name in ``module.named_parameters()``: a dict (parameters it does not name
    are replicated) or a callable returning an ``elastra.Sharding`` or None (replicated); no
    rules: all replicated. Parameters are registered as ``prefix + name``, the optimizer's state
    as ``prefix + name + "." + key`` with the parameter's rule (the step count replicated). The
    values are copied in (the job starts from global rank 0's), and the optimizer's state is
    created now, zero, as its first step would create it.

    From then on the worker points the parameters and the optimizer state at their shards
    after ``start()`` and after each ``step_end()`` that returns RECONFIGURED (so also after a
    rollback, with the values of the commit). Returns the Binding. Raises TypeError for an
    unsupported optimizer, a rule that is no Sharding or a parameter of an unsupported dtype;
    ValueError for a ZeRO rule (a flat range has no view of the parameter's shape), a split of
    a dimension the parameter lacks, a parameter not on the CPU, an optimizer parameter the
    module does not have, optimizer state that exists already, or a name the state has. A
    refused bind registers nothing.
    """
    if not isinstance(worker, elastra.Worker):
        raise TypeError(f"bind: worker must be an elastra.Worker, got {type(worker).__name__}")
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"bind: module must be a torch.nn.Module, got {type(module).__name__}")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"bind: optimizer must be a torch.optim.Optimizer, got "
                        f"{type(optimizer).__name__}")
    binding = Binding(worker, module, optimizer)
    # Everything is checked before anything is registered: a refused bind leaves no tensors.
    plan = _plan(binding, rules, prefix)
    taken = set(worker.state.names()) & {p.name for p in plan}
    if taken:
        raise ValueError(f"bind: the state has tensors of these names already: {sorted(taken)}")
    for p in plan:
        worker.state.add_tensor(p.name, p.shape, p.dtype, p.rule)
        if p.value is not None:
            worker.state.view(p.name).view(p.value.shape).copy_(p.value.detach())
    binding.rebind()  # held whole until start(): the module now computes with Elastra's memory
    worker._on_reconfigured.append(binding.rebind)
    return binding


class _Registration(NamedTuple):
    name: str
    shape: Tuple[int, ...]          # as registered: 1-D or 2-D
    dtype: torch.dtype
    rule: "elastra.Sharding"
    value: Optional[torch.Tensor]   # copied in; None: zeros


def _plan(binding: Binding, rules: Rules, prefix: str) -> List[_Registration]:
    """The tensors to register, after every check; fills in binding's tables."""
    named = list(binding.module.named_parameters())
    rule_of = _rule_of(rules, [n for n, _ in named])
    plan: List[_Registration] = []
    rules_of: Dict[int, elastra.Sharding] = {}
    for name, param in named:
        rule = rule_of(name)
        if not isinstance(rule, elastra.Sharding):
            raise TypeError(f"bind: the rule of '{name}' must be an elastra.Sharding, got "
                            f"{rule!r}")
        if rule.zero:
            raise ValueError(f"bind: parameter '{name}': ZeRO rules have no view of the "
                             "parameter's shape")
        if param.device.type != "cpu":
            raise ValueError(f"bind: parameter '{name}' is on {param.device}; only CPU "
                             "parameters are supported yet")
        if param.dtype not in elastra._DTYPES:
            raise TypeError(f"bind: parameter '{name}' is {param.dtype}, which the state cannot "
                            "hold")
        shape = tuple(param.shape)
        registered = _registered_shape(name, shape, rule)
        if rule.tp_split_dim >= len(registered):
            raise ValueError(f"bind: parameter '{name}' of shape {list(shape)} has no dimension "
                             f"{rule.tp_split_dim} to split")
        plan.append(_Registration(prefix + name, registered, param.dtype, rule, param))
        binding.names[name] = prefix + name
        binding._params.append((param, prefix + name, shape))
        rules_of[id(param)] = rule
    if binding.optimizer is not None:
        plan += _plan_optimizer_state(binding, named, rules_of)
    return plan


def _plan_optimizer_state(binding: Binding, named: List[Tuple[str, torch.nn.Parameter]],
                          rules_of: Dict[int, "elastra.Sharding"]) -> List[_Registration]:
    optimizer = binding.optimizer
    name_of = {id(p): binding.names[n] for n, p in named}
    plan: List[_Registration] = []
    for group in optimizer.param_groups:
        spec = _state_spec(optimizer, group)
        for param in group["params"]:
            name = name_of.get(id(param))
            if name is None:
                raise ValueError("bind: an optimizer parameter is not a parameter of the module")
            if optimizer.state.get(param):
                raise ValueError(f"bind: the optimizer already has state for '{name}': bind "
                                 "before its first step")
            shape = tuple(param.shape)
            rule = rules_of[id(param)]
            for key, like_param in spec.items():
                if like_param:
                    plan.append(_Registration(f"{name}.{key}", _registered_shape(name, shape, rule),
                                              param.dtype, rule, None))
                else:  # AdamW's step count: a float32 tensor of one element, held by every rank
                    plan.append(_Registration(f"{name}.{key}", (1,), torch.float32,
                                              elastra.replicated(), None))
            if spec:
                binding._opt_state.append((param, name, shape, spec))
    return plan


def allreduce_gradients(group: "elastra.Group", parameters: Iterable[torch.nn.Parameter],
                        scale: float = 1.0, bucket_bytes: int = 4 << 20) -> None:
    """DDP's bucketed gradient sum (elastra::torch's GradientReducer): the defined, non-empty
    gradients of ``parameters``, last first as backward produces them, packed into flat buckets
    of one dtype of up to ``bucket_bytes`` (at least one gradient each), each summed over
    ``group`` with one allreduce, multiplied by ``scale`` and copied back. Every rank of the
    group passes gradients of the same shapes in the same order (a dp_group). Raises what the
    allreduce raises (PeerLost, TimedOut, Aborted): hand it to step_end()."""
    grads = [p.grad for p in reversed(list(parameters))
             if p.grad is not None and p.grad.numel() > 0]
    i = 0
    while i < len(grads):
        end, elements = i, 0
        while end < len(grads) and grads[end].dtype == grads[i].dtype and (
                end == i or (elements + grads[end].numel()) * grads[i].element_size() <=
                bucket_bytes):
            elements += grads[end].numel()
            end += 1
        flat = torch.cat([g.reshape(-1) for g in grads[i:end]])
        group.allreduce(flat)
        if scale != 1.0:
            flat.mul_(scale)
        offset = 0
        for g in grads[i:end]:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()
        i = end
