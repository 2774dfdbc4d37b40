"""Partially observed tasks for ``bench/partial_observation.py`` (loaded as
``po_envs:Class`` with this directory on PYTHONPATH).

:class:`PendulumNoVelocity`: gymnasium's Pendulum-v1 with the angular velocity removed from
the observation, (cos theta, sin theta) only ("Pendulum-P" of the POMDP benchmarks, e.g. Ni
et al. 2022): the velocity that decides the swing-up is not in one observation, but two
consecutive ones give it.
"""

from __future__ import annotations

import numpy as np

from hpc_refer.envs.gym_env import GymEnv
from hpc_refer.envs.interface import Status


class PendulumNoVelocity:
    """Pendulum-v1 seen through (cos theta, sin theta): the solver interface over GymEnv."""

    obs_dim = 2
    act_dim = 1
    low = np.array([-2.0])
    high = np.array([2.0])

    def __init__(self, team: object = None) -> None:
        self.env = GymEnv("Pendulum-v1")

    def reset(self, seed: int | None = None) -> np.ndarray:
        return self.env.reset(seed)[:2]

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, Status]:
        state, reward, status = self.env.step(action)
        return state[:2], reward, status

    def close(self) -> None:
        self.env.close()
