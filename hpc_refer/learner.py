"""The learner: the replay shard, the ReF-ER state, the algorithm, and the pace of steps.

The learner owns every piece of learning state that is not the algorithm's networks: the
replay shard and all its maintenance (ingest of chunks with log mu, V and rho; refresh of the
sampled rows after each step; V-tbc; the state and reward scaling; the far-policy count and
its reduction over learners) and ReF-ER's beta, c_max and annealed learning rate (eqs. 12-13).
The algorithm (:class:`~hpc_refer.algorithms.base.Algorithm`) only computes: one gradient
step on a minibatch, and values / log-probabilities of stored rows.

Notes
-----
A learner stores the chunks of the actors assigned to it in its own shard of capacity N / L
and samples B / L rows of it per step. Training starts once the learners together hold
``replay.start`` states; from then on the learners keep ``grad_steps ~= grad_ratio *
(env_steps - env_steps_at_start)``, counted over all actors. Counts that decide anything (far
and stored transitions, scaling sums) are summed over learners through the reducer, so every
learner takes the same decisions.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from hpc_refer.algorithms.base import Algorithm, ReferTerms, StepResult
from hpc_refer.config import Config, Sampling
from hpc_refer.networks import gaussian_log_prob
from hpc_refer.refer import ReferState, importance_ratio
from hpc_refer.replay import HAS_ACTION, Chunk, PriorityConfig, ReplayShard, ScalingSums


class FarCounts(NamedTuple):
    """The replay's far-policy and stored transitions (local, or summed over learners)."""

    n_far: int
    n_stored: int

    def pack(self) -> np.ndarray:
        return np.array([self.n_far, self.n_stored], np.float64)

    @classmethod
    def unpack(cls, flat: np.ndarray) -> FarCounts:
        return cls(int(flat[0]), int(flat[1]))


def per_beta_at(t: int, beta0: float, total: int) -> float:
    """PER's importance exponent beta_IS annealed linearly from beta0 to 1 over ``total``
    gradient steps (Schaul et al. 2016, Sec. 3.4)."""
    return beta0 + (1.0 - beta0) * min(1.0, t / max(total, 1))


class Learner:
    """One learner rank's state; ``algo.reducer`` spans the learners."""

    def __init__(self, algo: Algorithm, config: Config, seed: int) -> None:
        self.algo = algo
        self.config = config
        n_learners = algo.reducer.size
        replay = config.replay
        priorities = (PriorityConfig(replay.per_alpha, replay.per_eps)
                      if replay.sampling is Sampling.PER else None)
        self.replay = ReplayShard(max(replay.size // n_learners, 2), algo.obs_dim,
                                  algo.act_dim, config.algorithm.gamma, algo.retrace,
                                  priorities)
        self.local_batch = max(1, config.algorithm.batch // n_learners)
        self.refer = ReferState.create(config.refer, config.algorithm.lr)
        self.rng = np.random.default_rng(seed)
        self.grad_steps = 0
        self.start_env_steps: int | None = None

    @property
    def terms(self) -> ReferTerms:
        """ReF-ER's beta, c_max and learning-rate factor for the next step."""
        return ReferTerms(self.refer.beta, self.refer.c_max, self.refer.lr_factor)

    def store(self, chunk: Chunk) -> None:
        """Store an actor's chunk with log mu_k(a_k|s_k), the current V and rho, and V-tbc."""
        replay = self.replay
        rows = replay.add(chunk, self.refer.c_max)
        acts = rows[(replay.flags[rows] & HAS_ACTION) != 0]
        with torch.no_grad():
            replay.log_mu[acts] = gaussian_log_prob(
                *(torch.from_numpy(x[acts]) for x in (replay.act, replay.mu_mean, replay.mu_std))
            ).numpy()
        self.refresh(rows)

    def refresh(self, rows: np.ndarray) -> None:
        """Store the algorithm's current V (if any) and rho of ``rows``, then V-tbc (eq. 8)."""
        if rows.size == 0:
            return
        replay = self.replay
        value, log_pi = self.algo.evaluate(replay.obs[rows], replay.act[rows])
        rho = importance_ratio(torch.from_numpy(log_pi),
                               torch.from_numpy(replay.log_mu[rows])).numpy()
        replay.refresh(rows, value, rho, self.refer.c_max)

    def update_start(self, global_states: int, env_steps: int) -> None:
        """Start training once the learners together store ``replay.start`` states."""
        if self.start_env_steps is None and global_states >= self.config.replay.start:
            self.start_env_steps = env_steps
            self.refresh_scaling()

    def steps_due(self, env_steps: int) -> int:
        """Gradient steps owed to reach grad_ratio * (env steps since training started)."""
        if self.start_env_steps is None:
            return 0
        target = int(self.config.replay.grad_ratio * (env_steps - self.start_env_steps))
        return max(0, target - self.grad_steps)

    def far_counts(self) -> FarCounts:
        """Far-policy and stored transitions over all learners (one reduction)."""
        local = FarCounts(self.replay.n_far, self.replay.n_transitions)
        return FarCounts.unpack(self.algo.reducer.sum(local.pack()))

    def train_step(self) -> StepResult:
        """One gradient step, then the replay's and ReF-ER's updates that follow it.

        1. sample B / L rows (uniform or PER, with PER's importance weights);
        2. the algorithm's step with this step's beta, c_max and learning-rate factor;
        3. the sampled rows get the pre-step rho_k (and V_w(s_k)), their episodes' V-tbc is
           redone (eq. 8), and the bootstrap states after them get the new V_w;
        4. PER priorities from the rows' errors;
        5. beta by eq. 12 from the global far-policy fraction, t += 1 (eq. 13);
        6. every ``stats_every`` steps, new state and reward scaling from the replay.
        """
        replay, c_max = self.replay, self.refer.c_max
        rows = replay.sample_rows(self.local_batch, self.rng)
        beta_is = per_beta_at(self.grad_steps, self.config.replay.per_beta,
                              int(self.config.replay.grad_ratio * self.config.run.steps))
        result = self.algo.train_step(replay.batch(rows, beta_is), self.terms)
        replay.refresh(rows, result.value, result.rho, c_max)
        if replay.retrace:
            boot = replay.bootstrap_rows(rows)
            if boot.size:
                replay.refresh(boot, self.algo.values(replay.obs[boot]), None, c_max)
        replay.update_priorities(rows, result.error)
        self.refer.update(*self.far_counts())
        self.grad_steps += 1
        if self.grad_steps % self.config.replay.stats_every == 0:
            self.refresh_scaling()
        return result

    def refresh_scaling(self) -> None:
        """Set the input normalisation and the reward scale 1/std(r) from the whole RM.

        The moments are combined over learners from their shards' sums, so every learner
        gets the same scaling. V-tbc of the whole shard is recomputed with the new reward
        scale, and the far-policy count is recounted with the current c_max.
        """
        sums = ScalingSums.unpack(self.algo.reducer.sum(self.replay.scaling_sums().pack()))
        mean, std, r_std = sums.moments()
        self.algo.set_input_scaling(mean, std)
        self.replay.reward_scale = 1.0 / r_std if r_std > 1e-8 else 1.0
        self.replay.recompute_all_vtbc()
        self.replay.recount_far(self.refer.c_max)

    def policy(self) -> np.ndarray:
        """The behaviour policy's parameters and input scaling, as one vector for actors."""
        return self.algo.policy_params()
