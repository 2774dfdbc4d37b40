"""Environments used only by the MPI tests (loaded as ``mpi_envs:Class``)."""

from __future__ import annotations

from mpi4py import MPI

from hpc_refer.envs import EnvironmentFinished
from hpc_refer.envs.diffusion import Diffusion1D


class FiniteOnOddRanks(Diffusion1D):
    """Diffusion1D whose actors on odd world ranks finish their work after two episodes."""

    def __init__(self, team=None):
        super().__init__(team)
        self.episodes = 0
        self.finite = MPI.COMM_WORLD.Get_rank() % 2 == 1

    def reset(self, seed=None):
        if self.finite and self.episodes == 2:
            raise EnvironmentFinished
        self.episodes += 1
        return super().reset(seed)


class ReportsItsEpisodes(Diffusion1D):
    """Diffusion1D with two episode metrics: the episode's length and the actor's world rank."""

    episode_metrics = ("steps", "world_rank")

    def episode_values(self):
        return self.t, MPI.COMM_WORLD.Get_rank()


class MetricNamedReturn(Diffusion1D):
    """An invalid solver: its episode metric would overwrite the return column."""

    episode_metrics = ("return",)


class GatheredOnLastRank(Diffusion1D):
    """Diffusion1D whose state is gathered on the team's last rank, which says so."""

    def __init__(self, team=None):
        super().__init__(team)
        self.state_rank = team.size - 1 if team is not None else 0
