"""The training loop of the rank roles (see :mod:`hpc_refer.layout`), one for every launch.

A learner loops over (receive the pending chunks of its actors; one allreduce of the
counters; one gradient step if owed; release waiting actors). Counters are global, so every
learner takes the same decisions in the same iteration and the collectives match. An actor
sends each chunk and waits for the reply: new parameters, or stop. Its learner holds the reply
while the learners owe more than ``grad_ratio * E * chunk_len`` gradient steps: the global
ratio of gradient to environment steps stays within one chunk per actor of ``grad_ratio``.

One process (no mpirun, or ``mpirun -n 1``) runs this very loop with one learner and one
actor over an in-process channel (:class:`LocalChannel`): the actor runs when the learner
would wait for a message (a blocking poll), so a run is deterministic and takes the same
decisions as an MPI run with one actor in which messages arrive only while the learner idles.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np
import torch

from hpc_refer.actor import Actor
from hpc_refer.algorithms import ALGORITHMS, make_algorithm
from hpc_refer.config import Config, Exploration
from hpc_refer.envs import (
    EnvironmentFinished,
    TeamDriver,
    env_dims,
    env_factory,
    is_external,
    make_env,
    serve_team,
)
from hpc_refer.layout import Layout, Role, SeedRole, role_seed
from hpc_refer.learner import Learner
from hpc_refer.metrics import RunDirectory
from hpc_refer.networks import BehaviourPolicy, flat_state
from hpc_refer.parallel import (
    ActorChannel,
    Fabric,
    LearnerChannel,
    Reducer,
    SerialReducer,
    Team,
)
from hpc_refer.records import EpisodeRecord, Incoming, LoggedEpisode
from hpc_refer.replay import Chunk


class IntervalStats:
    """Means of the step diagnostics and rates over one logging interval."""

    def __init__(self) -> None:
        self.reset(0, 0)

    def reset(self, env_steps: int, grad_steps: int) -> None:
        self.sums: dict[str, float] = {}
        self.count = 0
        self.t0 = time.perf_counter()
        self.env0, self.grad0 = env_steps, grad_steps

    def add(self, stats: dict[str, float]) -> None:
        for k, v in stats.items():
            self.sums[k] = self.sums.get(k, 0.0) + v
        self.count += 1

    def record(self, learner: Learner, env_steps: int, faults: int) -> dict[str, float | int]:
        """The interval's metrics; far-policy fraction from the global counts (a collective
        over learners); ``faults``: solver faults of all actors so far."""
        dt = max(time.perf_counter() - self.t0, 1e-9)
        refer = learner.refer
        n_far, n_stored = learner.far_counts()
        out: dict[str, float | int] = {
            "env_step": env_steps,
            "grad_step": learner.grad_steps,
            "env_steps_per_s": (env_steps - self.env0) / dt,
            "grad_steps_per_s": (learner.grad_steps - self.grad0) / dt,
            "beta": refer.beta,
            "c_max": refer.c_max,
            "lr": refer.learning_rate,
            "far_fraction": n_far / max(n_stored, 1),
            "stored": n_stored,
            "reward_scale": learner.replay.reward_scale,
            "solver_faults": faults,
        }
        out.update({k: v / self.count for k, v in self.sums.items()} if self.count else {})
        return out


class LoopCounters(NamedTuple):
    """The counters the learners sum in every loop iteration (one allreduce)."""

    new_steps: int
    """Environment steps received since the last iteration."""
    stored: int
    """States in the replay."""
    active: int
    """Actors still running or waiting for a reply."""
    faults: int
    """Solver faults of the actors so far."""

    def pack(self) -> np.ndarray:
        return np.array(self, np.float64)

    @classmethod
    def unpack(cls, flat: np.ndarray) -> LoopCounters:
        return cls(*(int(x) for x in flat))


class LearnerSide(Protocol):
    """The learner's end of the actor messages: over MPI (:class:`LearnerChannel`) or in
    this process (:class:`LocalChannel`)."""

    faults: dict[int, int]

    def poll(self, block: bool) -> Incoming | None: ...

    def send_params(self, actor: int, flat: np.ndarray) -> None: ...

    def send_stop(self, actor: int) -> None: ...


def next_message(actor: Actor) -> tuple[Chunk, EpisodeRecord | None] | None:
    """Step ``actor`` until it has a chunk to send (with the episode it ends); None when its
    environment has finished its work."""
    while True:
        try:
            chunk, episode = actor.step()
        except EnvironmentFinished:
            return None
        if chunk is not None:
            return chunk, episode


class LocalChannel:
    """The in-process channel of one process: the learner's messages drive the actor.

    ``send_params`` loads the parameters into the actor (a copy, as a message would carry);
    a blocking ``poll`` runs the released actor up to its next chunk; a non-blocking one
    returns nothing, since no other process could have sent anything.
    """

    def __init__(self, actor: Actor, rank: int = 0) -> None:
        self.actor = actor
        self.rank = rank
        self.released = False
        self.faults: dict[int, int] = {}

    def poll(self, block: bool) -> Incoming | None:
        if not (block and self.released):
            return None
        self.released = False
        message = next_message(self.actor)
        self.faults[self.rank] = self.actor.faults
        if message is None:
            return Incoming(self.rank, None, None)
        return Incoming(self.rank, *message)

    def send_params(self, actor: int, flat: np.ndarray) -> None:
        self.actor.load(flat.copy())
        self.released = True

    def send_stop(self, actor: int) -> None:
        self.released = False


def _log_interval(run: RunDirectory, record: dict[str, float | int], total: int) -> None:
    run.interval(record)
    run.log(run.progress(record, total))


@dataclass
class LearnerResult:
    """What a learner rank ends with (tests inspect it)."""

    learner: Learner
    env_steps: int
    received: int = 0
    """Transitions received from this learner's actors."""
    episodes: list[LoggedEpisode] = field(default_factory=list)
    """Every episode received."""
    finished_actors: list[int] = field(default_factory=list)
    faults: int = 0
    """Solver faults of all actors, as last reported in their chunks."""


