"""Adapter from a gymnasium environment to hpc_refer's environment interface.

The interface every environment offers to an actor::

    obs_dim, act_dim            sizes of the state and action vectors
    low, high                   action bounds (float64 arrays, +-inf where unbounded)
    reset(seed) -> state
    step(action) -> (state, reward, status)   status: CONTINUE, TERMINAL or TRUNCATED
    close()
"""

from __future__ import annotations

from enum import IntEnum

import gymnasium as gym
import numpy as np

from hpc_refer.config import ConfigError


class Status(IntEnum):
    """How an environment step ended: the episode goes on, reached a terminal state, or was
    cut by a time limit (the value of the last state is then bootstrapped, never zeroed)."""

    CONTINUE = 0
    TERMINAL = 1
    TRUNCATED = 2


def check_env_id(env_id: str) -> None:
    """Raise ConfigError unless ``env_id`` is a registered gymnasium id."""
    if env_id not in gym.registry:
        close = sorted(k for k in gym.registry if k.split("-")[0].lower() in env_id.lower())
        hint = f"; did you mean {', '.join(close[:5])}?" if close else ""
        raise ConfigError(
            f"run.env = {env_id!r} is not a registered gymnasium id (any continuous-action id "
            f"such as HalfCheetah-v5, Hopper-v5, Pendulum-v1 is allowed){hint}"
        )


class GymEnv:
    """A gymnasium environment with a continuous (Box) action space."""

    def __init__(self, env_id: str) -> None:
        check_env_id(env_id)
        self.env = gym.make(env_id)
        space = self.env.action_space
        if not isinstance(space, gym.spaces.Box):
            self.env.close()
            raise ConfigError(
                f"run.env = {env_id!r} has a {type(space).__name__} action space: allowed are "
                "environments with a continuous (Box) action space"
            )
        obs_space = self.env.observation_space
        if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
            self.env.close()
            raise ConfigError(
                f"run.env = {env_id!r} has observation space {obs_space}: allowed are "
                "flat Box observation spaces"
            )
        self.obs_dim = int(obs_space.shape[0])
        self.act_dim = int(np.prod(space.shape))
        self.low = np.asarray(space.low, np.float64).reshape(-1)
        self.high = np.asarray(space.high, np.float64).reshape(-1)

    def reset(self, seed: int | None = None) -> np.ndarray:
        obs, _ = self.env.reset(seed=seed)
        return np.asarray(obs, np.float32)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, Status]:
        obs, reward, terminated, truncated, _ = self.env.step(action)
        status = (
            Status.TERMINAL if terminated else Status.TRUNCATED if truncated else Status.CONTINUE
        )
        return np.asarray(obs, np.float32), float(reward), status

    def close(self) -> None:
        self.env.close()
