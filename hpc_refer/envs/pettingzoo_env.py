"""Adapter from a PettingZoo ``ParallelEnv`` of homogeneous agents to hpc_refer's multi-agent
solver interface. Its id, ``pettingzoo:package.module:factory``, its factory and the
factory's ``[env]`` keywords and team are its kind's,
:mod:`hpc_refer.envs.kinds.pettingzoo_factory`, which builds the ParallelEnv and hands it
here.

The interface it offers (every array in ``possible_agents`` order)::

    n_agents                    len(possible_agents), fixed for the run
    obs_dim, act_dim            sizes of ONE agent's (flattened) observation and action
    low, high                   one agent's action bounds (float64 arrays of shape (act_dim,))
    reset(seed) -> states                           float32 (n_agents, obs_dim)
    step(actions) -> (states, rewards, statuses)    actions float (n_agents, act_dim);
                                                    rewards float64 (n_agents,); statuses
                                                    int64 (n_agents,) of Status
    close()

A ParallelEnv of one agent answers in the interface's single-agent form (a state of shape
(obs_dim,), a float reward, a Status; an action of shape (act_dim,)), as the solver interface
asks of n_agents = 1, so that it runs as any one-agent environment.

Homogeneous agents. Every agent's observation space and action space must be a gymnasium
``Box`` of the same shape and the same bounds as the first agent's (and the same dtype for
actions), the action space a continuous (floating-point) Box; otherwise the construction is
a one-line ConfigError naming the agent, the field and what was expected, e.g.
``... agent 'agent_2' action_space has shape (3,), expected (2,) (the shape of agent
'agent_0'): agents must be homogeneous``.

Agents that end at different steps. After ``reset`` every one of ``possible_agents`` must be
active (in ``env.agents``, with an observation). ``step`` gives an action (row i, reshaped to
the action space's shape and cast to its dtype) only to the agents still in ``env.agents``;
the rows of agents already done are ignored. An agent's status is TERMINAL when
``terminations[a]``, TRUNCATED when ``truncations[a]`` (TERMINAL wins when both), CONTINUE
otherwise; once an agent is done its row keeps its last observation, reward 0 and its final
status, at every later step, until ``reset``. The episode is over when no status is CONTINUE.

Faults. An answer that breaks these rules raises :class:`~hpc_refer.envs.interface.SolverFault`
in one line naming the call and the field: an agent that is not in ``possible_agents``
(``step: observation for unknown agent 'x', allowed: agent_0..agent_3``), an agent that is
active again after it ended or appears after ``reset``, a live agent without its observation,
reward, termination or truncation, an observation of another size than ``obs_dim``, an agent
that leaves ``env.agents`` without being terminated or truncated.

On a team of K ranks (a factory that names ``team``). The ParallelEnv is built on every rank
of the team, and every rank's adapter makes every call: ``reset(seed)``, and ``step`` with the
actions of the agents in that rank's own ``env.agents`` (every rank's ParallelEnv keeps
``agents``, the agents still active, as PettingZoo's API asks). The answers (observations,
rewards, terminations, truncations) are read and checked on one rank alone, the team's state
rank: team rank 0 (the actor), or the rank the ParallelEnv names in an attribute
``state_rank``, as a Python solver does (:mod:`hpc_refer.envs`). The other ranks' answers are
ignored, so a ParallelEnv whose observations are gathered on one rank may answer empty dicts
on the others. ``possible_agents`` and the spaces are read on every rank: they must be the
same on each.

There is no ``get_state``/``set_state``: a ParallelEnv has no generic way to save its whole
state, so a resumed run ends the interrupted episode as truncated and starts a new one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

from hpc_refer.config.modes import ConfigError
from hpc_refer.envs.interface import SolverFault, Status, Team


def _agent_list(agents: Sequence[Any]) -> str:
    """The agents for messages: all of up to three, else the first and last
    (``agent_0..agent_3``)."""
    names = [str(a) for a in agents]
    return ", ".join(names) if len(names) <= 3 else f"{names[0]}..{names[-1]}"


class PettingZooEnv:
    """A PettingZoo ParallelEnv of homogeneous agents with continuous (Box) actions, as the
    multi-agent solver interface (see the module docstring)."""

    def __init__(self, env_id: str, env: ParallelEnv, team: Team | None = None) -> None:
        """The adapter of ``env`` (built by the factory of ``env_id``, on this rank of
        ``team``), its agents' spaces checked (one-line ConfigErrors; ``env`` is closed
        then)."""
        self.env_id = env_id
        self.env: ParallelEnv = env
        try:
            possible = getattr(env, "possible_agents", None)
            if possible is None:
                raise ConfigError(f"run.env = {env_id!r}: the ParallelEnv has no "
                                  "possible_agents, expected a list of its agents")
            self.possible_agents: tuple[Any, ...] = tuple(possible)
            if not self.possible_agents:
                raise ConfigError(f"run.env = {env_id!r}: possible_agents is empty, expected "
                                  "at least one agent")
            obs = self._space("observation_space", float_dtype=False)
            act = self._space("action_space", float_dtype=True)
        except BaseException:
            env.close()
            raise
        self.n_agents = len(self.possible_agents)
        self.obs_dim = int(np.prod(obs.shape))
        self.act_dim = int(np.prod(act.shape))
        self.low = np.asarray(act.low, np.float64).reshape(-1)
        self.high = np.asarray(act.high, np.float64).reshape(-1)
        self._act_shape = act.shape
        self._act_dtype = act.dtype
        self._index = {a: i for i, a in enumerate(self.possible_agents)}
        self._states = np.zeros((self.n_agents, self.obs_dim), np.float32)
        self._statuses = np.full(self.n_agents, Status.CONTINUE, np.int64)
        self._reset_once = False
        self.state_rank = getattr(env, "state_rank", 0)
        """The team rank whose answers are read (checked by the driver)."""
        self._reads = team is None or team.rank == self.state_rank
        """Whether this rank reads and checks the answers (the others only make the calls)."""

    def _space(self, field: str, *, float_dtype: bool) -> gym.spaces.Box:
        """The ``field`` space (observation_space or action_space) all agents share: a Box
        of one shape, bounds (and, for actions, a floating dtype) for every agent."""
        where = f"run.env = {self.env_id!r}:"
        first: gym.spaces.Box | None = None
        for agent in self.possible_agents:
            space = getattr(self.env, field)(agent)
            if not isinstance(space, gym.spaces.Box):
                kind = "continuous (Box)" if float_dtype else "Box"
                raise ConfigError(f"{where} agent {agent!r} has a {type(space).__name__} "
                                  f"{field}, expected a {kind} space")
            if float_dtype and not np.issubdtype(space.dtype, np.floating):
                raise ConfigError(f"{where} agent {agent!r} {field} has dtype {space.dtype}, "
                                  "expected a continuous (floating-point) Box")
            if first is None:
                first = space
                continue
            ref = f"(that of agent {self.possible_agents[0]!r}): agents must be homogeneous"
            if space.shape != first.shape:
                raise ConfigError(f"{where} agent {agent!r} {field} has shape {space.shape}, "
                                  f"expected {first.shape} {ref}")
            for bound in ("low", "high"):
                mine, theirs = getattr(space, bound), getattr(first, bound)
                differs = np.flatnonzero(mine.reshape(-1) != theirs.reshape(-1))
                if differs.size:
                    i = int(differs[0])
                    raise ConfigError(f"{where} agent {agent!r} {field}.{bound}[{i}] = "
                                      f"{mine.reshape(-1)[i]}, expected "
                                      f"{theirs.reshape(-1)[i]} {ref}")
            if float_dtype and space.dtype != first.dtype:
                raise ConfigError(f"{where} agent {agent!r} {field} has dtype {space.dtype}, "
                                  f"expected {first.dtype} {ref}")
        assert first is not None
        return first

    def _known(self, call: str, field: str, keys: Any) -> None:
        """A SolverFault unless every key of ``keys`` (the agents of ``field``: an answer's
        dict or ``env.agents``) is one of ``possible_agents``."""
        for key in keys:
            if key not in self._index:
                what = (f"env.agents holds unknown agent {key!r}" if field == "env.agents"
                        else f"{field} for unknown agent {key!r}")
                raise SolverFault(f"{call}: {what}, allowed: {_agent_list(self.possible_agents)}")

    def _observation(self, call: str, agent: Any, value: Any) -> np.ndarray:
        """``agent``'s observation flattened to float32 (obs_dim,)."""
        flat = np.asarray(value, np.float32).reshape(-1)
        if flat.size != self.obs_dim:
            raise SolverFault(f"{call}: observation of agent {agent!r} has shape "
                              f"{np.shape(value)}, expected {self.obs_dim} values (its "
                              "observation_space)")
        return flat

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Every agent's first observation, (n_agents, obs_dim) float32; (obs_dim,) for a
        ParallelEnv of one agent (the single-agent form of the solver interface)."""
        states = self._reset_agents(seed)
        return states[0] if self.n_agents == 1 else states

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, Any, Any]:
        """One step of every agent still active: (states, rewards, statuses), see the module
        docstring; for a ParallelEnv of one agent the single-agent form: the action
        (act_dim,) in, (state (obs_dim,), reward, Status) out."""
        if self.n_agents > 1:
            return self._step_agents(np.asarray(actions))
        states, rewards, statuses = self._step_agents(np.asarray(actions).reshape(1, -1))
        return states[0], float(rewards[0]), Status(int(statuses[0]))

    def _reset_agents(self, seed: int | None) -> np.ndarray:
        """:meth:`reset` in the (n_agents, obs_dim) form whatever the count."""
        obs, _ = self.env.reset(seed=seed)
        if not self._reads:  # another team rank reads the answer
            self._reset_once = True
            return self._states.copy()
        self._known("reset", "observation", obs)
        self._known("reset", "env.agents", self.env.agents)
        states = np.zeros((self.n_agents, self.obs_dim), np.float32)
        for i, agent in enumerate(self.possible_agents):
            if agent not in obs or agent not in self.env.agents:
                raise SolverFault(f"reset: agent {agent!r} of possible_agents is not active "
                                  "after reset (no observation or not in env.agents): every "
                                  "agent must start the episode")
            states[i] = self._observation("reset", agent, obs[agent])
        self._states = states
        self._statuses = np.full(self.n_agents, Status.CONTINUE, np.int64)
        self._reset_once = True
        return states.copy()

    def _step_agents(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`step` in the (n_agents, ...) form whatever the count."""
        if not self._reset_once:
            raise RuntimeError(f"{self.env_id}: step before the first reset")
        actions = np.asarray(actions)
        if actions.shape != (self.n_agents, self.act_dim):
            raise ValueError(f"{self.env_id}: actions have shape {actions.shape}, expected "
                             f"({self.n_agents}, {self.act_dim}) (n_agents, act_dim)")
        if not self._reads:  # another team rank reads the answer
            self._known("step", "env.agents", self.env.agents)
            self.env.step(self._given(actions, self.env.agents))
            return self._states.copy(), np.zeros(self.n_agents), self._statuses.copy()
        live = [a for a in self.possible_agents
                if self._statuses[self._index[a]] == Status.CONTINUE]
        if not live:
            raise RuntimeError(f"{self.env_id}: step after every agent ended: reset first")
        active = list(self.env.agents)  # known agents: checked after reset and every step
        for agent in active:
            if agent not in live:
                raise SolverFault(f"step: agent {agent!r} is in env.agents after it ended "
                                  "(terminated or truncated): an agent cannot come back "
                                  "before reset")
        obs, rewards, terminations, truncations, _ = self.env.step(self._given(actions, active))
        for field, answer in (("observation", obs), ("reward", rewards),
                              ("termination", terminations), ("truncation", truncations)):
            self._known("step", field, answer)
            for agent in live:
                if agent not in answer:
                    raise SolverFault(f"step: no {field} for active agent {agent!r}")
        self._known("step", "env.agents", self.env.agents)
        states = self._states.copy()
        reward_row = np.zeros(self.n_agents, np.float64)
        statuses = self._statuses.copy()
        for agent in live:
            i = self._index[agent]
            states[i] = self._observation("step", agent, obs[agent])
            reward_row[i] = float(rewards[agent])
            statuses[i] = (Status.TERMINAL if terminations[agent] else
                           Status.TRUNCATED if truncations[agent] else Status.CONTINUE)
            if statuses[i] == Status.CONTINUE and agent not in self.env.agents:
                raise SolverFault(f"step: agent {agent!r} left env.agents without a "
                                  "termination or truncation")
        self._states, self._statuses = states, statuses
        return states.copy(), reward_row, statuses.copy()

    def _given(self, actions: np.ndarray, agents: Sequence[Any]) -> dict[Any, np.ndarray]:
        """The actions of ``agents`` (rows of ``actions``), each in its action space's shape
        and dtype."""
        return {a: actions[self._index[a]].reshape(self._act_shape).astype(self._act_dtype)
                for a in agents}

    def close(self) -> None:
        self.env.close()
