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
the near-policy bounds of c_max (:class:`~hpc_refer.replay.near.NearBounds`, computed on the host as
everywhere) and Adam's bias-corrected step terms (which carry the annealed learning rate) enter as
0-d tensors (a new value is not a new graph). With several learners the step is two graphs,
the gradient and Adam, with the gradients averaged between them through the learners'
reducer (MPI stays outside the graph). Optimizers with a schedule (``OptimizerSpec.every``
> 1) give one more graph: the step of the gradient steps on which they rest. Where the graph
cannot be built, :class:`CompiledOrEagerStep` takes the eager step from then on, with one log
line.

At these sizes what dynamo does around each call (guards, gathering the inputs, wrappers)
cost about a fifth of the step on an Intel Xeon: each step keeps its graphs to itself
(:func:`own_code`), evaluates only the guards on what may change between its calls
(:func:`call_guards`), and after the first call of each graph calls it directly
(:class:`DirectGraph`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
import types
import warnings
from collections.abc import Callable, Hashable, Iterator
from typing import Any, NamedTuple, cast

import torch
import torch.utils._pytree as pytree
from torch import nn
from torch.func import functional_call, grad

from hpc_refer.algorithms.kit.base import Algorithm, Losses, ReferTerms, StepResult, TensorBatch
from hpc_refer.algorithms.kit.collectives import Reducer, SerialReducer
from hpc_refer.algorithms.kit.step import (
    BufferWrites,
    EagerStep,
    GradientAverage,
    due,
    resting,
    step_result,
)
from hpc_refer.replay.near import NearBounds
from hpc_refer.replay.shard import Batch

LOG = logging.getLogger(__name__)

Aux = dict[str, Any]
"""The loss's auxiliary outputs inside the graph: ``stats`` (the minibatch means as one
vector, one host transfer) named by ``stat_names``, ``rho``, ``error``, for algorithms
with V-tbc ``value``, and for those whose loss computes new buffers ``updates``."""


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
        self.loss_terms = algo.step_loss_terms

    def forward(self, batch: TensorBatch, beta: torch.Tensor, bounds: NearBounds,
                resting: frozenset[str]) -> tuple[torch.Tensor, Aux]:
        out: Losses = self.loss_terms(batch, beta, bounds, resting)
        aux = {"stats": {k: v.detach().float().mean() for k, v in out.stats.items()},
               "rho": out.rho, "error": out.error}
        if out.value is not None:  # torch.func's auxiliary outputs are tensors only
            aux["value"] = out.value
        if out.updates:
            aux["updates"] = out.updates  # (no gradient: running statistics, counts)
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
        self.write = BufferWrites(algo, reducer)
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
        self._fused = DirectGraph(self._fused_step, self.root, options)
        self._grads = DirectGraph(self._gradients, self.root, options)
        self._adam = DirectGraph(self._adam_all, self.root, options)

    def _loss(self, params: dict[str, torch.Tensor], batch: TensorBatch, beta: torch.Tensor,
              bounds: NearBounds, resting: frozenset[str]) -> tuple[torch.Tensor, Aux]:
        out: tuple[torch.Tensor, Aux] = functional_call(self.root, params,
                                                        (batch, beta, bounds, resting))
        return out

    def _gradients(self, params: dict[str, torch.Tensor], batch: TensorBatch,
                   beta: torch.Tensor, bounds: NearBounds, resting: frozenset[str]
                   ) -> tuple[dict[str, torch.Tensor], Aux]:
        grads, aux = self._grad(params, batch, beta, bounds, resting)
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
        grads, aux = self._gradients(params, batch, beta, bounds, resting(self.algo, now))
        self._adam_all(params, grads, states, terms, now)
        return aux

    def __call__(self, batch: Batch, terms: ReferTerms, t: int) -> StepResult:
        """Gradient step ``t``: the eager step's ``losses``, backward, average and Adam of
        the optimizers due (:func:`~hpc_refer.algorithms.kit.step.due`), compiled."""
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
            key = (now, tensors.obs.shape)  # what picks or shapes a graph
            if self.average.reducer.size == 1:
                aux = self._run(self._fused, key, params, tensors, self.beta, self.bounds,
                                states, adam_terms, now)
            else:
                grads, aux = self._run(self._grads, key, params, tensors, self.beta,
                                       self.bounds, resting(self.algo, now))
                self.average([grads[n] for g, stepping in zip(self.groups, now, strict=True)
                              if stepping for n in g.names])
                self._run(self._adam, key, params, grads, states, adam_terms, now)
        finally:
            if not self.compiled:
                self.compile_seconds = time.perf_counter() - start
        self.compiled = True
        self.write(aux.get("updates"), now)
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


class _Plan(NamedTuple):
    """How to call one compiled graph directly: its inputs from the call's arguments and the
    modules (one generated function), its outputs into the result's structure."""

    graph: Callable[..., Any]
    inputs: Callable[[tuple[Any, ...], list[nn.Module]], tuple[torch.Tensor, ...]]
    places: list[int | None]
    """Per leaf of the result: the index of the graph output it is, None for a constant."""
    constants: list[Any]
    spec: pytree.TreeSpec


class DirectGraph:
    """A ``torch.compile``-d function whose later calls go straight to its compiled graph.

    A call through dynamo evaluates the frame: its guards, the bytecode that gathers the
    graph's inputs from the arguments, and the wrappers around the graph, about 100 us of a
    0.75 ms step at the paper's sizes (BENCHMARKS section 13); the graph itself is a callable
    of a flat tuple of tensors. The first call of each ``key`` (what picks or shapes a graph:
    the optimizer schedule and the minibatch shape) goes through dynamo, which compiles and
    calls the graph through this object's backend; the tensors that call passed and got
    back, matched by identity with the tensors of the arguments (and of ``modules``, whose
    buffers and frozen parameters the graph reads) and of the result, give the path of every
    input and the place of every output. Later calls of the key gather the inputs by those
    paths and call the graph. Where the match fails (an input found nowhere, a result tensor
    that is not a graph output, several graphs in one call), the key stays with dynamo.

    Every graph is compiled under a cache key that names the vector ISA inductor generates
    C++ for in this process (:func:`isa_cache_tag`), whatever ``options`` the caller gives.
    """

    def __init__(self, fn: Callable[..., Any], modules: nn.Module,
                 options: dict[str, Any]) -> None:
        patches = {k: v for k, v in options.items() if k != "guard_filter_fn"}
        tag = isa_cache_tag()
        self._calls: list[tuple[Callable[..., Any], tuple[Any, ...], Any]] = []
        self._capturing = False

        def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]
                    ) -> Callable[..., Any]:
            # imported here: inductor costs about 2 s of every process's start, and a rank
            # that never compiles (an actor, an eager learner) never needs it
            from torch._inductor.compile_fx import compile_fx

            with cast(Any, torch.compiler.config).patch(cache_key_tag=tag):  # (a config module)
                graph = cast(Callable[..., Any],
                             compile_fx(gm, example_inputs, config_patches=patches))

            def run(*inputs: Any) -> Any:
                out = graph(*inputs)
                if self._capturing:  # (only the first call of a key is looked at)
                    self._calls.append((graph, inputs, out))
                return out

            return run

        self._dynamo = torch.compile(own_code(fn), dynamic=False, backend=backend,
                                     options={"guard_filter_fn": options["guard_filter_fn"]})
        self._modules = list(modules.modules())
        self._plans: dict[Hashable, _Plan | None] = {}

    def __call__(self, key: Hashable, *args: Any) -> Any:
        if key not in self._plans:
            self._capturing = True
            try:
                result = self._dynamo(*args)
            finally:
                self._capturing = False
            self._plans[key] = self._plan(args, result) if len(self._calls) == 1 else None
            self._calls.clear()
            return result
        plan = self._plans[key]
        if plan is None:
            return self._dynamo(*args)
        out = plan.graph(*plan.inputs(args, self._modules))
        leaves = [c if i is None else out[i] for i, c in zip(plan.places, plan.constants,
                                                             strict=True)]
        return pytree.tree_unflatten(leaves, plan.spec)

    def _plan(self, args: tuple[Any, ...], result: Any) -> _Plan | None:
        graph, inputs, outputs = self._calls[0]
        paths = {id(leaf): "a" + pytree.keystr(path)
                 for path, leaf in pytree.tree_flatten_with_path(args)[0]
                 if isinstance(leaf, torch.Tensor)}
        for j, module in enumerate(self._modules):
            for table in ("_parameters", "_buffers"):
                for name, tensor in getattr(module, table).items():
                    if tensor is not None:
                        paths.setdefault(id(tensor), f"m[{j}].{table}[{name!r}]")
        try:
            source = ", ".join(paths[id(x)] for x in inputs)
        except KeyError:
            return None  # an input the arguments and the modules do not hold
        leaves, spec = pytree.tree_flatten(result)
        out_index = {id(x): i for i, x in enumerate(outputs)}
        places = [out_index.get(id(x)) if isinstance(x, torch.Tensor) else None
                  for x in leaves]
        if any(isinstance(x, torch.Tensor) and i is None
               for x, i in zip(leaves, places, strict=True)):
            return None  # a result tensor that is not one of the graph's outputs
        gather = eval(f"lambda a, m: ({source},)")  # paths of pytree.keystr and names
        return _Plan(graph, gather, places, [None if i is not None else x
                                              for x, i in zip(leaves, places, strict=True)],
                     spec)


