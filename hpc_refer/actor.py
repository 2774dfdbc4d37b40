"""The actor: runs one environment with a local copy of the policy and records mu per step.

Actions are drawn locally from the actor's copy of pi (no network round trip per step); the
Gaussian that drew each action (the behaviour policy mu_k: mean and std) is stored with the
step, so the learner's off-policy corrections stay exact however stale the copy is. The copy
is refreshed by the caller at chunk boundaries.

Bounded action spaces: the policy acts in a normalised space where [-1, 1] maps onto
[low, high]; the sample u is either clipped to [-1, 1] (``clip``, the paper) or squashed by
tanh (``tanh``, the reference code) before scaling. The stored action is always u itself, so
rho and the KL are those of the Gaussian.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from hpc_refer.envs import TeamDriver
from hpc_refer.envs.gym_env import Status
from hpc_refer.networks import GaussianPolicyValueNet, load_flat_state
from hpc_refer.replay import OPEN, TERMINATED, TRUNCATED, Chunk


@dataclass
class EpisodeRecord:
    """A finished episode: undiscounted return and number of steps."""

    ret: float
    length: int


@dataclass
class _Pending:
    obs: list[np.ndarray] = field(default_factory=list)
    act: list[np.ndarray] = field(default_factory=list)
    rew: list[float] = field(default_factory=list)
    mean: list[np.ndarray] = field(default_factory=list)
    std: list[np.ndarray] = field(default_factory=list)


class Actor:
    """Steps one environment, returning chunks of at most ``chunk_len`` transitions."""

    def __init__(self, env: TeamDriver, net: GaussianPolicyValueNet, action_bounds: str,
                 seed: int, chunk_len: int, source: int = 0) -> None:
        self.env = env
        self.net = net
        self.chunk_len = chunk_len
        self.source = source
        self.rng = np.random.default_rng(seed)
        bounded = np.isfinite(env.low) & np.isfinite(env.high)
        self._center = np.where(bounded, 0.5 * (env.high + env.low), 0.0)
        self._half = np.where(bounded, 0.5 * (env.high - env.low), 1.0)
        self._bounded = bounded
        self._squash = action_bounds == "tanh"
        self._pending = _Pending()
        self._return = 0.0
        self._length = 0
        self._obs: np.ndarray | None = env.reset(seed)

    def load(self, flat: np.ndarray) -> None:
        """Replace the policy copy by the learner's parameters."""
        load_flat_state(self.net, flat)

    def to_env(self, u: np.ndarray) -> np.ndarray:
        """Map a Gaussian sample u to the environment's action box."""
        squashed = np.tanh(u) if self._squash else np.clip(u, -1.0, 1.0)
        return np.where(self._bounded, self._center + self._half * squashed, u)

    @torch.inference_mode()
    def _policy(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        _, mean, std = self.net(torch.from_numpy(obs)[None])
        return mean[0].numpy(), std.numpy()

    def step(self) -> tuple[Chunk | None, EpisodeRecord | None]:
        """One environment step; returns a chunk when one is complete, and a finished episode.

        A new episode starts (``reset``) at the first step after the previous one ended, so an
        environment that raises :class:`~hpc_refer.envs.EnvironmentFinished` from ``reset``
        does it after its last chunk was returned.
        """
        if self._obs is None:
            self._obs = self.env.reset()
        mean, std = self._policy(self._obs)
        u = (mean + std * self.rng.standard_normal(mean.shape)).astype(np.float32)
        nxt, reward, status = self.env.step(self.to_env(u))
        p = self._pending
        p.obs.append(self._obs)
        p.act.append(u)
        p.rew.append(reward)
        p.mean.append(mean)
        p.std.append(std)
        self._return += reward
        self._length += 1
        self._obs = nxt
        if status == Status.CONTINUE:
            if len(p.act) < self.chunk_len:
                return None, None
            return self._flush(OPEN, None), None
        record = EpisodeRecord(self._return, self._length)
        chunk = self._flush(TERMINATED if status == Status.TERMINAL else TRUNCATED, nxt)
        self._return, self._length = 0.0, 0
        self._obs = None
        return chunk, record

    def _flush(self, end: int, final_obs: np.ndarray | None) -> Chunk:
        p = self._pending
        obs = p.obs + ([final_obs] if end == TRUNCATED and final_obs is not None else [])
        chunk = Chunk(
            obs=np.stack(obs).astype(np.float32),
            act=np.stack(p.act),
            rew=np.asarray(p.rew, np.float32),
            mu_mean=np.stack(p.mean).astype(np.float32),
            mu_std=np.stack(p.std).astype(np.float32),
            end=end,
            source=self.source,
        )
        self._pending = _Pending()
        return chunk
