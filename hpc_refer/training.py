"""Training loops of the rank roles (see :mod:`hpc_refer.layout`).

Single process (world of one rank, L = E = 1): the loop alternates one environment step of the
actor with the gradient steps the learner owes (``grad_ratio`` per environment step once
training started); at the end of each chunk the learner stores it and the actor takes the
learner's parameters, as an actor rank does with its learner rank.

MPI: each learner loops over (receive the pending chunks of its actors; one allreduce of the
counters; one gradient step if owed; release waiting actors). Counters are global, so every
learner takes the same decisions in the same iteration and the collectives match. An actor
sends each chunk and waits for the reply: new parameters, or stop. Its learner holds the reply
while the learners owe more than ``grad_ratio * E * chunk_len`` gradient steps: the global
ratio of gradient to environment steps stays within one chunk per actor of ``grad_ratio``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from hpc_refer.actor import Actor
from hpc_refer.algorithms.vracer import StepStats, VRacer
from hpc_refer.config import Config
from hpc_refer.envs import (
    EnvironmentFinished,
    TeamDriver,
    env_dims,
    env_factory,
    is_external,
    make_env,
    serve_team,
)
from hpc_refer.layout import Layout
from hpc_refer.learner import Learner
from hpc_refer.metrics import RunDirectory
from hpc_refer.networks import GaussianPolicyValueNet, flat_state
from hpc_refer.parallel import ActorChannel, Fabric, LearnerChannel, Team


class IntervalStats:
    """Means of the step diagnostics and rates over one logging interval."""

    def __init__(self) -> None:
        self.reset(0, 0)

    def reset(self, env_steps: int, grad_steps: int) -> None:
        self.sums: dict[str, float] = {}
        self.count = 0
        self.t0 = time.perf_counter()
        self.env0, self.grad0 = env_steps, grad_steps

    def add(self, stats: StepStats) -> None:
        for k, v in asdict(stats).items():
            self.sums[k] = self.sums.get(k, 0.0) + v
        self.count += 1

    def record(self, learner: Learner, env_steps: int, n_far: int, n_stored: int,
               faults: int = 0) -> dict[str, float | int]:
        """The interval's metrics; far-policy fraction from the global counts; ``faults``:
        solver faults of all actors so far."""
        dt = max(time.perf_counter() - self.t0, 1e-9)
        refer = learner.algo.refer
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


def _log_interval(run: RunDirectory, record: dict[str, float | int], total: int) -> None:
    run.interval(record)
    run.log(run.progress(record, total))


def _policy_net(config: Config, obs_dim: int, act_dim: int) -> GaussianPolicyValueNet:
    return GaussianPolicyValueNet(obs_dim, act_dim, config.vracer.hidden,
                                  config.vracer.sigma_init)


def train_in_one_process(config: Config, run: RunDirectory) -> Learner:
    """Train V-RACER + ReF-ER with one actor and one learner in this process."""
    env = TeamDriver(make_env(config.run.env, 1, None), None)
    algo = VRacer(env.obs_dim, env.act_dim, config.vracer, config.refer, config.run.seed)
    learner = Learner(algo, config, env.obs_dim, env.act_dim, config.run.seed + 1)
    actor = Actor(env, _policy_net(config, env.obs_dim, env.act_dim),
                  config.vracer.action_bounds, config.run.seed + 1000, config.run.chunk_len)
    actor.load(learner.policy())
    total, every = config.run.steps, config.run.log_every
    interval = IntervalStats()
    try:
        for env_steps in range(1, total + 1):
            chunk, episode = actor.step()
            if episode is not None:
                run.episode(env_steps, 0, episode.ret, episode.length, episode.values)
            if chunk is not None:
                learner.store(chunk)
                learner.update_start(learner.replay.size, env_steps)
                actor.load(learner.policy())
            for _ in range(learner.steps_due(env_steps)):
                interval.add(learner.train_step())
            if env_steps % every == 0 or env_steps == total:
                replay = learner.replay
                _log_interval(run, interval.record(learner, env_steps, replay.n_far,
                                                   replay.n_transitions, actor.faults), total)
                interval.reset(env_steps, learner.grad_steps)
    finally:
        env.close()
    return learner


@dataclass
class LearnerResult:
    """What a learner rank ends with (tests inspect it)."""

    learner: Learner
    env_steps: int
    received: int = 0
    """Transitions received from this learner's actors."""
    episodes: list[tuple[int, int, float, int, tuple[float, ...]]] = field(default_factory=list)
    """(env_step, actor rank, return, length, metric values) of every episode received."""
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


