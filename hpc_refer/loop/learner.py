"""The learner: the replay shard, the ReF-ER state, the algorithm, and the pace of steps.

The learner owns every piece of learning state that is not the algorithm's networks: the
replay shard and all its maintenance (ingest of chunks with log mu, V and rho; refresh of the
sampled rows after each step; V-tbc; the state and reward scaling; the far-policy count and
its reduction over learners), ReF-ER's beta, c_max and annealed learning rate (eqs. 12-13)
with the one count of gradient steps t (``ReferState.t``), the reducer over the learners,
and the gradient step it composes from the algorithm (:func:`make_step`: eager or compiled,
with the gradient average). The algorithm (:class:`~hpc_refer.algorithms.kit.base.Algorithm`)
only computes: the minibatch loss, and values / log-probabilities of stored rows.

Notes
-----
A learner stores the chunks of the actors assigned to it in its own shard of capacity N / L
and samples B / L rows of it per step (``replay.batch_scaling = per-learner``: B rows, the
learning rate times sqrt(L)). Training starts once the learners together hold
``replay.start`` states; from then on the learners keep ``grad_steps ~= grad_ratio *
(env_steps - env_steps_at_start)``, counted over all actors. Counts that decide anything (far
and stored transitions, scaling sums) are summed over learners through the reducer, so every
learner takes the same decisions.

Checkpoints: :meth:`Learner.checkpoint_state` gathers the state of every owner (algorithm,
replay shard, ReF-ER) with the counters and both random generators; :meth:`restore_state`
continues bit for bit. After a change of the number of learners, each learner restores
everything but its shard and sampling generator and refills its empty shard with the
episodes :func:`~hpc_refer.replay.tree.split_episodes` gives it (:meth:`restore_resized`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from hpc_refer.algorithms.kit.base import Algorithm, ReferTerms, StepResult
from hpc_refer.algorithms.kit.collectives import Reducer, SerialReducer
from hpc_refer.algorithms.kit.compiled import CompiledOrEagerStep
from hpc_refer.algorithms.kit.networks import gaussian_log_prob, uniform_behaviour
from hpc_refer.algorithms.kit.program import UNIFORM_STD
from hpc_refer.algorithms.kit.refer import ReferState, importance_ratio
from hpc_refer.algorithms.kit.step import EagerStep, Step
from hpc_refer.config.modes import ActionBounds, BatchScaling, Sampling
from hpc_refer.config.resolve import Config
from hpc_refer.replay.sequences import follow, preceding
from hpc_refer.replay.shard import (
    HAS_ACTION,
    Batch,
    PriorityConfig,
    ReplayShard,
    ScalingSums,
)
from hpc_refer.replay.tree import StoredEpisode
from hpc_refer.report.formats import TreeFormat
from hpc_refer.report.records import OPEN, Chunk, StateTree, numpy_rng_state, set_numpy_rng_state
from hpc_refer.report.schema import RHO_EDGES


def without_grad_steps(tree: StateTree) -> StateTree:
    """Version 1 -> 2 of the learner's tree: schema 1's ``grad_steps`` goes (it duplicated
    ReF-ER's ``refer/t``, the step count restored)."""
    return {k: v for k, v in tree.items() if k != "grad_steps"}


LEARNER_FORMAT = TreeFormat("learner", (without_grad_steps,))
"""The learner's tree (:meth:`Learner.checkpoint_state`), version 2; its algorithm's and its
replay shard's trees have formats of their own."""

ADOPTED_SOURCE = -1
"""The source under which :meth:`Learner.adopt` stores episodes (no actor uses it)."""


def torch_rng_state() -> np.ndarray:
    """torch's CPU generator state as a uint8 array."""
    return torch.get_rng_state().numpy().copy()


def set_torch_rng_state(state: np.ndarray) -> None:
    """Inverse of :func:`torch_rng_state`."""
    torch.set_rng_state(torch.from_numpy(np.asarray(state, np.uint8).copy()))


class FarCounts(NamedTuple):
    """The replay's far-policy and stored transitions (local, or summed over learners)."""

    n_far: int
    n_stored: int

    def pack(self) -> np.ndarray:
        return np.array([self.n_far, self.n_stored], np.float64)

    @classmethod
    def unpack(cls, flat: np.ndarray) -> FarCounts:
        return cls(int(flat[0]), int(flat[1]))


def shard_capacity(size: int, learners: int) -> int:
    """States one learner's shard holds: N / L (at least 2)."""
    return max(size // learners, 2)


def per_beta_at(t: int, beta0: float, total: int) -> float:
    """PER's importance exponent beta_IS annealed linearly from beta0 to 1 over ``total``
    gradient steps (Schaul et al. 2016, Sec. 3.4)."""
    return beta0 + (1.0 - beta0) * min(1.0, t / max(total, 1))


def reset_seed(seed: int, k: int) -> int:
    """The seed of the networks after the k-th reset of a run of ``seed`` (k >= 1)."""
    return seed + 7919 * k


def make_step(algo: Algorithm, reducer: Reducer | None, compiled: bool) -> Step:
    """The learners' gradient step of ``algo`` over ``reducer``: compiled (falling back to
    eager where it cannot be built) or eager (``run.compile``, :attr:`Config.compiles`);
    ``reducer`` None: one learner."""
    return CompiledOrEagerStep(algo, reducer) if compiled else EagerStep(algo, reducer)


class Learner:
    """One learner rank's state; ``reducer`` spans the learners (one learner: serial)."""

    def __init__(self, algo: Algorithm, config: Config, seed: int,
                 reducer: Reducer | None = None, compiled: bool | None = None) -> None:
        """``compiled``: the kind of step (default: ``config.compiles``)."""
        self.algo = algo
        self.config = config
        self.reducer: Reducer = reducer or SerialReducer()
        n_learners = self.reducer.size
        replay = config.replay
        priorities = (PriorityConfig(replay.per_alpha, replay.per_eps)
                      if replay.sampling is Sampling.PER else None)
        self.replay = ReplayShard(shard_capacity(replay.size, n_learners), algo.row_dim,
                                  algo.act_dim, config.algorithm.gamma, config.algorithm.retrace,
                                  priorities, replay.forget)
        per_learner = replay.batch_scaling is BatchScaling.PER_LEARNER
        self.local_batch = (config.algorithm.batch if per_learner
                            else max(1, config.algorithm.batch // n_learners))
        self.lr_scale = math.sqrt(n_learners) if per_learner else 1.0
        """The learning rate's factor for the global batch (``replay.batch_scaling``)."""
        self.refer = ReferState.create(config.refer, config.algorithm.lr)
        self.step = make_step(algo, self.reducer,
                              config.compiles if compiled is None else compiled)
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.start_env_steps: int | None = None
        self.squashed = config.action_bounds is ActionBounds.TANH
        """Whether the actors squash their samples by tanh (the uniform warm-up's density)."""

    @property
    def grad_steps(self) -> int:
        """Gradient steps taken: ReF-ER's t (eq. 13), the one count of them."""
        return self.refer.t

    @property
    def terms(self) -> ReferTerms:
        """ReF-ER's beta, c_max and learning-rate factor for the next step (eq. 13's, times
        the batch scaling's sqrt(L) under ``per-learner``)."""
        return ReferTerms(self.refer.beta, self.refer.c_max,
                          self.refer.lr_factor * self.lr_scale)

    def store(self, chunk: Chunk) -> np.ndarray:
        """Store an actor's chunk with log mu_k(a_k|s_k), the current V and rho, and V-tbc;
        return the ring rows written. The steps of a uniform warm-up (``mu_std`` =
        :data:`~hpc_refer.algorithms.kit.program.UNIFORM_STD`) get the uniform's exact
        log mu and, as their mu_mean and mu_std, the Gaussian of its first two moments that
        Rule 2's KL reads (:func:`~hpc_refer.algorithms.kit.networks.uniform_behaviour`)."""
        replay = self.replay
        rows = replay.add(chunk, self.refer.c_max)
        acts = rows[(replay.flags[rows] & HAS_ACTION) != 0]
        uniform = (replay.mu_std[acts] == UNIFORM_STD).all(-1)
        gauss, warm = acts[~uniform], acts[uniform]
        with torch.no_grad():
            replay.log_mu[gauss] = gaussian_log_prob(
                *(torch.from_numpy(x[gauss]) for x in (replay.act, replay.mu_mean, replay.mu_std))
            ).numpy()
            if warm.size:
                log_mu, mean, std = uniform_behaviour(torch.from_numpy(replay.act[warm]),
                                                      self.squashed)
                replay.log_mu[warm], replay.mu_mean[warm], replay.mu_std[warm] = (
                    log_mu.numpy(), mean.numpy(), std.numpy())
        self.refresh(rows)
        return rows

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

    def rho_histogram(self) -> np.ndarray:
        """Counts of log10(rho) of the stored transitions of all learners in the bins of
        :data:`RHO_EDGES` (one reduction)."""
        local = self.replay.rho_histogram(RHO_EDGES).astype(np.float64)
        return self.reducer.sum(local).astype(np.int64)

    def steps_due(self, env_steps: int) -> int:
        """Gradient steps owed to reach grad_ratio * (env steps since training started)."""
        if self.start_env_steps is None:
            return 0
        target = int(self.config.replay.grad_ratio * (env_steps - self.start_env_steps))
        return max(0, target - self.grad_steps)

    def far_counts(self) -> FarCounts:
        """Far-policy and stored transitions over all learners (one reduction)."""
        local = FarCounts(self.replay.n_far, self.replay.n_transitions)
        return FarCounts.unpack(self.reducer.sum(local.pack()))

    def train_step(self) -> StepResult:
        """One gradient step, then the replay's and ReF-ER's updates that follow it.

        1. sample B / L rows (uniform or PER, with PER's importance weights; a recurrent
           algorithm's sequences, :meth:`sample`, whose padding rows get weight 0 and are
           not refreshed);
        2. the algorithm's step with this step's beta, c_max and learning-rate factor;
        3. the sampled rows get the pre-step rho_k (and V_w(s_k)), the bootstrap states after
           them the new V_w, and their episodes' V-tbc is redone (eq. 8, one pass for both);
        4. PER priorities from the rows' errors;
        5. beta by eq. 12 from the global far-policy fraction, t += 1 (eq. 13: the count of
           gradient steps);
        6. every ``stats_every`` steps, new state and reward scaling from the replay;
        7. every ``reset_every`` steps (if set), every network and optimizer afresh
           (:meth:`~hpc_refer.algorithms.kit.base.Algorithm.reset_networks`, seeded from the
           run's seed and the count of resets: the same on every learner).
        """
        replay, c_max = self.replay, self.refer.c_max
        rows, valid = self.sample()
        beta_is = per_beta_at(self.grad_steps, self.config.replay.per_beta,
                              int(self.config.replay.grad_ratio * self.config.run.steps))
        batch = replay.batch(rows, beta_is)
        if valid is not None:  # a recurrent learner's sequences: padding rows weigh nothing
            batch = batch._replace(weight=batch.weight * valid)
            if self.config.algorithm.burn_in_length:
                batch = self.burned_in(batch, rows, self.config.algorithm.burn_in_length)
        result = self.step(batch, self.terms, self.grad_steps)
        stored, value, rho = rows, result.value, result.rho
        if valid is not None:
            stored, rho = rows[valid], rho[valid]
            value = None if value is None else value[valid]
        if replay.retrace:
            boot = replay.bootstrap_rows(stored)
            if boot.size:  # final states: no action, so rho = 1 (one eq. 8 pass for all)
                stored = np.concatenate([stored, boot])
                value = np.concatenate([value, self.algo.values(replay.obs[boot])])
                rho = np.concatenate([rho, np.ones(boot.size, np.float32)])
        replay.refresh(stored, value, rho, c_max)
        replay.update_priorities(rows, result.error)
        self.refer.update(*self.far_counts())
        if self.grad_steps % self.config.replay.stats_every == 0:
            self.refresh_scaling()
        every = self.config.replay.reset_every
        if every and self.grad_steps % every == 0:
            self.algo.reset_networks(reset_seed(self.seed, self.grad_steps // every))
        return result

    def sample(self) -> tuple[np.ndarray, np.ndarray | None]:
        """The rows of the next minibatch: B / L transitions (uniform or by priority), or
        for a recurrent algorithm (W = ``sequence_length`` > 1) :attr:`local_sequences`
        sequences of W consecutive steps (:func:`~hpc_refer.replay.sequences.follow`) with
        their validity mask (None for single rows)."""
        length = self.config.algorithm.sequence_length
        if length == 1:
            return self.replay.sample_rows(self.local_batch, self.rng), None
        starts = self.replay.sample_rows(self.local_sequences, self.rng)
        return follow(starts, length, self.replay.next, self.replay.flags)

    @property
    def local_sequences(self) -> int:
        """Sequences per minibatch on this learner: ``sequences`` (the algorithm's
        ``minibatch_sequences``) split over the learners as ``batch`` is
        (``replay.batch_scaling``), or B / L / W where it is 0."""
        total = self.config.algorithm.minibatch_sequences
        if not total:
            return max(1, self.local_batch // self.config.algorithm.sequence_length)
        if self.config.replay.batch_scaling is BatchScaling.PER_LEARNER:
            return total
        return max(1, total // self.reducer.size)

    def burned_in(self, batch: Batch, rows: np.ndarray, b: int) -> Batch:
        """``batch`` of the sequences of ``rows`` whose first rows carry, instead of their
        stored carry, the carry of the algorithm's burn-in
        (:meth:`~hpc_refer.algorithms.kit.base.Algorithm.burn_in`) over the b steps before
        them (:func:`~hpc_refer.replay.sequences.preceding`; the step's b is the algorithm's
        ``burn_in_length``). Those steps enter neither the losses nor the refresh of rho
        after the step, so not Rule 1's count either."""
        length = self.config.algorithm.sequence_length
        firsts = rows[::length]
        before, valid = preceding(firsts, b, self.replay.prev)
        obs = self.replay.obs[before].reshape(firsts.size, b, -1)
        batch.obs[::length, self.algo.obs_dim:] = self.algo.burn_in(
            obs, valid.reshape(firsts.size, b))  # the batch's own arrays (ReplayShard.batch)
        return batch

    def refresh_scaling(self) -> None:
        """Set the input normalisation and the reward scale 1/std(r) from the whole RM,
        each where ``replay.scaling`` names it (the other stays the identity).

        The moments are combined over learners from their shards' sums, so every learner
        gets the same scaling. V-tbc of the whole shard is recomputed with the new reward
        scale, and the far-policy count is recounted with the current c_max.
        """
        sums = ScalingSums.unpack(self.reducer.sum(self.replay.scaling_sums().pack()))
        mean, std, r_std = sums.moments()
        scaling = self.config.replay.scaling
        if scaling.states:
            self.algo.set_input_scaling(mean, std)
        if scaling.rewards:
            self.replay.reward_scale = 1.0 / r_std if r_std > 1e-8 else 1.0
        self.replay.recompute_all_vtbc()
        self.replay.recount_far(self.refer.c_max)

    def checkpoint_state(self) -> StateTree:
        """Everything a restart needs: the algorithm's, the replay shard's and ReF-ER's
        state, the counters, the sampling generator (JSON) and torch's generator (uint8)."""
        return LEARNER_FORMAT.stamp({
            "algorithm": self.algo.checkpoint_state(),
            "replay": self.replay.checkpoint_state(),
            "refer": self.refer.checkpoint_state(),
            "start_env_steps": self.start_env_steps,
            "local_batch": self.local_batch, "rng": numpy_rng_state(self.rng),
            "torch_rng": torch_rng_state()})

    def restore_state(self, tree: StateTree, replay: bool = True) -> None:
        """Inverse of :meth:`checkpoint_state`. With ``replay=False`` (another number of
        learners than the checkpoint's) the shard, its minibatch size and the sampling
        generator stay as built for this rank; :meth:`adopt` fills the shard. A tree of any
        version of :data:`LEARNER_FORMAT` (upgraded first)."""
        tree = LEARNER_FORMAT.upgrade(tree)
        self.algo.restore_state(tree["algorithm"])
        self.refer.restore_state(tree["refer"])
        start = tree["start_env_steps"]
        self.start_env_steps = None if start is None else int(start)
        set_torch_rng_state(tree["torch_rng"])
        if replay:
            self.replay.restore_state(tree["replay"])
            self.local_batch = int(tree["local_batch"])
            set_numpy_rng_state(self.rng, tree["rng"])

    def restore_resized(self, tree: StateTree, episodes: list[StoredEpisode]) -> None:
        """Restore from a checkpoint written by another number of learners: everything of
        ``tree`` (learner 0's, say) but its shard, then :meth:`adopt` this learner's share
        ``episodes`` of all old shards."""
        self.restore_state(tree, replay=False)
        self.adopt(episodes)

    def adopt(self, episodes: list[StoredEpisode]) -> None:
        """Store ``episodes`` in this empty shard, in the given order (oldest first).

        Every learner calls it, with its share from
        :func:`~hpc_refer.replay.tree.split_episodes`. Each episode is stored as one chunk
        (its last ``capacity`` rows at most), so log mu, V, rho and V-tbc come from this
        learner's networks, as at ingest. An episode whose next chunk had not arrived (or the
        first part of an episode split over two shards) keeps its stored rows, but no chunk
        will continue it (actors are dealt out to the learners anew): its last transition
        stays unsampleable (:meth:`~hpc_refer.replay.shard.ReplayShard.forget_open_tails`). Under
        PER each sampleable transition keeps its priority and the tree the largest running
        maximum of the old trees. Once training has started, the scaling is refreshed over
        all learners (collective, like every reduction), which sets the reward scale and
        redoes V-tbc; before, the scale is 1 on every shard anyway.
        """
        replay = self.replay
        if replay.size:
            raise ValueError(f"adopt fills an empty replay shard; this one holds "
                             f"{replay.size} states")
        for episode in episodes:
            chunk, priorities = episode.chunk, episode.priorities
            cut = chunk.obs.shape[0] - replay.capacity
            if cut > 0:
                chunk = chunk._replace(obs=chunk.obs[cut:], act=chunk.act[cut:],
                                       rew=chunk.rew[cut:], mu_mean=chunk.mu_mean[cut:],
                                       mu_std=chunk.mu_std[cut:])
                priorities = None if priorities is None else priorities[cut:]
            rows = self.store(chunk._replace(source=ADOPTED_SOURCE))
            if chunk.end is OPEN:
                replay.forget_open_tails()
            if replay.tree is not None and priorities is not None:
                replay.tree.raise_max_priority(episode.max_priority)
                keep = (priorities > 0) & replay.sampleable(rows)
                replay.tree.update(rows[keep], priorities[keep])
        if self.start_env_steps is not None:
            self.refresh_scaling()

    def policy(self) -> np.ndarray:
        """The behaviour policy's parameters and input scaling, as one vector for actors."""
        return self.algo.policy_params()
