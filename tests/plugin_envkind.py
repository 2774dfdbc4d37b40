"""An environment kind from outside the package, registered as a plug-in (``--plugins
plugin_envkind --env drift:LENGTH``): tests/test_env_kinds.py trains it and resumes it
without any package file knowing it, the proof that a kind is one module.

``drift:LENGTH`` names a point on a line that drifts away from 0 and is pushed back: state
x, action a in [-1, 1], x <- x + 0.1 (a + drift), reward -|x|, each episode LENGTH steps
(then truncated), started at ``env.start`` (a float, 1.0 by default). The kind brings all of
it: the id's form, its check, the sizes without a solver, the ``[env]`` check, the factory
and the episode metric it declares (``distance``: |x| at the episode's end).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from hpc_refer.config.modes import ConfigError
from hpc_refer.envs.interface import Status
from hpc_refer.envs.registry import EnvKind, Factory, SolverSpec, register_kind

PREFIX = "drift:"
DRIFT = 0.3


class Drift:
    """The solver an id ``drift:LENGTH`` names (one agent, one rank)."""

    obs_dim, act_dim = 1, 1
    low, high = np.array([-1.0]), np.array([1.0])
    episode_metrics = ("distance",)

    def __init__(self, length: int, start: float = 1.0) -> None:
        self.length, self.start = length, start
        self.x, self.t = start, 0

    def reset(self, seed: int | None = None) -> np.ndarray:
        self.x, self.t = self.start, 0
        return np.array([self.x], np.float32)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, Status]:
        self.x += 0.1 * (float(np.clip(action[0], -1.0, 1.0)) + DRIFT)
        self.t += 1
        status = Status.TRUNCATED if self.t >= self.length else Status.CONTINUE
        return np.array([self.x], np.float32), -abs(self.x), status

    def episode_values(self) -> tuple[float, ...]:
        return (abs(self.x),)

    def close(self) -> None:
        pass


def length_of(env_id: str) -> int:
    """LENGTH of ``drift:LENGTH``; a one-line ConfigError naming the form otherwise."""
    text = env_id.removeprefix(PREFIX)
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"run.env = {env_id!r} is invalid: allowed is {DriftKind.form}")
    return int(text)


@register_kind
class DriftKind(EnvKind):
    """``drift:LENGTH``: :class:`Drift` of that episode length."""

    name = "drift"
    label = "a drifting point"
    form = "drift:LENGTH (a test plug-in: a point pushed back to 0, episodes of LENGTH steps)"

    def claims(self, env_id: str) -> bool:
        return env_id.startswith(PREFIX)

    def solver_params(self, env_id: str, params: Mapping[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(params) - {"start"})
        if unknown:
            raise ConfigError(f"env.{unknown[0]} is not a parameter of {env_id}: its "
                              "parameters are start")
        return {k: float(v) for k, v in params.items()}

    def solver_dims(self, spec: SolverSpec) -> tuple[int, int]:
        length_of(spec.env_id)
        return Drift.obs_dim, Drift.act_dim

    def factory(self, spec: SolverSpec, index: int = 0) -> Factory:
        length, params = length_of(spec.env_id), dict(spec.params)
        return lambda team: Drift(length, **params)

    def metric_names(self, env_id: str) -> tuple[str, ...]:
        return Drift.episode_metrics