def _agreed_dims(fabric: Fabric, mine: tuple[int, int] | None) -> tuple[int, int]:
    """(obs_dim, act_dim) declared by every actor's external solver (collective; learners
    pass None)."""
    dims = {d for d in fabric.allgather(mine) if d is not None}
    if len(dims) != 1:
        raise RuntimeError(f"the external solvers declare different (obs_dim, act_dim): "
                           f"{sorted(dims)}; every environment must declare the same sizes")
    return dims.pop()


class LearnerLoop:
    """One learner rank's loop (see the module docstring), over any :class:`LearnerSide`."""

    def __init__(self, config: Config, learner: Learner, channel: LearnerSide,
                 actors: list[int], envs: int, run: RunDirectory | None) -> None:
        self.config = config
        self.learner = learner
        self.reducer = learner.algo.reducer
        self.channel = channel
        self.run = run
        self.actors = actors
        self.running = set(actors)
        self.waiting: list[int] = []
        self.result = LearnerResult(learner, 0)
        self.new_steps = 0
        self.new_episodes: list[tuple[int, EpisodeRecord]] = []
        self.slack = config.replay.grad_ratio * envs * config.run.chunk_len
        self.interval = IntervalStats()
        self.next_log = config.run.log_every
        self.logged_episodes = 0

    def handle(self, message: Incoming) -> None:
        self.running.discard(message.actor)
        if message.chunk is None:
            self.result.finished_actors.append(message.actor)
            return
        self.learner.store(message.chunk)
        steps = message.chunk.act.shape[0]
        self.new_steps += steps
        self.result.received += steps
        if message.episode is not None:
            self.new_episodes.append((message.actor, message.episode))
        self.waiting.append(message.actor)

    def receive(self, block: bool) -> None:
        message = self.channel.poll(block)
        while message is not None:
            self.handle(message)
            message = self.channel.poll(False)

    def reduce_counters(self) -> LoopCounters:
        """Sum the loop counters over learners; record the interval's episodes."""
        local = LoopCounters(self.new_steps, self.learner.replay.size,
                             len(self.running) + len(self.waiting),
                             sum(self.channel.faults.values()))
        total = LoopCounters.unpack(self.reducer.sum(local.pack()))
        self.result.env_steps += total.new_steps
        self.result.faults = total.faults
        self.new_steps = 0
        step = self.result.env_steps
        self.result.episodes += [LoggedEpisode(step, actor, ep.ret, ep.length, ep.values)
                                 for actor, ep in self.new_episodes]
        self.new_episodes = []
        return total

    def release(self) -> None:
        flat = self.learner.policy()
        for actor in self.waiting:
            self.channel.send_params(actor, flat)
            self.running.add(actor)
        self.waiting = []

    def log(self) -> None:
        """Collective over learners: gather interval stats and episodes onto learner 0, which
        writes them and prints the progress line."""
        record = self.interval.record(self.learner, self.result.env_steps, self.result.faults)
        gathered = self.reducer.gather((record, self.result.episodes[self.logged_episodes:]))
        self.logged_episodes = len(self.result.episodes)
        if self.run is not None and gathered is not None:
            for _, episodes in gathered:
                for episode in sorted(episodes):
                    self.run.episode(*episode)
            _log_interval(self.run, record, self.config.run.steps)
        self.interval.reset(self.result.env_steps, self.learner.grad_steps)

    def train_step(self) -> None:
        self.interval.add(self.learner.train_step().stats)
        k = self.config.run.checksum_every
        if k and self.learner.grad_steps % k == 0 and not self.reducer.checksums_agree(
                self.learner.algo.checksum()):
            raise RuntimeError(
                f"learner weights differ after {self.learner.grad_steps} gradient steps"
            )

    def loop(self) -> LearnerResult:
        total = self.config.run.steps
        flat = self.learner.policy()
        for actor in self.actors:
            self.channel.send_params(actor, flat)
        while True:
            idle = self.learner.steps_due(self.result.env_steps) <= 0 and bool(self.running)
            self.receive(block=idle)
            counters = self.reduce_counters()
            self.learner.update_start(counters.stored, self.result.env_steps)
            if self.result.env_steps >= total or counters.active == 0:
                break
            if self.learner.steps_due(self.result.env_steps) > 0:
                self.train_step()
            if self.learner.steps_due(self.result.env_steps) <= self.slack:
                self.release()
            while self.result.env_steps >= self.next_log:
                self.log()
                self.next_log += self.config.run.log_every
        self.shutdown()
        return self.result

    def shutdown(self) -> None:
        """Stop the waiting actors; take the last chunk of each running one, then stop it;
        then make the gradient steps still owed for all stored data."""
        for actor in self.waiting:
            self.channel.send_stop(actor)
        self.waiting = []
        while self.running:
            message = self.channel.poll(block=True)
            assert message is not None
            self.handle(message)
            for actor in self.waiting:
                self.channel.send_stop(actor)
            self.waiting = []
        self.reduce_counters()
        while self.learner.steps_due(self.result.env_steps) > 0:
            self.train_step()
        self.log()


