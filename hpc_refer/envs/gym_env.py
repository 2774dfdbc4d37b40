"""Adapter from a gymnasium environment to hpc_refer's environment interface.

The interface every environment offers to an actor::

    obs_dim, act_dim            sizes of the state and action vectors
    low, high                   action bounds (float64 arrays, +-inf where unbounded)
    reset(seed) -> state
    step(action) -> (state, reward, status)   status: CONTINUE, TERMINAL or TRUNCATED
    close()
    get_state() -> dict[str, np.ndarray] | None, set_state(dict)   optional (checkpoints)

:class:`GymEnv` saves and restores the whole state of MuJoCo environments (``mj_getState`` /
``mj_setState`` of the full integration state ``mjSTATE_INTEGRATION``: time, positions,
velocities, actuator activations, warm-start accelerations, controls, applied forces, ...)
and of classic-control ones (their ``state`` array), with the time limit's step count and
the environment's random generator, so that a restored episode continues bit for bit. Other
gymnasium environments (Box2D, ...) have no such state: ``get_state`` returns None.

MuJoCo's warnings reach Python's :mod:`warnings` (as RuntimeWarning, so each is shown once per
process under the default filter) instead of being printed by the C library at every model
compile, and the deprecation of ``settotalmass`` in gymnasium's own HalfCheetah and Walker2d
models, which a user cannot act on, is not shown at all.
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from hpc_refer.config.modes import ConfigError
from hpc_refer.envs.interface import Status
from hpc_refer.report.records import numpy_rng_state, set_numpy_rng_state


def unregistered(env_id: str) -> str:
    """Why ``env_id`` is no registered gymnasium id, naming the nearest registered ids (its
    kind, :mod:`hpc_refer.envs.kinds.gymnasium_id`, adds every allowed form); "" when it
    is one."""
    if env_id in gym.registry:
        return ""
    close = sorted(k for k in gym.registry if k.split("-")[0].lower() in env_id.lower())
    hint = f" (did you mean {', '.join(close[:5])}?)" if close else ""
    return f"run.env = {env_id!r} is not a registered gymnasium id{hint}"


GYMNASIUM_ASSET_WARNINGS = ("compiler attribute 'settotalmass' is deprecated",)
"""Starts of MuJoCo warnings caused by gymnasium's model files, not by the user: dropped."""


def mujoco_warning(message: str) -> None:
    """MuJoCo's warning callback: a RuntimeWarning, unless gymnasium's assets cause it."""
    if not message.startswith(GYMNASIUM_ASSET_WARNINGS):
        warnings.warn(f"MuJoCo: {message}", RuntimeWarning, stacklevel=2)


class GymEnv:
    """A gymnasium environment with a continuous (Box) action space."""

    def __init__(self, env_id: str, **params: Any) -> None:
        """``gymnasium.make(env_id, **params)`` (params: the run's ``[env]`` table)."""
        why = unregistered(env_id)
        if why:
            raise ConfigError(why)
        mujoco.set_mju_user_warning(mujoco_warning)
        self.env_id = env_id
        self.params = params
        self.env = gym.make(env_id, **params)
        self._reset_once = False
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
        self._reset_once = True
        return np.asarray(obs, np.float32)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, Status]:
        obs, reward, terminated, truncated, _ = self.env.step(action)
        status = (
            Status.TERMINAL if terminated else Status.TRUNCATED if truncated else Status.CONTINUE
        )
        return np.asarray(obs, np.float32), float(reward), status

    def close(self) -> None:
        self.env.close()

    def _time_limit(self) -> Any:
        """The TimeLimit wrapper around the environment (None if it has none)."""
        wrapper = self.env
        while isinstance(wrapper, gym.Wrapper):
            if isinstance(wrapper, gym.wrappers.TimeLimit):
                return wrapper
            wrapper = wrapper.env
        return None

    def get_state(self) -> dict[str, np.ndarray] | None:
        """The environment's whole state: MuJoCo's integration state (``physics``) or a
        classic-control env's ``state``, the time limit's ``elapsed_steps`` and the
        generator's state (``np_random``, JSON bytes); None for other environments."""
        unwrapped: Any = self.env.unwrapped
        state: dict[str, np.ndarray]
        if isinstance(getattr(unwrapped, "data", None), mujoco.MjData):
            spec = mujoco.mjtState.mjSTATE_INTEGRATION
            physics = np.empty(mujoco.mj_stateSize(unwrapped.model, spec))
            mujoco.mj_getState(unwrapped.model, unwrapped.data, physics, spec)
            state = {"physics": physics}
        elif isinstance(getattr(unwrapped, "state", None), np.ndarray):
            state = {"state": np.array(unwrapped.state)}
        else:
            return None
        limit = self._time_limit()
        state["elapsed_steps"] = np.array([limit._elapsed_steps if limit is not None else 0])
        state["np_random"] = np.frombuffer(numpy_rng_state(unwrapped.np_random).encode(),
                                           np.uint8).copy()
        return state

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        """Continue from a state of :meth:`get_state` (of an env of the same id)."""
        if not self._reset_once:  # the wrappers refuse a step before the first reset
            self.reset()
        unwrapped: Any = self.env.unwrapped
        if "physics" in state:
            mujoco.mj_setState(unwrapped.model, unwrapped.data,
                               np.asarray(state["physics"], np.float64),
                               mujoco.mjtState.mjSTATE_INTEGRATION)
        else:
            unwrapped.state = np.array(state["state"])
        limit = self._time_limit()
        if limit is not None:
            limit._elapsed_steps = int(np.asarray(state["elapsed_steps"]).reshape(-1)[0])
        set_numpy_rng_state(unwrapped.np_random,
                            np.asarray(state["np_random"], np.uint8).tobytes().decode())
