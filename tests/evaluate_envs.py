"""A solver whose uncontrolled episodes are known in closed form, for ``evaluate --baseline``."""

from __future__ import annotations

import numpy as np

from hpc_refer.envs import Status

HORIZON = 10


class Decay:
    """x_{t+1} = 0.9 x_t + a, x_0 = 1, reward -x_{t+1}^2, episodes of HORIZON steps; the
    episode metric ``x_end`` is the last state."""

    obs_dim, act_dim = 1, 1
    low, high = -np.ones(1), np.ones(1)
    episode_metrics = ("x_end",)

    def __init__(self, team: object = None) -> None:
        self.x, self.t = 1.0, 0

    def reset(self, seed: int | None = None) -> np.ndarray:
        self.x, self.t = 1.0, 0
        return np.array([self.x])

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, Status]:
        self.x = 0.9 * self.x + float(action[0])
        self.t += 1
        status = Status.TRUNCATED if self.t == HORIZON else Status.CONTINUE
        return np.array([self.x]), -self.x**2, status

    def episode_values(self) -> tuple[float]:
        return (self.x,)

    def close(self) -> None:
        pass


class CannotStart(Decay):
    """Decay whose first reset raises, as a solver missing its input."""

    def reset(self, seed: int | None = None) -> np.ndarray:
        raise KeyError("inflow_profile")
