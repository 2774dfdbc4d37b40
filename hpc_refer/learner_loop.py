"""The learner loop: what every learner rank runs, and one process too (with one actor).

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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from hpc_refer import checkpoint
from hpc_refer.config import Config
from hpc_refer.learner import Learner
from hpc_refer.local_channel import LocalChannel
from hpc_refer.metrics import RunDirectory
from hpc_refer.records import (
    ChunkEnd,
    EpisodeRecord,
    Incoming,
    LoggedEpisode,
    MessageKind,
    StateTree,
    episodes_from,
    episodes_tree,
)
from hpc_refer.resume import part_attrs
from hpc_refer.schema import IntervalRecord
from hpc_refer.supervision import STOP


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
        of the stored transitions in the bins of :data:`~hpc_refer.schema.RHO_EDGES`) from
        the global counts (collectives over learners); ``faults``: solver faults of all
        actors so far."""
        dt = max(time.perf_counter() - self.t0, 1e-9)
        refer = learner.refer
        n_far, n_stored = learner.far_counts()
        return IntervalRecord(
            env_step=env_steps,
            grad_step=learner.grad_steps,
            env_steps_per_s=(env_steps - self.env0) / dt,
            grad_steps_per_s=(learner.grad_steps - self.grad0) / dt,
            learner_busy=1.0 - self.idle / dt,
            beta=refer.beta,
            c_max=refer.c_max,
            lr=refer.learning_rate,
            far_fraction=n_far / max(n_stored, 1),
            stored=n_stored,
            reward_scale=learner.replay.reward_scale,
            solver_faults=faults,
            rho_hist=tuple(learner.rho_histogram().tolist()),
            compiled=learner.step.compiled,
            stats={k: v / self.count for k, v in self.sums.items()} if self.count else {},
        )

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
        self.reducer = learner.reducer
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
        self.step_logged = False
        """Whether the kind of the learner step (compiled or eager) went to the log."""

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
        if not self.step_logged and self.run is not None:
            self.run.log(f"learner step: {self.learner.step.kind}")
            self.step_logged = True
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
                                   self.config.to_dict(), self.result.env_steps,
                                   self.learner.grad_steps)

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
