"""The training loop of the rank roles (see :mod:`hpc_refer.layout`), one for every launch.

A learner loops over (receive the pending chunks of its actors; one allreduce of the
counters; one gradient step if owed; release waiting actors). Counters are global, so every
learner takes the same decisions in the same iteration and the collectives match. An actor
sends each chunk and waits for the reply: new parameters, or stop. Its learner holds the reply
while the learners owe more than ``grad_ratio * E * chunk_len`` gradient steps: the global
ratio of gradient to environment steps stays within one chunk per actor of ``grad_ratio``.

Step budgets
------------
Each release (new parameters) carries the number of environment steps the actor may take
before it sends its chunk: at most ``chunk_len``, fewer near the end of the run, so that the
actors of all learners together never take more than ``run.steps``. The counters summed in
every iteration hold the steps received, the steps *granted* to running actors and not
received yet, and the number of waiting actors of each learner; from these every learner
knows the same remainder R = ``run.steps`` - received - granted and the same order of all
waiting actors (learner by learner), and grants its own ones their place's share of R
(:func:`grant_steps`: R // W each, one more to the first R % W, at most ``chunk_len``), so
the budgets of one iteration sum to at most R over all learners. An actor granted nothing
keeps waiting (a later iteration, or the stop at the end, answers it); an actor's grant is
over when its next message arrives (its chunk holds at most the budget, a cut or an episode
end sends fewer). Whenever steps remain and no actor runs, the first waiting one is granted
at least one step (or evaluates, if its round is due), so a run ends with exactly
``run.steps`` environment steps in its last ``train.jsonl`` record, whatever the episode
boundaries, unless it stops early (signal, failed environment) or every environment finished
its work (``EnvironmentFinished``) before. In one process the single actor is granted
min(``chunk_len``, ``run.steps`` - received): full chunks as before, and a shorter last one
where the run used to overshoot.

One process (no mpirun, or ``mpirun -n 1``) runs this very loop with one learner and one
actor over an in-process channel (:class:`LocalChannel`): the actor runs when the learner
would wait for a message (a blocking poll), so a run is deterministic and takes the same
decisions as an MPI run with one actor in which messages arrive only while the learner idles.

Checkpoints, preemption, evaluation
-----------------------------------
The learners decide together, from the summed loop counters, when to checkpoint (every
``run.checkpoint_every`` environment steps, and where the loop stops), so every learner takes
the checkpoint in the same iteration. Under MPI the learners first *quiesce* their actors
(a cut request makes a running actor send the steps it has, without waiting for its chunk to
fill), then each actor writes its part (rng, episode in progress, environment state, policy
copy), each learner its own (networks, optimizers, replay shard, ReF-ER state, rng, loop
state) and learner 0 publishes the checkpoint (see :mod:`hpc_refer.checkpoint`). In one
process the actor is idle whenever the learner runs, so nothing is cut and a checkpoint
changes nothing: a run resumed from it continues bit for bit.

SIGTERM and SIGUSR1 (:data:`STOP`) count in the loop counters: every learner stops in the same
iteration, checkpoints and stops its actors. An environment that failed for good
(:class:`~hpc_refer.envs.external.SolverFailure`) stops the run the same way, with the
failure's message. Every ``run.eval_every`` environment steps the actor of environment 0 runs
``run.eval_episodes`` episodes of the mean policy at its next episode boundary; they go to
``eval.csv``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np
import torch

from hpc_refer import checkpoint
from hpc_refer.actor import Actor
from hpc_refer.algorithms import ALGORITHMS, make_algorithm
from hpc_refer.config import Config, Exploration
from hpc_refer.envs import (
    EnvironmentFinished,
    SolverFailure,
    SolverSpec,
    TeamDriver,
    env_dims,
    env_factory,
    is_external,
    make_driver,
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
    Reply,
    SerialReducer,
    Team,
)
from hpc_refer.records import (
    EpisodeRecord,
    Incoming,
    IntervalRecord,
    LoggedEpisode,
    MessageKind,
    StateTree,
    episodes_from,
    episodes_tree,
)
from hpc_refer.replay import Chunk, ChunkEnd
from hpc_refer.resume import Resume, actor_part, part_attrs, restore_actor, restore_learner
from hpc_refer.supervision import STOP, Watchdog, end_stuck_process


class IntervalStats:
    """Means of the step diagnostics and rates over one logging interval."""

    def __init__(self) -> None:
        self.reset(0, 0)

    def reset(self, env_steps: int, grad_steps: int) -> None:
        self.sums: dict[str, float] = {}
        self.count = 0
        self.idle = 0.0
        """Seconds this learner spent blocked waiting for a message (nothing else to do)."""
        self.t0 = time.perf_counter()
        self.env0, self.grad0 = env_steps, grad_steps

    def add(self, stats: dict[str, float]) -> None:
        for k, v in stats.items():
            self.sums[k] = self.sums.get(k, 0.0) + v
        self.count += 1

    def record(self, learner: Learner, env_steps: int, faults: int) -> IntervalRecord:
        """The interval's metrics; far-policy fraction and ``rho_hist`` (counts of log10 rho
        of the stored transitions in the bins of :data:`~hpc_refer.learner.RHO_EDGES`) from
        the global counts (collectives over learners); ``faults``: solver faults of all
        actors so far."""
        dt = max(time.perf_counter() - self.t0, 1e-9)
        refer = learner.refer
        n_far, n_stored = learner.far_counts()
        out: IntervalRecord = {
            "env_step": env_steps,
            "grad_step": learner.grad_steps,
            "env_steps_per_s": (env_steps - self.env0) / dt,
            "grad_steps_per_s": (learner.grad_steps - self.grad0) / dt,
            "learner_busy": 1.0 - self.idle / dt,
            "beta": refer.beta,
            "c_max": refer.c_max,
            "lr": refer.learning_rate,
            "far_fraction": n_far / max(n_stored, 1),
            "stored": n_stored,
            "reward_scale": learner.replay.reward_scale,
            "solver_faults": faults,
            "rho_hist": learner.rho_histogram().tolist(),
        }
        out.update({k: v / self.count for k, v in self.sums.items()} if self.count else {})
        return out

    def checkpoint_state(self) -> StateTree:
        """The sums and counts (not the wall clock: rates restart with the resumed run)."""
        return {"sums": dict(self.sums), "count": self.count, "env0": self.env0,
                "grad0": self.grad0}

    def restore_state(self, tree: StateTree) -> None:
        self.sums = {k: float(v) for k, v in tree["sums"].items()}
        self.count, self.env0, self.grad0 = tree["count"], tree["env0"], tree["grad0"]
        self.t0 = time.perf_counter()


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
    stop_signals: int
    """Learners that received SIGTERM or SIGUSR1."""
    failures: int
    """Environments that failed for good."""
    granted: int
    """Environment steps granted to running actors and not received yet."""
    waiting: tuple[int, ...]
    """Actors waiting for a reply, per learner (each learner fills its own slot)."""

    def pack(self) -> np.ndarray:
        return np.array([*self[:-1], *self.waiting], np.float64)

    @classmethod
    def unpack(cls, flat: np.ndarray) -> LoopCounters:
        fixed = len(cls._fields) - 1
        return cls._make([*(int(x) for x in flat[:fixed]), tuple(int(x) for x in flat[fixed:])])


def grant_steps(remaining: int, waiting: Sequence[int], rank: int, chunk_len: int
                ) -> list[int]:
    """The step budgets of learner ``rank``'s waiting actors, in its order.

    ``remaining``: steps of the run neither received nor granted; ``waiting``: the waiting
    actors of every learner. All waiting actors, learner by learner, share ``remaining``:
    each gets ``remaining // W``, the first ``remaining % W`` one more, and none more than
    ``chunk_len``; the budgets of all learners sum to at most ``max(remaining, 0)``.
    """
    total = sum(waiting)
    first = sum(waiting[:rank])
    share, extra = divmod(max(remaining, 0), max(total, 1))
    return [min(chunk_len, share + (first + i < extra)) for i in range(waiting[rank])]


class LearnerSide(Protocol):
    """The learner's end of the actor messages: over MPI (:class:`LearnerChannel`) or in
    this process (:class:`LocalChannel`)."""

    faults: dict[int, int]

    def poll(self, block: bool) -> Incoming | None: ...

    def send_params(self, actor: int, flat: np.ndarray, budget: int) -> None: ...

    def send_stop(self, actor: int) -> None: ...

    def send_cut(self, actor: int) -> None: ...

    def send_eval(self, actor: int, flat: np.ndarray, episodes: int) -> None: ...

    def request_checkpoints(self, actors: list[int], step: int) -> None: ...


def empty_chunk(actor: Actor) -> Chunk:
    """A chunk without steps: an interrupted actor's answer when it has nothing pending."""
    obs = np.empty((0, actor.env.obs_dim), np.float32)
    act = np.empty((0, actor.env.act_dim), np.float32)
    return Chunk(obs, act, np.empty(0, np.float32), act, act, ChunkEnd.OPEN, actor.source)


