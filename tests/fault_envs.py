"""Faulty solvers for the end-to-end fault tests (loaded as ``fault_envs:Class``; the tests
put this directory on PYTHONPATH for subprocesses)."""

from __future__ import annotations

import time

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
