"""Solver classes for the solver-interface tests (loaded as ``param_envs:Class``): parameters
from the ``[env]`` table, the context keywords, step metrics, and interface mistakes that the
first reset and step must name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from hpc_refer.envs.diffusion import Diffusion1D


class Channel(Diffusion1D):
    """Diffusion1D with parameters, the context keywords and two step metrics; with a run
    directory, each rank writes what its constructor received to ``seen/``."""

    step_metrics = ("cd", "cl")

    def __init__(self, team=None, re: float = 50.0, nx: int = 32, label: str = "x", *,
                 env_index: int = 0, run_dir: str = "", seed: int = 0):
        super().__init__(team)
        self.re, self.nx, self.label = re, nx, label
        self.values = (0.0, 0.0)
        if run_dir:
            rank = team.rank if team is not None else 0
            seen = Path(run_dir) / "seen"
            seen.mkdir(exist_ok=True)
            (seen / f"env-{env_index}-rank-{rank}.json").write_text(json.dumps({
                "re": re, "re_type": type(re).__name__, "nx": nx, "label": label,
                "env_index": env_index, "run_dir": run_dir, "seed": seed}))

    def step(self, action):
        answer = super().step(action)
        self.values = (self.re * self.t, -float(self.t))
        return answer

    def step_values(self):
        return self.values


class NeedsRe(Diffusion1D):
    def __init__(self, team=None, re: float = 0.0, *, mach: float):
        super().__init__(team)


class ShortState(Diffusion1D):
    """Returns one value fewer than obs_dim from reset."""

    def reset(self, seed=None):
        return super().reset(seed)[:-1]


class ArrayReward(Diffusion1D):
    """Returns the reward as an array."""

    def step(self, action):
        state, reward, status = super().step(action)
        return state, np.array([reward, reward]), status


class ThreeValues(Channel):
    """Declares two step metrics and returns three."""

    def step_values(self):
        return (1.0, 2.0, 3.0)


class NarrowBounds(Diffusion1D):
    low = -np.ones(3)


class EmptyBox(Diffusion1D):
    low = np.array([0.0, 0.0, 1.0, 0.0])
    high = np.ones(4)