def next_message(actor: Actor, interrupted: Callable[[], bool] = lambda: False
                 ) -> tuple[Chunk, EpisodeRecord | None] | None:
    """Step ``actor`` until it has a chunk to send (with the episode it ends); None when its
    environment has finished its work. When ``interrupted()`` turns true between steps, the
    steps collected so far are sent at once (possibly none)."""
    while True:
        try:
            chunk, episode = actor.step()
        except EnvironmentFinished:
            return None
        if chunk is not None:
            return chunk, episode
        if interrupted():
            cut = actor.cut()
            return (cut if cut is not None else empty_chunk(actor)), None


class LocalChannel:
    """The in-process channel of one process: the learner's messages drive the actor.

    ``send_params`` loads the parameters into the actor (a copy, as a message would carry)
    and grants it its step budget; a blocking ``poll`` runs the released actor up to its next
    chunk (or its evaluation round); a non-blocking one returns nothing, since no other
    process could have sent anything. The actor writes its checkpoint part when asked, into
    ``run_dir``.
    """

    def __init__(self, actor: Actor, rank: int = 0, run_dir: Path | None = None) -> None:
        self.actor = actor
        self.rank = rank
        self.run_dir = run_dir
        self.released = False
        self.eval_episodes = 0
        self.faults: dict[int, int] = {}

    def poll(self, block: bool) -> Incoming | None:
        if not (block and self.released):
            return None
        self.released = False
        try:
            if self.eval_episodes:
                episodes, self.eval_episodes = self.eval_episodes, 0
                return Incoming(self.rank, MessageKind.EVAL,
                                evals=tuple(self.actor.evaluate(episodes)))
            message = next_message(self.actor, STOP)
        except SolverFailure as failure:
            return Incoming(self.rank, MessageKind.FAILED, failure=str(failure))
        finally:
            self.faults[self.rank] = self.actor.faults
        if message is None:
            return Incoming(self.rank, MessageKind.FINISHED)
        return Incoming(self.rank, MessageKind.CHUNK, *message)

    def send_params(self, actor: int, flat: np.ndarray, budget: int) -> None:
        self.actor.load(flat.copy())
        self.actor.grant(budget)
        self.released = True

    def resume(self, budgets: dict[int, int]) -> None:
        """After a restore: the actor released before the checkpoint (a key of ``budgets``,
        with the budget recomputed for it) runs again, with the policy copy it had."""
        self.released = self.rank in budgets
        if self.released:
            self.actor.grant(budgets[self.rank])

    def send_stop(self, actor: int) -> None:
        self.released = False

    def send_cut(self, actor: int) -> None:
        """Nothing to cut: the actor runs only inside a blocking poll."""

    def send_eval(self, actor: int, flat: np.ndarray, episodes: int) -> None:
        self.actor.load(flat.copy())
        self.released = True
        self.eval_episodes = episodes

    def request_checkpoints(self, actors: list[int], step: int) -> None:
        if actors and self.run_dir is not None:
            checkpoint.write_tree(checkpoint.partial_dir(self.run_dir, step) / "actor-0.h5",
                                  actor_part(self.actor), {})


