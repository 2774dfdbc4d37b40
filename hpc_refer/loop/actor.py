"""The actor: runs one environment with a local copy of the policy and records mu per step,
over lanes: one lane per agent of the simulation (one agent is the common case).

Actions are drawn locally from the actor's copy of pi (no network round trip per step); the
Gaussian that drew each action (the behaviour policy mu_k: mean and std) is stored with the
step, so the learner's off-policy corrections stay exact however stale the copy is. The copy
is refreshed by the caller at chunk boundaries, with the number of steps the next chunk may
hold (:meth:`Actor.grant`, the learner's step budget).

Bounded action spaces: the policy acts in a normalised space where [-1, 1] maps onto
[low, high]; the sample u is either clipped to [-1, 1] (``clip``, the paper) or squashed by
tanh (``tanh``, the reference code) before scaling. The stored action is always u itself, so
rho and the KL are those of the Gaussian.

The uniform warm-up (``replay.warmup = uniform``): the actor's first ``warmup_steps``
environment steps draw each action uniformly in the box instead (as Stable-Baselines3's
``learning_starts``). That behaviour is no Gaussian: the actor stores u (a, or atanh(a) under
tanh) with mu's std set to the mark ``UNIFORM_STD`` (0, which no Gaussian has), and the learner
stores the uniform's exact log mu for rho and, for Rule 2's KL, the Gaussian of its first two
moments, whose KL to pi has the true KL's gradient
(:func:`~hpc_refer.algorithms.kit.networks.uniform_behaviour`).

The behaviour policy is the algorithm's
(:class:`~hpc_refer.algorithms.kit.networks.BehaviourPolicy`):
V-RACER's Gaussian, or N(m_w(s), sigma^2) around DDPG's or NAF's mean. Plain-ER DDPG may use
Ornstein-Uhlenbeck noise instead (``Exploration.OU``: u = m_w(s) + sigma x_t with
x_t = (1 - theta) x_{t-1} + N(0, 1), theta = 0.15, x = 0 at each episode start); the stored
mu is then still the Gaussian's, which plain ER never reads.

Agents and lanes. A solver may declare ``n_agents`` = n > 1 agents that share one policy
(:mod:`hpc_refer.envs`). Each environment step the policy copy runs once over the agents'
states (one numpy forward call, [n, obs_dim] -> [n, A]; a solver of one agent answers in
its own form, without the agent axis), each agent draws its action from its own Gaussian
mu_i = N(m_w(s_i), sigma_w(s_i)^2) (the OU noise runs per agent), and the solver answers
with every agent's state, reward and status (validated by
:class:`~hpc_refer.envs.TeamDriver`). Each agent has a lane: its steps not sent yet, its
return and length so far; its chunks carry the agent's index
(:attr:`~hpc_refer.report.records.Chunk.agent`), so the replay links each agent's chunks into
an episode of its own (its own V-tbc, rho, far-policy count and forgetting). An agent whose
status is TERMINAL or TRUNCATED has finished its episode: its chunk closes (TERMINATED or
TRUNCATED), its episode record is made (with its agent index), and it takes no part in the
rest of the simulation (its rows of later answers are ignored; its rows of later actions are
drawn as the others' and ignored by the solver). The simulation's episode ends when every
agent has finished; the next step resets the solver. The solver's episode metrics
(``episode_values()``) belong to the simulation: they go with the records of the agents that
finish at its last step, and are nan for agents that finished before.

Chunks and budgets. Chunks wait in an outbox and leave one per message, as the learner loop
expects (one chunk per release, at most the release's step budget: a longer one is split,
its first part OPEN); with one agent the outbox holds at most the chunk of the step just
taken. Steps are counted per agent: ``run.steps``, ``run.chunk_len`` and the budgets count
stored transitions, n per environment step with n agents active. When the steps of all
lanes not sent yet reach the budget, every lane's steps go to the outbox as OPEN chunks
(the episodes go on in the next chunks); while the outbox holds chunks the actor takes no
environment step. A run's last budget can be smaller than the agents still active: the
steps of that last environment step that exceed it are never sent (at most n - 1
transitions).

Solver faults (:class:`~hpc_refer.envs.external.SolverFault`: an answer that fails
validation, an exception of a Python solver, an in-process solver that did not answer in
time; see :class:`~hpc_refer.envs.TeamDriver`) end the simulation's episode: the faulty step
is dropped, the fault is counted (``Actor.faults``) and logged as a warning with the actor's
rank, each active agent's valid steps not yet sent go to the learner as a truncated chunk at
its last valid state (this also closes the episode's chunks already sent), no episode record
is made, and the environment is reset at the next step (a Python solver rebuilt by the
driver first, unless it declares ``rebuild_after_fault = False``). ``max_failures`` faults in
a row (``run.max_env_failures``) raise :class:`~hpc_refer.envs.external.SolverFailure`
naming the environment, the actor's rank and the last fault, as does an environment that
failed for good; the episode in progress is then *interrupted*: the next step returns its
closing chunks. A solver that cannot start (its first reset raised:
:class:`~hpc_refer.envs.SolverStartError`) is no fault: the error passes uncounted, and the
run stops.

Checkpoints: :meth:`Actor.checkpoint_state` and :meth:`Actor.restore_state` carry the
generator, the noise, the episode in progress (the lanes, the active agents, the outbox) and
the environment's state (when its solver provides ``get_state``/``set_state``); without the
latter a restored episode is interrupted the same way, so the learner's open tails are
closed and never joined to a new episode. :meth:`Actor.cut` hands over the pending steps
mid-chunk, :meth:`Actor.evaluate` runs episodes of the mean policy between training episodes.
Training and evaluation take their steps through one routine (:meth:`Actor._transition`).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hpc_refer.algorithms.kit.program import UNIFORM_STD, UNIFORM_U_BOUND, Program
from hpc_refer.config.modes import ActionBounds, Exploration
from hpc_refer.config.tables import RunConfig
from hpc_refer.envs.driver import TeamDriver
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
CONTINUE, TERMINAL = Status.CONTINUE, Status.TERMINAL


def history_and_series(tree: StateTree) -> StateTree:
    """Version 1 -> 2 of the actor's tree: the stack of past states ``history`` and the step
    series' rows ``series`` where the tree has none (written before either existed: None,
    as an actor without them stores)."""
    return {"history": None, "series": None, **tree}


ONE_AGENT_LANE = ("pending", "return", "length", "sent")
"""The keys of a version-2 tree that held the episode in progress of an actor of one agent
(and were unused, empty, in the tree of an actor of several agents)."""


def lanes_for_every_actor(tree: StateTree) -> StateTree:
    """Version 2 -> 3 of the actor's tree: one layout for any number of agents. A tree of
    one agent (its episode in progress at the top: ``pending``, ``return``, ``length``,
    ``sent``) gets that episode as lane ``"0"``, ``active`` [whether an episode is in
    progress], an empty ``outbox``, and the agent axis on ``obs`` and ``noise``; a tree of
    several agents (``lanes``, ``active``, ``outbox`` already there) loses its unused
    top-level ones."""
    out = {k: v for k, v in tree.items() if k not in ONE_AGENT_LANE}
    if "lanes" in tree:
        return out
    out["lanes"] = {"0": {k: tree[k] for k in ONE_AGENT_LANE}}
    out["active"] = np.array([tree["obs"] is not None])
    out["outbox"] = {}
    out["obs"] = None if tree["obs"] is None else np.asarray(tree["obs"])[None]
    out["noise"] = np.asarray(tree["noise"])[None]
    return out


def warmup_counter(tree: StateTree) -> StateTree:
    """Version 3 -> 4 of the actor's tree: ``warmup_left``, the uniform warm-up's steps still
    to take, 0 (written before the option existed: the actor acted with its policy)."""
    return {"warmup_left": 0, **tree}


ACTOR_FORMAT = TreeFormat("actor", (history_and_series, lanes_for_every_actor, warmup_counter))
"""The actor's tree (:meth:`Actor.checkpoint_state`), version 4."""

