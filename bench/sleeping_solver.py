"""A solver whose steps take seconds of wall time and almost no CPU, for
``bench/slow_envs.py`` and ``tests/test_slow_envs.py`` (issue 38, point 7): loaded as
``--env bench.sleeping_solver:SleepingSolver`` with the repository on PYTHONPATH.

Each ``step`` sleeps a time drawn uniformly in [``lo``, ``hi``] seconds, times
``slow_factor`` on the environment whose index is ``slow_env`` (-1: none), so that 56 such
environments on two cores behave like 56 expensive simulations: they only wait. The
dynamics are trivial (a damped linear system driven by the action, reward minus the squared
state) and, like the sleep times, deterministic given the constructor's ``seed`` (hpc_refer
derives it from ``run.seed`` and the environment index). ``reset`` does not sleep. An
episode is ``episode_len`` steps, then TRUNCATED.

Parameters (``--env.KEY VALUE`` or the ``[env]`` table; solvers/README.md): ``lo``, ``hi``,
``slow_env``, ``slow_factor``, ``episode_len``, ``log_steps``. With ``log_steps`` (default
true) and a run directory, every step appends one line ``start,end`` (``time.time()``
seconds, the wall clock that all ranks of one host share) to
``RUN_DIR/sleeping/env-<index>.csv``: what the benchmark counts a team's steps and its time
inside the solver from.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import IO, Any

import numpy as np

from hpc_refer.envs.interface import Status

LOG_DIR = "sleeping"
"""The folder of the per-environment step logs inside the run directory."""


def log_path(run_dir: str | Path, env_index: int) -> Path:
    """Where environment ``env_index`` logs its steps."""
    return Path(run_dir) / LOG_DIR / f"env-{env_index}.csv"


def mean_step_s(lo: float, hi: float, factor: float = 1.0) -> float:
    """The expected duration of one step: the mean of U[lo, hi], times ``factor``."""
    return factor * (lo + hi) / 2


class SleepingSolver:
    """Steps that sleep U[lo, hi] seconds (``slow_factor`` times that on ``slow_env``)."""

    obs_dim = 3
    act_dim = 1
    low = np.array([-1.0])
    high = np.array([1.0])
    rebuild_after_fault = False

    def __init__(self, team: Any = None, lo: float = 0.5, hi: float = 2.0, slow_env: int = -1,
                 slow_factor: float = 4.0, episode_len: int = 10, log_steps: bool = True,
                 env_index: int = 0, run_dir: str = "", seed: int = 0) -> None:
        if not 0 <= lo <= hi:
            raise ValueError(f"SleepingSolver needs 0 <= lo <= hi, got lo={lo}, hi={hi}")
        if slow_factor <= 0 or episode_len < 1:
            raise ValueError("SleepingSolver needs slow_factor > 0 and episode_len >= 1")
        self.team = team
        self.factor = slow_factor if env_index == slow_env else 1.0
        self.lo, self.hi = self.factor * lo, self.factor * hi
        self.episode_len = episode_len
        self.rng = np.random.default_rng(seed)
        self.x = np.zeros(self.obs_dim)
        self.t = 0
        self.log: IO[str] | None = None
        if log_steps and run_dir:
            path = log_path(run_dir, env_index)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.log = path.open("a", buffering=1)  # a line per step, flushed at once

    def reset(self, seed: int | None = None) -> np.ndarray:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.x = self.rng.uniform(-1.0, 1.0, self.obs_dim)
        self.t = 0
        return self.x.copy()

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, Status]:
        start = time.time()
        time.sleep(self.rng.uniform(self.lo, self.hi))
        self.x = 0.9 * self.x + 0.1 * float(np.asarray(action).reshape(-1)[0])
        self.t += 1
        if self.log is not None:
            self.log.write(f"{start:.6f},{time.time():.6f}\n")
        status = Status.TRUNCATED if self.t >= self.episode_len else Status.CONTINUE
        return self.x.copy(), -float(self.x @ self.x), status

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None
