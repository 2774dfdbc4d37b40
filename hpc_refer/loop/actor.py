"""The actor: runs one environment with a local copy of the policy and records mu per step.

Actions are drawn locally from the actor's copy of pi (no network round trip per step); the
Gaussian that drew each action (the behaviour policy mu_k: mean and std) is stored with the
step, so the learner's off-policy corrections stay exact however stale the copy is. The copy
is refreshed by the caller at chunk boundaries, with the number of steps the next chunk may
hold (:meth:`Actor.grant`, the learner's step budget).

Bounded action spaces: the policy acts in a normalised space where [-1, 1] maps onto
[low, high]; the sample u is either clipped to [-1, 1] (``clip``, the paper) or squashed by
tanh (``tanh``, the reference code) before scaling. The stored action is always u itself, so
rho and the KL are those of the Gaussian.

The behaviour policy is the algorithm's
(:class:`~hpc_refer.algorithms.kit.networks.BehaviourPolicy`):
V-RACER's Gaussian, or N(m_w(s), sigma^2) around DDPG's or NAF's mean. Plain-ER DDPG may use
Ornstein-Uhlenbeck noise instead (``Exploration.OU``: u = m_w(s) + sigma x_t with
x_t = (1 - theta) x_{t-1} + N(0, 1), theta = 0.15, x = 0 at each episode start); the stored
mu is then still the Gaussian's, which plain ER never reads.

Solver faults (:class:`~hpc_refer.envs.external.SolverFault`: an answer that fails
validation, an exception of a Python solver, an in-process solver that did not answer in
time; see :class:`~hpc_refer.envs.TeamDriver`) end the episode: the faulty step is dropped,
the fault is counted (``Actor.faults``) and logged as a warning with the actor's rank, the
episode's valid steps not yet sent go to the learner as a truncated chunk (this also closes
the episode's chunks already sent), no episode record is made, and the environment is reset
at the next step (a Python solver rebuilt by the driver first, unless it declares
``rebuild_after_fault = False``). ``max_failures`` faults in a row
(``run.max_env_failures``) raise :class:`~hpc_refer.envs.external.SolverFailure` naming the
environment, the actor's rank and the last fault, as does an environment that failed for
good; the episode in progress is then *interrupted*: the next step returns its closing chunk.
A solver that cannot start (its first reset raised: :class:`~hpc_refer.envs.SolverStartError`)
is no fault: the error passes uncounted, and the run stops.

Checkpoints: :meth:`Actor.checkpoint_state` and :meth:`Actor.restore_state` carry the
generator, the noise, the episode in progress and the environment's state (when its solver
provides ``get_state``/``set_state``); without the latter a restored episode is interrupted
the same way, so the learner's open tail is closed and never joined to a new episode.
:meth:`Actor.cut` hands over the pending steps mid-chunk, :meth:`Actor.evaluate` runs
episodes of the mean policy between training episodes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from hpc_refer.algorithms.kit.networks import BehaviourPolicy, load_flat_state
from hpc_refer.config.modes import ActionBounds, Exploration
from hpc_refer.config.tables import RunConfig
from hpc_refer.envs import TeamDriver
from hpc_refer.envs.external import SolverFailure, SolverFault
from hpc_refer.envs.interface import Status
from hpc_refer.report.clock import CLOCK
from hpc_refer.report.formats import TreeFormat
from hpc_refer.report.records import (
    Chunk,
    ChunkEnd,
    EpisodeRecord,
    StateTree,
    numpy_rng_state,
    set_numpy_rng_state,
)

OU_THETA = 0.15


def history_and_series(tree: StateTree) -> StateTree:
    """Version 1 -> 2 of the actor's tree: the stack of past states ``history`` and the step
    series' rows ``series`` where the tree has none (written before either existed: None,
    as an actor without them stores)."""
    return {"history": None, "series": None, **tree}


ACTOR_FORMAT = TreeFormat("actor", (history_and_series,))
"""The actor's tree (:meth:`Actor.checkpoint_state`, with the lanes, active agents and outbox
of :class:`~hpc_refer.loop.agents_actor.AgentsActor`), version 2."""

LOG = logging.getLogger(__name__)


@dataclass
class Pending:
    """Steps of one episode taken and not sent yet (rows as the actor made them)."""

    obs: list[np.ndarray] = field(default_factory=list)
    act: list[np.ndarray] = field(default_factory=list)
    rew: list[float] = field(default_factory=list)
    mean: list[np.ndarray] = field(default_factory=list)
    std: list[np.ndarray] = field(default_factory=list)

    def state(self, obs_dim: int, act_dim: int) -> StateTree:
        """The pending steps as arrays (float32 rows, float64 rewards: exact copies)."""
        def rows(x: list[np.ndarray], width: int) -> np.ndarray:
            return np.stack(x) if x else np.empty((0, width), np.float32)

        return {"obs": rows(self.obs, obs_dim), "act": rows(self.act, act_dim),
                "rew": np.asarray(self.rew, np.float64), "mean": rows(self.mean, act_dim),
                "std": rows(self.std, act_dim)}

    @classmethod
    def of(cls, tree: StateTree) -> Pending:
        """Inverse of :meth:`state`."""
        def rows(name: str) -> list[np.ndarray]:
            return [np.array(r, np.float32) for r in np.asarray(tree[name])]

        return cls(rows("obs"), rows("act"), [float(r) for r in np.asarray(tree["rew"])],
                   rows("mean"), rows("std"))


def action_box(low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The box's bounded dimensions (both bounds finite), its centre c = (low + high) / 2 and
    half-width h = (high - low) / 2 there (0 and 1 on the unbounded ones): an action in
    [-1, 1] maps to c + h x."""
    bounded = np.isfinite(low) & np.isfinite(high)
    lo, hi = np.where(bounded, low, -1.0), np.where(bounded, high, 1.0)
    return bounded, np.where(bounded, 0.5 * (hi + lo), 0.0), 0.5 * (hi - lo)