class _LearnerLoop:
    """State of one learner rank's loop (see the module docstring)."""

    def __init__(self, config: Config, layout: Layout, fabric: Fabric,
                 run: RunDirectory | None) -> None:
        dims = env_dims(config.run.env, config.run.ranks_per_env)
        obs_dim, act_dim = dims if dims is not None else _agreed_dims(fabric, None)
        self.config = config
        self.fabric = fabric
        self.reducer = fabric.reducer()
        algo = VRacer(obs_dim, act_dim, config.vracer, config.refer, config.run.seed,
                      self.reducer)
        self.learner = Learner(algo, config, obs_dim, act_dim, config.run.seed + 1 + fabric.rank)
        self.channel = LearnerChannel(fabric.world, obs_dim, act_dim)
        self.run = run
        self.actors = layout.actors_of(fabric.rank)
        self.running = set(self.actors)
        self.waiting: list[int] = []
        self.result = LearnerResult(self.learner, 0)
        self.new_steps = 0
        self.new_episodes: list[tuple[int, float, int, tuple[float, ...]]] = []
        self.slack = config.replay.grad_ratio * layout.envs * config.run.chunk_len
        self.interval = IntervalStats()
        self.next_log = config.run.log_every
        self.logged_episodes = 0

    def handle(self, message: tuple) -> None:
        actor, chunk, episode = message
        self.running.discard(actor)
        if chunk is None:
            self.result.finished_actors.append(actor)
            return
        self.learner.store(chunk)
        self.new_steps += chunk.act.shape[0]
        self.result.received += chunk.act.shape[0]
        if episode is not None:
            self.new_episodes.append((actor, *episode))
        self.waiting.append(actor)

    def receive(self, block: bool) -> None:
        message = self.channel.poll(block)
        while message is not None:
            self.handle(message)
            message = self.channel.poll(False)

    def reduce_counters(self) -> tuple[int, int]:
        """Allreduce (new env steps, stored states, active actors); returns the last two."""
        tot = self.reducer.sum(np.array([self.new_steps, self.learner.replay.size,
                                         len(self.running) + len(self.waiting),
                                         sum(self.channel.faults.values())]))
        self.result.env_steps += int(tot[0])
        self.result.faults = int(tot[3])
        self.new_steps = 0
        step = self.result.env_steps
        self.result.episodes += [(step, *episode) for episode in self.new_episodes]
        self.new_episodes = []
        return int(tot[1]), int(tot[2])

    def release(self) -> None:
        flat = self.learner.policy()
        for actor in self.waiting:
            self.channel.send_params(actor, flat)
            self.running.add(actor)
        self.waiting = []

    def log(self) -> None:
        """Collective over learners: gather interval stats and episodes onto learner 0, which
        writes them and prints the progress line."""
        replay = self.learner.replay
        n_far, n_stored = self.reducer.sum(np.array([replay.n_far, replay.n_transitions]))
        record = self.interval.record(self.learner, self.result.env_steps, int(n_far),
                                      int(n_stored), self.result.faults)
        gathered = self.reducer.gather((record, self.result.episodes[self.logged_episodes:]))
        self.logged_episodes = len(self.result.episodes)
        if self.run is not None and gathered is not None:
            for _, episodes in gathered:
                for episode in sorted(episodes):
                    self.run.episode(*episode)
            _log_interval(self.run, record, self.config.run.steps)
        self.interval.reset(self.result.env_steps, self.learner.grad_steps)

    def loop(self) -> LearnerResult:
        total = self.config.run.steps
        flat = self.learner.policy()
        for actor in self.actors:
            self.channel.send_params(actor, flat)
        while True:
            idle = self.learner.steps_due(self.result.env_steps) <= 0 and bool(self.running)
            self.receive(block=idle)
            stored, active = self.reduce_counters()
            self.learner.update_start(stored, self.result.env_steps)
            if self.result.env_steps >= total or active == 0:
                break
            if self.learner.steps_due(self.result.env_steps) > 0:
                self.interval.add(self.learner.train_step())
                self.check_weights()
            if self.learner.steps_due(self.result.env_steps) <= self.slack:
                self.release()
            while self.result.env_steps >= self.next_log:
                self.log()
                self.next_log += self.config.run.log_every
        self.shutdown()
        return self.result

    def check_weights(self) -> None:
        k = self.config.run.checksum_every
        if k and self.learner.grad_steps % k == 0:
            checksum = float(flat_state(self.learner.algo.net).astype(np.float64).sum())
            if not self.reducer.checksums_agree(checksum):
                raise RuntimeError(
                    f"learner weights differ after {self.learner.grad_steps} gradient steps"
                )

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
            self.interval.add(self.learner.train_step())
            self.check_weights()
        self.log()


def learner_main(config: Config, layout: Layout, fabric: Fabric,
                 run: RunDirectory | None) -> LearnerResult:
    """A learner rank: serve its actors, train with the other learners, log (rank 0)."""
    return _LearnerLoop(config, layout, fabric, run).loop()


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
    net = _policy_net(config, env.obs_dim, env.act_dim)
    channel = ActorChannel(fabric.world, layout.learner_of(index), flat_state(net).size)
    result = ActorResult()
    try:
        if not channel.recv_reply():
            return result
        actor = Actor(env, net, config.vracer.action_bounds, config.run.seed + 1000 + index,
                      config.run.chunk_len, source=fabric.rank)
        actor.load(channel.params)
        while True:
            try:
                chunk, episode = actor.step()
            except EnvironmentFinished:
                channel.send_done()
                result.finished_early = True
                return result
            result.faults = channel.faults = actor.faults
            if chunk is None:
                continue
            channel.send_chunk(chunk, (episode.ret, episode.length, episode.values)
                               if episode else None)
            result.sent += chunk.act.shape[0]
            result.episodes += episode is not None
            if not channel.recv_reply():
                return result
            actor.load(channel.params)
    finally:
        env.close()


def solver_main(config: Config, fabric: Fabric) -> None:
    """A solver rank of a multi-rank environment team: follow the actor's calls."""
    assert fabric.team is not None
    team = Team(fabric.team)
    serve_team(env_factory(config.run.env, config.run.ranks_per_env)(team), team)


def set_threads(config: Config) -> None:
    """One (or ``run.threads``) torch thread per rank."""
    torch.set_num_threads(config.run.threads)