def _log_interval(run: RunDirectory, record: IntervalRecord, total: int) -> None:
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
    evals: list[LoggedEpisode] = field(default_factory=list)
    """Every evaluation episode received (``env_step``: when the round was asked for)."""
    finished_actors: list[int] = field(default_factory=list)
    faults: int = 0
    """Solver faults of all actors, as last reported in their chunks."""
    stopped_by: str = ""
    """Why the loop stopped before ``run.steps``: 'signal', or the failure's message."""


def _agreed_dims(fabric: Fabric, mine: tuple[int, int] | None) -> tuple[int, int]:
    """(obs_dim, act_dim) declared by every actor's external solver (collective; learners
    pass None)."""
    dims = {d for d in fabric.allgather(mine) if d is not None}
    if len(dims) != 1:
        raise RuntimeError(f"the external solvers declare different (obs_dim, act_dim): "
                           f"{sorted(dims)}; every environment must declare the same sizes")
    return dims.pop()


class LearnerLoop:
    """One learner rank's loop (see the module docstring), over any :class:`LearnerSide`.

    ``run_dir`` (every learner; None: no checkpoints) is where checkpoint parts go;
    ``eval_actor`` the actor rank of this learner that runs evaluation rounds, if any.
    """

    def __init__(self, config: Config, learner: Learner, channel: LearnerSide,
                 actors: list[int], envs: int, run: RunDirectory | None,
                 run_dir: Path | None = None, eval_actor: int | None = None,
                 meta: dict[str, Any] | None = None) -> None:
        self.config = config
        self.learner = learner
        self.reducer = learner.algo.reducer
        self.channel = channel
        self.run = run
        self.run_dir = run_dir
        self.meta = meta or {}
        self.actors = actors
        self.running: set[int] = set()
        self.waiting = list(actors)
        self.granted: dict[int, int] = {}
        """Step budget of each actor released with parameters, until its next message."""
        self.counters = LoopCounters(0, 0, 0, 0, 0, 0, 0, (0,) * self.reducer.size)
        """The counters of the latest reduction (:meth:`sum_counters`)."""
        self.between_episodes = dict.fromkeys(actors, True)
        """Whether each actor's last chunk ended an episode (evaluation may then run)."""
        self.result = LearnerResult(learner, 0)
        self.new_steps = 0
        self.new_episodes: list[tuple[int, EpisodeRecord]] = []
        self.new_evals: list[tuple[int, EpisodeRecord]] = []
        self.failures: list[str] = []
        self.stuck: set[int] = set()
        """Actors stuck in a solver call: they answer nothing any more."""
        self.slack = config.replay.grad_ratio * envs * config.run.chunk_len
        self.interval = IntervalStats()
        self.next_log = config.run.log_every
        self.logged_episodes = 0
        self.logged_evals = 0
        self.logged_at = -1
        """Env steps of the last record."""
        every = config.run.checkpoint_every
        self.next_checkpoint = every if every else None
        self.last_checkpoint = -1
        self.next_eval = config.run.eval_every or None
        self.eval_step: int | None = None
        """Env step at which the pending evaluation round was asked for (None: none)."""
        self.eval_actor = eval_actor
        self.resumed = False

    def handle(self, message: Incoming) -> None:
        actor = message.actor
        self.running.discard(actor)
        self.granted.pop(actor, None)
        if message.kind is MessageKind.FINISHED:
            self.result.finished_actors.append(actor)
            return
        if message.kind is MessageKind.STUCK:
            if actor in self.waiting:  # its main thread answered after all, then hung
                self.waiting.remove(actor)
            self.failures.append(message.failure)
            self.stuck.add(actor)
            return
        self.waiting.append(actor)
        if message.kind is MessageKind.FAILED:
            self.failures.append(message.failure)
            return
        if message.kind is MessageKind.EVAL:
            self.new_evals += [(actor, ep) for ep in message.evals]
            return
        chunk = message.chunk
        assert chunk is not None
        if chunk.obs.shape[0] == 0:
            return
        self.learner.store(chunk)
        steps = chunk.act.shape[0]
        self.new_steps += steps
        self.result.received += steps
        self.between_episodes[actor] = chunk.end != ChunkEnd.OPEN
        if message.episode is not None:
            self.new_episodes.append((actor, message.episode))

    def receive(self, block: bool) -> None:
        """Handle the messages that arrived; with ``block``, wait for one first (the wait is
        the learner's idle time, ``learner_busy`` of the interval records)."""
        start = time.perf_counter()
        message = self.channel.poll(block)
        if block:
            self.interval.idle += time.perf_counter() - start
        while message is not None:
            self.handle(message)
            message = self.channel.poll(False)

    def sum_counters(self) -> LoopCounters:
        """Collective over learners: the loop counters summed (kept as ``counters``)."""
        waiting = [0] * self.reducer.size
        waiting[self.reducer.rank] = len(self.waiting)
        local = LoopCounters(self.new_steps, self.learner.replay.size,
                             len(self.running) + len(self.waiting),
                             sum(self.channel.faults.values()), int(STOP()),
                             len(self.failures), sum(self.granted.values()), tuple(waiting))
        self.counters = LoopCounters.unpack(self.reducer.sum(local.pack()))
        return self.counters

    def reduce_counters(self) -> LoopCounters:
        """Sum the loop counters over learners; record the interval's episodes."""
        total = self.sum_counters()
        self.result.env_steps += total.new_steps
        self.result.faults = total.faults
        self.new_steps = 0
        step = self.result.env_steps
        self.result.episodes += [LoggedEpisode(step, actor, ep.ret, ep.length, ep.values)
                                 for actor, ep in self.new_episodes]
        self.new_episodes = []
        if self.new_evals:
            asked = self.eval_step if self.eval_step is not None else step
            self.result.evals += [LoggedEpisode(asked, actor, ep.ret, ep.length, ep.values)
                                  for actor, ep in self.new_evals]
            self.new_evals = []
            self.eval_step = None
        return total

    def release(self) -> None:
        """Answer the waiting actors: the actor of a pending evaluation round evaluates,
        the others get the parameters with their step budget (:func:`grant_steps`, from the
        counters of this iteration's reduction); one granted nothing keeps waiting."""
        counters = self.counters
        assert counters.waiting[self.reducer.rank] == len(self.waiting)
        budgets = grant_steps(self.config.run.steps - self.result.env_steps - counters.granted,
                              counters.waiting, self.reducer.rank, self.config.run.chunk_len)
        flat = self.learner.policy()
        kept = []
        for actor, budget in zip(self.waiting, budgets, strict=True):
            if (actor == self.eval_actor and self.eval_step is not None
                    and self.between_episodes[actor]):
                self.channel.send_eval(actor, flat, self.config.run.eval_episodes)
            elif budget:
                self.channel.send_params(actor, flat, budget)
                self.granted[actor] = budget
            else:
                kept.append(actor)
                continue
            self.running.add(actor)
        self.waiting = kept

    def log(self, final: bool = False) -> None:
        """Collective over learners: gather interval stats, episodes and evaluation episodes
        onto learner 0, which writes them and prints the progress line; the next record is
        due at the next multiple of ``run.log_every`` (one record per crossing, never two at
        one step). ``final``: the last
        record of a run, skipped when no environment step or episode came since the previous
        one (the counters are global, so every learner skips it alike)."""
        unlogged = (len(self.result.episodes) - self.logged_episodes
                    + len(self.result.evals) - self.logged_evals)
        if (final and self.result.env_steps == self.logged_at
                and not self.reducer.sum(np.array([unlogged]))[0]):
            return
        self.logged_at = self.result.env_steps
        every = self.config.run.log_every
        self.next_log = (self.result.env_steps // every + 1) * every
        record = self.interval.record(self.learner, self.result.env_steps, self.result.faults)
        gathered = self.reducer.gather((record, self.result.episodes[self.logged_episodes:],
                                        self.result.evals[self.logged_evals:]))
        self.logged_episodes = len(self.result.episodes)
        self.logged_evals = len(self.result.evals)
        if self.run is not None and gathered is not None:
            for episode in sorted(e for _, episodes, _ in gathered for e in episodes):
                self.run.episode(*episode)
            for evaluation in sorted(e for _, _, evals in gathered for e in evals):
                self.run.evaluation(*evaluation)
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

    def advance(self) -> None:
        """The rest of an iteration, after the stop and checkpoint decisions: a gradient
        step if owed, release actors within the slack, evaluation and logging schedules."""
        if self.learner.steps_due(self.result.env_steps) > 0:
            self.train_step()
        step = self.result.env_steps
        while self.next_eval is not None and step >= self.next_eval:
            self.eval_step = self.next_eval if self.eval_step is None else self.eval_step
            self.next_eval += self.config.run.eval_every
        if self.learner.steps_due(step) <= self.slack:
            self.release()
        if step >= self.next_log:
            self.log()

    def loop(self) -> LearnerResult:
        total = self.config.run.steps
        self.sum_counters()
        if self.resumed:
            self.advance()
        else:
            self.release()
        while True:
            idle = self.learner.steps_due(self.result.env_steps) <= 0 and bool(self.running)
            self.receive(block=idle)
            counters = self.reduce_counters()
            self.learner.update_start(counters.stored, self.result.env_steps)
            if counters.stop_signals or counters.failures:
                self.stop_early(counters)
                return self.result
            step = self.result.env_steps
            done = step >= total or counters.active == 0
            if done or (self.next_checkpoint is not None and step >= self.next_checkpoint):
                self.checkpoint()
            if done:
                break
            self.advance()
        self.shutdown()
        return self.result

    def checkpoint(self) -> None:
        """Collective over learners (and their actors): write this iteration's checkpoint.

        Under MPI the running actors are cut first and their steps stored (the counters are
        reduced again), so no actor is mid-chunk while the parts are written.
        """
        every = self.config.run.checkpoint_every
        while self.next_checkpoint is not None and self.result.env_steps >= self.next_checkpoint:
            self.next_checkpoint += every
        if self.run_dir is None:
            return
        if not isinstance(self.channel, LocalChannel):
            for actor in self.running:
                self.channel.send_cut(actor)
            while self.running:
                message = self.channel.poll(block=True)
                assert message is not None
                self.handle(message)
            self.reduce_counters()
        step = self.result.env_steps
        if step == self.last_checkpoint:
            return
        self.last_checkpoint = step
        part = checkpoint.partial_dir(self.run_dir, step)
        done = set(self.result.finished_actors) | self.stuck
        self.channel.request_checkpoints([a for a in self.actors if a not in done], step)
        rank = self.reducer.rank
        checkpoint.write_tree(part / f"learner-{rank}.h5",
                              {"learner": self.learner.checkpoint_state(),
                               "loop": self.checkpoint_state()}, part_attrs(self.config))
        self.reducer.sum(np.zeros(1))  # every part is written
        if self.run is not None:
            meta = {**self.meta, "env_step": step, "grad_step": self.learner.grad_steps,
                    "files": self.run.offsets()}
            checkpoint.publish(self.run_dir, step, meta, self.config.run.checkpoint_keep)
            self.save_policy()
            self.run.log(f"checkpoint at step {step}: {self.run_dir / 'checkpoints'}")

    def save_policy(self) -> None:
        """Learner 0: the current policy as RUN_DIR/policy.h5 (for ``hpc_refer.evaluate``)."""
        if self.run is not None and self.run_dir is not None:
            checkpoint.save_policy(self.run_dir / "policy.h5", self.learner.algo,
                                   self.config.to_dict())

    def checkpoint_state(self) -> StateTree:
        """The loop's own state (this learner's): counters, schedules, unlogged episodes."""
        return {
            "env_steps": self.result.env_steps, "received": self.result.received,
            "faults": self.result.faults, "next_log": self.next_log,
            "next_checkpoint": self.next_checkpoint, "next_eval": self.next_eval,
            "eval_step": self.eval_step, "last_checkpoint": self.last_checkpoint,
            "running": np.array(sorted(self.running), np.int64),
            "waiting": np.array(self.waiting, np.int64),
            "between_episodes": np.array([self.between_episodes[a] for a in self.actors]),
            "actors": np.array(self.actors, np.int64),
            "finished": np.array(self.result.finished_actors, np.int64),
            "episodes": episodes_tree(self.result.episodes[self.logged_episodes:]),
            "evals": episodes_tree(self.result.evals[self.logged_evals:]),
            "interval": self.interval.checkpoint_state(),
        }

    def restore_state(self, tree: StateTree, same_actors: bool) -> None:
        """Continue from :meth:`checkpoint_state`; the actors' sets only when this learner
        serves the same actors as the one that wrote it (else all of them wait)."""
        self.resumed = True
        self.result.env_steps = tree["env_steps"]
        self.result.received = tree["received"]
        self.result.faults = tree["faults"]
        self.next_log, self.next_checkpoint = tree["next_log"], tree["next_checkpoint"]
        self.next_eval, self.eval_step = tree["next_eval"], tree["eval_step"]
        self.last_checkpoint = tree["last_checkpoint"]
        self.result.episodes = episodes_from(tree["episodes"])
        self.result.evals = episodes_from(tree["evals"])
        self.interval.restore_state(tree["interval"])
        if same_actors:
            self.running = {int(a) for a in tree["running"]}
            self.waiting = [int(a) for a in tree["waiting"]]
            self.between_episodes = dict(zip(self.actors, (bool(b) for b in
                                                           tree["between_episodes"]),
                                             strict=True))
            self.result.finished_actors = [int(a) for a in tree["finished"]]
        else:
            self.running, self.waiting = set(), list(self.actors)
        if isinstance(self.channel, LocalChannel):
            # Only here can an actor be running at a checkpoint (MPI actors are cut first):
            # released, not run yet. It runs with a budget recomputed from this run's steps
            # (a restart asks for more steps than the checkpoint's, so it is >= 1).
            budgets = grant_steps(self.config.run.steps - self.result.env_steps,
                                  (len(self.running),), 0, self.config.run.chunk_len)
            self.granted = dict(zip(sorted(self.running), budgets, strict=True))
            self.channel.resume(self.granted)

    def stop_early(self, counters: LoopCounters) -> None:
        """Stop on a signal or a failed environment: cut the actors, checkpoint, stop them."""
        self.result.stopped_by = "signal" if counters.stop_signals else "failure"
        messages = self.reducer.gather(self.failures)
        if messages is not None:
            failures = [m for ms in messages for m in ms]
            self.result.stopped_by = failures[0] if failures else "signal"
        self.log(final=True)
        self.checkpoint()
        for actor in self.waiting:
            self.channel.send_stop(actor)
        self.waiting = []
        if self.run is not None:
            why = (f"signal {STOP.signal}" if self.result.stopped_by == "signal"
                   else self.result.stopped_by)
            self.run.log(f"stopped at step {self.result.env_steps} ({why}); resume with: "
                         f"python -m hpc_refer.run --restart {self.run_dir}")

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
        self.log(final=True)
        self.save_policy()


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
                 source=source, exploration=exploration,
                 max_failures=config.run.max_env_failures)


