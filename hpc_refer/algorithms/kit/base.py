"""The algorithm contract: what a learner asks of an off-policy algorithm.

The :class:`~hpc_refer.loop.learner.Learner` owns the replay shard, every replay-maintenance step
(ingest, refresh of sampled rows, V-tbc, scaling statistics, far counts and their reductions),
the ReF-ER state (beta, c_max, the annealed learning rate), the reducer over the learners and
the gradient step it composes from the algorithm (:mod:`hpc_refer.algorithms.kit.step`, eager or
compiled). An algorithm owns its networks, optimizers and losses and answers the learner
through :class:`Algorithm`:

====================== ==================================================================
``name``, ``Config``   its registry name and its config table (a subclass of
                       :class:`~hpc_refer.config.tables.AlgorithmConfig` whose ``section`` is the
                       name): :func:`~hpc_refer.algorithms.registry.register` makes both
                       known
``behaviour_policy``   a fresh copy of the module actors sample from: ``policy(s)`` returns
                       the mean and std of the Gaussian behaviour mu(.|s) (class method)
``policy_params``      the learner's behaviour module as one flat vector, for the actors
``loss_terms``         the minibatch loss of a :class:`TensorBatch` at the step's beta and
                       c_max, with its diagnostics (:class:`Losses`): the algorithm's maths,
                       a pure function of its modules' parameters
``optimizers``         name -> :class:`OptimizerSpec`: the optimizer, its initial learning
                       rate and every how many gradient steps it steps (1: every step; 2: a
                       delayed actor, as TD3's)
``after_step``         what follows each gradient step t (target networks' Polyak update)
``evaluate``           V_w(s) (or None) and log pi_w(a|s) of stored rows (ingest, refresh)
``values``             V_w(s) of rows without action (bootstrap states of V-tbc)
``set_input_scaling``  the state normalisation computed by the learner from the replay
``checkpoint_state``   networks and optimizers as a :data:`~hpc_refer.report.records.StateTree` of
                       numpy arrays and plain scalars (HDF5 checkpoints; ``restore_state``
                       inverts it)
====================== ==================================================================

Algorithms never import mpi4py nor know the other learners, and never write replay arrays.
Adding an algorithm means one new module: a subclass of :class:`Algorithm` with its table,
decorated with :func:`~hpc_refer.algorithms.registry.register` (in this package, or in a
module of ``run.plugins``).
"""

from __future__ import annotations

import functools
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np
import torch
from torch import nn

from hpc_refer.algorithms.kit.networks import (
    BehaviourPolicy,
    Normalizer,
    flat_state,
    gaussian_log_prob,
)
from hpc_refer.config.tables import AlgorithmConfig, ReferConfig
from hpc_refer.replay.near import NearBounds
from hpc_refer.replay.shard import Batch
from hpc_refer.report.formats import TreeFormat

if TYPE_CHECKING:
    from hpc_refer.report.records import StateTree


class ReferTerms(NamedTuple):
    """ReF-ER's state at this gradient step, as the learner passes it to the algorithm."""

    beta: float
    """Penalty coefficient of eq. 10 (1 without Rule 2)."""
    c_max: float
    """Near-policy bound of eq. 13."""
    lr_factor: float
    """eta(t) / eta0 of eq. 13 (1 with plain ER): every optimizer's learning rate is scaled."""

    @property
    def bounds(self) -> NearBounds:
        """The near-policy interval of ``c_max`` (the float32 thresholds of
        :mod:`hpc_refer.replay.near`)."""
        return NearBounds.of(self.c_max)


class TensorBatch(NamedTuple):
    """A :class:`~hpc_refer.replay.shard.Batch` as torch tensors sharing its numpy memory (the
    rows' indices left out): what :meth:`Algorithm.loss_terms` reads."""

    obs: torch.Tensor
    act: torch.Tensor
    mu_mean: torch.Tensor
    mu_std: torch.Tensor
    log_mu: torch.Tensor
    rew: torch.Tensor
    next_obs: torch.Tensor
    done: torch.Tensor
    q_ret: torch.Tensor | None
    weight: torch.Tensor

    @classmethod
    def of(cls, batch: Batch) -> TensorBatch:
        """The tensors of ``batch`` (no copy)."""
        t = torch.from_numpy
        return cls(t(batch.obs), t(batch.act), t(batch.mu_mean), t(batch.mu_std),
                   t(batch.log_mu), t(batch.rew), t(batch.next_obs), t(batch.done),
                   None if batch.q_ret is None else t(batch.q_ret), t(batch.weight))