def make_learner(config: Config, obs_dim: int, act_dim: int, reducer: Reducer) -> Learner:
    """The learner of learner rank ``reducer.rank``: networks seeded alike on every learner,
    minibatch sampling seeded per learner."""
    algo = make_algorithm(config, obs_dim, act_dim,
                          role_seed(config.run.seed, SeedRole.NETWORKS), reducer)
    return Learner(algo, config, role_seed(config.run.seed, SeedRole.SAMPLING, reducer.rank))


def make_actor(config: Config, env: TeamDriver, index: int, source: int) -> Actor:
    """The actor of environment ``index`` with a fresh copy of the behaviour policy."""
    cls = ALGORITHMS[config.run.algorithm]
    net: BehaviourPolicy = cls.behaviour_policy(env.obs_dim, env.act_dim, config.algorithm)
    exploration = (config.ddpg.exploration if config.run.algorithm == "ddpg"
                   else Exploration.GAUSSIAN)
    return Actor(env, net, config.run.action_bounds,
                 role_seed(config.run.seed, SeedRole.ACTOR, index), config.run.chunk_len,
                 source=source, exploration=exploration)


def train_local(config: Config, run: RunDirectory | None) -> LearnerResult:
    """One process: one learner and one actor, the learner loop over a :class:`LocalChannel`."""
    env = TeamDriver(make_env(config.run.env, 1, None), None)
    try:
        learner = make_learner(config, env.obs_dim, env.act_dim, SerialReducer())
        channel = LocalChannel(make_actor(config, env, 0, 0))
        return LearnerLoop(config, learner, channel, [0], 1, run).loop()
    finally:
        env.close()