def outputs_of(config: Config, run_dir: Path | None) -> dict[str, Any]:
    """Where actors save their solvers' episode fields (``RUN_DIR/fields``), step series
    (``RUN_DIR/series``) and snapshots (``RUN_DIR/snapshots``, the episodes of
    ``run.snapshot``), and the series' stride: :func:`~hpc_refer.envs.make_driver`'s
    keywords (nothing saved without a run directory)."""
    return {"field_dir": run_dir / "fields" if run_dir is not None else None,
            "series_dir": run_dir / "series" if run_dir is not None else None,
            "series_stride": config.run.series_stride,
            "snapshot_dir": run_dir / "snapshots" if run_dir is not None else None,
            "snapshot_due": config.run.snapshot_due if config.run.snapshot else None}


def train_local(config: Config, run: RunDirectory | None, run_dir: Path | None = None,
                resume: Resume | None = None) -> LearnerResult:
    """One process: one learner and one actor, the learner loop over a :class:`LocalChannel`."""
    env = make_driver(SolverSpec.of(config, run_dir), None, timeout=config.run.env_step_timeout,
                      **outputs_of(config, run_dir))
    watchdog = Watchdog(env, config.run.env_step_timeout,
                        lambda text: end_stuck_process(text, run))
    try:
        learner = make_learner(config, env.obs_dim, env.act_dim, SerialReducer())
        actor = make_actor(config, env, 0, 0)
        channel = LocalChannel(actor, 0, run_dir)
        loop = LearnerLoop(config, learner, channel, [0], 1, run, run_dir, eval_actor=0,
                           meta={"learners": 1, "envs": 1, "config": config.to_dict(),
                                 "obs_dim": env.obs_dim, "act_dim": env.act_dim})
        if resume is not None:
            restore_learner(loop, resume, layout_same=resume.envs == 1)
            part = resume.part("actor-0.h5")
            if part is not None:
                restore_actor(actor, part)
        return loop.loop()
    finally:
        watchdog.close()
        env.close()


