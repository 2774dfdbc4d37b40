"""A trained policy as the solver sees it: raw states in, actions in the solver's units out.

:class:`Controller` is the deployed form of a policy file (``RUN_DIR/policy.h5``), and the
reference every exported form is checked against. Per step it does what an actor does in an
evaluation episode (:meth:`~hpc_refer.loop.actor.Actor.evaluate`), with the same numpy code:

    x_t = stack(s_t, a_{t-1})          the last k states (and actions) with ``env.history``
                                       (:class:`~hpc_refer.envs.history.ObservationStack`)
    r_t = [x_t, h_t]                   a recurrent policy's carry h_t (0 at an episode start)
    (m_t, sigma_t, h_{t+1}) = mu(r_t)  the policy's mean; its std is not used
    a_t = to_env(m_t)                  the map into the action box
                                       (:class:`~hpc_refer.loop.actor.ActionMap`)

so ``act`` takes one raw state per step, (obs_dim,) for one agent or (K, obs_dim) for the K
agents of one simulation, and keeps the history and the carry between calls; ``reset``
starts an episode (the next state is s_0).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hpc_refer.algorithms.kit.networks import BehaviourPolicy
from hpc_refer.config.modes import ActionBounds
from hpc_refer.config.resolve import build_config
from hpc_refer.envs.history import History, ObservationStack
from hpc_refer.loop.actor import ActionMap
from hpc_refer.loop.checkpoint import CheckpointError
from hpc_refer.loop.policy_file import PolicyFile, load_policy
from hpc_refer.report.schema import POLICY_FILE


def checked_state(state: np.ndarray, state_dim: int) -> np.ndarray:
    """``state`` as the policy's float32 input: (state_dim,) or (K, state_dim); a state of
    another shape, or with NaN or inf in float32 (beyond 3.4e38 included), is a ValueError
    that names it (the policy's action would be NaN)."""
    with np.errstate(over="ignore"):  # (beyond float32: inf, refused below)
        x = np.asarray(state, np.float32)
    if x.ndim not in (1, 2) or x.shape[-1] != state_dim:
        raise ValueError(f"a state of shape {x.shape}: this policy takes states of "
                         f"{state_dim} values, shape ({state_dim},) or (K, {state_dim}) for K "
                         f"agents")
    if not np.isfinite(x).all():
        raise ValueError(f"the state holds {int(np.size(x) - np.isfinite(x).sum())} NaN or "
                         f"infinite value(s): the policy's action would be NaN")
    return x


class Controller:
    """The mean policy of ``policy`` for raw solver states (module docstring): ``to_env``
    maps its output into the action box, ``history`` stacks past states of ``state_dim``
    values (and actions of ``act_dim``)."""

    def __init__(self, policy: BehaviourPolicy, to_env: ActionMap, history: History,
                 state_dim: int, act_dim: int) -> None:
        self.policy = policy
        self.to_env = to_env
        self.history = history
        self.state_dim = state_dim
        """Values of one raw state (the solver's, before stacking)."""
        self.act_dim = act_dim
        self.carry_dim = policy.carry_dim
        self._step = policy.numpy_step() if self.carry_dim else None
        self._mean = policy.numpy_policy()
        self._stack: ObservationStack | None = None
        self._carry: np.ndarray | None = None
        self._last: np.ndarray | None = None
        """The last action returned (None: the next state starts an episode)."""

    @classmethod
    def of(cls, saved: PolicyFile, where: Path) -> Controller:
        """The controller of a policy file read from ``where`` (CheckpointError naming it when
        the file predates the action box, or its run's config is not valid here)."""
        if saved.action_low is None or saved.action_high is None:
            raise CheckpointError(
                f"{where}: this policy file holds no action box (written by an hpc_refer "
                f"before it recorded one): resume its run for one more step to write a new "
                f"one, or evaluate it with python -m hpc_refer.evaluate")
        config = build_config(saved.config)
        history = History.of(config.env)
        # the raw state's width: the policy's input unstacked (``env.history``)
        state_dim = saved.obs_dim // history.k - (saved.act_dim if history.actions else 0)
        to_env = ActionMap(saved.action_low, saved.action_high,
                           config.action_bounds is ActionBounds.TANH)
        return cls(saved.policy, to_env, history, state_dim, saved.act_dim)

    @classmethod
    def load(cls, path: Path) -> Controller:
        """The controller of a run directory's ``policy.h5``, or of a policy file given by
        its path (``hpc_refer.load_policy``)."""
        file = path / POLICY_FILE if path.is_dir() else path
        if not file.is_file():
            raise FileNotFoundError(f"{file}: no policy file there (a run directory holds "
                                    f"{POLICY_FILE} once its first checkpoint is written)")
        return cls.of(load_policy(file), file)

    def reset(self) -> None:
        """The next state given to :meth:`act` is an episode's first."""
        self._last = None

    def act(self, state: np.ndarray) -> np.ndarray:
        """The action (float64, in the solver's units) for the raw state ``state`` of this
        step: (obs_dim,) -> (act_dim,), or (K, obs_dim) -> (K, act_dim) for K agents. A state
        of another width, or of another agent count than the episode's, is a ValueError
        naming both; a state with NaN or inf is a ValueError (the policy would answer NaN)."""
        x = checked_state(state, self.state_dim)
        if self._last is None:
            observed = self._start(x)
        elif x.shape[:-1] != self._last.shape[:-1]:
            raise ValueError(f"a state of shape {x.shape} inside an episode of states "
                             f"{(*self._last.shape[:-1], self.state_dim)}: the agent count "
                             f"changes only at an episode's start (reset())")
        elif self._stack is None:
            observed = x
        else:
            observed = self._stack.push(x, self._last)
        if self._step is None:
            mean, _ = self._mean(observed)
        else:
            assert self._carry is not None
            row = np.concatenate([observed, self._carry], axis=-1).astype(np.float32)
            mean, _, self._carry = self._step(row)
        action = np.asarray(self.to_env(mean), np.float64)
        self._last = action
        return action

    def _start(self, x: np.ndarray) -> np.ndarray:
        """An episode's first state: the history filled with it, the carry 0."""
        if self.carry_dim:
            self._carry = np.zeros((*x.shape[:-1], self.carry_dim), np.float32)
        if not self.history.active:
            self._stack = None
            return x
        agents = 1 if x.ndim == 1 else x.shape[0]
        self._stack = ObservationStack(self.history, self.state_dim, self.act_dim, agents)
        return self._stack.reset(x)
