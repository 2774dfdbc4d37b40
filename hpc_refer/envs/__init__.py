"""Environments behind one interface, and the driver that runs them over a team of ranks.

The interface (what the actor calls)::

    obs_dim, act_dim, low, high
    reset(seed) -> state            step(action) -> (state, reward, Status)        close()

``--env`` selects: a built-in solver by name (``Diffusion1D``), a user's class as
``package.module:Class`` (constructed with the team, see :class:`~hpc_refer.parallel.Team`),
an external MPI program (``external``, ``external:[-n K] PROGRAM``, ``external:--connect
DIR``, see :mod:`hpc_refer.envs.external`), or any gymnasium id with a continuous action
space (one rank per environment).
A solver spanning K ranks is called collectively: team rank 0 (the actor) drives it through
:class:`TeamDriver`, the other ranks follow in :func:`serve_team`. The state, reward and
status are taken from the return values of team rank ``state_rank``, an optional attribute of
the solver (default 0, the actor): a solver whose state is gathered on another rank sets it,
and that rank's results travel to the actor in one message per call (the other ranks' return
values are ignored). A solver may also report values of its own per episode (a physical
quantity, say): it names them in a class attribute ``episode_metrics`` (a tuple of identifiers)
and returns them, in that order, from ``episode_values()``, which the actor calls on team rank 0
(not collectively) when an episode ends; they become columns of ``episodes.csv``.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from hpc_refer.config import ConfigError
from hpc_refer.envs.external import ExternalEnv, check_port_dir, is_external, parse_spec
from hpc_refer.envs.gym_env import GymEnv, Status, check_env_id
from hpc_refer.parallel import Team, TeamCommand

BUILTIN = {
    "Diffusion1D": "hpc_refer.envs.diffusion:Diffusion1D",
    "KS": "hpc_refer.envs.ks:KuramotoSivashinsky",
}


class EnvironmentFinished(Exception):  # noqa: N818 (a signal, not an error)
    """Raised by a solver's ``reset`` when it has no further episodes to run: its actor tells
    its learner and stops; training goes on with the other actors."""


def _load_class(spec: str) -> Any:
    module, _, name = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ConfigError(
            f"run.env = {spec!r} cannot be loaded ({err}): allowed are gymnasium ids, "
            f"{', '.join(BUILTIN)}, or package.module:Class"
        ) from None


def _solver_class(env_id: str) -> Any | None:
    """The Python solver class ``env_id`` names (built-in or package.module:Class); None for
    gymnasium ids and external solvers."""
    if is_external(env_id) or not (":" in env_id or env_id in BUILTIN):
        return None
    return _load_class(BUILTIN.get(env_id, env_id))


def env_factory(env_id: str, ranks_per_env: int) -> Callable[[Team | None], Any]:
    """A function team -> environment for ``env_id``; raises ConfigError on a bad id."""
    cls = _solver_class(env_id)
    if cls is not None:
        return lambda team: cls(team)
    check_env_id(env_id)
    if ranks_per_env != 1:
        raise ConfigError(
            f"run.env = {env_id!r} is a gymnasium environment and runs on one rank: "
            f"run.ranks_per_env = {ranks_per_env} is invalid, allowed is 1"
        )
    return lambda team: GymEnv(env_id)


def make_env(env_id: str, ranks_per_env: int, team: Team | None, index: int = 0,
             envs: int = 1) -> Any:
    """The environment of team ``index`` (of ``envs``), on its actor or solver ranks."""
    if is_external(env_id):
        return ExternalEnv(env_id, index, envs)
    return env_factory(env_id, ranks_per_env)(team)


METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _metric_names(source: Any, where: str) -> tuple[str, ...]:
    names = tuple(getattr(source, "episode_metrics", ()))
    if len(set(names)) != len(names) or not all(
            isinstance(n, str) and METRIC_NAME.fullmatch(n) for n in names):
        raise ConfigError(f"{where}.episode_metrics = {names!r} is invalid: allowed is a tuple "
                          f"of distinct identifiers")
    return names


def episode_metric_names(env_id: str) -> tuple[str, ...]:
    """Names of the per-episode values the solver class of ``env_id`` reports (its
    ``episode_metrics``); () for gymnasium ids and external solvers."""
    cls = _solver_class(env_id)
    return () if cls is None else _metric_names(cls, env_id)


def env_dims(env_id: str, ranks_per_env: int) -> tuple[int, int] | None:
    """(obs_dim, act_dim) of ``env_id`` without a team (learners need only the sizes).

    None for an external solver, whose sizes arrive in its HELLO (the id is validated).
    """
    if is_external(env_id):
        parse_spec(env_id, ranks_per_env)
        return None
    factory = env_factory(env_id, ranks_per_env)
    cls = _solver_class(env_id)
    if cls is not None:
        return int(cls.obs_dim), int(cls.act_dim)
    env = factory(None)
    try:
        return env.obs_dim, env.act_dim
    finally:
        env.close()


def check_env(env_id: str, ranks_per_env: int) -> None:
    """Start-up validation of ``env_id`` on every rank, before any environment exists:
    :func:`env_dims`, and the port directory of ``external:--connect DIR``."""
    env_dims(env_id, ranks_per_env)
    if is_external(env_id):
        check_port_dir(env_id)


def state_rank_of(env: Any, team: Team | None) -> int:
    """The solver's ``state_rank`` (0 when it has none), checked against the team size."""
    size = team.size if team is not None else 1
    rank = getattr(env, "state_rank", 0)
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer) or not 0 <= rank < size:
        raise ConfigError(f"{type(env).__name__}.state_rank = {rank!r} is invalid: allowed are "
                          f"the team ranks 0..{size - 1}")
    return int(rank)