def learner_main(config: Config, layout: Layout, fabric: Fabric, run: RunDirectory | None,
                 run_dir: Path | None = None, resume: Resume | None = None) -> LearnerResult:
    """A learner rank: serve its actors, train with the other learners, log (rank 0)."""
    dims = env_dims(SolverSpec.of(config, run_dir))
    obs_dim, act_dim = dims if dims is not None else _agreed_dims(fabric, None)
    learner = make_learner(config, obs_dim, act_dim, fabric.reducer())
    channel = LearnerChannel(fabric.world, obs_dim, act_dim)
    actors = layout.actors_of(fabric.rank)
    eval_actor = layout.actor_rank(0) if layout.learner_of(0) == fabric.rank else None
    meta = {"learners": layout.learners, "envs": layout.envs, "config": config.to_dict(),
            "obs_dim": obs_dim, "act_dim": act_dim}
    loop = LearnerLoop(config, learner, channel, actors, layout.envs, run, run_dir,
                       eval_actor, meta)
    if resume is not None:
        restore_learner(loop, resume,
                        layout_same=(resume.learners, resume.envs) == (layout.learners,
                                                                       layout.envs))
    return loop.loop()


@dataclass
class ActorResult:
    """What an actor rank ends with (tests inspect it)."""

    sent: int = 0
    """Transitions sent to the learner."""
    episodes: int = 0
    finished_early: bool = False
    faults: int = 0
    """Solver faults (episodes ended by invalid solver messages)."""
    failure: str = ""
    """Why the environment failed for good, if it did."""


