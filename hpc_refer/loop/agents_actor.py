"""The actor of a simulation of several agents (a solver that declares ``n_agents`` > 1):
one policy shared by all agents, each agent's trajectory an episode of its own.

Each environment step the policy copy runs once over the agents' states (one batched numpy
forward call, [n, obs_dim] -> [n, A]), each agent draws its action from its own Gaussian
mu_i = N(m_w(s_i), sigma_w(s_i)^2) (the OU noise of plain-ER DDPG runs per agent), and the
solver answers with every agent's state, reward and status (validated by
:class:`~hpc_refer.envs.TeamDriver`). An agent whose status is TERMINAL or TRUNCATED has
finished its episode: its chunk closes, its episode record is made, and it takes no part in
the rest of the simulation (its rows of later answers are ignored; its rows of later actions
are its policy mean, which the solver ignores). The simulation's episode ends when every
agent has finished; the next step resets the solver. The solver's episode metrics
(``episode_values()``) belong to the simulation: they go with the records of the agents that
finish at its last step, and are nan for agents that finished before.

Lanes and the outbox. Each agent has a lane of pending steps; its chunks carry the agent's
index (:attr:`~hpc_refer.report.records.Chunk.agent`), so the replay links each agent's chunks into
its own episode (its own V-tbc, rho, far-policy count and forgetting). Chunks wait in an
outbox and leave one per message, as the learner loop expects (one chunk per release, at
most the release's step budget: a longer one is split, its first part OPEN). Steps are
counted per agent: ``run.steps``, ``run.chunk_len`` and the budgets count stored transitions,
n per environment step with n agents active. When the steps pending over all lanes reach the
budget, every lane's steps go to the outbox as OPEN chunks; while the outbox holds chunks the
actor takes no environment step. A run's last budget can be smaller than the agents still
active: the steps of that last environment step that exceed it are never sent (at most
n - 1 transitions).

Faults end the simulation's episode: the lanes' pending steps go to the learner as truncated
chunks at their last valid state (no records), as a single agent's do
(:class:`~hpc_refer.loop.actor.Actor`). Checkpoints carry the lanes, the active agents and the
outbox, so a restored actor continues bit for bit.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from hpc_refer.algorithms.kit.networks import BehaviourPolicy
from hpc_refer.config.modes import ActionBounds, Exploration
from hpc_refer.config.tables import RunConfig
from hpc_refer.envs import TeamDriver
from hpc_refer.envs.external import SolverFailure, SolverFault
from hpc_refer.envs.interface import Status
from hpc_refer.loop.actor import Actor, Pending, pending_chunk
from hpc_refer.report.clock import CLOCK
from hpc_refer.report.records import Chunk, ChunkEnd, EpisodeRecord, StateTree


@dataclass
class Lane:
    """One agent's episode in progress: its pending steps, return, length, and whether
    chunks of it were sent already."""

    pending: Pending = field(default_factory=Pending)
    ret: float = 0.0
    length: int = 0
    sent: bool = False


Outgoing = tuple[Chunk, EpisodeRecord | None]
"""A chunk waiting in the outbox, with the episode it ends."""


class AgentsActor(Actor):
    """Steps a simulation of ``env.n_agents`` agents with one shared policy (see the
    module's docstring); the interface of :class:`~hpc_refer.loop.actor.Actor`."""

    def __init__(self, env: TeamDriver, net: BehaviourPolicy, action_bounds: ActionBounds,
                 seed: int, chunk_len: int, source: int = 0,
                 exploration: Exploration = Exploration.GAUSSIAN,
                 max_failures: int = RunConfig.max_env_failures) -> None:
        super().__init__(env, net, action_bounds, seed, chunk_len, source, exploration,
                         max_failures)
        self.n_agents = env.n_agents
        self._noise = np.zeros((self.n_agents, env.act_dim))
        self._lanes = [Lane() for _ in range(self.n_agents)]
        self._active = np.zeros(self.n_agents, bool)
        """The agents whose episode goes on in the simulation in progress."""
        self._outbox: deque[Outgoing] = deque()

    @property
    def between_episodes(self) -> bool:
        """No simulation in progress and nothing waiting to be sent."""
        return self._obs is None and not self._interrupted and not self._outbox

    def step(self) -> tuple[Chunk | None, EpisodeRecord | None]:
        """One environment step of all active agents, or none while chunks wait to be sent;
        returns the next chunk of the outbox, if any, and the episode it ends."""
        if not self._outbox and self._interrupted:
            self._end_simulation()
        if self._outbox:
            return self._deliver()
        try:
            if self._obs is None:
                self._obs = self._start(self.env.reset(self._seed))
                self._seed = None
                self._noise[:] = 0.0
                self._active[:] = True
            u, mean, std, nxt, rewards, statuses = self._agents_transition(self._obs, True)
        except SolverFault as fault:
            self._count_fault(fault, "simulation ended and environment reset")
            self._end_simulation()
            return self._deliver()
        except SolverFailure as failure:
            self._interrupted = True
            raise self._failed(failure) from failure
        ending: list[tuple[int, ChunkEnd]] = []
        for i in (int(k) for k in np.flatnonzero(self._active)):
            lane = self._lanes[i]
            p = lane.pending
            p.obs.append(self._obs[i])
            p.act.append(u[i])
            p.rew.append(float(rewards[i]))
            p.mean.append(mean[i])
            p.std.append(std[i])
            lane.ret += float(rewards[i])
            lane.length += 1
            if statuses[i] != Status.CONTINUE:
                ending.append((i, ChunkEnd.TERMINATED if statuses[i] == Status.TERMINAL
                               else ChunkEnd.TRUNCATED))
        for k, _ in ending:
            self._active[k] = False
        values = self.env.end_episode() if not self._active.any() else None
        for k, end in ending:
            self._close_lane(k, end, nxt[k], values)
        self._obs = nxt if self._active.any() else None
        if self._obs is not None and sum(len(lane.pending.act) for lane in self._lanes
                                         ) >= self._limit:
            self._send_open()
        return self._deliver()

    def _agents_transition(self, obs: np.ndarray, explore: bool) -> tuple[
            np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`Actor._transition` for all agents at once: the policy over the [n,
        obs_dim] states in one call, one draw of [n, A] noise, one solver step."""
        mean, std, carry = self._policy(obs)
        u = (mean + std * self._draw(mean.shape)).astype(np.float32) if explore else mean
        nxt, rewards, statuses = self.env.step_agents(self.to_env(u))
        self._faults_in_a_row = 0
        return u, mean, std, self._row(nxt, carry), rewards, statuses

    def _nan_values(self) -> tuple[float, ...]:
        return (float("nan"),) * len(self.env.metric_names)

    def _close_lane(self, i: int, end: ChunkEnd, final: np.ndarray,
                    values: tuple[float, ...] | None) -> None:
        """Agent ``i``'s episode is over: its last chunk and record to the outbox."""
        lane = self._lanes[i]
        record = EpisodeRecord(lane.ret, lane.length,
                               values if values is not None else self._nan_values(),
                               CLOCK.now(), i)
        self._outbox.append((pending_chunk(lane.pending, end, final, self.env.act_dim,
                                           self.source, i), record))
        self._lanes[i] = Lane()

    def _send_open(self) -> None:
        """Every lane's pending steps to the outbox as OPEN chunks (the budget is reached,
        or a cut)."""
        for i, lane in enumerate(self._lanes):
            if lane.pending.act:
                self._outbox.append((pending_chunk(lane.pending, ChunkEnd.OPEN, None,
                                                   self.env.act_dim, self.source, i), None))
                lane.pending = Pending()
                lane.sent = True

    def _end_simulation(self) -> None:
        """End the simulation's episode without records (a fault, an interruption): each
        active agent's steps not yet sent and its last valid state go to the outbox as a
        truncated chunk (which also closes its chunks already sent)."""
        if self._obs is not None:
            for i in np.flatnonzero(self._active):
                lane = self._lanes[i]
                if lane.pending.act or lane.sent:
                    self._outbox.append((pending_chunk(
                        lane.pending, ChunkEnd.TRUNCATED, self._obs[i], self.env.act_dim,
                        self.source, int(i)), None))
        self._lanes = [Lane() for _ in range(self.n_agents)]
        self._active[:] = False
        self._obs = None
        self._interrupted = False

    def _deliver(self) -> tuple[Chunk | None, EpisodeRecord | None]:
        """The outbox's first chunk, at most the budget's steps (a longer one is split: its
        first part goes OPEN, the rest waits); (None, None) when it is empty."""
        if not self._outbox:
            return None, None
        chunk, record = self._outbox.popleft()
        m = chunk.act.shape[0]
        if m <= self._limit:
            return chunk, record
        k = self._limit
        head = chunk._replace(obs=chunk.obs[:k], act=chunk.act[:k], rew=chunk.rew[:k],
                              mu_mean=chunk.mu_mean[:k], mu_std=chunk.mu_std[:k],
                              end=ChunkEnd.OPEN)
        rest = chunk._replace(obs=chunk.obs[k:], act=chunk.act[k:], rew=chunk.rew[k:],
                              mu_mean=chunk.mu_mean[k:], mu_std=chunk.mu_std[k:])
        self._outbox.appendleft((rest, record))
        return head, None

    def cut(self) -> Chunk | None:
        """The next chunk to send now (the pending steps of every lane go to the outbox as
        OPEN chunks first when it is empty); None when there is none, or when it ends an
        episode: that one leaves with its record, at the next release."""
        if not self._outbox:
            self._send_open()
        if self._outbox and self._outbox[0][1] is not None:
            return None
        return self._deliver()[0]

    def _evaluation_episode(self, seed: int | None) -> list[EpisodeRecord]:
        """One simulation of the mean policy: a record per agent, each with the
        simulation's metric values (see :meth:`Actor.evaluate`)."""
        obs = self._start(self.env.reset(seed))
        active = np.ones(self.n_agents, bool)
        ret, length = np.zeros(self.n_agents), np.zeros(self.n_agents, np.int64)
        while active.any():
            *_, obs, rewards, statuses = self._agents_transition(obs, False)
            ret[active] += rewards[active]
            length[active] += 1
            active &= statuses == Status.CONTINUE
        values, now = self.env.end_episode(), CLOCK.now()
        return [EpisodeRecord(float(ret[i]), int(length[i]), values, now, i)
                for i in range(self.n_agents)]

    def checkpoint_state(self) -> StateTree:
        """:meth:`Actor.checkpoint_state` with the lanes, the active agents and the
        outbox."""
        tree = super().checkpoint_state()
        obs_dim, act_dim = self.row_dim, self.env.act_dim
        tree["lanes"] = {str(i): {"pending": lane.pending.state(obs_dim, act_dim),
                                  "return": lane.ret, "length": lane.length,
                                  "sent": lane.sent}
                         for i, lane in enumerate(self._lanes)}
        tree["active"] = self._active.copy()
        tree["outbox"] = {str(k): _outgoing_tree(item) for k, item in enumerate(self._outbox)}
        return tree

    def restore_state(self, tree: StateTree) -> None:
        """Inverse of :meth:`checkpoint_state` (see :meth:`Actor.restore_state`: without
        the solver's state the simulation in progress is interrupted)."""
        super().restore_state(tree)
        self._lanes = [Lane(Pending.of(t["pending"]), float(t["return"]), int(t["length"]),
                            bool(t["sent"]))
                       for t in (tree["lanes"][str(i)] for i in range(self.n_agents))]
        self._active = np.array(tree["active"], bool)
        self._outbox = deque(_outgoing_of(tree["outbox"][str(k)], self.source)
                             for k in range(len(tree["outbox"])))


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


def actor_for(env: TeamDriver, net: BehaviourPolicy, action_bounds: ActionBounds, seed: int,
              chunk_len: int, source: int = 0, exploration: Exploration = Exploration.GAUSSIAN,
              max_failures: int = RunConfig.max_env_failures) -> Actor:
    """The actor of ``env``: an :class:`AgentsActor` for a solver of several agents, else
    an :class:`~hpc_refer.loop.actor.Actor` (same arguments)."""
    cls = AgentsActor if env.n_agents > 1 else Actor
    return cls(env, net, action_bounds, seed, chunk_len, source, exploration, max_failures)