def pack_step(obs: Any, reward: float, status: Status) -> np.ndarray:
    """A step result as one float64 vector [reward, status, state...] (see :func:`unpack_step`)."""
    return np.concatenate([[float(reward), int(status)], np.asarray(obs, np.float64).ravel()])


def unpack_step(packed: np.ndarray) -> tuple[np.ndarray, float, Status]:
    """(state, reward, status) from a vector made by :func:`pack_step`."""
    return packed[2:], float(packed[0]), Status(int(packed[1]))


class TeamDriver:
    """Team rank 0's view of a collective environment: each call is broadcast first, and the
    result comes from the solver's ``state_rank``."""

    def __init__(self, env: Any, team: Team | None) -> None:
        self.env = env
        self.team = team if team is not None and team.size > 1 else None
        self.state_rank = state_rank_of(env, team)
        self.metric_names = _metric_names(env, type(env).__name__)
        self.obs_dim, self.act_dim = int(env.obs_dim), int(env.act_dim)
        self.low = np.asarray(env.low, np.float64).reshape(-1)
        self.high = np.asarray(env.high, np.float64).reshape(-1)

    def reset(self, seed: int | None = None) -> np.ndarray:
        if self.team is not None:
            self.team.send_command(TeamCommand.RESET, np.array([-1 if seed is None else seed]))
        obs = self.env.reset(seed)
        if self.team is not None and self.state_rank:
            obs = self.team.receive_result(self.state_rank)
        return np.asarray(obs, np.float32)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, Status]:
        if self.team is not None:
            self.team.send_command(TeamCommand.STEP, np.asarray(action, np.float64))
        obs, reward, status = self.env.step(action)
        if self.team is not None and self.state_rank:
            obs, reward, status = unpack_step(self.team.receive_result(self.state_rank))
        return np.asarray(obs, np.float32), float(reward), Status(status)

    def episode_values(self) -> tuple[float, ...]:
        """The solver's ``episode_values()`` for the episode that just ended (on this rank
        only), one per name of its ``episode_metrics``."""
        if not self.metric_names:
            return ()
        values = tuple(float(v) for v in self.env.episode_values())
        if len(values) != len(self.metric_names):
            raise ValueError(f"{type(self.env).__name__}.episode_values() returned "
                             f"{len(values)} values for episode_metrics {self.metric_names}")
        return values

    def close(self) -> None:
        if self.team is not None:
            self.team.send_command(TeamCommand.STOP, np.zeros(0))
        self.env.close()


def serve_team(env: Any, team: Team) -> None:
    """Solver ranks 1..K-1: follow team rank 0's reset/step calls until it says stop; the
    solver's ``state_rank`` also sends each result to team rank 0."""
    sends = team.rank == state_rank_of(env, team)
    while True:
        command, payload = team.receive_command()
        if command is TeamCommand.RESET:
            try:
                obs = env.reset(None if payload[0] < 0 else int(payload[0]))
            except EnvironmentFinished:
                continue
            if sends:
                team.send_result(np.asarray(obs, np.float64).ravel())
        elif command is TeamCommand.STEP:
            result = env.step(payload)
            if sends:
                team.send_result(pack_step(*result))
        else:
            env.close()
            return
