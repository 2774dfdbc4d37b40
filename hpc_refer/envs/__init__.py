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
:class:`TeamDriver`, the other ranks follow in :func:`serve_team`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from hpc_refer.config import ConfigError
from hpc_refer.envs.external import ExternalEnv, check_port_dir, is_external, parse_spec
from hpc_refer.envs.gym_env import GymEnv, Status, check_env_id
from hpc_refer.parallel import Team

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


def env_factory(env_id: str, ranks_per_env: int) -> Callable[[Team | None], Any]:
    """A function team -> environment for ``env_id``; raises ConfigError on a bad id."""
    if ":" in env_id or env_id in BUILTIN:
        cls = _load_class(BUILTIN.get(env_id, env_id))
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


def env_dims(env_id: str, ranks_per_env: int) -> tuple[int, int] | None:
    """(obs_dim, act_dim) of ``env_id`` without a team (learners need only the sizes).

    None for an external solver, whose sizes arrive in its HELLO (the id is validated).
    """
    if is_external(env_id):
        parse_spec(env_id, ranks_per_env)
        return None
    factory = env_factory(env_id, ranks_per_env)
    if ":" in env_id or env_id in BUILTIN:
        cls = _load_class(BUILTIN.get(env_id, env_id))
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


class TeamDriver:
    """Team rank 0's view of a collective environment: each call is broadcast first."""

    def __init__(self, env: Any, team: Team | None) -> None:
        self.env = env
        self.team = team if team is not None and team.size > 1 else None
        self.obs_dim, self.act_dim = int(env.obs_dim), int(env.act_dim)
        self.low = np.asarray(env.low, np.float64).reshape(-1)
        self.high = np.asarray(env.high, np.float64).reshape(-1)

    def reset(self, seed: int | None = None) -> np.ndarray:
        if self.team is not None:
            self.team.send_command("reset", np.array([-1 if seed is None else seed]))
        return np.asarray(self.env.reset(seed), np.float32)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, Status]:
        if self.team is not None:
            self.team.send_command("step", np.asarray(action, np.float64))
        obs, reward, status = self.env.step(action)
        return np.asarray(obs, np.float32), float(reward), Status(status)

    def close(self) -> None:
        if self.team is not None:
            self.team.send_command("stop", np.zeros(0))
        self.env.close()


def serve_team(env: Any, team: Team) -> None:
    """Solver ranks 1..K-1: follow team rank 0's reset/step calls until it says stop."""
    while True:
        name, payload = team.receive_command()
        if name == "reset":
            try:
                env.reset(None if payload[0] < 0 else int(payload[0]))
            except EnvironmentFinished:
                continue
        elif name == "step":
            env.step(payload)
        else:
            env.close()
            return