class Losses(NamedTuple):
    """What an algorithm's loss gives for one minibatch."""

    loss: torch.Tensor
    """The minibatch loss whose gradient is the step (eq. 10 with Rule 1 under ReF-ER)."""
    stats: dict[str, torch.Tensor]
    """Named per-sample diagnostics (their minibatch means are logged)."""
    rho: torch.Tensor
    """rho_k = pi_w(a_k|s_k) / mu_k(a_k|s_k) (detached)."""
    value: torch.Tensor | None
    """V_w(s_k) (detached) for algorithms with V-tbc, else None."""
    error: torch.Tensor
    """Per-sample error that prioritized replay ranks rows by (detached)."""
    updates: dict[str, torch.Tensor] | None = None
    """New values of module buffers that the loss computed (batch renormalisation's running
    statistics), by ``<module>.<buffer>`` (a name of ``modules``, then the buffer's
    state-dict name): the gradient step writes each after the step, when the optimizer that
    holds its module's parameters steps (:class:`~hpc_refer.algorithms.kit.step.BufferWrites`).
    None: the loss changes no buffer."""


class StepResult(NamedTuple):
    """What one gradient step returns to the learner (per row: the minibatch's rows)."""

    stats: dict[str, float]
    """Named diagnostics (means over the local minibatch)."""
    rho: np.ndarray
    """rho_k = pi_w(a_k|s_k) / mu_k(a_k|s_k) under the policy before the step."""
    value: np.ndarray | None
    """V_w(s_k) before the step, for V-tbc (None for algorithms without V-tbc)."""
    error: np.ndarray
    """The sample's error (TD error or Q-ret - V) that prioritized replay ranks it by."""


class OptimizerSpec(NamedTuple):
    """One of an algorithm's optimizers, as the gradient step uses it."""

    optimizer: torch.optim.Optimizer
    lr0: float
    """Initial learning rate (scaled by ReF-ER's eta(t) / eta0, eq. 13)."""
    every: int = 1
    """It steps at the gradient steps t with t % every == 0 (1: every step)."""


def adam(params: Iterable[nn.Parameter], lr: float, weight_decay: float = 0.0,
         every: int = 1, betas: tuple[float, float] = (0.9, 0.999)) -> OptimizerSpec:
    """Adam over ``params`` at the initial rate ``lr`` with moment rates ``betas`` (torch's
    fused CPU kernel, one group: the form the compiled step takes over), as an optimizer the
    step applies at the gradient steps t with t % ``every`` == 0 (1: every time; TD3's
    delayed actor: 2)."""
    opt = torch.optim.Adam(params, lr=lr, betas=betas, weight_decay=weight_decay,
                           foreach=False, fused=True)
    return OptimizerSpec(opt, lr, every)


def module_state(module: nn.Module) -> dict[str, np.ndarray]:
    """Every parameter and buffer of ``module`` by its state-dict name, as numpy copies."""
    return {k: t.detach().cpu().numpy().copy() for k, t in module.state_dict().items()}


