"""Network bodies: stored rows -> the outputs of a trunk, feed-forward or recurrent, behind one
protocol (:class:`Body`), so that every head is written once over a body and no algorithm asks
which kind it has.

A row is what the replay stores for a state: s itself (feed-forward) or [s, c], the state and
the carry c the actor entered the step with (recurrent, :mod:`hpc_refer.algorithms.kit.recurrent`).
With x = normalise(s) (:class:`~hpc_refer.algorithms.kit.networks.Normalizer`):

- :class:`FeedForwardBody`: outputs = mlp(x); the critics read s;
- :class:`RecurrentBody`: h' = cell(x, c), outputs = mlp([x, h']); the critics read [s, h'].

What a body answers (the protocol):

================== ===========================================================================
``rows``           rows [B, D], each on its own from its stored carry: :class:`BodyOutputs`,
                   the trunk's outputs, what the critics read at that step and the carry after
                   it (the per-row step: ingest, bootstrap values, an actor's torch policy)
``sequences``      rows [n W, D] that are n sequences of W consecutive steps, unrolled from
                   each sequence's first stored carry (truncated BPTT; a feed-forward body's
                   sequences are its rows)
``after``          the successor states s_{k+1} of steps whose carries after the step are
                   given: one cell step from them (at a successor inside the sequence, the
                   unroll's own next step); a feed-forward body reads the states alone
``ops``            the trunk as ops (:mod:`~hpc_refer.algorithms.kit.ops`): the per-row step
                   in numpy, rows -> (outputs, carry after the step), that actors and exports
                   interpret (copies of the tensors, or views that follow every load)
``evaluator``      rows -> outputs for the learner's evaluations outside the gradient step (a
                   few bootstrap states per step): the cheaper exact path of each body
``carry_dim``      values of the carry stored after the state in each row (0: feed-forward)
``seen_dim``       width of what the critics read: obs_dim, or obs_dim + H with a cell
================== ===========================================================================

:func:`make_body` chooses the body from the table's
:class:`~hpc_refer.config.tables.NetworkShape` (``config.network``), the one place that tells the
two apart. A head (:class:`BodyPolicy`: V-RACER's value and Gaussian, the deterministic and the
squashed-Gaussian actors of :mod:`~hpc_refer.algorithms.kit.actors`, NAF's V, m and L) builds
its body with as many outputs as it reads and holds it as ``body``: its tensors are named
``body.normalizer.*``, ``body.cell.*`` and ``body.trunk.*``, after the head's own parameters
and buffers (the state-dict order of the flat vector actors load, unchanged from the networks
before bodies). Heads written before bodies named a feed-forward network's tensors
``normalizer.*`` and ``trunk.*``: :func:`heads_with_bodies` and :func:`policy_with_body` are
the upgrades of the algorithms' checkpoint trees and of policy files that rename them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch
from torch import nn

from hpc_refer.algorithms.kit.networks import (
    BehaviourPolicy,
    Normalizer,
    mlp,
    mlp_ops,
    small_output_,
)
from hpc_refer.algorithms.kit.ops import Arrays, Op, copied, viewed
from hpc_refer.algorithms.kit.program import NumpyBehaviour, run_ops
from hpc_refer.algorithms.kit.recurrent import RecurrentCell
from hpc_refer.config.modes import Activation, Cell
from hpc_refer.config.tables import NetworkShape
from hpc_refer.report.formats import TreeFormat, Upgrade

if TYPE_CHECKING:
    from hpc_refer.report.records import StateTree

NumpyOutputs = Callable[[np.ndarray], np.ndarray]
"""rows -> outputs, in numpy."""


class BodyOutputs(NamedTuple):
    """What a body gives for rows [B, D] (or their successors)."""

    out: torch.Tensor
    """The trunk's outputs [B, out_dim], which the head reads."""
    seen: torch.Tensor
    """What the critics read at the step [B, seen_dim]: s, or [s, h'] with a cell."""
    carry: torch.Tensor
    """The carry after the step [B, carry_dim] (no columns without a cell)."""


