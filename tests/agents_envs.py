"""Solvers of several agents for the tests (loaded as ``agents_envs:Class``).

:class:`Points`: ``agents`` points on a line, each an agent that moves toward its own target;
agent i's episode lasts ``horizon + 3 i`` steps (the last agent's ends TERMINAL, the others'
TRUNCATED), so agents finish at different steps and the simulation's episode ends with the
last of them. On a team of K > 1 ranks every rank advances the same points and the reward is
a team sum of one rank's share, so each step is collective.
"""

from __future__ import annotations

import json

import numpy as np

from hpc_refer.envs.interface import SolverFault, Status, Team


class Points:
    """Points x_i moved by x_i <- x_i + 0.2 a_i toward targets c_i; reward -(x_i - c_i)^2."""

    obs_dim = 2
    act_dim = 1
    low = -np.ones(1)
    high = np.ones(1)
    episode_metrics = ("spread",)

    def __init__(self, team: Team | None = None, agents: int = 3, horizon: int = 10,
                 fault_at: int = 0, seed: int = 0) -> None:
        self.team = team if team is not None and team.size > 1 else None
        self.n_agents = agents
        self.horizon = horizon
        self.fault_at = fault_at
        self.calls = 0
        self.rng = np.random.default_rng(seed)
        self.targets = np.linspace(-0.5, 0.5, agents)
        self.x = np.zeros(agents)
        self.t = 0
        self.ends = horizon + 3 * np.arange(agents)

    def _observe(self) -> np.ndarray:
        return np.stack([self.x - self.targets,
                         np.full(self.n_agents, self.t / self.ends[-1])], axis=1)

    def reset(self, seed: int | None = None) -> np.ndarray:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.x = self.rng.uniform(-1.0, 1.0, self.n_agents)
        self.t = 0
        return self._observe()

    def step(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        self.calls += 1
        if self.calls == self.fault_at:
            raise SolverFault("the points left the line")
        a = np.asarray(action, np.float64).reshape(self.n_agents)
        self.x = self.x + 0.2 * np.clip(a, -1.0, 1.0)
        reward = -(self.x - self.targets) ** 2
        if self.team is not None:
            reward = reward + self.team.sum(0.0)
        self.t += 1
        status = np.where(self.t >= self.ends, int(Status.TRUNCATED), int(Status.CONTINUE))
        status[-1] = Status.TERMINAL if self.t >= self.ends[-1] else Status.CONTINUE
        return self._observe(), reward, status

    def episode_values(self) -> tuple[float]:
        return (float(np.std(self.x)),)

    def get_state(self) -> dict[str, np.ndarray]:
        return {"x": self.x.copy(), "t": np.array(self.t),
                "rng": np.frombuffer(json.dumps(self.rng.bit_generator.state).encode(),
                                     np.uint8).copy()}

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        self.x = np.array(state["x"], np.float64)
        self.t = int(state["t"])
        self.rng.bit_generator.state = json.loads(np.asarray(state["rng"]).tobytes())

    def close(self) -> None:
        """Nothing to release."""


class Shifty(Points):
    """Points whose agent count grows by one at every construction after the first: a
    rebuild after a fault meets another count."""

    built = 0

    def __init__(self, team: Team | None = None, fault_at: int = 5) -> None:
        super().__init__(team, agents=3 + Shifty.built, fault_at=fault_at)
        Shifty.built += 1


class PointsWithSeries(Points):
    """Points that also report a value per simulation step (``step_metrics``) and a picture
    of each simulation (``episode_field``: the points' positions per step)."""

    step_metrics = ("mean_x",)
    field_label = "x_i(t)"

    def reset(self, seed: int | None = None) -> np.ndarray:
        states = super().reset(seed)
        self.history = [self.x.copy()]
        return states

    def step(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        answer = super().step(action)
        self.history.append(self.x.copy())
        return answer

    def step_values(self) -> tuple[float]:
        return (float(np.mean(self.x)),)

    def episode_field(self) -> np.ndarray:
        return np.array(self.history)
