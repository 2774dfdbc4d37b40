"""The learner's gradient step as one compiled graph (issue 11): forward, losses, backward and
Adam in a single ``torch.compile``-d function.

At the sizes of the paper's networks (2 x 128, B = 256) an eager step on one core spends more
time in torch's per-operation overhead (dispatch, autograd bookkeeping, one kernel per
elementwise operation of the losses, Adam's parameter loop) than in its nine small matrix
products. Here the step is written functionally,

    g, aux = grad_w L(w; batch, beta, bounds)       (torch.func.grad over the algorithm's
                                                     own :meth:`Algorithm.loss_terms`)
    w <- Adam(w, g)                                  (:func:`adam_`)

and compiled once (``dynamic=False``: the minibatch size is fixed): the elementwise work of
the losses and their gradients is fused into a few C++ loops, the autograd graph is built at
compile time, and Adam updates the parameters in the same graph. The losses are the
algorithm's named functions, traced, not rewritten, so the compiled step follows the eager
one (autograd and ``torch.optim.Adam``) to float32 round-off (tests/test_compiled_step.py).

Adam's moments and step counts stay in the algorithm's ``torch.optim.Adam`` objects, in the
layout torch's fused Adam uses, so checkpoints are the same whichever path wrote them. beta,
the near-policy bounds of c_max (:class:`~hpc_refer.near.NearBounds`, computed on the host as
everywhere) and Adam's bias-corrected step terms (which carry the annealed learning rate) enter as
0-d tensors (a new value is not a new graph). With several learners the step is two graphs,
the gradient and Adam, with the gradients averaged between them through the learners'
reducer (MPI stays outside the graph). Optimizers with a schedule (``OptimizerSpec.every``
> 1) give one more graph: the step of the gradient steps on which they rest. Where the graph
cannot be built, :class:`CompiledOrEagerStep` takes the eager step from then on, with one log
line.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any, cast

import torch
from torch import nn
from torch.func import functional_call, grad

from hpc_refer.algorithms.base import Algorithm, Losses, ReferTerms, StepResult, TensorBatch
from hpc_refer.algorithms.step import (
    EagerStep,
    GradientAverage,
    due,
    step_result,
)
from hpc_refer.collectives import Reducer, SerialReducer
from hpc_refer.near import NearBounds
from hpc_refer.replay import Batch

LOG = logging.getLogger(__name__)

Aux = dict[str, Any]
"""The loss's auxiliary outputs inside the graph: ``stats`` (the minibatch means as one
vector, one host transfer) named by ``stat_names``, ``rho``, ``error`` and, for algorithms
with V-tbc, ``value``."""


def adam_(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
          exp_avg_sqs: list[torch.Tensor], step: torch.Tensor, step_size: torch.Tensor,
          bias2_sqrt: torch.Tensor, betas: tuple[float, float], eps: float,
          weight_decay: float) -> None:
    """One Adam step in place (Kingma & Ba 2015, Algorithm 1, as ``torch.optim.Adam``):

        g <- g + lambda w                      (L2 weight decay lambda, if any)
        m <- beta1 m + (1 - beta1) g,   v <- beta2 v + (1 - beta2) g^2,   t <- t + 1
        w <- w - eta / (1 - beta1^t) m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

    ``step`` holds t (one counter for the group). The bias corrections come in as 0-d
    tensors, ``step_size`` = eta / (1 - beta1^t) and ``bias2_sqrt`` = sqrt(1 - beta2^t) of
    the new t (:meth:`_Group.set_step_terms`, in float64 as torch's fused Adam computes them):
    inside the graph each would be recomputed for every element, through libm's underflow
    path once beta1^t underflows (t above about 900 for beta1 = 0.9).
    """
    beta1, beta2 = betas
    step.add_(1.0)
    for w, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs, strict=True):
        if weight_decay:
            g = g + weight_decay * w
        m.lerp_(g, 1.0 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
        w.sub_(step_size * m / (v.sqrt() / bias2_sqrt + eps))


class _LossModule(nn.Module):
    """The algorithm's modules under one root, whose forward is the algorithm's loss: what
    ``functional_call`` needs to evaluate the loss at given parameter values."""

    def __init__(self, algo: Algorithm) -> None:
        super().__init__()
        self.parts = nn.ModuleDict(algo.modules)
        self.loss_terms = algo.loss_terms

    def forward(self, batch: TensorBatch, beta: torch.Tensor, bounds: NearBounds
                ) -> tuple[torch.Tensor, Aux]:
        out: Losses = self.loss_terms(batch, beta, bounds)
        aux = {"stats": {k: v.detach().float().mean() for k, v in out.stats.items()},
               "rho": out.rho, "error": out.error}
        if out.value is not None:  # torch.func's auxiliary outputs are tensors only
            aux["value"] = out.value
        return out.loss, aux


class _Group:
    """One optimizer's parameters (by name under :class:`_LossModule`) and Adam state."""

    def __init__(self, opt: torch.optim.Optimizer, lr0: float, names: dict[int, str]) -> None:
        if not isinstance(opt, torch.optim.Adam) or len(opt.param_groups) != 1:
            raise TypeError("the compiled step supports one torch.optim.Adam group per "
                            f"optimizer, not {type(opt).__name__}")
        group = opt.param_groups[0]
        if group["amsgrad"] or group["maximize"]:
            raise TypeError("the compiled step does not support amsgrad or maximize")
        self.opt, self.lr0 = opt, lr0
        self.betas: tuple[float, float] = tuple(group["betas"])
        self.eps: float = group["eps"]
        self.weight_decay: float = group["weight_decay"]
        self.params: list[torch.Tensor] = list(group["params"])
        self.names = [names[id(p)] for p in self.params]
        self.step_size = torch.zeros(())
        self.bias2_sqrt = torch.ones(())
        self._cached: tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor] | None = None
        self._t = 0.0
        """The group's t on the host (read from its tensor when :meth:`state` caches it)."""

    def state(self) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
        """m and v of every parameter and the group's step t, created as torch's fused Adam
        creates them if no step was taken yet (so ``state_dict`` stays torch's). torch keeps
        one step count per parameter, all equal: here they are one shared tensor, so the
        graph advances them all (shared again after a state dict was loaded)."""
        state = self.opt.state
        first = state[self.params[0]]
        if self._cached is not None and first.get("exp_avg") is self._cached[0][0]:
            return self._cached
        for p in self.params:
            if not state[p]:
                state[p].update(step=torch.zeros((), dtype=torch.float32),
                                exp_avg=torch.zeros_like(p, memory_format=torch.preserve_format),
                                exp_avg_sq=torch.zeros_like(p,
                                                            memory_format=torch.preserve_format))
        step = first["step"]
        for p in self.params:
            if state[p]["exp_avg"].shape != p.shape:
                raise ValueError(f"Adam state of {self.names[self.params.index(p)]} has shape "
                                 f"{tuple(state[p]['exp_avg'].shape)}, its parameter "
                                 f"{tuple(p.shape)}")
            state[p]["step"] = step
        self._t = float(step)
        self._cached = ([state[p]["exp_avg"] for p in self.params],
                        [state[p]["exp_avg_sq"] for p in self.params], step)
        return self._cached

    def set_step_terms(self, lr: float) -> None:
        """eta = ``lr`` for torch's Adam, and the step's bias-corrected terms for
        :func:`adam_` from the count t + 1 that the group's step (:meth:`state`) will reach
        in the graph (counted here too: no read of the tensor)."""
        self.opt.param_groups[0]["lr"] = lr  # (a loaded state dict brings new group dicts)
        self._t += 1.0
        t = self._t
        beta1, beta2 = self.betas
        self.step_size.fill_(lr / (1.0 - beta1**t))
        self.bias2_sqrt.fill_(math.sqrt(1.0 - beta2**t))

    def unshare(self) -> None:
        """Give every parameter its own step count again (for torch's Adam, which advances
        each one: after a fallback to the eager step)."""
        for p in self.params:
            if "step" in self.opt.state[p]:
                self.opt.state[p]["step"] = self.opt.state[p]["step"].clone()
        self._cached = None


