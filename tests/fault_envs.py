"""Faulty solvers for the end-to-end fault tests (loaded as ``fault_envs:Class``; the tests
put this directory on PYTHONPATH for subprocesses)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from hpc_refer.envs.diffusion import Diffusion1D


class NaNEvery37(Diffusion1D):
    """Returns a NaN state at every 37th step of the process (the solver itself goes on)."""

    calls = 0

    def step(self, action):
        obs, reward, status = super().step(action)
        NaNEvery37.calls += 1
        if NaNEvery37.calls % 37 == 0:
            obs = np.full_like(obs, np.nan)
        return obs, reward, status


class AlwaysRaises(Diffusion1D):
    """Every step raises: faults in a row until the run gives up on the environment."""

    def step(self, action):
        raise FloatingPointError("CFL condition violated")


class SleepsOnce(Diffusion1D):
    """Sleeps far past any timeout at the 100th step of the process, once."""

    calls = 0

    def step(self, action):
        SleepsOnce.calls += 1
        if SleepsOnce.calls == 100:
            time.sleep(600)
        return super().step(action)


class RankOneHangs(Diffusion1D):
    """A team solver whose rank 1 stops answering at its 60th step (stuck in Python)."""

    calls = 0

    def step(self, action):
        RankOneHangs.calls += 1
        if self.team is not None and self.team.rank == 1 and RankOneHangs.calls == 60:
            time.sleep(600)
        return super().step(action)


def count_build(run_dir: str, team: object) -> None:
    """One line in RUN_DIR/builds-<team rank> per construction (the tests count them)."""
    rank = getattr(team, "rank", 0)
    with (Path(run_dir) / f"builds-{rank}").open("a") as out:
        out.write("built\n")


class SlowBuild(Diffusion1D):
    """Issue 25's expensive solver scaled down tenfold: its constructor takes 1.5 s, and at the
    120th step of the process (episode 3: two episodes have finished) it either sleeps 1 s
    (``fault = "sleep"``, past a 0.2-s env_step_timeout) or answers a state of the wrong
    shape (``"shape"``); either is a fault, and the solver is rebuilt."""

    calls = 0

    def __init__(self, team=None, run_dir: str = "", fault: str = "sleep"):
        time.sleep(1.5)
        super().__init__(team)
        self.fault = fault
        count_build(run_dir, team)

    def step(self, action):
        SlowBuild.calls += 1
        obs, reward, status = super().step(action)
        if SlowBuild.calls == 120 and self.fault == "sleep":
            time.sleep(1)
        if SlowBuild.calls == 120 and self.fault == "shape":
            obs = obs[:-1]
        return obs, reward, status


class ResetNeedsInflow(Diffusion1D):
    """A solver that cannot start: its first reset looks up a parameter nobody gave it, on team
    rank ``on_rank`` (after the reset's collectives, so the other ranks are not left
    waiting)."""

    def __init__(self, team=None, run_dir: str = "", on_rank: int = 0):
        super().__init__(team)
        self.on_rank = on_rank
        self.params: dict[str, float] = {}
        count_build(run_dir, team)

    def reset(self, seed=None):
        state = super().reset(seed)
        if getattr(self.team, "rank", 0) == self.on_rank:
            self.inflow = self.params["inflow_profile"]
        return state


class ConstructorNeedsInflow(Diffusion1D):
    """A solver that cannot be built: its constructor looks up a parameter nobody gave it."""

    def __init__(self, team=None, run_dir: str = ""):
        count_build(run_dir, team)
        super().__init__(team)
        self.inflow = {}["inflow_profile"]


class Recovers(Diffusion1D):
    """A solver that a reset brings back after a fault (``rebuild_after_fault = False``): its
    last team rank raises at every 37th step of this instance, after the step's collectives."""

    rebuild_after_fault = False

    def __init__(self, team=None, run_dir: str = ""):
        super().__init__(team)
        self.calls = 0
        count_build(run_dir, team)

    def step(self, action):
        answer = super().step(action)
        self.calls += 1
        last = self.team.size - 1 if self.team is not None else 0
        if self.calls % 37 == 0 and getattr(self.team, "rank", 0) == last:
            raise FloatingPointError("CFL condition violated")
        return answer