def actor_main(config: Config, layout: Layout, fabric: Fabric, run_dir: Path | None = None,
               resume: Resume | None = None) -> ActorResult:
    """An actor rank: run its team's environment with a policy copy; chunks to its learner;
    checkpoint parts and evaluation rounds when its learner asks."""
    assert fabric.team is not None
    team = Team(fabric.team)
    index = layout.team(fabric.rank)
    env = make_driver(SolverSpec.of(config, run_dir), team, index=index, envs=layout.envs,
                      timeout=config.run.env_step_timeout, **outputs_of(config, run_dir))
    if is_external(config.run.env):
        _agreed_dims(fabric, (env.obs_dim, env.act_dim))
    actor = make_actor(config, env, index, fabric.rank)
    if resume is not None:
        part = resume.part(f"actor-{index}.h5")
        if part is not None:
            restore_actor(actor, part)
    channel = ActorChannel(fabric.world, layout.learner_of(index), flat_state(actor.net).size)
    watchdog = Watchdog(env, config.run.env_step_timeout,
                        lambda text: channel.send_failed(text, stuck=True))
    result = ActorResult()
    try:
        while (reply := channel.recv_reply()) is not Reply.STOP:
            if reply is Reply.CHECKPOINT:
                assert run_dir is not None
                checkpoint.write_tree(checkpoint.partial_dir(run_dir, channel.step)
                                      / f"actor-{index}.h5", actor_part(actor),
                                      part_attrs(config))
                channel.send_saved()
                continue
            actor.load(channel.params)
            if result.failure:
                channel.send_failed(result.failure)
                continue
            try:
                if reply is Reply.EVAL:
                    channel.send_evals(actor.evaluate(channel.episodes))
                    continue
                actor.grant(channel.budget)
                message = next_message(actor, channel.cut_requested)
            except SolverFailure as failure:
                result.failure = str(failure)
                channel.send_failed(result.failure)
                continue
            finally:
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
        watchdog.close()
        env.close()