class CompiledStep:
    """The compiled gradient step of ``algo`` (see the module's docstring).

    The first call compiles (seconds); a failure to compile (no C++ compiler, an
    unsupported operation) raises :class:`CompileUnavailableError` with the reason, before any
    parameter changed.
    """

    def __init__(self, algo: Algorithm, reducer: Reducer | None = None) -> None:
        self.algo = algo
        self.average = GradientAverage(reducer or SerialReducer())
        self.root = _LossModule(algo)
        names = {id(p): n for n, p in self.root.named_parameters()}
        self.groups = [_Group(spec.optimizer, spec.lr0, names)
                       for spec in algo.optimizers.values()]
        self.params = {n: p.detach() for g in self.groups
                       for n, p in zip(g.names, g.params, strict=True)}
        """Aliases of the parameters outside autograd (Adam updates them in place; loading a
        state dict copies into the same storage)."""
        self.beta = torch.zeros(())
        self._low, self._high = torch.zeros(()), torch.zeros(())
        self.bounds = NearBounds(cast(float, self._low), cast(float, self._high))
        """1/c_max and c_max of the step, as 0-d float32 tensors (values change, graphs not)."""
        self.compiled = False
        self.compile_seconds = 0.0
        self._grad = grad(self._loss, has_aux=True)
        options: dict[str, str | int | bool | Callable[..., Any]] = {
            "cpp_wrapper": True,  # the kernels are called from C++, not from Python
            "fallback_random": True,  # a loss's noise (SAC's) drawn as the eager step draws it
            "guard_filter_fn": call_guards}
        bits = _vector_bits()
        if bits is not None:
            options["cpp.simdlen"] = bits
        self._fused = torch.compile(own_code(self._fused_step), dynamic=False, options=options)
        self._grads = torch.compile(own_code(self._gradients), dynamic=False, options=options)
        self._adam = torch.compile(own_code(self._adam_all), dynamic=False, options=options)

    def _loss(self, params: dict[str, torch.Tensor], batch: TensorBatch, beta: torch.Tensor,
              bounds: NearBounds) -> tuple[torch.Tensor, Aux]:
        out: tuple[torch.Tensor, Aux] = functional_call(self.root, params, (batch, beta, bounds))
        return out

    def _gradients(self, params: dict[str, torch.Tensor], batch: TensorBatch,
                   beta: torch.Tensor, bounds: NearBounds
                   ) -> tuple[dict[str, torch.Tensor], Aux]:
        grads, aux = self._grad(params, batch, beta, bounds)
        stats = aux["stats"]  # names beside one vector: one transfer to the host, not one each
        return grads, {**aux, "stat_names": tuple(stats), "stats": torch.stack(list(
            stats.values()))}

    def _adam_all(self, params: dict[str, torch.Tensor], grads: dict[str, torch.Tensor],
                  states: list[tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]],
                  terms: list[tuple[torch.Tensor, torch.Tensor]], now: tuple[bool, ...]
                  ) -> None:
        for group, (m, v, t), (step_size, bias2_sqrt), stepping in zip(
                self.groups, states, terms, now, strict=True):
            if stepping:  # a Python constant: one graph per schedule pattern
                adam_([params[n] for n in group.names], [grads[n] for n in group.names], m,
                      v, t, step_size, bias2_sqrt, group.betas, group.eps,
                      group.weight_decay)

    def _fused_step(self, params: dict[str, torch.Tensor], batch: TensorBatch,
                    beta: torch.Tensor, bounds: NearBounds,
                    states: list[tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]],
                    terms: list[tuple[torch.Tensor, torch.Tensor]], now: tuple[bool, ...]
                    ) -> Aux:
        grads, aux = self._gradients(params, batch, beta, bounds)
        self._adam_all(params, grads, states, terms, now)
        return aux

    def __call__(self, batch: Batch, terms: ReferTerms, t: int) -> StepResult:
        """Gradient step ``t``: the eager step's ``losses``, backward, average and Adam of
        the optimizers due (:func:`~hpc_refer.algorithms.step.due`), compiled."""
        self.beta.fill_(terms.beta)
        bounds = terms.bounds
        self._low.fill_(bounds.low)
        self._high.fill_(bounds.high)
        params = self.params
        tensors = TensorBatch.of(batch)
        now = due(self.algo, t)
        states = [g.state() for g in self.groups]
        for g, stepping in zip(self.groups, now, strict=True):
            if stepping:
                g.set_step_terms(g.lr0 * terms.lr_factor)
        adam_terms = [(g.step_size, g.bias2_sqrt) for g in self.groups]
        start = time.perf_counter()
        try:
            if self.average.reducer.size == 1:
                aux = self._run(self._fused, params, tensors, self.beta, self.bounds, states,
                                adam_terms, now)
            else:
                grads, aux = self._run(self._grads, params, tensors, self.beta, self.bounds)
                self.average(list(grads.values()))
                self._run(self._adam, params, grads, states, adam_terms, now)
        finally:
            if not self.compiled:
                self.compile_seconds = time.perf_counter() - start
        self.compiled = True
        self.algo.after_step(t)
        stats = dict(zip(aux["stat_names"], aux["stats"].tolist(), strict=True))
        return step_result(stats, aux["rho"], aux.get("value"), aux["error"])

    def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call a compiled function; before the first success, a failure is
        :class:`CompileUnavailableError`."""
        if self.compiled:
            return fn(*args)
        try:
            with warnings.catch_warnings(), _quiet_compiler():
                warnings.filterwarnings("ignore", category=FutureWarning, module="torch")
                return fn(*args)
        except Exception as err:  # any failure of tracing or of the C++ build
            for group in self.groups:
                group.unshare()
            raise CompileUnavailableError(failure_reason(err)) from err


def own_code(method: Callable[..., Any]) -> Callable[..., Any]:
    """The bound ``method`` with a code object of its own. Dynamo keeps its compiled graphs
    and their guards on the code object: with a copy per :class:`CompiledStep`, a step only
    ever finds its own graphs, so :func:`call_guards` may drop the guards on what is fixed
    for its life (another step's networks, widths, gamma or Adam constants never match it)."""
    func = cast(types.MethodType, method).__func__
    copy = types.FunctionType(func.__code__.replace(), func.__globals__, func.__name__,
                              func.__defaults__, func.__closure__)
    return types.MethodType(copy, cast(types.MethodType, method).__self__)


_FIXED_FOR_LIFE = ("self", "G[", "__import__", "dict(type(self", "params", "states")
"""Roots of the guards :func:`call_guards` drops."""


def call_guards(entries: list[Any]) -> list[bool]:
    """Which of dynamo's guards a call of the step evaluates: those on the minibatch, beta,
    the bounds, Adam's step terms, the optimizer schedule ``now`` (which picks the graph) and
    torch's global state (grad mode, deterministic algorithms, ...), not those on what is
    fixed for the life of a :class:`CompiledStep` (whose graphs no other step sees:
    :func:`own_code`): the parameters and Adam moments (the same shapes and dtypes for good:
    updated in place, a loaded state dict copied into them, a moment of another shape
    refused by :meth:`_Group.state`), this object's attributes (the modules, group names,
    betas, eps, the algorithm's constants) and module globals.

    There are about 300 such guards, 80 us of a 0.8 ms step on one core, about a tenth of it
    (BENCHMARKS section 1)."""
    return [not e.name.startswith(_FIXED_FOR_LIFE) for e in entries]


def failure_reason(err: BaseException) -> str:
    """One line that says why a compile failed: the type of ``err`` and, from its message,
    the first diagnostic of the C++ compiler (``file:line: error: ...``, from ``error:`` on),
    else the first further line that names an error, else the first line; at most 300
    characters."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    compiler = [ln[ln.index("error:"):] for ln in lines if ": error:" in ln]
    named = [ln for ln in lines[1:] if "error" in ln.lower()]
    line = (compiler or named or lines or [""])[0]
    return f"{type(err).__name__}: {line}"[:300]


def _vector_bits() -> int | None:
    """The vector width (bits) inductor generates C++ for in this process: that of the ISA it
    picks (the CPU's best, or the one ``ATEN_CPU_CAPABILITY`` names), 1 for scalar code; None
    where its probe programs do not build (no C++ compiler: the compile then fails and says
    so).

    Stated explicitly, it enters inductor's cache key: torch 2.13's FX graph cache does not
    key on the ISA, so a graph generated for AVX-512 was served to a process that builds for
    another ISA (``ATEN_CPU_CAPABILITY=default``, or a cache directory shared by nodes of
    different CPUs), and its C++ failed to compile."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    try:
        return pick_vec_isa().bit_width() or 1
    except Exception:  # the probe's own build failed: reported by the compile itself
        return None


@contextlib.contextmanager
def _quiet_compiler() -> Iterator[None]:
    """Silence the compiler's own warnings (deprecations, the kept temporary directory of a
    failed build): a failure is reported once, by the caller."""
    loggers = [logging.getLogger(name) for name in ("torch._dynamo", "torch._inductor")]
    levels = [log.level for log in loggers]
    for log in loggers:
        log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for log, level in zip(loggers, levels, strict=True):
            log.setLevel(level)


class CompileUnavailableError(RuntimeError):
    """``torch.compile`` could not build the step here (the reason is the message)."""


class CompiledOrEagerStep:
    """The compiled step; if it cannot be built here, the eager step from then on (one log
    line naming the reason)."""

    def __init__(self, algo: Algorithm, reducer: Reducer | None = None) -> None:
        self.algo = algo
        self._compiled: CompiledStep | None = CompiledStep(algo, reducer)
        self._eager = EagerStep(algo, reducer)

    @property
    def compiled(self) -> bool:
        """Whether the steps run compiled (False before the first and after a fallback)."""
        return self._compiled is not None and self._compiled.compiled

    @property
    def compile_seconds(self) -> float:
        """Seconds the compiling first call took (0 after a fallback)."""
        return 0.0 if self._compiled is None else self._compiled.compile_seconds

    @property
    def kind(self) -> str:
        """``compiled (S s to compile)``, or ``eager`` after a fallback."""
        if self._compiled is None:
            return "eager"
        return f"compiled ({self.compile_seconds:.1f} s to compile)"

    def __call__(self, batch: Batch, terms: ReferTerms, t: int) -> StepResult:
        if self._compiled is not None:
            try:
                return self._compiled(batch, terms, t)
            except CompileUnavailableError as err:
                LOG.warning("%s: compiled learner step unavailable (%s); using the eager "
                            "step", self.algo.name, err)
                self._compiled = None
        return self._eager(batch, terms, t)