class Actor:
    """Steps one environment, returning chunks of at most ``chunk_len`` transitions (fewer
    when the learner's budget, :meth:`grant`, is smaller).

    ``max_failures`` (``run.max_env_failures``): that many solver faults in a row, without a
    valid step in between, raise :class:`~hpc_refer.envs.external.SolverFailure`.
    """

    def __init__(self, env: TeamDriver, net: BehaviourPolicy, action_bounds: ActionBounds,
                 seed: int, chunk_len: int, source: int = 0,
                 exploration: Exploration = Exploration.GAUSSIAN,
                 max_failures: int = RunConfig.max_env_failures) -> None:
        self.env = env
        self.net = net
        self._numpy_policy = net.numpy_policy()
        self.carry_dim = net.carry_dim
        """Values of the recurrent policy's carry stored after each state (0: feed-forward)."""
        self._numpy_step = net.numpy_step() if self.carry_dim else None
        self.row_dim = env.obs_dim + self.carry_dim
        """Width of the rows the actor stores: the state, then the carry it entered with."""
        self.chunk_len = chunk_len
        self._limit = chunk_len
        """The most transitions of a chunk, until the next :meth:`grant`."""
        self.source = source
        self.max_failures = max_failures
        self.rng = np.random.default_rng(seed)
        self._bounded, self._center, self._half = action_box(env.low, env.high)
        self._box = bool(self._bounded.all())
        self._squash = action_bounds is ActionBounds.TANH
        self._ou = exploration is Exploration.OU
        self._noise = np.zeros(env.act_dim)
        self._pending = Pending()
        self._return = 0.0
        self._length = 0
        self._sent = False
        """Whether chunks of the current episode went to the learner already."""
        self._interrupted = False
        """The episode in progress cannot go on (restored without the environment's state,
        or its environment failed): the next step closes it."""
        self.faults = 0
        self._faults_in_a_row = 0
        self._obs: np.ndarray | None = None
        self._seed: int | None = seed

    def load(self, flat: np.ndarray) -> None:
        """Replace the policy copy by the learner's parameters."""
        load_flat_state(self.net, flat)

    def grant(self, steps: int) -> None:
        """The learner's step budget of this release (>= 1): the next chunk holds at most
        min(``chunk_len``, ``steps``) transitions, so the actor takes no more than ``steps``
        environment steps before it returns. A chunk that reaches the budget ends OPEN, as a
        :meth:`cut` does: the episode goes on in the next chunk. The budget holds until the
        next grant (an actor sends one chunk per release) and is not part of the checkpoint:
        the learner grants one anew after a restart."""
        self._limit = min(self.chunk_len, steps)

    def to_env(self, u: np.ndarray) -> np.ndarray:
        """Map a Gaussian sample u to the environment's action box."""
        # (np.minimum of np.maximum: np.clip's Python wrapper costs more than the two ufuncs)
        squashed = np.tanh(u) if self._squash else np.minimum(np.maximum(u, -1.0), 1.0)
        if self._box:
            return self._center + self._half * squashed
        return np.where(self._bounded, self._center + self._half * squashed, u)

    def _policy(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """mu's mean and std at the row ``obs``, in numpy
        (:meth:`BehaviourPolicy.numpy_policy`), and a recurrent policy's carry after the
        step (None for a feed-forward one)."""
        if self._numpy_step is None:
            mean, std = self._numpy_policy(obs)
            carry = None
        else:
            mean, std, carry = self._numpy_step(obs)
        return mean, std if std.shape == mean.shape else np.broadcast_to(std, mean.shape), carry

    def _row(self, state: np.ndarray, carry: np.ndarray | None) -> np.ndarray:
        """The stored row of ``state``: the state itself, or [state, carry] for a recurrent
        policy (the carry it enters the next step with,
        :mod:`hpc_refer.algorithms.kit.recurrent`)."""
        if carry is None:
            return state
        return np.concatenate([state, carry], axis=-1).astype(np.float32)

    def _start(self, state: np.ndarray) -> np.ndarray:
        """The row of an episode's first state: a recurrent policy's carry starts at 0."""
        if not self.carry_dim:
            return state
        return self._row(state, np.zeros((*state.shape[:-1], self.carry_dim), np.float32))

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
        does it after its last chunk was returned. An interrupted episode (see
        :meth:`restore_state`) is first closed: this step returns its closing chunk, if it
        has one, and takes no environment step.
        """
        if self._interrupted:
            closing = self._end_episode()
            if closing is not None:
                return closing, None
        try:
            if self._obs is None:
                self._obs = self._start(self.env.reset(self._seed))
                self._seed = None
                self._noise[:] = 0.0
            u, mean, std, nxt, reward, status = self._transition(self._obs, explore=True)
        except SolverFault as fault:
            self._count_fault(fault, "episode ended and environment reset")
            return self._end_episode(), None
        except SolverFailure as failure:
            self._interrupted = True
            raise self._failed(failure) from failure
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
            if len(p.act) < self._limit:
                return None, None
            self._sent = True
            return self._flush(ChunkEnd.OPEN, None), None
        record = EpisodeRecord(self._return, self._length, self.env.end_episode(), CLOCK.now())
        end = ChunkEnd.TERMINATED if status == Status.TERMINAL else ChunkEnd.TRUNCATED
        chunk = self._flush(end, nxt)
        self._return, self._length = 0.0, 0
        self._obs = None
        self._sent = False
        return chunk, record

    def _transition(self, obs: np.ndarray, explore: bool
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float, Status]:
        """One environment step from ``obs``, the routine of training and evaluation alike:
        mu's mean and std at ``obs``; the action u = mean + std z (``explore``: the Gaussian
        or OU noise z of :meth:`_draw`) or the mean itself (evaluation); the environment's
        answer to ``to_env(u)``. Returns (u, mean, std, next state, reward, status); a valid
        answer resets the count of consecutive faults (a faulty one raises, see
        :meth:`_count_fault`)."""
        mean, std, carry = self._policy(obs)
        u = (mean + std * self._draw(mean.shape)).astype(np.float32) if explore else mean
        nxt, reward, status = self.env.step(self.to_env(u))
        self._faults_in_a_row = 0
        return u, mean, std, self._row(nxt, carry), reward, status

    def _failed(self, failure: SolverFailure) -> SolverFailure:
        """The failure of the environment, naming this actor's rank."""
        return SolverFailure(f"actor rank {self.source}: {failure}")

    def _count_fault(self, fault: SolverFault, what: str) -> None:
        """Count and log a solver fault; the ``max_failures``-th in a row raises
        :class:`~hpc_refer.envs.external.SolverFailure` (the episode in progress is then
        interrupted: its closing chunk is the next step's, e.g. after a checkpoint)."""
        self.faults += 1
        self._faults_in_a_row += 1
        LOG.warning("actor rank %d: solver fault %d, %s: %s", self.source, self.faults, what,
                    fault)
        if self._faults_in_a_row >= self.max_failures:
            self._faults_in_a_row = 0  # a resumed run gets max_failures faults again
            self._interrupted = True
            raise SolverFailure(
                f"env {self.env.index} on actor rank {self.source}: {self.max_failures} "
                f"consecutive solver faults (run.max_env_failures), the last: {fault}"
            ) from fault

    def _end_episode(self) -> Chunk | None:
        """End the episode in progress without an episode record (after a solver fault, or
        an interruption); the chunk that closes it, if one is due: its steps not yet sent
        and its last valid state, truncated, which also closes its chunks already sent."""
        chunk = None
        if self._obs is not None and (self._pending.act or self._sent):
            chunk = self._flush(ChunkEnd.TRUNCATED, self._obs)
        self._pending = Pending()
        self._return, self._length = 0.0, 0
        self._obs = None
        self._sent = False
        self._interrupted = False
        return chunk

    def cut(self) -> Chunk | None:
        """The steps collected so far as an OPEN chunk (None when there are none): a
        preempted actor hands over what it has before its chunk is full. The episode goes
        on; its next chunk continues this one."""
        if not self._pending.act:
            return None
        self._sent = True
        return self._flush(ChunkEnd.OPEN, None)

    def evaluate(self, episodes: int, seed: int | None = None) -> list[EpisodeRecord]:
        """Run ``episodes`` whole episodes of the deterministic policy (action =
        ``to_env(mean)``), the first reset with ``seed``; nothing is recorded for training
        and the actor's generator and noise are untouched. Only between episodes (raises
        RuntimeError while one is in progress: call it at an episode boundary). A solver
        fault ends its evaluation episode without a record (counted and logged)."""
        if not self.between_episodes:
            raise RuntimeError(f"actor rank {self.source}: evaluation asked for while an "
                               f"episode is in progress; evaluate at an episode boundary")
        records: list[EpisodeRecord] = []
        for k in range(episodes):
            try:
                records += self._evaluation_episode(seed if k == 0 else None)
            except SolverFault as fault:
                self._count_fault(fault, "evaluation episode ended")
            except SolverFailure as failure:
                raise self._failed(failure) from failure
        return records

    def _evaluation_episode(self, seed: int | None) -> list[EpisodeRecord]:
        """One episode of the mean policy from ``reset(seed)``: its record."""
        obs = self._start(self.env.reset(seed))
        ret, length, status = 0.0, 0, Status.CONTINUE
        while status == Status.CONTINUE:
            *_, obs, reward, status = self._transition(obs, explore=False)
            ret += reward
            length += 1
        return [EpisodeRecord(ret, length, self.env.end_episode(), CLOCK.now())]

    def checkpoint_state(self) -> StateTree:
        """Everything the actor needs to continue: its generator, the OU noise, the episode
        in progress (current state, pending steps, return, length, whether chunks of it were
        sent, whether it is interrupted), the first reset's seed if still unused, the fault
        counters, the environment's state (None when it cannot give one, see
        :meth:`~hpc_refer.envs.TeamDriver.checkpoint_state`), its stack of past states
        (``env.history``; None without one) and the rows of its step series (None without
        one). The policy copy is not part
        of it (the caller saves the parameters it loads)."""
        return ACTOR_FORMAT.stamp({
            "rng": numpy_rng_state(self.rng),
            "noise": self._noise.copy(),
            "obs": None if self._obs is None else self._obs.copy(),
            "pending": self._pending.state(self.row_dim, self.env.act_dim),
            "return": self._return,
            "length": self._length,
            "sent": self._sent,
            "interrupted": self._interrupted,
            "seed": self._seed,
            "faults": self.faults,
            "faults_in_a_row": self._faults_in_a_row,
            "env": self.env.checkpoint_state(),
            "history": None if self.env.stack is None else self.env.stack.state(),
            "series": self.env.series_state(),
        })

    def restore_state(self, tree: StateTree) -> None:
        """Continue from :meth:`checkpoint_state` (on a fresh actor of the same environment
        kind). The episode in progress continues when the environment takes the saved
        state; otherwise it is interrupted: the next :meth:`step` returns its closing
        truncated chunk at its last state (what a solver fault sends, without counting
        one), so the learner's open tail is closed and never joined to the next episode. A
        tree of any version of :data:`ACTOR_FORMAT` (upgraded first)."""
        tree = ACTOR_FORMAT.upgrade(tree)
        set_numpy_rng_state(self.rng, tree["rng"])
        self._noise = np.array(tree["noise"], np.float64)
        self._obs = None if tree["obs"] is None else np.array(tree["obs"], np.float32)
        self._pending = Pending.of(tree["pending"])
        self._return = float(tree["return"])
        self._length = int(tree["length"])
        self._sent = bool(tree["sent"])
        self._seed = None if tree["seed"] is None else int(tree["seed"])
        self.faults = int(tree["faults"])
        self._faults_in_a_row = int(tree["faults_in_a_row"])
        if tree["series"] is not None:
            self.env.restore_series(tree["series"])
        restored = tree["env"] is not None and self.env.restore_state(tree["env"])
        if restored and self.env.stack is not None:
            self.env.stack.restore(tree["history"])
        self._interrupted = bool(tree["interrupted"]) or (self._obs is not None
                                                           and not restored)

    @property
    def between_episodes(self) -> bool:
        """Whether no episode is in progress (an evaluation round may run now)."""
        return self._obs is None and not self._interrupted

    def _flush(self, end: ChunkEnd, final_obs: np.ndarray | None) -> Chunk:
        chunk = pending_chunk(self._pending, end, final_obs, self.env.act_dim, self.source)
        self._pending = Pending()
        return chunk


def pending_chunk(p: Pending, end: ChunkEnd, final_obs: np.ndarray | None, act_dim: int,
                  source: int, agent: int = 0) -> Chunk:
    """The pending steps ``p`` as a chunk that stops with ``end`` (a TRUNCATED one also
    holds its final state ``final_obs``); it may hold no action (the closing one after a
    fault)."""
    obs = p.obs + ([final_obs] if end is ChunkEnd.TRUNCATED and final_obs is not None else [])

    def rows(x: list[np.ndarray]) -> np.ndarray:
        return np.stack(x).astype(np.float32) if x else np.empty((0, act_dim), np.float32)

    return Chunk(obs=np.stack(obs).astype(np.float32), act=rows(p.act),
                 rew=np.asarray(p.rew, np.float32), mu_mean=rows(p.mean), mu_std=rows(p.std),
                 end=end, source=source, agent=agent)
