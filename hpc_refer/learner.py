"""The learner: a replay shard, the algorithm, and the pace of gradient steps.

Notes
-----
A learner stores the chunks of the actors assigned to it in its own shard of capacity N / L.
Training starts once the learners together hold ``replay.start`` states; from then on the
learners keep ``grad_steps ~= grad_ratio * (env_steps - env_steps_at_start)``, counted over all
actors. The scaling of states and rewards is taken from the replay memory when training starts
and refreshed every ``stats_every`` gradient steps.
"""

from __future__ import annotations

import numpy as np

from hpc_refer.algorithms.vracer import StepStats, VRacer
from hpc_refer.config import Config
from hpc_refer.networks import flat_state
from hpc_refer.replay import Chunk, ReplayShard


class Learner:
    """One learner rank's state. ``reducer`` of the algorithm spans the learners."""

    def __init__(self, algo: VRacer, config: Config, obs_dim: int, act_dim: int,
                 seed: int) -> None:
        self.algo = algo
        self.config = config
        n_learners = algo.reducer.size
        self.replay = ReplayShard(
            max(config.replay.size // n_learners, 2), obs_dim, act_dim, config.vracer.gamma
        )
        self.rng = np.random.default_rng(seed)
        self.grad_steps = 0
        self.start_env_steps: int | None = None

    def store(self, chunk: Chunk) -> None:
        """Store an actor's chunk with the current network's V and rho, and its V-tbc."""
        rows = self.replay.add(chunk, self.algo.refer.c_max)
        self.algo.ingest(self.replay, rows)

    def update_start(self, global_states: int, env_steps: int) -> None:
        """Start training once the learners together store ``replay.start`` states."""
        if self.start_env_steps is None and global_states >= self.config.replay.start:
            self.start_env_steps = env_steps
            self.algo.refresh_scaling(self.replay)

    def steps_due(self, env_steps: int) -> int:
        """Gradient steps owed to reach grad_ratio * (env steps since training started)."""
        if self.start_env_steps is None:
            return 0
        target = int(self.config.replay.grad_ratio * (env_steps - self.start_env_steps))
        return max(0, target - self.grad_steps)

    def train_step(self) -> StepStats:
        """One gradient step (and, every ``stats_every`` steps, new input/reward scaling)."""
        stats = self.algo.train_step(self.replay, self.rng)
        self.grad_steps += 1
        if self.grad_steps % self.config.replay.stats_every == 0:
            self.algo.refresh_scaling(self.replay)
        return stats

    def policy(self) -> np.ndarray:
        """The current parameters and input scaling, as one vector for the actors."""
        return flat_state(self.algo.net)
