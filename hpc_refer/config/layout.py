"""The rank layout: which MPI rank is a learner, an actor, or a solver rank of a team.

    world = L learners + E teams of K ranks
    ranks 0 .. L-1                      learners (rank 0 also writes the run directory)
    ranks L + e K .. L + e K + K - 1    team e; its first rank is the actor, the others run
                                        the solver with it; actor e sends to learner e mod L

A world of one rank is the single-process case: learner and actor in one process (L = E = 1).
Pure functions, no MPI: tested without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum

import numpy as np


class LayoutError(ValueError):
    """The requested layout cannot be built from this world size."""


class SeedRole(IntEnum):
    """The random streams of a run, each seeded by :func:`role_seed`."""

    NETWORKS = 0
    """Initial weights: the same on every learner."""
    SAMPLING = 1
    """Minibatch sampling of one learner (index: learner rank)."""
    ACTOR = 2
    """Behaviour noise and environment resets of one actor (index: environment)."""
    SOLVER = 3
    """The ``seed`` a solver's constructor may take (index: environment)."""


def role_seed(seed: int, role: SeedRole, index: int = 0) -> int:
    """The seed of stream ``role`` number ``index``, derived from the run's ``seed``: every
    role and rank gets an independent stream (numpy's SeedSequence over (seed, role, index)),
    whatever the launch; the one place where seeds are made."""
    return int(np.random.SeedSequence([seed, int(role), index]).generate_state(1)[0])


class Role(Enum):
    SINGLE = "learner+actor"
    LEARNER = "learner"
    ACTOR = "actor"
    SOLVER = "solver"


@dataclass(frozen=True)
class Layout:
    """A valid rank layout (build it with :func:`compute_layout`)."""

    world: int
    learners: int
    ranks_per_env: int

    @property
    def envs(self) -> int:
        """Number E of environment teams."""
        return 1 if self.world == 1 else (self.world - self.learners) // self.ranks_per_env

    def role(self, rank: int) -> Role:
        if self.world == 1:
            return Role.SINGLE
        if rank < self.learners:
            return Role.LEARNER
        return Role.ACTOR if (rank - self.learners) % self.ranks_per_env == 0 else Role.SOLVER

    def team(self, rank: int) -> int:
        """Team index of an actor or solver rank."""
        return (rank - self.learners) // self.ranks_per_env

    def actor_rank(self, team: int) -> int:
        return self.learners + team * self.ranks_per_env

    def learner_of(self, team: int) -> int:
        """Learner rank that serves team ``team`` (team e -> learner e mod L)."""
        return team % self.learners

    def actors_of(self, learner: int) -> list[int]:
        """World ranks of the actors served by learner rank ``learner``."""
        return [self.actor_rank(e) for e in range(learner, self.envs, self.learners)]


def compute_layout(world: int, learners: int, ranks_per_env: int) -> Layout:
    """Check ``world = learners + E * ranks_per_env`` with E >= learners, and return the
    layout.

    A world of one rank is always valid (one process runs learner and actor) as long as the
    flags ask for at most one learner and one rank per environment.
    """
    if learners < 1:
        raise LayoutError(f"--learners = {learners}: allowed values are integers >= 1")
    if ranks_per_env < 1:
        raise LayoutError(f"--ranks-per-env = {ranks_per_env}: allowed values are integers >= 1")
    if world == 1:
        if learners != 1 or ranks_per_env != 1:
            raise LayoutError(
                f"one MPI rank runs one learner and a one-rank environment, but --learners = "
                f"{learners} and --ranks-per-env = {ranks_per_env}: launch with mpirun -n "
                f"{learners + ranks_per_env} or more"
            )
        return Layout(1, 1, 1)
    rest = world - learners
    if rest < ranks_per_env or rest % ranks_per_env:
        sizes = [learners + e * ranks_per_env for e in range(learners, learners + 3)]
        raise LayoutError(
            f"world size {world} != learners {learners} + E x ranks-per-env {ranks_per_env} "
            f"for any E >= 1: use a world size in {{{', '.join(map(str, sizes))}, ...}} "
            f"(E >= {learners}: a team for every learner)"
        )
    envs = rest // ranks_per_env
    if envs < learners:
        raise LayoutError(
            f"--learners = {learners} > the {envs} environment team(s) of world size {world}: "
            f"learner l serves the teams e with e mod L = l, so a learner without one would "
            f"train on an empty replay shard; use at most {envs} learner(s), or a world size "
            f"of at least {learners + learners * ranks_per_env} (E >= {learners})"
        )
    return Layout(world, learners, ranks_per_env)