class Body(nn.Module, ABC):
    """The network-body protocol (module docstring): rows -> trunk outputs, per row from its
    stored carry, as unrolled sequences, at successors, and in numpy for the actors."""

    obs_dim: int
    carry_dim: int
    seen_dim: int

    @abstractmethod
    def rows(self, rows: torch.Tensor) -> BodyOutputs:
        """Each row [B, obs_dim + carry_dim] on its own, from its stored carry."""

    @abstractmethod
    def sequences(self, rows: torch.Tensor, length: int) -> BodyOutputs:
        """Rows [n W, D] that are n sequences of ``length`` = W consecutive steps, each
        unrolled from its first row's stored carry; flattened back to [n W, ...] in order."""

    @abstractmethod
    def after(self, states: torch.Tensor, carry: torch.Tensor) -> BodyOutputs:
        """The successor states [B, >= obs_dim] (their first obs_dim columns) of steps whose
        carries after the step are ``carry`` [B, carry_dim]."""

    @abstractmethod
    def ops(self, arrays: Arrays = copied) -> list[Op]:
        """The trunk's outputs as ops (:mod:`~hpc_refer.algorithms.kit.ops`) over a row's
        state part and carry."""

    def evaluator(self) -> NumpyOutputs:
        """rows -> outputs (numpy in and out, no gradient) for the learner's evaluations
        outside the gradient step: here through torch, the arithmetic of the step."""
        def outputs(rows: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                out: np.ndarray = self.rows(torch.from_numpy(rows)).out.numpy()
            return out

        return outputs


class FeedForwardBody(Body):
    """outputs = mlp(normalise(s)): a row is the state; the critics read s; no carry."""

    def __init__(self, obs_dim: int, out_dim: int, hidden: tuple[int, ...],
                 activation: Activation = Activation.SOFTSIGN) -> None:
        super().__init__()
        self.obs_dim = self.seen_dim = obs_dim
        self.carry_dim = 0
        self.normalizer = Normalizer(obs_dim)
        self.trunk = mlp([obs_dim, *hidden, out_dim], activation)
        small_output_(self.trunk)

    def rows(self, rows: torch.Tensor) -> BodyOutputs:
        return BodyOutputs(self.trunk(self.normalizer(rows)), rows, rows[..., self.obs_dim:])

    def sequences(self, rows: torch.Tensor, length: int) -> BodyOutputs:
        """The rows, each on its own (a feed-forward network's sequences are its rows)."""
        return self.rows(rows)

    def after(self, states: torch.Tensor, carry: torch.Tensor) -> BodyOutputs:
        """The states alone (there is no carry)."""
        return self.rows(states)

    def ops(self, arrays: Arrays = copied) -> list[Op]:
        return [self.normalizer.op(arrays), *mlp_ops(self.trunk, arrays)]

    def evaluator(self) -> NumpyOutputs:
        """In numpy (:func:`~hpc_refer.algorithms.kit.program.run_ops` on views of the
        parameters): a torch call's overhead (about 50 us) is several times the arithmetic of
        a few rows."""
        ops = self.ops(viewed)
        return lambda rows: run_ops(ops, rows)[0]


class RecurrentBody(Body):
    """Rows [s, c] -> outputs through h' = cell(x, c), x = normalise(s), and an MLP over
    [x, h'] (:class:`~hpc_refer.algorithms.kit.recurrent.RecurrentCell`); the critics read
    [s, h'] (h' with its gradient: their regression trains the cell too)."""

    def __init__(self, obs_dim: int, out_dim: int, hidden: tuple[int, ...], cell: Cell,
                 width: int, activation: Activation = Activation.SOFTSIGN) -> None:
        super().__init__()
        self.obs_dim = obs_dim
        self.seen_dim = obs_dim + width
        self.normalizer = Normalizer(obs_dim)
        self.cell = RecurrentCell(cell, obs_dim, width)
        self.carry_dim = self.cell.carry_dim
        self.trunk = mlp([obs_dim + width, *hidden, out_dim], activation)
        small_output_(self.trunk)

    def rows(self, rows: torch.Tensor) -> BodyOutputs:
        s = rows[..., :self.obs_dim]
        x = self.normalizer(s)
        h, carry = self.cell(x, rows[..., self.obs_dim:])
        return BodyOutputs(self.trunk(torch.cat([x, h], dim=-1)), torch.cat([s, h], dim=-1),
                           carry)

    def sequences(self, rows: torch.Tensor, length: int) -> BodyOutputs:
        seq = rows.reshape(-1, length, rows.shape[-1])
        x = self.normalizer(seq[..., :self.obs_dim])
        h, carry = self.cell.unroll(x, seq[:, 0, self.obs_dim:])
        out = self.trunk(torch.cat([x, h], dim=-1))
        n = rows.shape[0]
        h = h.reshape(n, -1)
        return BodyOutputs(out.reshape(n, -1), torch.cat([rows[..., :self.obs_dim], h], dim=-1),
                           carry.reshape(n, -1))

    def after(self, states: torch.Tensor, carry: torch.Tensor) -> BodyOutputs:
        """One cell step from ``carry`` at the states."""
        return self.rows(torch.cat([states[..., :self.obs_dim], carry], dim=-1))

    def ops(self, arrays: Arrays = copied) -> list[Op]:
        return [self.normalizer.op(arrays), self.cell.op(arrays), *mlp_ops(self.trunk, arrays)]


def make_body(obs_dim: int, out_dim: int, shape: NetworkShape) -> Body:
    """The body of ``out_dim`` outputs that ``shape`` (a table's ``network``) declares:
    feed-forward without a cell, recurrent with one."""
    if shape.cell is Cell.NONE:
        return FeedForwardBody(obs_dim, out_dim, shape.hidden, shape.activation)
    return RecurrentBody(obs_dim, out_dim, shape.hidden, shape.cell, shape.cell_width,
                         shape.activation)


class BodyPolicy(BehaviourPolicy, ABC):
    """A behaviour policy written once over a body: the head reads the mean and std of the
    Gaussian behaviour from the trunk's outputs (:meth:`read`, and as ops
    :meth:`read_ops`); policy and numpy behaviour follow for either body."""

    def __init__(self, body: Body) -> None:
        super().__init__()
        self.body = body
        self.carry_dim = body.carry_dim

    @abstractmethod
    def read(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The behaviour's mean and std from the trunk's outputs."""

    @abstractmethod
    def read_ops(self, arrays: Arrays) -> tuple[list[Op], list[Op]]:
        """:meth:`read` as ops on the trunk's outputs: (the mean's, the std's)."""

    def behaviour_ops(self, arrays: Arrays = copied) -> NumpyBehaviour:
        mean, std = self.read_ops(arrays)
        return NumpyBehaviour(self.body.obs_dim, self.carry_dim, tuple(self.body.ops(arrays)),
                              tuple(mean), tuple(std))

    def policy(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std of the behaviour at rows, each from its stored carry."""
        return self.read(self.body.rows(obs).out)


# --- the upgrades of trees written before bodies -------------------------------------------


def body_keys(module: StateTree) -> StateTree:
    """A head's tensors as named since heads hold a body: ``normalizer.*`` and ``trunk.*`` (a
    feed-forward network written before bodies) become ``body.normalizer.*`` and
    ``body.trunk.*``; every other key (a recurrent network's ``body.*``, the head's own
    parameters and buffers) stays. Pure: a new dict."""
    return {f"body.{k}" if k.startswith(("normalizer.", "trunk.")) else k: v
            for k, v in module.items()}


def heads_with_bodies(*names: str) -> Upgrade:
    """The upgrade 1 -> 2 of an algorithm's checkpoint tree whose modules ``names`` (its heads
    and their target copies; not its critics) hold a body now: :func:`body_keys` of each."""
    def upgrade(tree: StateTree) -> StateTree:
        modules = {k: body_keys(m) if k in names else m for k, m in tree["modules"].items()}
        return {**tree, "modules": modules}

    upgrade.__name__ = upgrade.__qualname__ = f"heads_with_bodies({', '.join(names)})"
    return upgrade


def policy_with_body(tree: StateTree) -> StateTree:
    """The upgrade 1 -> 2 of a policy file (:mod:`hpc_refer.loop.policy_file`) whose
    behaviour module holds a body now: :func:`body_keys` of its ``policy``."""
    return {**tree, "policy": body_keys(tree["policy"])}


BODY_POLICY_FORMAT = TreeFormat("policy file", (policy_with_body,), key="policy_version")
"""The policy-file format of an algorithm whose behaviour module is a :class:`BodyPolicy`
(version 2; 1 named a feed-forward network's tensors without ``body.``)."""