LOG = logging.getLogger(__name__)


@dataclass(slots=True)
class Lane:
    """One agent's episode in progress: its steps taken and not sent yet (rows as the actor
    made them), its return and length so far, and whether chunks of it were sent already."""

    obs: list[np.ndarray] = field(default_factory=list)
    act: list[np.ndarray] = field(default_factory=list)
    rew: list[float] = field(default_factory=list)
    mean: list[np.ndarray] = field(default_factory=list)
    std: list[np.ndarray] = field(default_factory=list)
    ret: float = 0.0
    length: int = 0
    sent: bool = False

    def chunk(self, end: ChunkEnd, final_obs: np.ndarray | None, act_dim: int, source: int,
              agent: int) -> Chunk:
        """The steps not sent yet as a chunk that stops with ``end`` (a TRUNCATED one also
        holds its final state ``final_obs``), which then count as sent; it may hold no
        action (the closing one after a fault)."""
        obs = self.obs + ([final_obs] if end is ChunkEnd.TRUNCATED and final_obs is not None
                          else [])

        def rows(x: list[np.ndarray]) -> np.ndarray:
            # (np.array of the rows: np.stack's Python loop over them cost 1 us per step)
            return np.array(x, np.float32) if x else np.empty((0, act_dim), np.float32)

        chunk = Chunk(obs=np.array(obs, np.float32), act=rows(self.act),
                      rew=np.asarray(self.rew, np.float32), mu_mean=rows(self.mean),
                      mu_std=rows(self.std), end=end, source=source, agent=agent)
        self.obs, self.act, self.rew, self.mean, self.std = [], [], [], [], []
        return chunk

    def state(self, obs_dim: int, act_dim: int) -> StateTree:
        """The lane for a checkpoint: its pending steps as arrays (float32 rows, float64
        rewards: exact copies), its return, length and whether chunks of it were sent."""
        def rows(x: list[np.ndarray], width: int) -> np.ndarray:
            return np.array(x) if x else np.empty((0, width), np.float32)

        return {"pending": {"obs": rows(self.obs, obs_dim), "act": rows(self.act, act_dim),
                            "rew": np.asarray(self.rew, np.float64),
                            "mean": rows(self.mean, act_dim), "std": rows(self.std, act_dim)},
                "return": self.ret, "length": self.length, "sent": self.sent}

    @classmethod
    def of(cls, tree: StateTree) -> Lane:
        """Inverse of :meth:`state`."""
        pending = tree["pending"]

        def rows(name: str) -> list[np.ndarray]:
            return [np.array(r, np.float32) for r in np.asarray(pending[name])]

        return cls(rows("obs"), rows("act"), [float(r) for r in np.asarray(pending["rew"])],
                   rows("mean"), rows("std"), float(tree["return"]), int(tree["length"]),
                   bool(tree["sent"]))