def _leaf(value: Any, where: str) -> Any:
    """An optimizer state value as a StateTree leaf: tensors and tuples or lists of numbers
    become arrays; None, bool, int, float and str stay."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy().copy()
    if isinstance(value, (tuple, list)):
        out = np.asarray(value)
        if out.dtype.kind not in "biuf":
            raise TypeError(f"{where}: cannot store {value!r} (not a sequence of numbers)")
        return out
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"{where}: cannot store a value of type {type(value).__name__}")


def optimizer_tree(optimizer: torch.optim.Optimizer) -> StateTree:
    """A torch optimizer's ``state_dict`` as a StateTree, without pickle::

        state/<i>/<key>            per parameter i (int ``state_dict`` index, as a string):
                                   Adam's exp_avg, exp_avg_sq (arrays) and step (0-d array)
        param_groups/<j>/<key>     hyper-parameters of group j (lr, eps, weight_decay, ...;
                                   betas as a float64 array, params as an int64 array)
    """
    sd = optimizer.state_dict()
    return {
        "state": {str(i): {k: _leaf(v, f"state {i} {k}") for k, v in s.items()}
                  for i, s in sd["state"].items()},
        "param_groups": {str(j): {k: _leaf(v, f"param_groups {j} {k}") for k, v in g.items()}
                         for j, g in enumerate(sd["param_groups"])},
    }


def _like(template: Any, value: Any) -> Any:
    """``value`` from a StateTree in the type of the optimizer's own ``template`` value."""
    if isinstance(template, tuple):
        return tuple(np.asarray(value).tolist())
    if isinstance(template, list):
        return list(np.asarray(value).tolist())
    if isinstance(template, torch.Tensor):
        return torch.as_tensor(value, dtype=template.dtype)
    return value


