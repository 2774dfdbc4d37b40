"""Solvers for the tests of the run directory (issue 25): a solver whose steps drive a test
clock, one whose code fails outside a step (loaded as ``run_envs:Class``).

With ``TICKING_CLOCK=1`` in its environment, a process that imports this module (every rank of
``mpirun ... --env run_envs:Ticking``: each checks the solver at start) makes its run clock
read :func:`ticking_time`: on an actor rank the clock then advances with its own steps alone.
"""

from __future__ import annotations

import os

from hpc_refer.envs.diffusion import Diffusion1D
from hpc_refer.report.clock import CLOCK

SECONDS_PER_STEP = 0.004
"""The time one step of :class:`Ticking` takes on the clock it drives (250 steps/s)."""


class Ticking(Diffusion1D):
    """Diffusion1D (episodes of 50 steps) that counts the steps of this process, so that a
    test clock reading ``Ticking.steps * SECONDS_PER_STEP`` advances with the steps alone."""

    steps = 0

    def step(self, action):
        Ticking.steps += 1
        return super().step(action)


def ticking_time() -> float:
    """The time of a clock driven by :class:`Ticking`'s steps (seconds)."""
    return Ticking.steps * SECONDS_PER_STEP


class MetricRaises(Diffusion1D):
    """Its episode metric raises at the end of the second episode of the process: an error
    of the solver's code outside a step (not a solver fault), which ends the rank that meets
    it."""

    episode_metrics = ("energy",)
    episodes = 0

    def episode_values(self):
        MetricRaises.episodes += 1
        if MetricRaises.episodes == 2:
            raise RuntimeError("energy diverged")
        return (float(self.u @ self.u),)


if os.environ.get("TICKING_CLOCK") == "1":
    CLOCK.source = ticking_time
