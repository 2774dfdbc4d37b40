"""Stacked observations: the policy sees the last k states (and optionally the last k
actions) of its environment, ``--env.history k`` and ``--env.history_actions true``.

A flow seen through a few probes is not Markov in one observation; the cheap remedy is to let
the policy see a short past. With history k the observation at step t is

    x_t = [s_t, s_{t-1}, ..., s_{t-k+1}]                          (k * obs_dim values)
    x_t = [s_t, ..., s_{t-k+1}, a_{t-1}, ..., a_{t-k}]            (k * (obs_dim + act_dim))

the second with ``history_actions``, where a_{t-1} is the action (in the environment's units,
as the solver received it) that led to s_t. Before the episode's start the states are the
first state s_0 repeated and the actions zero, so x_0 is defined and a state that does not
move reads as a constant history.

The stacking is done on the actor's rank by :class:`~hpc_refer.envs.TeamDriver`, before the
policy and the replay see a state: the solver neither knows nor cares, the stored states are
exactly the policy's inputs, evaluation stacks the same way, and the actor's checkpoint
carries the stack (:meth:`ObservationStack.state`), so a restart continues an episode bit for
bit. The two keys belong to hpc_refer, not to the solver: they are taken out of ``[env]``
before the solver's parameters are checked, and a solver whose constructor names one of them
is a ConfigError.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from hpc_refer.config.modes import ConfigError
from hpc_refer.report.records import StateTree

HISTORY_KEYS = ("history", "history_actions")
"""The ``[env]`` keys that hpc_refer reads itself (never passed to the solver)."""


@dataclass(frozen=True)
class History:
    """How many past states the policy sees (``k``) and whether it sees the past actions."""

    k: int = 1
    actions: bool = False

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> History:
        """The history of an ``[env]`` table: ``history`` an integer >= 1 (default 1),
        ``history_actions`` a boolean (default false); a one-line ConfigError otherwise."""
        k = params.get("history", 1)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"env.history = {k!r} is invalid: allowed are integers >= 1 (the "
                              f"number of past states the policy sees; 1: the present only)")
        actions = params.get("history_actions", False)
        if not isinstance(actions, bool):
            raise ConfigError(f"env.history_actions = {actions!r} is invalid: allowed are true "
                              f"and false (whether the policy also sees its last actions)")
        return cls(k, actions)

    @property
    def active(self) -> bool:
        """Whether the policy sees more than the present state."""
        return self.k > 1 or self.actions

    def dim(self, obs_dim: int, act_dim: int) -> int:
        """The width of the stacked observation: k obs_dim, plus k act_dim with actions."""
        return self.k * (obs_dim + (act_dim if self.actions else 0))


PRESENT = History()
"""The present state only (no ``env.history``)."""


def solver_keys(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` without the :data:`HISTORY_KEYS` (what the solver receives)."""
    return {k: v for k, v in params.items() if k not in HISTORY_KEYS}


class ObservationStack:
    """The last k states and actions of each of ``agents`` agents, newest first.

    ``reset`` and ``push`` take the solver's state, (obs_dim,) or (agents, obs_dim), and
    return the stacked observation of the same leading shape."""

    def __init__(self, history: History, obs_dim: int, act_dim: int, agents: int = 1) -> None:
        self.history = history
        self.agents = agents
        self.obs = np.zeros((agents, history.k, obs_dim), np.float32)
        self.act = np.zeros((agents, history.k if history.actions else 0, act_dim), np.float32)

    def reset(self, state: np.ndarray) -> np.ndarray:
        """An episode's first state s_0: every past state is s_0, every past action 0."""
        self.obs[:] = np.reshape(state, (self.agents, 1, -1))
        self.act[:] = 0.0
        return self.observed()

    def push(self, state: np.ndarray, action: np.ndarray) -> np.ndarray:
        """The state s_t that the action a_{t-1} led to."""
        self.obs[:, 1:] = self.obs[:, :-1]
        self.obs[:, 0] = np.reshape(state, (self.agents, -1))
        if self.history.actions:
            self.act[:, 1:] = self.act[:, :-1]
            self.act[:, 0] = np.reshape(action, (self.agents, -1))
        return self.observed()

    def observed(self) -> np.ndarray:
        """x_t of each agent (see the module docstring); shape (D,) for one agent."""
        x = np.concatenate([self.obs.reshape(self.agents, -1),
                            self.act.reshape(self.agents, -1)], axis=1)
        return x[0] if self.agents == 1 else x

    def state(self) -> StateTree:
        """The stack, for a checkpoint (exact copies)."""
        return {"obs": self.obs.copy(), "act": self.act.copy()}

    def restore(self, tree: StateTree) -> None:
        """Continue from :meth:`state`; a stack of other sizes is a ValueError naming them."""
        obs, act = np.asarray(tree["obs"], np.float32), np.asarray(tree["act"], np.float32)
        if obs.shape != self.obs.shape or act.shape != self.act.shape:
            raise ValueError(f"the checkpoint's observation history has shapes {obs.shape} "
                             f"and {act.shape}, this run's {self.obs.shape} and "
                             f"{self.act.shape} (env.history, env.history_actions)")
        self.obs[:], self.act[:] = obs, act