def optimizer_state_dict(tree: StateTree, template: dict[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`optimizer_tree`, in the layout of ``template`` (the state_dict of
    the optimizer being restored): each hyper-parameter takes the template's type (tuple,
    list, tensor or scalar; one the checkpoint lacks keeps the template's value), each
    per-parameter array becomes a tensor of its stored dtype and shape."""
    groups = []
    for j, own in enumerate(template["param_groups"]):
        if str(j) not in tree["param_groups"]:
            raise ValueError(f"parameter group {j} is missing from the checkpoint")
        saved = tree["param_groups"][str(j)]
        group = {k: _like(v, saved[k]) if k in saved else v for k, v in own.items()}
        if group["params"] != own["params"]:
            raise ValueError(f"parameter group {j}: parameters {group['params']} in the "
                             f"checkpoint, {own['params']} here")
        groups.append(group)
    state = {int(i): {k: torch.from_numpy(np.array(v)) if isinstance(v, np.ndarray) else v
                      for k, v in s.items()}
             for i, s in sorted(tree["state"].items(), key=lambda x: int(x[0]))}
    return {"state": state, "param_groups": groups}


@functools.cache
def takes_resting(loss_terms: Callable[..., Losses]) -> bool:
    """Whether an algorithm's ``loss_terms`` takes ``resting`` (read once per class, not on
    every step)."""
    return "resting" in inspect.signature(loss_terms).parameters


class Algorithm(ABC):
    """Base of the algorithms: the contract above plus what they share (input scaling,
    state and checksum).

    Subclasses create their modules and optimizers in ``__init__`` and list them in
    ``modules`` and ``optimizers`` (name -> object): the base class derives the checkpoint
    state, the checksum and the normalisers from them.
    """

    name: ClassVar[str]
    Config: ClassVar[type[AlgorithmConfig]]
    """The algorithm's config table (``section`` = ``name``)."""
    state_format: ClassVar[TreeFormat] = TreeFormat("algorithm")
    """The format of the algorithm's checkpoint tree (:mod:`hpc_refer.report.formats`):
    version 1, the tree of :meth:`checkpoint_state`; an algorithm that changes what it stores
    declares its own, with the upgrades from this one (the built-in ones: version 2, their
    heads' tensors under ``body.``, :func:`~hpc_refer.algorithms.kit.bodies.heads_with_bodies`)."""
    policy_format: ClassVar[TreeFormat] = TreeFormat("policy file", key="policy_version")
    """The format of the algorithm's policy files (:mod:`hpc_refer.loop.policy_file`, whose
    tree holds the behaviour module's tensors as ``policy``): version 1 here; an algorithm
    whose behaviour module changes its tensors declares its own, with the upgrades (the
    built-in ones, whose behaviour modules hold a body:
    :data:`~hpc_refer.algorithms.kit.bodies.BODY_POLICY_FORMAT`)."""

    def __init__(self, obs_dim: int, act_dim: int, config: AlgorithmConfig,
                 refer: ReferConfig, seed: int) -> None:
        """Subclasses call this first (it seeds torch with ``seed``), then build networks."""
        torch.manual_seed(seed)
        self.obs_dim = obs_dim
        self.act_dim = act_dim
        self.config = config
        self.refer_config = refer
        self.modules: dict[str, nn.Module] = {}
        self.optimizers: dict[str, OptimizerSpec] = {}

    @property
    def row_dim(self) -> int:
        """Width of a stored state row: the state, then the recurrent cell's carry
        (``config.carry_dim``, 0 for feed-forward networks)."""
        return self.obs_dim + self.config.carry_dim

    @classmethod
    @abstractmethod
    def behaviour_policy(cls, obs_dim: int, act_dim: int,
                         config: AlgorithmConfig) -> BehaviourPolicy:
        """A fresh behaviour module with the structure of the learner's (for an actor)."""

    @property
    @abstractmethod
    def behaviour(self) -> BehaviourPolicy:
        """The learner's behaviour module, whose parameters the actors receive."""

    @abstractmethod
    def loss_terms(self, batch: TensorBatch, beta: float | torch.Tensor,
                   bounds: NearBounds, resting: frozenset[str] = frozenset()) -> Losses:
        """The minibatch loss at ReF-ER's ``beta`` and near-policy ``bounds`` (1/c_max,
        c_max: floats, or 0-d tensors in the compiled step) and its diagnostics; torch
        operations only, no host synchronisation, no branch on tensor values.

        ``resting``: the names of the optimizers that do not step at this gradient step (a
        delayed actor's, :func:`~hpc_refer.algorithms.kit.step.due`). The step discards their
        gradients, so the loss may leave out the terms whose gradient reaches only their
        parameters, with those terms' diagnostics (the interval means count each
        diagnostic over the steps that gave it); the other terms' gradients must not change."""

    def step_loss_terms(self, batch: TensorBatch, beta: float | torch.Tensor,
                        bounds: NearBounds, resting: frozenset[str]) -> Losses:
        """:meth:`loss_terms` as the steps call it: ``resting`` passed where the algorithm's
        signature takes it (a plug-in written before it existed computes every term each
        step, as before)."""
        if resting and takes_resting(type(self).loss_terms):
            return self.loss_terms(batch, beta, bounds, resting)
        return self.loss_terms(batch, beta, bounds)

    def losses(self, batch: Batch, terms: ReferTerms,
               resting: frozenset[str] = frozenset()) -> Losses:
        """:meth:`loss_terms` of a numpy minibatch at this step's terms."""
        return self.step_loss_terms(TensorBatch.of(batch), terms.beta, terms.bounds, resting)

    def after_step(self, t: int) -> None:  # noqa: B027 (a hook: most algorithms have none)
        """Work after gradient step ``t`` (none here; target networks in DDPG and NAF)."""

    @torch.no_grad()
    def evaluate(self, obs: np.ndarray, act: np.ndarray
                 ) -> tuple[np.ndarray | None, np.ndarray]:
        """V_w(s) (None without a state value, as here) and log pi_w(a|s) of stored rows,
        pi_w the behaviour Gaussian."""
        mean, std = self.behaviour.policy(torch.from_numpy(obs))
        return None, gaussian_log_prob(torch.from_numpy(act), mean, std).numpy()

    def burn_in(self, rows: np.ndarray, valid: np.ndarray) -> np.ndarray:
        """R2D2's burn-in (Kapturowski et al. 2019; :mod:`~hpc_refer.algorithms.kit.recurrent`):
        the carries [n, carry_dim] that the behaviour's current cell reaches over ``rows``
        [n, b, row_dim], each sequence's b steps before its first in time order, from the
        stored carry of its first row through its ``valid`` [n, b] steps (the invalid ones,
        the front padding, leave it as it is), without gradient: the carry the sequence's
        unroll starts from instead of its own stored one. The behaviour's numpy step
        (:meth:`~hpc_refer.algorithms.kit.networks.BehaviourPolicy.numpy_step`) on the
        current parameters, equal to the torch cell to float32 round-off."""
        step = self.behaviour.numpy_step()
        d = self.obs_dim
        carry = rows[:, 0, d:]
        for t in range(rows.shape[1]):
            _, _, after = step(np.concatenate([rows[:, t, :d], carry], axis=-1))
            carry = np.where(valid[:, t, None], after, carry)
        return carry.astype(np.float32)

    def values(self, obs: np.ndarray) -> np.ndarray:
        """V_w(s) of states without action (bootstrap rows); only algorithms with V-tbc."""
        raise NotImplementedError(f"{self.name} keeps no state values")

    def policy_params(self) -> np.ndarray:
        """The behaviour module's parameters and buffers as one float32 vector."""
        return flat_state(self.behaviour)

    def set_input_scaling(self, mean: np.ndarray, std: np.ndarray) -> None:
        """Use these state statistics in every network's input normalisation."""
        for module in self.modules.values():
            for m in module.modules():
                if isinstance(m, Normalizer):
                    m.set_stats(mean, std)

    def checkpoint_state(self) -> StateTree:
        """The algorithm's whole state: ``name``, ``obs_dim``, ``act_dim``, ``behaviour``
        (the name of the module actors receive), ``modules/<name>/<tensor>`` (every network,
        target networks included, with its normaliser buffers; float32 arrays) and
        ``optimizers/<name>`` (:func:`optimizer_tree`)."""
        behaviour = next(k for k, m in self.modules.items() if m is self.behaviour)
        return self.state_format.stamp({
            "name": self.name, "obs_dim": self.obs_dim, "act_dim": self.act_dim,
            "behaviour": behaviour,
            "modules": {k: module_state(m) for k, m in self.modules.items()},
            "optimizers": {k: optimizer_tree(o.optimizer) for k, o in self.optimizers.items()}})

    def restore_state(self, tree: StateTree) -> None:
        """Inverse of :meth:`checkpoint_state`: subsequent steps are bit for bit those the
        saved algorithm would take. A different algorithm, size or network structure is a
        ValueError naming it. A tree of any version of :attr:`state_format` (upgraded first)."""
        tree = self.state_format.upgrade(tree)
        saved = (tree["name"], int(tree["obs_dim"]), int(tree["act_dim"]))
        if saved != (self.name, self.obs_dim, self.act_dim):
            raise ValueError(f"algorithm (name, obs_dim, act_dim) = {saved} in the checkpoint, "
                             f"{(self.name, self.obs_dim, self.act_dim)} here")
        for k, m in self.modules.items():
            if k not in tree["modules"]:
                raise ValueError(f"module {k} is missing from the checkpoint")
            tensors = {n: torch.from_numpy(np.array(a)) for n, a in tree["modules"][k].items()}
            try:
                m.load_state_dict(tensors)
            except RuntimeError as err:
                raise ValueError(f"module {k} does not match the checkpoint: {err}") from None
        for k, spec in self.optimizers.items():
            if k not in tree["optimizers"]:
                raise ValueError(f"optimizer {k} is missing from the checkpoint")
            o = spec.optimizer
            try:
                o.load_state_dict(optimizer_state_dict(tree["optimizers"][k], o.state_dict()))
            except ValueError as err:
                raise ValueError(f"optimizer {k}: {err}") from None

    def reset_networks(self, seed: int) -> None:
        """Every network and optimizer afresh, as a new instance seeded with ``seed`` starts,
        keeping the input scaling (the replay's statistics in the normalisers): the periodic
        resets of high update-to-data ratios (D'Oro et al. 2023, "Sample-Efficient
        Reinforcement Learning by Breaking the Replay Ratio Barrier"; Nauman et al. 2024,
        BRO), which keep the replay memory. The fresh instance's state is restored into this
        one (its tensors stay where they are: a compiled step keeps its graphs); torch's
        generator is left where it was."""
        generator = torch.get_rng_state()
        try:
            fresh = type(self)(self.obs_dim, self.act_dim, self.config, self.refer_config, seed)
        finally:
            torch.set_rng_state(generator)
        for name, module in self.modules.items():
            kept = [m for m in module.modules() if isinstance(m, Normalizer)]
            new = [m for m in fresh.modules[name].modules() if isinstance(m, Normalizer)]
            for old, normaliser in zip(kept, new, strict=True):
                normaliser.load_state_dict(old.state_dict())
        self.restore_state(fresh.checkpoint_state())

    def checksum(self) -> float:
        """Sum of every module's parameters and buffers (float64), to compare learners."""
        return float(sum(flat_state(m).astype(np.float64).sum() for m in self.modules.values()))
