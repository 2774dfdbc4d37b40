"""The actor: runs one environment with a local copy of the policy and records mu per step.

Actions are drawn locally from the actor's copy of pi (no network round trip per step); the
Gaussian that drew each action (the behaviour policy mu_k: mean and std) is stored with the
step, so the learner's off-policy corrections stay exact however stale the copy is. The copy
is refreshed by the caller at chunk boundaries.

Bounded action spaces: the policy acts in a normalised space where [-1, 1] maps onto
[low, high]; the sample u is either clipped to [-1, 1] (``clip``, the paper) or squashed by
tanh (``tanh``, the reference code) before scaling. The stored action is always u itself, so
rho and the KL are those of the Gaussian.

The behaviour policy is the algorithm's (:class:`~hpc_refer.networks.BehaviourPolicy`):
V-RACER's Gaussian, or N(m_w(s), sigma^2) around DDPG's or NAF's mean. Plain-ER DDPG may use
Ornstein-Uhlenbeck noise instead (``Exploration.OU``: u = m_w(s) + sigma x_t with
x_t = (1 - theta) x_{t-1} + N(0, 1), theta = 0.15, x = 0 at each episode start); the stored
mu is then still the Gaussian's, which plain ER never reads.

Solver faults (:class:`~hpc_refer.envs.external.SolverFault`, raised by an environment whose
message fails validation) end the episode: the faulty step is dropped, the fault is counted
(``Actor.faults``) and logged on stderr with the actor's rank, the episode's valid steps not
yet sent go to the learner as a truncated chunk (this also closes the episode's chunks already
sent), no episode record is made, and the environment is reset at the next step.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np
import torch

from hpc_refer.config import ActionBounds, Exploration
from hpc_refer.envs import TeamDriver
from hpc_refer.envs.external import SolverFault
from hpc_refer.envs.gym_env import Status
from hpc_refer.networks import BehaviourPolicy, load_flat_state
from hpc_refer.records import EpisodeRecord
from hpc_refer.replay import Chunk, ChunkEnd

OU_THETA = 0.15

@dataclass
class _Pending:
    obs: list[np.ndarray] = field(default_factory=list)
    act: list[np.ndarray] = field(default_factory=list)
    rew: list[float] = field(default_factory=list)
    mean: list[np.ndarray] = field(default_factory=list)
    std: list[np.ndarray] = field(default_factory=list)


MAX_FAULTS_IN_A_ROW = 20
"""More solver faults than this without one valid step in between stop the run."""


class Actor:
    """Steps one environment, returning chunks of at most ``chunk_len`` transitions."""

    def __init__(self, env: TeamDriver, net: BehaviourPolicy, action_bounds: ActionBounds,
                 seed: int, chunk_len: int, source: int = 0,
                 exploration: Exploration = Exploration.GAUSSIAN) -> None:
        self.env = env
        self.net = net
        self.chunk_len = chunk_len
        self.source = source
        self.rng = np.random.default_rng(seed)
        bounded = np.isfinite(env.low) & np.isfinite(env.high)
        self._center = np.where(bounded, 0.5 * (env.high + env.low), 0.0)
        self._half = np.where(bounded, 0.5 * (env.high - env.low), 1.0)
        self._bounded = bounded
        self._squash = action_bounds is ActionBounds.TANH
        self._ou = exploration is Exploration.OU
        self._noise = np.zeros(env.act_dim)
        self._pending = _Pending()
        self._return = 0.0
        self._length = 0
        self._sent = False
        """Whether chunks of the current episode went to the learner already."""
        self.faults = 0
        self._faults_in_a_row = 0
        self._obs: np.ndarray | None = None
        self._seed: int | None = seed

    def load(self, flat: np.ndarray) -> None:
        """Replace the policy copy by the learner's parameters."""
        load_flat_state(self.net, flat)

    def to_env(self, u: np.ndarray) -> np.ndarray:
        """Map a Gaussian sample u to the environment's action box."""
        squashed = np.tanh(u) if self._squash else np.clip(u, -1.0, 1.0)
        return np.where(self._bounded, self._center + self._half * squashed, u)

    @torch.inference_mode()
    def _policy(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mean, std = self.net.policy(torch.from_numpy(obs)[None])
        return mean[0].numpy(), std.expand_as(mean)[0].numpy()

    def _draw(self, shape: tuple[int, ...]) -> np.ndarray:
        """The standard-normal noise of this step (an OU process under ``Exploration.OU``)."""
        z = self.rng.standard_normal(shape)
        if not self._ou:
            return z
        self._noise = (1.0 - OU_THETA) * self._noise + z
        return self._noise

    def step(self) -> tuple[Chunk | None, EpisodeRecord | None]:
        """One environment step; returns a chunk when one is complete, and a finished episode.

        A new episode starts (``reset``) at the first step after the previous one ended, so an
        environment that raises :class:`~hpc_refer.envs.EnvironmentFinished` from ``reset``
        does it after its last chunk was returned.
        """
        try:
            if self._obs is None:
                self._obs = self.env.reset(self._seed)
                self._seed = None
                self._noise[:] = 0.0
            mean, std = self._policy(self._obs)
            u = (mean + std * self._draw(mean.shape)).astype(np.float32)
            nxt, reward, status = self.env.step(self.to_env(u))
        except SolverFault as fault:
            return self._fault(fault), None
        self._faults_in_a_row = 0
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
            self._sent = True
            return self._flush(ChunkEnd.OPEN, None), None
        record = EpisodeRecord(self._return, self._length, self.env.episode_values())
        end = ChunkEnd.TERMINATED if status == Status.TERMINAL else ChunkEnd.TRUNCATED
        chunk = self._flush(end, nxt)
        self._return, self._length = 0.0, 0
        self._obs = None
        self._sent = False
        return chunk, record

    def _fault(self, fault: SolverFault) -> Chunk | None:
        """End the episode after a solver fault; the chunk that closes it, if one is due."""
        self.faults += 1
        self._faults_in_a_row += 1
        print(f"hpc_refer: actor rank {self.source}: solver fault {self.faults}, episode "
              f"ended and environment reset: {fault}", file=sys.stderr, flush=True)
        if self._faults_in_a_row > MAX_FAULTS_IN_A_ROW:
            raise RuntimeError(f"{MAX_FAULTS_IN_A_ROW + 1} solver faults in a row on actor "
                               f"rank {self.source}, the last: {fault}") from fault
        chunk = None
        if self._obs is not None and (self._pending.act or self._sent):
            chunk = self._flush(ChunkEnd.TRUNCATED, self._obs)
        self._pending = _Pending()
        self._return, self._length = 0.0, 0
        self._obs = None
        self._sent = False
        return chunk

    def _flush(self, end: ChunkEnd, final_obs: np.ndarray | None) -> Chunk:
        p = self._pending
        obs = p.obs + ([final_obs] if end is ChunkEnd.TRUNCATED and final_obs is not None
                       else [])
        a = self.env.act_dim  # a chunk may hold no action: the closing one after a fault

        def rows(x: list[np.ndarray]) -> np.ndarray:
            return np.stack(x).astype(np.float32) if x else np.empty((0, a), np.float32)

        chunk = Chunk(
            obs=np.stack(obs).astype(np.float32),
            act=rows(p.act),
            rew=np.asarray(p.rew, np.float32),
            mu_mean=rows(p.mean),
            mu_std=rows(p.std),
            end=end,
            source=self.source,
        )
        self._pending = _Pending()
        return chunk
