"""The learner's gradient step, composed by the learner from an algorithm and the learners'
reducer: eager (autograd and torch's Adam) or compiled (:mod:`hpc_refer.algorithms.kit.compiled`).

Either way one step at gradient step t (the count of steps taken before it) is

    g  = grad_w L(w; batch, beta, c_max)           the algorithm's :meth:`Algorithm.losses`
    g <- (1 / L) sum_l g_l                         with L > 1 learners: one allreduce (of
                                                   the gradients of the optimizers due)
    w <- Adam_k(w, g)  for every optimizer k due   t % every_k == 0 (``OptimizerSpec.every``;
                                                   L may leave out the terms that reach only
                                                   the others, :func:`resting`)
    b <- b_new         for the loss's buffer updates of the modules of every optimizer due
                                                   (``Losses.updates``: batch renormalisation's
                                                   running statistics)
    after_step(t)                                  e.g. Polyak targets

with each optimizer's learning rate eta0_k times ReF-ER's factor (eq. 13). An optimizer that
is not due keeps its parameters and moments (a delayed actor, as TD3's). The step's kind is
fixed when the learner is built (``run.compile``); a compiled step that cannot be built here
falls back to the eager one on its first call, with one log line, before any parameter moved
(:class:`~hpc_refer.algorithms.kit.compiled.CompiledOrEagerStep`).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from hpc_refer.algorithms.kit.base import Algorithm, ReferTerms, StepResult
from hpc_refer.algorithms.kit.collectives import Reducer, SerialReducer
from hpc_refer.replay.shard import Batch


class Step(Protocol):
    """One gradient step of the learners (all learners call it together)."""

    @property
    def kind(self) -> str:
        """``eager``, or ``compiled (S s to compile)``: for the run's log."""
        ...

    @property
    def compiled(self) -> bool:
        """Whether the steps so far ran compiled."""
        ...

    @property
    def compile_seconds(self) -> float:
        """Seconds the first (compiling) call took; 0 for an eager step."""
        ...

    def __call__(self, batch: Batch, terms: ReferTerms, t: int) -> StepResult: ...


def due(algo: Algorithm, t: int) -> tuple[bool, ...]:
    """Which of the algorithm's optimizers step at gradient step ``t`` (in their order)."""
    return tuple(t % spec.every == 0 for spec in algo.optimizers.values())


def resting(algo: Algorithm, now: tuple[bool, ...]) -> frozenset[str]:
    """The names of the optimizers that do not step, ``now`` being :func:`due`'s answer: the
    loss may leave out the terms that reach only them (:meth:`Algorithm.loss_terms`)."""
    return frozenset(name for name, stepping in zip(algo.optimizers, now, strict=True)
                     if not stepping)


def minibatch_means(stats: dict[str, torch.Tensor]) -> dict[str, float]:
    """The mean of each per-sample diagnostic over the minibatch (one host synchronisation);
    0-d values (means already, as the compiled step returns them) are taken as they are."""
    with torch.no_grad():
        values = torch.stack([x.detach().float().mean() if x.dim() else x
                              for x in stats.values()]).tolist()
    return dict(zip(stats, values, strict=True))


def step_result(stats: dict[str, float], rho: torch.Tensor, value: torch.Tensor | None,
                error: torch.Tensor) -> StepResult:
    """A :class:`StepResult` of numpy views of the step's tensors."""
    return StepResult(stats, rho.numpy(), None if value is None else value.numpy(),
                      error.numpy())


class GradientAverage:
    """(1 / L) sum_l g_l in place over the learners: the gradients of one step as one flat
    float32 vector, one reduction (its buffer is kept between steps)."""

    def __init__(self, reducer: Reducer) -> None:
        self.reducer = reducer
        self._flat: np.ndarray | None = None

    def __call__(self, grads: list[torch.Tensor]) -> None:
        if self.reducer.size == 1:
            return
        size = sum(g.numel() for g in grads)
        if self._flat is None or self._flat.size != size:
            self._flat = np.zeros(size, np.float32)
        flat = torch.from_numpy(self._flat)
        torch.cat([g.reshape(-1) for g in grads], out=flat)
        self.reducer.average_(self._flat)
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()


class BufferWrites:
    """Writes the new buffer values a loss computed (:attr:`Losses.updates`) into the
    algorithm's modules after the step: ``<module>.<buffer>`` where the optimizer that holds
    that module's parameters is due at the step (a module whose optimizer rests keeps its
    statistics, as its weights). With L > 1 learners the floating-point values are first
    averaged over them (one reduction), so that every learner keeps the same buffers: each
    learner's batch statistics are its own B / L rows' (as data-parallel batch normalisation
    without synchronisation), their running averages the learners' mean."""

    def __init__(self, algo: Algorithm, reducer: Reducer | None = None) -> None:
        self.algo = algo
        self.average = GradientAverage(reducer or SerialReducer())
        self._targets: dict[str, tuple[torch.Tensor, int]] = {}

    def _target(self, name: str) -> tuple[torch.Tensor, int]:
        if name not in self._targets:
            module_name, _, path = name.partition(".")
            module = self.algo.modules[module_name]
            mine = {id(p) for p in module.parameters()}
            owner = next(i for i, spec in enumerate(self.algo.optimizers.values())
                         if any(id(p) in mine for g in spec.optimizer.param_groups
                                for p in g["params"]))
            self._targets[name] = (module.get_buffer(path), owner)
        return self._targets[name]

    def __call__(self, updates: dict[str, torch.Tensor] | None, now: tuple[bool, ...]) -> None:
        if not updates:
            return
        with torch.no_grad():
            self.average([v for v in updates.values() if v.is_floating_point()])
            for name, value in updates.items():
                buffer, owner = self._target(name)
                if now[owner]:
                    buffer.copy_(value)


class EagerStep:
    """Autograd on :meth:`Algorithm.losses`, the gradients averaged over learners, then
    torch's Adam of every optimizer due at this step."""

    kind = "eager"
    compiled = False
    compile_seconds = 0.0

    def __init__(self, algo: Algorithm, reducer: Reducer | None = None) -> None:
        self.algo = algo
        self.average = GradientAverage(reducer or SerialReducer())
        self.write = BufferWrites(algo, reducer)

    def __call__(self, batch: Batch, terms: ReferTerms, t: int) -> StepResult:
        algo = self.algo
        now = due(algo, t)
        out = algo.losses(batch, terms, resting(algo, now))
        specs = list(algo.optimizers.values())
        for spec in specs:
            spec.optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        self.average([p.grad for spec, stepping in zip(specs, now, strict=True) if stepping
                      for g in spec.optimizer.param_groups for p in g["params"]
                      if p.grad is not None])
        for spec, stepping in zip(specs, now, strict=True):
            if stepping:
                for group in spec.optimizer.param_groups:
                    group["lr"] = spec.lr0 * terms.lr_factor
                spec.optimizer.step()
        self.write(out.updates, now)
        algo.after_step(t)
        return step_result(minibatch_means(out.stats), out.rho, out.value, out.error)
