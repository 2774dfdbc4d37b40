"""Partially observed tasks for ``bench/partial_observation.py`` (loaded as
``po_envs:Class`` with this directory on PYTHONPATH).

:class:`PendulumNoVelocity`: gymnasium's Pendulum-v1 with the angular velocity removed from
the observation, (cos theta, sin theta) only ("Pendulum-P" of the POMDP benchmarks, e.g. Ni
et al. 2022): the velocity that decides the swing-up is not in one observation, but two
consecutive ones give it.

:class:`CueRecall`: a task whose optimum needs memory over more than 4 steps (a continuous
"T-maze"; issue 39, point 2). A cue shown at an episode's first step must be given back as the
action D = 12 to 23 steps later; neither one state nor a stack of 4 holds it then.
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


class CueRecall:
    """Episodes of T = 2 D steps (D = :attr:`delay` = 12). At t = 0 the state is (c, 0), the
    cue c ~ U(-1, 1) drawn at the reset; from t = 1 on it is (0, t / T): the cue is gone, the
    time is seen. The reward is r_t = -(a_t - c)^2 for t >= D and 0 before; the episode ends
    (terminal) after step T - 1.

    Expected returns: the policy that remembers c gets 0. Without memory the best action is
    E c = 0: -D E[c^2] = -D / 3 = -4. A stack of the last k states holds the cue at steps t < k:
    a stack of 4 none of the D answers (-4), a stack of 16 the 4 answers at t = 12..15 (-8 / 3).
    A uniform random action gives -D (E[a^2] + E[c^2]) = -8."""


    obs_dim = 2
    act_dim = 1
    low = np.array([-1.0])
    high = np.array([1.0])
    delay = 12

    def __init__(self, team: object = None) -> None:
        self.rng = np.random.default_rng()
        self.cue = 0.0
        self.t = 0

    @property
    def horizon(self) -> int:
        return 2 * self.delay

    def _state(self) -> np.ndarray:
        return np.array([self.cue if self.t == 0 else 0.0, self.t / self.horizon])

    def reset(self, seed: int | None = None) -> np.ndarray:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.cue, self.t = float(self.rng.uniform(-1.0, 1.0)), 0
        return self._state()

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, Status]:
        a = float(np.clip(np.asarray(action, float).reshape(-1)[0], -1.0, 1.0))
        reward = -(a - self.cue) ** 2 if self.t >= self.delay else 0.0
        self.t += 1
        return (self._state(), reward,
                Status.TERMINAL if self.t == self.horizon else Status.CONTINUE)

    def close(self) -> None:
        pass


class CueShown(CueRecall):
    """:class:`CueRecall` fully observed: the state is (c, t / T) at every step (the
    benchmark's ``full`` setting: what the partially observed ones could reach)."""

    def _state(self) -> np.ndarray:
        return np.array([self.cue, self.t / self.horizon])