Outgoing = tuple[Chunk, EpisodeRecord | None]
"""A chunk waiting in the outbox, with the episode it ends."""


def action_box(low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The box's bounded dimensions (both bounds finite), its centre c = (low + high) / 2 and
    half-width h = (high - low) / 2 there (0 and 1 on the unbounded ones): an action in
    [-1, 1] maps to c + h x."""
    bounded = np.isfinite(low) & np.isfinite(high)
    lo, hi = np.where(bounded, low, -1.0), np.where(bounded, high, 1.0)
    return bounded, np.where(bounded, 0.5 * (hi + lo), 0.0), 0.5 * (hi - lo)


def evaluation_episode(env: TeamDriver, obs: np.ndarray,
                       step: Callable[[np.ndarray], tuple[np.ndarray, Any, Any]]
                       ) -> list[EpisodeRecord]:
    """The rest of a simulation's episode after its first rows ``obs``, ``step`` taking the
    rows to (next rows, reward, status) in the solver's form (a float and a Status for one
    agent, arrays of n for n agents): a record per agent, in agent order, each with the
    simulation's metric values; an agent that ended is counted no further (its later
    rewards are ignored) while the others go on."""
    ret, length = [0.0] * env.n_agents, [0] * env.n_agents
    running = list(range(env.n_agents))
    while running:
        obs, reward, status = step(obs)
        rewards, statuses = ((reward,), (status,)) if env.n_agents == 1 else (reward, status)
        for i in running:
            ret[i] += float(rewards[i])
            length[i] += 1
        running = [i for i in running if statuses[i] == CONTINUE]
    values, now = env.end_episode(), CLOCK.now()
    return [EpisodeRecord(ret[i], length[i], values, now, i) for i in range(env.n_agents)]


class ActionMap:
    """A Gaussian sample u in an environment's action box (``low``, ``high``): c + h clip(u,
    -1, 1), or c + h tanh(u) with ``squash`` (``ActionBounds.TANH``), on the box's bounded
    dimensions (:func:`action_box`), u itself on the others. What an actor sends its solver,
    and what a deployed policy (:mod:`hpc_refer.export.controller`) returns."""

    def __init__(self, low: np.ndarray, high: np.ndarray, squash: bool) -> None:
        self.bounded, self.center, self.half = action_box(np.asarray(low, np.float64),
                                                          np.asarray(high, np.float64))
        self.box = bool(self.bounded.all())
        """Whether every dimension is bounded."""
        self.squash = squash
        self._lower, self._upper = (np.full(self.bounded.size, x, np.float32)
                                    for x in (-1.0, 1.0))
        """The clip's bounds as arrays (a Python float is converted anew at every call)."""

    def __call__(self, u: np.ndarray) -> np.ndarray:
        # (np.minimum of np.maximum: np.clip's Python wrapper costs more than the two ufuncs)
        squashed = (np.tanh(u) if self.squash
                    else np.minimum(np.maximum(u, self._lower), self._upper))
        if self.box:
            return self.center + self.half * squashed
        return np.where(self.bounded, self.center + self.half * squashed, u)


