"""The learner loop: what every learner rank runs, and one process too (with one actor).

A learner loops over (receive the pending chunks of its actors; one allreduce of the
counters; one gradient step if owed; release waiting actors). Counters are global, so every
learner takes the same decisions in the same iteration and the collectives match. An actor
sends each chunk and waits for the reply: new parameters, or stop. Its learner holds the reply
while the learners owe more than ``grad_ratio * E * chunk_len`` gradient steps: the global
ratio of gradient to environment steps stays within one chunk per actor of ``grad_ratio``.
An idle learner of several waits at most :data:`IDLE_WAIT_S` for its own actors before it
joins the iteration's allreduce, so that it never holds the replies to the others' actors.

Step budgets
------------
Each release (new parameters) carries the number of environment steps the actor may take
before it sends its chunk: at most ``chunk_len``, fewer near the end of the run, so that the
actors of all learners together never take more than ``run.steps``. The counters summed in
every iteration hold the steps received, the steps *granted* to running actors and not
received yet, and the number of waiting actors of each learner; from these every learner
knows the same remainder R = ``run.steps`` - received - granted and the same order of all
waiting actors (learner by learner), and grants its own ones their share of R
(:func:`grant_steps`, at most ``chunk_len``), so the budgets of one iteration sum to at most
R over all learners. The shares follow the actors' speeds (the steps of an actor's latest
chunk over the time from its release to its message, summed in the counters too): the
waiting actors get the part of R that is theirs beside the running ones, each in proportion
to its speed, so near the end a slow actor is granted only what it takes in the time the
others need for the rest, and no actor waits for the last chunk of a slow one (BENCHMARKS 23).
Until every actor's speed is known (the first chunks, after a restart), all weigh the same:
R // W each of the W waiting actors while none runs. An actor granted nothing
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
actor over an in-process channel (:class:`~hpc_refer.loop.local_channel.LocalChannel`, whose
``in_process`` is true): the actor runs when the learner would wait for a message (a blocking
poll), so a run is deterministic and takes the same decisions as an MPI run with one actor in
which messages arrive only while the learner idles. The loop talks to either channel only
through :class:`LearnerSide`.

Who owns what: :class:`LearnerLoop` schedules (with :class:`Schedule`: when to log,
checkpoint and evaluate) and holds the one count of environment steps; what it knows of its
actors is an :class:`~hpc_refer.loop.actor_book.ActorBook`, what it reports a
:class:`~hpc_refer.loop.intervals.LoopReport`; its checkpoint part is written by
:mod:`hpc_refer.loop.learner_checkpoint`.

Checkpoints, preemption, evaluation
-----------------------------------
The learners decide together, from the summed loop counters, when to checkpoint (every
``run.checkpoint_every`` environment steps, where the loop stops early, and at the end, after
the gradient steps still owed: the last checkpoint of a finished run holds the state that
``policy.h5`` holds), so every learner takes the checkpoint in the same iteration. Under MPI
the learners first *quiesce* their actors (a cut request makes a running actor send the
steps it has, without waiting for its chunk to fill), then each actor writes its part (rng,
episode in progress, environment state, policy copy), each learner its own (networks,
optimizers, replay shard, ReF-ER state, rng, loop state) and learner 0 publishes the
checkpoint (see :mod:`hpc_refer.loop.checkpoint`). In one
process the actor is idle whenever the learner runs, so nothing is cut and a checkpoint
changes nothing: a run resumed from it continues bit for bit.

SIGTERM and SIGUSR1 (:data:`STOP`) count in the loop counters: every learner stops in the same
iteration, checkpoints and stops its actors. An environment that failed for good
(:class:`~hpc_refer.envs.external.SolverFailure`) stops the run the same way, with the
failure's message. Every ``run.eval_every`` environment steps the actor of environment 0 runs
``run.eval_episodes`` episodes of the mean policy at its next episode boundary; they go to
``eval.csv``. A round asked for at the run's last step (``run.steps`` a multiple of
``run.eval_every``), or still pending there, runs after the last gradient step: the actor drops
its training episode in progress for it (:meth:`LearnerLoop.shutdown`), so a run of N steps
reports the policy it ends with at step N. It comes after the last checkpoint, which a longer
restart resumes, so the restart reruns that round at its next episode boundary instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from hpc_refer.config.resolve import Config
from hpc_refer.config.tables import RunConfig
from hpc_refer.envs.supervision import STOP
from hpc_refer.loop import checkpoint
from hpc_refer.loop.actor_book import ActorBook
from hpc_refer.loop.intervals import LoopReport
from hpc_refer.loop.learner import Learner
from hpc_refer.loop.learner_checkpoint import write_learner_part
from hpc_refer.loop.policy_file import save_policy
from hpc_refer.report.clock import CLOCK
from hpc_refer.report.formats import TreeFormat
from hpc_refer.report.metrics import RunDirectory
from hpc_refer.report.records import Incoming, LoggedEpisode, MessageKind, StateTree
from hpc_refer.report.schema import POLICY_FILE

LOG = logging.getLogger(__name__)


def episode_times_and_agents(tree: StateTree) -> StateTree:
    """Version 1 -> 2 of the loop's tree: each unlogged episode (``episodes``, ``evals``)
    gets its end time ``wall_s`` where it has none (written before episodes carried it: nan)
    and its ``agent`` where it has none (written before several agents: agent 0)."""
    out = dict(tree)
    for key in ("episodes", "evals"):
        episodes = dict(tree[key])
        count = len(episodes["env_step"])
        episodes.setdefault("wall_s", np.full(count, np.nan))
        episodes.setdefault("agent", np.zeros(count, np.int64))
        out[key] = episodes
    return out


def interval_counts_per_statistic(tree: StateTree) -> StateTree:
    """Upgrade 2 -> 3 of the learner loop's tree: the interval's one count of steps becomes a
    count per statistic (a delayed actor's loss comes from some steps only); in a version 2
    tree every statistic came from every step."""
    interval = dict(tree["interval"])
    count = int(interval.pop("count"))
    interval["counts"] = {k: count for k in interval["sums"]}
    return {**tree, "interval": interval}


LOOP_FORMAT = TreeFormat("learner loop", (episode_times_and_agents,
                                          interval_counts_per_statistic))
"""The learner loop's tree (:meth:`LearnerLoop.checkpoint_state`: its counters, schedule,
actor sets, unlogged episodes and interval sums and counts), version 3."""


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
    unmeasured: int
    """Actors running or waiting whose speed is not known yet."""
    running_speed: int
    """The summed speeds of the running actors (:func:`~hpc_refer.loop.actor_book.speed`)."""
    waiting: tuple[int, ...]
    """Actors waiting for a reply, per learner (each learner fills its own slot)."""
    waiting_speed: tuple[int, ...]
    """The summed speeds of the waiting actors with a known one, per learner."""

    def pack(self) -> np.ndarray:
        return np.array([*self[:-2], *self.waiting, *self.waiting_speed], np.float64)

    @classmethod
    def unpack(cls, flat: np.ndarray) -> LoopCounters:
        fixed = len(cls._fields) - 2
        learners = (len(flat) - fixed) // 2
        ints = [int(x) for x in flat]
        return cls._make([*ints[:fixed], tuple(ints[fixed:fixed + learners]),
                          tuple(ints[fixed + learners:])])

    @classmethod
    def zero(cls, learners: int) -> LoopCounters:
        """Counters of a loop that has summed none yet."""
        return cls.unpack(np.zeros(len(cls._fields) - 2 + 2 * learners))

    def grant_weights(self) -> tuple[tuple[int, ...], int]:
        """The weights that share the remaining steps (:func:`grant_steps`): the waiting
        actors' summed speed per learner and the running ones' speed; while any actor's
        speed is unknown, every actor weighs 1 (actors counted)."""
        if self.unmeasured:
            return self.waiting, self.active - sum(self.waiting)
        return self.waiting_speed, self.running_speed


def shares(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` (integers >= 0, some > 0):
    floor(total w_i / sum w) each, then one more to each of the first ones with w_i > 0 until
    the parts sum to ``total`` (fewer than the positive weights are left over)."""
    whole = sum(weights)
    parts = [total * w // whole for w in weights]
    left = total - sum(parts)
    for i, w in enumerate(weights):
        if left == 0:
            break
        if w:
            parts[i] += 1
            left -= 1
    return parts


def grant_steps(remaining: int, waiting: Sequence[int], running: int, weights: Sequence[int],
                rank: int, chunk_len: int) -> list[int]:
    """The step budgets of learner ``rank``'s waiting actors, whose weights (speeds) are
    ``weights``, in its order.

    ``remaining``: the steps R of the run neither received nor granted; ``waiting``: the
    summed weight V_k of the waiting actors of every learner k, V_w their sum; ``running``:
    the summed weight V_r of the running actors (:meth:`LoopCounters.grant_weights`). At the
    actors' speeds R takes R / (V_w + V_r) more time, so the waiting actors together get
    R_w = floor(R V_w / (V_w + V_r)) steps (all of R when none runs), learner k the share
    S_k of R_w in proportion to V_k and its actor i the share of S_k in proportion to w_i
    (:func:`shares`), none more than ``chunk_len``. The budgets of all learners sum to R_w,
    or less where the cap cut them: never more than max(R, 0). Where every actor weighs 1 and
    none runs, this is R // W each of W waiting actors, the first R % W one more. With
    speeds, no actor is granted more steps than it takes in the time the others need for
    theirs: near the end of a run the budgets shrink with what remains, a slow actor's most,
    so all actors step until the last steps are taken instead of waiting for a slow one's
    last chunk.
    """
    if not weights or remaining <= 0:
        return [0] * len(weights)
    total = sum(waiting)
    own = shares(remaining * total // (total + running), waiting)[rank]
    return [min(chunk_len, g) for g in shares(own, weights)]


IDLE_WAIT_S = 0.02
"""The longest an idle learner of several waits for a message of its own actors before it
joins the iteration's reduction anyway (:meth:`LearnerLoop.receive`). Every iteration sums
the loop counters over the learners, so a learner blocked until one of its own actors sends
would hold the iteration, and with it the replies to every other learner's actors: with
solver steps of seconds, each team would wait at each chunk for the slowest learner's next
message (BENCHMARKS 23: 56 teams, 8 learners). Its cost: an idle learner's iteration (an
allreduce of the counters) every 20 ms, against a reply delayed by up to 20 ms."""
POLL_PAUSE_S = 0.001
"""The pause between two looks for a message while an idle learner waits (asleep: a
blocking probe would keep polling, on an oversubscribed core too)."""


def wait_for_message(channel: LearnerSide, deadline: float,
                     pause: float = POLL_PAUSE_S) -> Incoming | None:
    """The first message of ``channel`` to arrive before ``deadline`` (a
    ``time.perf_counter()`` time), else None; between looks the process sleeps ``pause``
    seconds."""
    while True:
        message = channel.poll(False)
        if message is not None or time.perf_counter() >= deadline:
            return message
        time.sleep(pause)


class LearnerSide(Protocol):
    """The learner's end of the actor messages: over MPI
    (:class:`~hpc_refer.parallel.channels.LearnerChannel`) or in this process
    (:class:`~hpc_refer.loop.local_channel.LocalChannel`)."""

    in_process: bool
    """Whether the actors run inside :meth:`poll` (one process): then none is ever
    mid-chunk at a checkpoint, and a restored one resumes through :meth:`resume`."""

    def poll(self, block: bool) -> Incoming | None: ...

    def send_params(self, actor: int, flat: np.ndarray, budget: int) -> None: ...

    def send_stop(self, actor: int) -> None: ...

    def send_cut(self, actor: int) -> None: ...

    def send_eval(self, actor: int, flat: np.ndarray, episodes: int,
                  final: bool = False) -> None: ...

    def request_checkpoints(self, actors: list[int], step: int) -> None: ...

    def resume(self, budgets: dict[int, int]) -> None: ...


@dataclass
class Schedule:
    """When the loop writes a record, a checkpoint and asks for an evaluation round: thresholds
    of environment steps, the same on every learner (the counts are global)."""

    log_every: int
    checkpoint_every: int
    eval_every: int
    next_log: int
    next_checkpoint: int | None
    next_eval: int | None
    last_checkpoint: int = -1
    """Env step of the last checkpoint written (none twice at one step)."""
    eval_step: int | None = None
    """Env step at which the pending evaluation round was asked for (None: none)."""

    @classmethod
    def of(cls, run: RunConfig) -> Schedule:
        return cls(run.log_every, run.checkpoint_every, run.eval_every, run.log_every,
                   run.checkpoint_every or None, run.eval_every or None)

    def logged(self, step: int) -> None:
        """A record was made at ``step``: the next is due at the next multiple of
        ``run.log_every`` (one record per crossing, never two at one step)."""
        self.next_log = (step // self.log_every + 1) * self.log_every

    def checkpoint_due(self, step: int) -> bool:
        return self.next_checkpoint is not None and step >= self.next_checkpoint

    def passed_checkpoint(self, step: int) -> None:
        """A checkpoint is being taken at ``step``: the next is due one interval on."""
        while self.next_checkpoint is not None and step >= self.next_checkpoint:
            self.next_checkpoint += self.checkpoint_every

    def ask_evaluations(self, step: int) -> None:
        """Ask for the evaluation round whose step ``step`` reached (one pending at most)."""
        while self.next_eval is not None and step >= self.next_eval:
            self.eval_step = self.next_eval if self.eval_step is None else self.eval_step
            self.next_eval += self.eval_every

    def ask_final_evaluation(self, step: int) -> None:
        """At the run's last step ``step``: a round due there (a threshold reached since the
        last ask) supersedes a pending one, labelled with the last threshold reached (it
        evaluates the final policy); else a pending round, if any, stays as it is."""
        if self.next_eval is not None and step >= self.next_eval:
            self.eval_step = step // self.eval_every * self.eval_every
            self.next_eval = self.eval_step + self.eval_every

    def checkpoint_state(self) -> StateTree:
        return {"next_log": self.next_log, "next_checkpoint": self.next_checkpoint,
                "next_eval": self.next_eval, "eval_step": self.eval_step,
                "last_checkpoint": self.last_checkpoint}

    def restore_state(self, tree: StateTree) -> None:
        self.next_log, self.next_checkpoint = tree["next_log"], tree["next_checkpoint"]
        self.next_eval, self.eval_step = tree["next_eval"], tree["eval_step"]
        self.last_checkpoint = tree["last_checkpoint"]


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
    """Solver faults of all actors, as last reported in their messages."""
    stopped_by: str = ""
    """Why the loop stopped before ``run.steps``: 'signal', or the failure's message."""
    stop_signal: int = 0
    """The number of the stop signal (SIGTERM, SIGUSR1) when one stopped the loop: the
    first one of the learners that received one."""


class LearnerLoop:
    """One learner rank's loop (see the module docstring), over any :class:`LearnerSide`.

    ``run`` (learner 0 of a run with a run directory, else None) is where records go,
    ``run_dir`` (every learner; None: no checkpoints) where checkpoint parts go;
    ``eval_actor`` the actor rank of this learner that runs evaluation rounds, if any;
    ``action_box`` the environment's (low, high), which policy files record (None: unknown
    here; only the learner that writes them needs it).
    """

    def __init__(self, config: Config, learner: Learner, channel: LearnerSide,
                 actors: list[int], envs: int, run: RunDirectory | None,
                 run_dir: Path | None = None, eval_actor: int | None = None,
                 meta: dict[str, Any] | None = None,
                 action_box: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        self.config = config
        self.learner = learner
        self.reducer = learner.reducer
        self.channel = channel
        self.run_dir = run_dir
        self.meta = meta or {}
        self.eval_actor = eval_actor
        self.action_box = action_box
        self.book = ActorBook.of(actors)
        self.report = LoopReport(learner, self.reducer, run, config.run.steps)
        self.schedule = Schedule.of(config.run)
        self.env_steps = 0
        """Environment steps of all actors so far (the global count, equal on every
        learner): the run's step."""
        self.received = 0
        """Transitions received from this learner's actors."""
        self.faults = 0
        """Solver faults of all actors so far (global)."""
        self.new_steps = 0
        self.counters = LoopCounters.zero(self.reducer.size)
        """The counters of the latest reduction (:meth:`sum_counters`)."""
        self.slack = config.replay.grad_ratio * envs * config.run.chunk_len
        self.resumed = False
        self.stopped_by = ""
        self.stop_signal = 0

    @property
    def result(self) -> LearnerResult:
        """What this learner has done so far."""
        return LearnerResult(self.learner, self.env_steps, self.received,
                             self.report.episodes, self.report.evals,
                             list(self.book.finished), self.faults, self.stopped_by,
                             self.stop_signal)

    def handle(self, message: Incoming) -> None:
        """Book one actor message; store its steps and note its episodes."""
        if self.book.note(message, time.perf_counter()):
            chunk = message.chunk
            assert chunk is not None
            self.learner.store(chunk)
            steps = chunk.act.shape[0]
            self.new_steps += steps
            self.received += steps
            if message.episode is not None:
                self.report.episode(message.actor, message.episode)
        elif message.kind is MessageKind.EVAL:
            self.report.evaluation(message.actor, message.evals)

    def receive(self, block: bool) -> None:
        """Handle the messages that arrived; with ``block``, wait for one first (the wait is
        the learner's idle time, ``learner_busy`` of the interval records). A learner of
        several under MPI waits at most :data:`IDLE_WAIT_S` (:func:`wait_for_message`): the
        iteration's reduction that follows needs every learner, so one blocked until its own
        actors send would hold the replies to every other learner's actors."""
        start = time.perf_counter()
        if block and self.reducer.size > 1 and not self.channel.in_process:
            message = wait_for_message(self.channel, start + IDLE_WAIT_S)
        else:
            message = self.channel.poll(block)
        if block:
            self.report.interval.idle += time.perf_counter() - start
        while message is not None:
            self.handle(message)
            message = self.channel.poll(False)

    def sum_counters(self) -> LoopCounters:
        """Collective over learners: the loop counters summed (kept as ``counters``)."""
        book = self.book
        waiting = [0] * self.reducer.size
        waiting_speed = [0] * self.reducer.size
        waiting[self.reducer.rank] = len(book.waiting)
        unmeasured = book.unmeasured
        if not unmeasured:
            waiting_speed[self.reducer.rank] = book.speed_sum(book.waiting)
        local = LoopCounters(self.new_steps, self.learner.replay.size,
                             len(book.running) + len(book.waiting), book.total_faults,
                             int(STOP()), len(book.failures), sum(book.granted.values()),
                             unmeasured, 0 if unmeasured else book.speed_sum(book.running),
                             tuple(waiting), tuple(waiting_speed))
        self.counters = LoopCounters.unpack(self.reducer.sum(local.pack()))
        return self.counters

    def reduce_counters(self) -> LoopCounters:
        """Sum the loop counters over learners; book the interval's episodes."""
        total = self.sum_counters()
        self.env_steps += total.new_steps
        self.faults = total.faults
        self.new_steps = 0
        if self.report.book(self.env_steps, self.schedule.eval_step):
            self.schedule.eval_step = None
        return total

    def release(self) -> None:
        """Answer the waiting actors: the actor of a pending evaluation round evaluates,
        the others get the parameters with their step budget (:func:`grant_steps`, from the
        counters of this iteration's reduction); one granted nothing keeps waiting."""
        counters, book = self.counters, self.book
        assert counters.waiting[self.reducer.rank] == len(book.waiting)
        if not book.waiting:  # (most iterations: the policy vector costs 0.2 ms to build)
            return
        waiting, running = counters.grant_weights()
        weights = ([1] * len(book.waiting) if counters.unmeasured
                   else [book.speeds[a] for a in book.waiting])
        budgets = grant_steps(self.config.run.steps - self.env_steps - counters.granted,
                              waiting, running, weights, self.reducer.rank,
                              self.config.run.chunk_len)
        flat, now = self.learner.policy(), time.perf_counter()
        kept = []
        for actor, budget in zip(book.waiting, budgets, strict=True):
            if (actor == self.eval_actor and self.schedule.eval_step is not None
                    and book.between_episodes[actor]):
                self.channel.send_eval(actor, flat, self.config.run.eval_episodes)
                book.release(actor, None, now)
            elif budget:
                self.channel.send_params(actor, flat, budget)
                book.release(actor, budget, now)
            else:
                kept.append(actor)
        book.waiting = kept

    def log(self, final: bool = False) -> None:
        """Collective over learners: the interval record (:meth:`LoopReport.log`)."""
        if self.report.log(self.env_steps, self.faults, final):
            self.schedule.logged(self.env_steps)

    def train_step(self) -> None:
        self.report.step_taken(self.learner.train_step().stats)
        k = self.config.run.checksum_every
        if k and self.learner.grad_steps % k == 0 and not self.reducer.checksums_agree(
                self.learner.algo.checksum()):
            raise RuntimeError(
                f"learner weights differ after {self.learner.grad_steps} gradient steps"
            )

    def advance(self) -> None:
        """The rest of an iteration, after the stop and checkpoint decisions: a gradient
        step if owed, release actors within the slack, evaluation and logging schedules."""
        if self.learner.steps_due(self.env_steps) > 0:
            self.train_step()
        step = self.env_steps
        self.schedule.ask_evaluations(step)
        if self.learner.steps_due(step) <= self.slack:
            self.release()
        if step >= self.schedule.next_log:
            self.log()

    def loop(self) -> LearnerResult:
        total = self.config.run.steps
        self.sum_counters()
        if self.resumed:
            self.advance()
        else:
            self.release()
        while True:
            idle = self.learner.steps_due(self.env_steps) <= 0 and bool(self.book.running)
            self.receive(block=idle)
            counters = self.reduce_counters()
            self.learner.update_start(counters.stored, self.env_steps)
            if counters.stop_signals or counters.failures:
                self.stop_early(counters)
                return self.result
            step = self.env_steps
            if step >= total or counters.active == 0:
                break
            if self.schedule.checkpoint_due(step):
                self.checkpoint()
            self.advance()
        self.shutdown()
        return self.result

    def drain(self) -> None:
        """Wait for every running actor's message and handle it (after a cut or a stop)."""
        while self.book.running:
            message = self.channel.poll(block=True)
            assert message is not None
            self.handle(message)

    def checkpoint(self) -> None:
        """Collective over learners (and their actors): write this iteration's checkpoint.

        Under MPI the running actors are cut first and their steps stored (the counters are
        reduced again), so no actor is mid-chunk while the parts are written.
        """
        self.schedule.passed_checkpoint(self.env_steps)
        if self.run_dir is None:
            return
        if not self.channel.in_process:
            for actor in self.book.running:
                self.channel.send_cut(actor)
            self.drain()
            self.reduce_counters()
        step = self.env_steps
        if step == self.schedule.last_checkpoint:
            return
        self.schedule.last_checkpoint = step
        self.channel.request_checkpoints(self.book.answering, step)
        write_learner_part(self.run_dir, step, self.reducer.rank, self.learner, self,
                           self.config)
        self.reducer.sum(np.zeros(1))  # every part is written
        run = self.report.run
        if run is not None:
            meta = {**self.meta, "env_step": step, "grad_step": self.learner.grad_steps,
                    "wall_s": CLOCK.now(), "files": run.offsets()}
            checkpoint.publish(self.run_dir, step, meta, self.config.run.checkpoint_keep)
            self.save_policy()
            LOG.info("checkpoint at step %d: %s", step, self.run_dir / "checkpoints")

    def save_policy(self) -> None:
        """Learner 0: the current policy as RUN_DIR/policy.h5 (for ``hpc_refer.evaluate``)."""
        if self.report.run is not None and self.run_dir is not None:
            save_policy(self.run_dir / POLICY_FILE, self.learner.algo, self.config.to_dict(),
                        self.env_steps, self.learner.grad_steps, self.action_box)

    def checkpoint_state(self) -> StateTree:
        """The loop's own state (this learner's): counts, schedules, its actors' sets,
        unlogged episodes and the interval's sums."""
        return LOOP_FORMAT.stamp({
            "env_steps": self.env_steps, "received": self.received, "faults": self.faults,
            **self.schedule.checkpoint_state(), **self.book.checkpoint_state(),
            **self.report.checkpoint_state()})

    def restore_state(self, tree: StateTree, same_actors: bool,
                      unlogged: list[StateTree]) -> None:
        """Continue from :meth:`checkpoint_state`; the actors' sets only when this learner
        serves the same actors as the one that wrote it (else all of them wait); the
        episodes not logged yet of the loop trees ``unlogged``. Trees of any version of
        :data:`LOOP_FORMAT` (upgraded first)."""
        tree = LOOP_FORMAT.upgrade(tree)
        unlogged = [LOOP_FORMAT.upgrade(t) for t in unlogged]
        self.resumed = True
        self.env_steps, self.received = tree["env_steps"], tree["received"]
        self.faults = tree["faults"]
        self.schedule.restore_state(tree)
        self.report.restore_state(tree, unlogged)
        if same_actors:
            self.book.restore_state(tree)
        if self.channel.in_process:
            # Only here can an actor be running at a checkpoint (MPI actors are cut first):
            # released, not run yet. It runs with a budget recomputed from this run's steps
            # (a restart asks for more steps than the checkpoint's, so it is >= 1).
            running = len(self.book.running)
            budgets = grant_steps(self.config.run.steps - self.env_steps, (running,), 0,
                                  [1] * running, 0, self.config.run.chunk_len)
            self.book.granted = dict(zip(sorted(self.book.running), budgets, strict=True))
            self.channel.resume(self.book.granted)

    def stop_early(self, counters: LoopCounters) -> None:
        """Stop on a signal or a failed environment: cut the actors, checkpoint, stop them.
        Learner 0 learns why from every learner (their actors' failures, the signal each
        received), which the entry point records (state.txt, log.txt)."""
        self.stopped_by = "signal" if counters.stop_signals else "failure"
        gathered = self.reducer.gather((self.book.failures, STOP.signal))
        if gathered is not None:
            failures = [m for ms, _ in gathered for m in ms]
            self.stopped_by = failures[0] if failures else "signal"
            self.stop_signal = next((n for _, n in gathered if n), 0)
        self.log(final=True)
        self.checkpoint()
        for actor in self.book.waiting:
            self.channel.send_stop(actor)
        self.book.waiting = []

    def shutdown(self) -> None:
        """The end of a run that reached its steps: take the last chunk of each running
        actor; make the gradient steps still owed for all stored data; write the final
        checkpoint, so that it holds the state that ``policy.h5`` holds (a restart continues
        from the run's final policy, not from the one before the owed steps); stop the actors
        but the one of the evaluation round due at the last step (module docstring), which
        runs with the final policy, then stops too."""
        self.schedule.ask_final_evaluation(self.env_steps)
        evaluator = self.eval_actor if self.schedule.eval_step is not None else None
        while self.book.running:
            message = self.channel.poll(block=True)
            assert message is not None
            self.handle(message)
        self.reduce_counters()
        while self.learner.steps_due(self.env_steps) > 0:
            self.train_step()
        self.checkpoint()
        self.stop_waiting(keep=evaluator)
        if evaluator in self.book.waiting:
            self.channel.send_eval(evaluator, self.learner.policy(),
                                   self.config.run.eval_episodes, final=True)
            message = self.channel.poll(block=True)
            assert message is not None
            self.handle(message)
            if message.kind is not MessageKind.EVAL:
                LOG.warning("the evaluation round at the end did not run: %s",
                            message.failure)
            self.stop_waiting()
        if self.schedule.eval_step is not None:  # on every learner: a collective
            self.reduce_counters()
        self.log(final=True)
        self.save_policy()

    def stop_waiting(self, keep: int | None = None) -> None:
        """Stop every waiting actor but ``keep``."""
        for actor in self.book.waiting:
            if actor != keep:
                self.channel.send_stop(actor)
        self.book.waiting = [a for a in self.book.waiting if a == keep]