def own_code(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a function or a bound method) with a code object of its own. Dynamo keeps its
    compiled graphs and their guards on the code object: with a copy per :class:`CompiledStep`,
    a step only ever finds its own graphs, so :func:`call_guards` may drop the guards on what
    is fixed for its life (another step's networks, widths, gamma or Adam constants never
    match it)."""
    func = fn.__func__ if isinstance(fn, types.MethodType) else fn
    copy = types.FunctionType(func.__code__.replace(), func.__globals__, func.__name__,
                              func.__defaults__, func.__closure__)
    return types.MethodType(copy, fn.__self__) if isinstance(fn, types.MethodType) else copy


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
    (BENCHMARKS section 13)."""
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


def isa_cache_tag() -> str:
    """The cache key tag under which :class:`DirectGraph` compiles: torch's own tag (if any)
    and the vector ISA inductor generates C++ for in this process, the CPU's best or the one
    ``ATEN_CPU_CAPABILITY`` names (``"isa=avx512 avx512_vnni/512"``; ``"isa=scalar"`` where
    there is none, or where its probe programs do not build: the compile then fails and
    says so).

    torch 2.13's FX graph cache does not key on the ISA: without the tag a graph generated for
    AVX-512 is served to a process that builds for another ISA (``ATEN_CPU_CAPABILITY=
    default``, or a cache directory shared by nodes of different CPUs), and its C++ fails to
    compile (``'at::vec' has not been declared``). The ISA's name, not only its width, since
    two ISAs of one width (AVX-512 with and without AMX or VNNI) generate different code."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    try:
        isa = pick_vec_isa()
    except Exception:  # the probe's own build failed: reported by the compile itself
        isa = None
    name = f"{isa}/{isa.bit_width()}" if isa else "scalar"
    return "|".join(t for t in (torch.compiler.config.cache_key_tag, f"isa={name}") if t)


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