class Actor:
    """Steps one environment of ``env.n_agents`` agents (one lane each, see the module's
    docstring), returning chunks of at most ``chunk_len`` transitions (fewer when the
    learner's budget, :meth:`grant`, is smaller).

    ``max_failures`` (``run.max_env_failures``): that many solver faults in a row, without a
    valid step in between, raise :class:`~hpc_refer.envs.external.SolverFailure`.

    ``warmup_steps`` (``replay.warmup = uniform``): the first that many environment steps
    draw every agent's action uniformly in the action box instead of from the policy
    (:meth:`_uniform`); the box must be bounded in every dimension.
    """

    def __init__(self, env: TeamDriver, policy: Program, action_bounds: ActionBounds,
                 seed: int, chunk_len: int, source: int = 0,
                 exploration: Exploration = Exploration.GAUSSIAN,
                 max_failures: int = RunConfig.max_env_failures, warmup_steps: int = 0) -> None:
        self.env = env
        self.params = policy.params.copy()
        """The policy copy's flat vector (:func:`~hpc_refer.algorithms.kit.networks.flat_state`
        order), which :meth:`load` overwrites."""
        self._behaviour = policy.bind(self.params)
        """rows -> (mean, std, carry after the step), on views of :attr:`params`."""
        self.carry_dim = policy.carry_dim
        """Values of the recurrent policy's carry stored after each state (0: feed-forward)."""
        self.row_dim = env.obs_dim + self.carry_dim
        """Width of the rows the actor stores: the state, then the carry it entered with."""
        self.n_agents = env.n_agents
        self._one = self.n_agents == 1
        """Whether the solver answers in the single-agent form (no agent axis)."""
        self._agent_shape = () if self._one else (self.n_agents,)
        """The leading shape of the solver's states and actions."""
        self.chunk_len = chunk_len
        self._limit = chunk_len
        """The most transitions of a chunk, until the next :meth:`grant`."""
        self.source = source
        self.max_failures = max_failures
        self.rng = np.random.default_rng(seed)
        self.to_env = ActionMap(env.low, env.high, action_bounds is ActionBounds.TANH)
        """u -> the action the solver receives."""
        if warmup_steps and not self.to_env.box:
            raise ValueError(
                f"replay.warmup = uniform needs a bounded action box, and action dimensions "
                f"{np.flatnonzero(~self.to_env.bounded).tolist()} of {env.act_dim} are unbounded: "
                f"allowed for this environment is replay.warmup = policy")
        self._warmup_left = warmup_steps
        """Environment steps of the uniform warm-up still to take."""
        self._ou = exploration is Exploration.OU
        self._noise = np.zeros((*self._agent_shape, env.act_dim))
        self._lanes = [Lane() for _ in range(self.n_agents)]
        self._running: list[int] = []
        """The agents whose episode goes on in the simulation in progress."""
        self._unsent = 0
        """The steps of all lanes not sent yet (none of them in the outbox)."""
        self._outbox: deque[Outgoing] = deque()
        self._interrupted = False
        """The episode in progress cannot go on (restored without the environment's state,
        or its environment failed): the next step closes it."""
        self.faults = 0
        self._faults_in_a_row = 0
        self._obs: np.ndarray | None = None
        """The simulation's current rows, in the solver's form (None between episodes)."""
        self._seed: int | None = seed

    def load(self, flat: np.ndarray) -> None:
        """Replace the policy copy by the learner's parameters."""
        if flat.shape != self.params.shape:
            raise ValueError(f"a policy vector of {flat.size} values for a policy of "
                             f"{self.params.size}")
        self.params[:] = flat

    def grant(self, steps: int) -> None:
        """The learner's step budget of this release (>= 1): the next chunk holds at most
        min(``chunk_len``, ``steps``) transitions, so the actor takes no more than ``steps``
        transitions before it returns. A chunk that reaches the budget ends OPEN, as a
        :meth:`cut` does: the episode goes on in the next chunk. The budget holds until the
        next grant (an actor sends one chunk per release) and is not part of the checkpoint:
        the learner grants one anew after a restart."""
        self._limit = min(self.chunk_len, steps)

    def _policy(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """mu's mean and std at the rows ``obs``, in numpy
        (:class:`~hpc_refer.algorithms.kit.program.NumpyBehaviour`), and a recurrent policy's
        carry after the step (None for a feed-forward one)."""
        mean, std, carry = self._behaviour(obs)
        std = std if std.shape == mean.shape else np.broadcast_to(std, mean.shape)
        return mean, std, carry if self.carry_dim else None

    def _row(self, state: np.ndarray, carry: np.ndarray) -> np.ndarray:
        """The stored row of ``state`` for a recurrent policy: [state, carry], the carry it
        enters the next step with (:mod:`hpc_refer.algorithms.kit.recurrent`); a feed-forward
        policy's row is the state itself."""
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

    def _uniform(self, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A step of the uniform warm-up: a ~ U(-1, 1) per action dimension, so that
        :attr:`to_env` gives an action uniform in the box; the stored u is a (clip) or
        atanh(a) with |a| <= :data:`~hpc_refer.algorithms.kit.program.UNIFORM_U_BOUND`
        (tanh), and mu's mean and std are 0 and
        :data:`~hpc_refer.algorithms.kit.program.UNIFORM_STD`, the mark the learner reads
        (:meth:`~hpc_refer.loop.learner.Learner.store`)."""
        a = self.rng.uniform(-1.0, 1.0, shape)
        u = np.arctanh(np.clip(a, -UNIFORM_U_BOUND, UNIFORM_U_BOUND)) if self.to_env.squash else a
        zeros = np.zeros(shape, np.float32)
        return u.astype(np.float32), zeros, np.full(shape, UNIFORM_STD, np.float32)

    def step(self) -> tuple[Chunk | None, EpisodeRecord | None]:
        """One environment step of all active agents, or none while chunks wait to be sent;
        returns the outbox's next chunk, if any, and the episode it ends.

        A new episode starts (``reset``) at the first step after the previous one ended, so an
        environment that raises :class:`~hpc_refer.envs.EnvironmentFinished` from ``reset``
        does it after its last chunk was returned. An interrupted episode (see
        :meth:`restore_state`) is first closed: this step returns its closing chunks, if it
        has any, and takes no environment step.
        """
        if self._interrupted and not self._outbox:
            self._end_simulation()
        if self._outbox:
            return self._deliver()
        try:
            if self._obs is None:
                self._obs = self._start(self.env.reset(self._seed))
                self._seed = None
                self._noise[:] = 0.0
                self._running = list(range(self.n_agents))
            u, mean, std, nxt, reward, status = self._transition(self._obs, True)
            self._warmup_left = max(self._warmup_left - 1, 0)
        except SolverFault as fault:
            self._count_fault(fault, "episode ended and environment reset")
            self._end_simulation()
            return self._deliver()
        except SolverFailure as failure:
            self._interrupted = True
            raise self._failed(failure) from failure
        obs = self._obs
        ended: list[tuple[int, ChunkEnd]] = []
        for i in self._running:
            lane = self._lanes[i]
            if self._one:  # the single-agent form: the answers are agent 0's own
                state, act, r, mu, sigma, done = obs, u, reward, mean, std, status
            else:
                state, act, r, mu, sigma, done = (obs[i], u[i], float(reward[i]), mean[i],
                                                  std[i], status[i])
            lane.obs.append(state)
            lane.act.append(act)
            lane.rew.append(r)
            lane.mean.append(mu)
            lane.std.append(sigma)
            lane.ret += r
            lane.length += 1
            if done != CONTINUE:
                ended.append((i, ChunkEnd.TERMINATED if done == TERMINAL
                              else ChunkEnd.TRUNCATED))
        self._unsent += len(self._running)
        if ended:
            self._close_lanes(ended, nxt)
        self._obs = nxt if self._running else None
        if self._obs is not None and self._unsent >= self._limit:
            self._send_open()
        return self._deliver() if self._outbox else (None, None)

    def _transition(self, obs: np.ndarray, explore: bool) -> tuple[
            np.ndarray, np.ndarray, np.ndarray, np.ndarray, Any, Any]:
        """One environment step from the rows ``obs``, the routine of training and
        evaluation alike: mu's mean and std at ``obs`` (one policy call for all agents); the
        action u = mean + std z (``explore``: the Gaussian or OU noise z of :meth:`_draw`) or
        the mean itself (evaluation); the environment's answer to ``to_env(u)``. Returns
        (u, mean, std, next rows, reward, status), the last two in the solver's form (a
        float and a Status for one agent, arrays of n for n agents); a valid answer resets
        the count of consecutive faults (a faulty one raises, see :meth:`_count_fault`)."""
        mean, std, carry = self._policy(obs)
        if explore and self._warmup_left:
            u, mean, std = self._uniform(mean.shape)
        else:
            u = (mean + std * self._draw(mean.shape)).astype(np.float32) if explore else mean
        nxt, reward, status = self.env.step(self.to_env(u))
        self._faults_in_a_row = 0
        return u, mean, std, nxt if carry is None else self._row(nxt, carry), reward, status

    def _close_lanes(self, ended: list[tuple[int, ChunkEnd]], nxt: np.ndarray) -> None:
        """The agents ``ended`` finished their episodes at this step (how each chunk ends):
        each one's last chunk (at its final row of ``nxt``) and record to the outbox. The
        simulation's metric values go with them when no agent goes on (nan otherwise)."""
        finals = (nxt,) if self._one else nxt
        for i, _ in ended:
            self._running.remove(i)
        values = (self.env.end_episode() if not self._running
                  else (float("nan"),) * len(self.env.metric_names))
        for i, end in ended:
            lane = self._lanes[i]
            record = EpisodeRecord(lane.ret, lane.length, values, CLOCK.now(), i)
            self._unsent -= len(lane.act)
            self._outbox.append((lane.chunk(end, finals[i], self.env.act_dim, self.source, i),
                                 record))
            self._lanes[i] = Lane()

    def _send_open(self) -> None:
        """Every lane's steps not sent yet to the outbox as OPEN chunks (the budget is
        reached, or a cut)."""
        for i, lane in enumerate(self._lanes):
            if lane.act:
                self._outbox.append((lane.chunk(ChunkEnd.OPEN, None, self.env.act_dim,
                                                self.source, i), None))
                lane.sent = True
        self._unsent = 0

    def _end_simulation(self) -> None:
        """End the simulation's episode without records (after a solver fault, or an
        interruption): each active agent's steps not yet sent and its last valid state go to
        the outbox as a truncated chunk (which also closes its chunks already sent)."""
        if self._obs is not None:
            rows = (self._obs,) if self._one else self._obs
            for i in self._running:
                lane = self._lanes[i]
                if lane.act or lane.sent:
                    self._outbox.append((lane.chunk(ChunkEnd.TRUNCATED, rows[i],
                                                    self.env.act_dim, self.source, i), None))
        self._lanes = [Lane() for _ in range(self.n_agents)]
        self._running = []
        self._unsent = 0
        self._obs = None
        self._interrupted = False

    def _deliver(self) -> tuple[Chunk | None, EpisodeRecord | None]:
        """The outbox's first chunk, at most the budget's steps (a longer one is split: its
        first part goes OPEN, the rest waits); (None, None) when it is empty."""
        if not self._outbox:
            return None, None
        chunk, record = self._outbox.popleft()
        if chunk.act.shape[0] <= self._limit:
            return chunk, record
        k = self._limit
        head = chunk._replace(obs=chunk.obs[:k], act=chunk.act[:k], rew=chunk.rew[:k],
                              mu_mean=chunk.mu_mean[:k], mu_std=chunk.mu_std[:k],
                              end=ChunkEnd.OPEN)
        rest = chunk._replace(obs=chunk.obs[k:], act=chunk.act[k:], rew=chunk.rew[k:],
                              mu_mean=chunk.mu_mean[k:], mu_std=chunk.mu_std[k:])
        self._outbox.appendleft((rest, record))
        return head, None

    def _failed(self, failure: SolverFailure) -> SolverFailure:
        """The failure of the environment, naming this actor's rank."""
        return SolverFailure(f"actor rank {self.source}: {failure}")

    def _count_fault(self, fault: SolverFault, what: str) -> None:
        """Count and log a solver fault; the ``max_failures``-th in a row raises
        :class:`~hpc_refer.envs.external.SolverFailure` (the episode in progress is then
        interrupted: its closing chunks are the next steps', e.g. after a checkpoint)."""
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

    def cut(self) -> Chunk | None:
        """The next chunk to send now (the steps of every lane not sent yet go to the outbox
        as OPEN chunks first when it is empty): a preempted actor hands over what it has
        before its chunk is full, and the episodes go on. None when there is none, or when
        the next one ends an episode: that one leaves with its record, at the next release."""
        if not self._outbox:
            self._send_open()
        if self._outbox and self._outbox[0][1] is not None:
            return None
        return self._deliver()[0]

    def evaluate(self, episodes: int, seed: int | None = None,
                 final: bool = False) -> list[EpisodeRecord]:
        """Run ``episodes`` whole episodes (simulations) of the deterministic policy (action
        = ``to_env(mean)``), the first reset with ``seed``: a record per agent and
        simulation, in agent order, each with the simulation's metric values; nothing is
        recorded for training and the actor's generator and noise are untouched. Only
        between episodes (raises RuntimeError while one is in progress: call it at an
        episode boundary), unless ``final``: the run is over, so the training episode in
        progress and any chunk not sent are dropped first (nothing more is stored; the
        last checkpoint holds them). A solver fault ends its evaluation episode without a
        record (counted and logged)."""
        if final:
            self._end_simulation()
            self._outbox.clear()
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
        """One simulation of the mean policy from ``reset(seed)``: a record per agent."""
        return evaluation_episode(self.env, self._start(self.env.reset(seed)),
                                  lambda obs: self._transition(obs, False)[3:])

    def checkpoint_state(self) -> StateTree:
        """Everything the actor needs to continue: its generator, the OU noise (agents x
        act_dim), the episode in progress (the current rows, agents x row_dim, None between
        episodes; each agent's lane; the active agents; the outbox's chunks with their
        records; whether it is interrupted), the first reset's seed if still unused, the
        fault counters, the uniform warm-up's steps left, the environment's state (None when
        it cannot give one, see :meth:`~hpc_refer.envs.TeamDriver.checkpoint_state`), its
        stack of past states (``env.history``; None without one) and the rows of its step
        series (None without one). The policy copy is not part of it (the caller saves the
        parameters it loads)."""
        active = np.zeros(self.n_agents, bool)
        active[self._running] = True
        return ACTOR_FORMAT.stamp({
            "rng": numpy_rng_state(self.rng),
            "noise": self._noise.reshape(self.n_agents, -1).copy(),
            "obs": None if self._obs is None else self._obs.reshape(self.n_agents, -1).copy(),
            "lanes": {str(i): lane.state(self.row_dim, self.env.act_dim)
                      for i, lane in enumerate(self._lanes)},
            "active": active,
            "outbox": {str(k): _outgoing_tree(item) for k, item in enumerate(self._outbox)},
            "interrupted": self._interrupted,
            "seed": self._seed,
            "faults": self.faults,
            "faults_in_a_row": self._faults_in_a_row,
            "warmup_left": self._warmup_left,
            "env": self.env.checkpoint_state(),
            "history": None if self.env.stack is None else self.env.stack.state(),
            "series": self.env.series_state(),
        })

    def restore_state(self, tree: StateTree) -> None:
        """Continue from :meth:`checkpoint_state` (on a fresh actor of the same environment
        kind). The episode in progress continues when the environment takes the saved
        state; otherwise it is interrupted: the next :meth:`step` returns its closing
        truncated chunks at each active agent's last state (what a solver fault sends,
        without counting one), so the learner's open tails are closed and never joined to the
        next episode. A tree of any version of :data:`ACTOR_FORMAT` (upgraded first)."""
        tree = ACTOR_FORMAT.upgrade(tree)
        set_numpy_rng_state(self.rng, tree["rng"])
        self._noise = np.array(tree["noise"], np.float64).reshape(self._noise.shape)
        self._obs = None if tree["obs"] is None else np.array(tree["obs"], np.float32).reshape(
            *self._agent_shape, self.row_dim)
        self._lanes = [Lane.of(tree["lanes"][str(i)]) for i in range(self.n_agents)]
        self._running = [int(i) for i in np.flatnonzero(np.asarray(tree["active"], bool))]
        self._unsent = sum(len(lane.act) for lane in self._lanes)
        self._outbox = deque(_outgoing_of(tree["outbox"][str(k)], self.source)
                             for k in range(len(tree["outbox"])))
        self._seed = None if tree["seed"] is None else int(tree["seed"])
        self.faults = int(tree["faults"])
        self._faults_in_a_row = int(tree["faults_in_a_row"])
        self._warmup_left = int(tree["warmup_left"])
        if tree["series"] is not None:
            self.env.restore_series(tree["series"])
        restored = tree["env"] is not None and self.env.restore_state(tree["env"])
        if restored and self.env.stack is not None:
            self.env.stack.restore(tree["history"])
        self._interrupted = bool(tree["interrupted"]) or (self._obs is not None
                                                           and not restored)

    @property
    def between_episodes(self) -> bool:
        """Whether no episode is in progress and nothing waits to be sent (an evaluation
        round may run now)."""
        return self._obs is None and not self._interrupted and not self._outbox


def _outgoing_tree(item: Outgoing) -> StateTree:
    """A chunk of the outbox and its record as a checkpoint tree."""
    chunk, record = item
    return {"obs": chunk.obs, "act": chunk.act, "rew": chunk.rew, "mu_mean": chunk.mu_mean,
            "mu_std": chunk.mu_std, "end": int(chunk.end), "agent": chunk.agent,
            "record": None if record is None else {
                "ret": record.ret, "length": record.length,
                "values": np.array(record.values, np.float64), "wall_s": record.wall_s}}


def _outgoing_of(tree: StateTree, source: int) -> Outgoing:
    """Inverse of :func:`_outgoing_tree` (the chunk of actor ``source``)."""
    agent = int(tree["agent"])
    chunk = Chunk(np.array(tree["obs"], np.float32), np.array(tree["act"], np.float32),
                  np.array(tree["rew"], np.float32), np.array(tree["mu_mean"], np.float32),
                  np.array(tree["mu_std"], np.float32), ChunkEnd(int(tree["end"])), source,
                  agent)
    r = tree["record"]
    record = None if r is None else EpisodeRecord(
        float(r["ret"]), int(r["length"]), tuple(float(v) for v in np.asarray(r["values"])),
        float(r["wall_s"]), agent)
    return chunk, record
