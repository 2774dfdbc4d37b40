"""A solver for the tests of stacked observations (loaded as ``history_envs:Walk``).

:class:`Walk`: a point x on a line moved by x <- x + 0.3 a; the state is (t / horizon, x), so
every state of an episode differs from the one before it, and the episode is truncated after
``horizon`` steps. It gives its whole state (``get_state``), so a restored episode goes on.
"""

from __future__ import annotations

import json

import numpy as np

from hpc_refer.envs.interface import Status, Team


class Walk:
    """x <- x + 0.3 a, reward -x^2, state (t / horizon, x)."""

    obs_dim = 2
    act_dim = 1
    low = -np.ones(1)
    high = np.ones(1)

    def __init__(self, team: Team | None = None, horizon: int = 12) -> None:
        self.horizon = horizon
        self.rng = np.random.default_rng(0)
        self.x, self.t = 0.0, 0

    def _state(self) -> np.ndarray:
        return np.array([self.t / self.horizon, self.x])

    def reset(self, seed: int | None = None) -> np.ndarray:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.x, self.t = float(self.rng.uniform(-1.0, 1.0)), 0
        return self._state()

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, Status]:
        self.x += 0.3 * float(np.clip(action[0], -1.0, 1.0))
        self.t += 1
        status = Status.TRUNCATED if self.t >= self.horizon else Status.CONTINUE
        return self._state(), -self.x ** 2, status

    def get_state(self) -> dict[str, np.ndarray]:
        return {"x": np.array(self.x), "t": np.array(self.t),
                "rng": np.frombuffer(json.dumps(self.rng.bit_generator.state).encode(),
                                     np.uint8).copy()}

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        self.x, self.t = float(state["x"]), int(state["t"])
        self.rng.bit_generator.state = json.loads(np.asarray(state["rng"]).tobytes())

    def close(self) -> None:
        """Nothing to release."""


class Remembers(Walk):
    """A solver whose constructor names ``history``, which hpc_refer reserves."""

    def __init__(self, team: Team | None = None, history: int = 3) -> None:
        super().__init__(team)