def learner_main(config: Config, layout: Layout, fabric: Fabric,
                 run: RunDirectory | None) -> LearnerResult:
    """A learner rank: serve its actors, train with the other learners, log (rank 0)."""
    dims = env_dims(config.run.env, config.run.ranks_per_env)
    obs_dim, act_dim = dims if dims is not None else _agreed_dims(fabric, None)
    learner = make_learner(config, obs_dim, act_dim, fabric.reducer())
    channel = LearnerChannel(fabric.world, obs_dim, act_dim)
    return LearnerLoop(config, learner, channel, layout.actors_of(fabric.rank), layout.envs,
                       run).loop()


@dataclass
class ActorResult:
    """What an actor rank ends with (tests inspect it)."""

    sent: int = 0
    """Transitions sent to the learner."""
    episodes: int = 0
    finished_early: bool = False
    faults: int = 0
    """Solver faults (episodes ended by invalid solver messages)."""


def actor_main(config: Config, layout: Layout, fabric: Fabric) -> ActorResult:
    """An actor rank: run its team's environment with a policy copy; chunks to its learner."""
    assert fabric.team is not None
    team = Team(fabric.team)
    index = layout.team(fabric.rank)
    env = TeamDriver(make_env(config.run.env, config.run.ranks_per_env, team, index,
                              layout.envs), team)
    if is_external(config.run.env):
        _agreed_dims(fabric, (env.obs_dim, env.act_dim))
    actor = make_actor(config, env, index, fabric.rank)
    channel = ActorChannel(fabric.world, layout.learner_of(index), flat_state(actor.net).size)
    result = ActorResult()
    try:
        while channel.recv_reply():
            actor.load(channel.params)
            message = next_message(actor)
            result.faults = channel.faults = actor.faults
            if message is None:
                channel.send_done()
                result.finished_early = True
                return result
            chunk, episode = message
            channel.send_chunk(chunk, episode)
            result.sent += chunk.act.shape[0]
            result.episodes += episode is not None
        return result
    finally:
        env.close()


def solver_main(config: Config, fabric: Fabric) -> None:
    """A solver rank of a multi-rank environment team: follow the actor's calls."""
    assert fabric.team is not None
    team = Team(fabric.team)
    serve_team(env_factory(config.run.env, config.run.ranks_per_env)(team), team)


def run_role(config: Config, layout: Layout, fabric: Fabric | None,
             run: RunDirectory | None) -> LearnerResult | ActorResult | None:
    """Run this rank's role to the end; returns what a learner or actor rank ends with.

    A world of one rank (``fabric`` may then be None) trains in this process."""
    role = layout.role(fabric.rank if fabric is not None else 0)
    if role is Role.SINGLE:
        return train_local(config, run)
    assert fabric is not None
    if role is Role.LEARNER:
        return learner_main(config, layout, fabric, run)
    if role is Role.ACTOR:
        return actor_main(config, layout, fabric)
    solver_main(config, fabric)
    return None


def set_threads(config: Config) -> None:
    """One (or ``run.threads``) torch thread per rank."""
    torch.set_num_threads(config.run.threads)