def solver_main(config: Config, layout: Layout, fabric: Fabric,
                run_dir: Path | None = None) -> None:
    """A solver rank of a multi-rank environment team: follow the actor's calls."""
    assert fabric.team is not None
    team = Team(fabric.team)
    serve_team(env_factory(SolverSpec.of(config, run_dir), layout.team(fabric.rank)), team)


def run_role(config: Config, layout: Layout, fabric: Fabric | None,
             run: RunDirectory | None, run_dir: Path | None = None,
             resume: Resume | None = None) -> LearnerResult | ActorResult | None:
    """Run this rank's role to the end; returns what a learner or actor rank ends with.

    A world of one rank (``fabric`` may then be None) trains in this process. ``run_dir``
    (on every rank; None: no checkpoints) receives the checkpoints; ``resume`` is the
    checkpoint to continue from."""
    role = layout.role(fabric.rank if fabric is not None else 0)
    if role is Role.SINGLE:
        return train_local(config, run, run_dir, resume)
    assert fabric is not None
    if role is Role.LEARNER:
        return learner_main(config, layout, fabric, run, run_dir, resume)
    if role is Role.ACTOR:
        return actor_main(config, layout, fabric, run_dir, resume)
    solver_main(config, layout, fabric, run_dir)
    return None


def set_threads(config: Config) -> None:
    """One (or ``run.threads``) torch thread per rank."""
    torch.set_num_threads(config.run.threads)
