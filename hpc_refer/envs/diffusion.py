"""Diffusion1D: a small multi-rank test environment whose state is split over the team.

A temperature field u on a periodic ring of ``N_CELLS`` cells, advanced by explicit diffusion
with a steady heat source and ``N_ACT`` Gaussian heaters/coolers driven by the action::

    u_i <- u_i + nu (u_{i-1} - 2 u_i + u_{i+1}) + dt (q_i + sum_j a_j g_j(x_i))

The cells are split over the K ranks of the team (np.array_split): every rank advances its
own cells and exchanges one halo value with each neighbour per step; the reward
r = -mean_i u_i^2 is a team sum; the observation (the whole field) is gathered on team rank
``state_rank``: 0, the actor, here. Episodes are truncated after ``HORIZON`` steps. With K = 1
it runs on one rank.
"""

from __future__ import annotations

import numpy as np

from hpc_refer.envs.interface import Status, Team

N_CELLS = 32
N_ACT = 4
HORIZON = 50
NU = 0.2
DT = 0.1


class Diffusion1D:
    """Heat equation on a ring with actuation; collective over the team's ranks."""

    obs_dim = N_CELLS
    act_dim = N_ACT
    low = -np.ones(N_ACT)
    high = np.ones(N_ACT)

    def __init__(self, team: Team | None = None) -> None:
        self.team = team
        rank, size = (team.rank, team.size) if team is not None else (0, 1)
        self.cells = np.array_split(np.arange(N_CELLS), size)[rank]
        x = 2 * np.pi * self.cells / N_CELLS
        centres = 2 * np.pi * (np.arange(N_ACT) + 0.5) / N_ACT
        d = np.angle(np.exp(1j * (x[:, None] - centres[None, :])))
        self.heaters = np.exp(-0.5 * (d / 0.4) ** 2)
        self.source = 0.5 * np.sin(x) + 0.3 * np.cos(3 * x)
        self.u = np.zeros(self.cells.size)
        self.t = 0

    state_rank = 0  # the team rank that gathers the observation (a subclass may choose another)

    def _observe(self) -> np.ndarray:
        full = self.team.gather_rows(self.u, self.state_rank) if self.team is not None else self.u
        return np.asarray(full if full is not None else np.zeros(0), np.float32)

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Random smooth initial field (same on every rank for one seed); collective."""
        rng = np.random.default_rng(seed)
        modes = rng.standard_normal(4)
        x = 2 * np.pi * self.cells / N_CELLS
        self.u = sum(modes[k] * np.sin((k + 1) * x + k) for k in range(4)) * 0.5
        self.t = 0
        return self._observe()

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, Status]:
        """Advance one step with the action (as seen on team rank 0); collective."""
        a = np.asarray(action, np.float64)
        if self.team is not None:
            left, right = self.team.halo(self.u[0], self.u[-1])
        else:
            left, right = self.u[-1], self.u[0]
        padded = np.concatenate([[left], self.u, [right]])
        lap = padded[:-2] - 2 * self.u + padded[2:]
        self.u = self.u + NU * lap + DT * (self.source + self.heaters @ a)
        local = float(np.sum(self.u**2))
        total = self.team.sum(local) if self.team is not None else local
        self.t += 1
        status = Status.TRUNCATED if self.t >= HORIZON else Status.CONTINUE
        return self._observe(), -total / N_CELLS, status

    def close(self) -> None:
        """Nothing to release."""
