"""What the learner loop reports: the means of the step diagnostics and the rates of one
logging interval, the episodes and evaluation episodes its actors sent, and their way to the
run directory (gathered over the learners onto learner 0, which writes episodes.csv,
eval.csv, train.jsonl and the progress line).

Notes
-----
Every learner keeps its own actors' episodes; :meth:`LoopReport.log` is collective over the
learners (one gather of the interval record and the episodes not logged yet), and only
learner 0 (the one with a run directory) writes.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from hpc_refer.algorithms.kit.collectives import Reducer
from hpc_refer.loop.learner import Learner
from hpc_refer.report.metrics import RunDirectory
from hpc_refer.report.records import (
    EpisodeRecord,
    LoggedEpisode,
    StateTree,
    episodes_from,
    episodes_tree,
)
from hpc_refer.report.schema import IntervalRecord

LOG = logging.getLogger(__name__)


class IntervalStats:
    """Means of the step diagnostics and rates over one logging interval."""

    def __init__(self) -> None:
        self.reset(0, 0)

    def reset(self, env_steps: int, grad_steps: int) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        """Per diagnostic, the steps that gave it (a delayed actor's loss comes from some)."""
        self.idle = 0.0
        """Seconds this learner spent blocked waiting for a message (nothing else to do)."""
        self.t0 = time.perf_counter()
        self.env0, self.grad0 = env_steps, grad_steps

    def add(self, stats: dict[str, float]) -> None:
        for k, v in stats.items():
            self.sums[k] = self.sums.get(k, 0.0) + v
            self.counts[k] = self.counts.get(k, 0) + 1

    def means(self) -> dict[str, float]:
        """Each diagnostic's mean over the steps of the interval that gave it."""
        return {k: v / self.counts[k] for k, v in self.sums.items()}

    def record(self, learner: Learner, env_steps: int, faults: int) -> IntervalRecord:
        """The interval's metrics; far-policy fraction and ``rho_hist`` (counts of log10 rho
        of the stored transitions in the bins of :data:`~hpc_refer.report.schema.RHO_EDGES`) from
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
            stats=self.means(),
        )

    def checkpoint_state(self) -> StateTree:
        """The sums and counts (not the wall clock: rates restart with the resumed run)."""
        return {"sums": dict(self.sums), "counts": dict(self.counts), "env0": self.env0,
                "grad0": self.grad0}

    def restore_state(self, tree: StateTree) -> None:
        self.sums = {k: float(v) for k, v in tree["sums"].items()}
        self.counts = {k: int(v) for k, v in tree["counts"].items()}
        self.env0, self.grad0 = tree["env0"], tree["grad0"]
        self.t0 = time.perf_counter()


class LoopReport:
    """One learner's reporting: interval statistics, episodes received, the run directory
    (learner 0 only, else None) and what of it is logged already."""

    def __init__(self, learner: Learner, reducer: Reducer, run: RunDirectory | None,
                 total_steps: int) -> None:
        self.learner = learner
        self.reducer = reducer
        self.run = run
        self.total_steps = total_steps
        self.interval = IntervalStats()
        self.episodes: list[LoggedEpisode] = []
        """Every episode received, in the order they were booked."""
        self.evals: list[LoggedEpisode] = []
        """Every evaluation episode (``env_step``: when the round was asked for)."""
        self._new_episodes: list[tuple[int, EpisodeRecord]] = []
        self._new_evals: list[tuple[int, EpisodeRecord]] = []
        self._logged_episodes = 0
        self._logged_evals = 0
        self.logged_at = -1
        """Env steps of the last record."""
        self._step_logged = False

    def episode(self, actor: int, record: EpisodeRecord) -> None:
        """An episode arrived (booked at the env step of the next :meth:`book`)."""
        self._new_episodes.append((actor, record))

    def evaluation(self, actor: int, records: tuple[EpisodeRecord, ...]) -> None:
        """An evaluation round's episodes arrived."""
        self._new_evals += [(actor, r) for r in records]

    def book(self, env_step: int, eval_step: int | None) -> bool:
        """Book the episodes that arrived since the last call at ``env_step`` (evaluation
        episodes at ``eval_step``, when the round was asked for, if given); returns whether
        evaluation episodes were booked (the round is over)."""
        self.episodes += [LoggedEpisode(env_step, actor, ep.ret, ep.length, ep.values,
                                        ep.wall_s, ep.agent) for actor, ep in self._new_episodes]
        self._new_episodes = []
        if not self._new_evals:
            return False
        asked = eval_step if eval_step is not None else env_step
        self.evals += [LoggedEpisode(asked, actor, ep.ret, ep.length, ep.values, ep.wall_s,
                                     ep.agent) for actor, ep in self._new_evals]
        self._new_evals = []
        return True

    def step_taken(self, stats: dict[str, float]) -> None:
        """A gradient step's statistics; the first step's kind goes to the log."""
        self.interval.add(stats)
        if not self._step_logged and self.run is not None:
            LOG.info("learner step: %s", self.learner.step.kind)
            self._step_logged = True

    def unlogged(self) -> int:
        """Episodes and evaluation episodes of this learner not written yet."""
        return (len(self.episodes) - self._logged_episodes + len(self.evals)
                - self._logged_evals)

    def log(self, env_steps: int, faults: int, final: bool = False) -> bool:
        """Collective over learners: gather interval stats, episodes and evaluation episodes
        onto learner 0, which writes them and prints the progress line. ``final``: the last
        record of a run, skipped when no environment step or episode came since the previous
        one (the counts are global, so every learner skips it alike). Returns whether a
        record was made."""
        if (final and env_steps == self.logged_at
                and not self.reducer.sum(np.array([self.unlogged()]))[0]):
            return False
        self.logged_at = env_steps
        record = self.interval.record(self.learner, env_steps, faults)
        gathered = self.reducer.gather((record, self.episodes[self._logged_episodes:],
                                        self.evals[self._logged_evals:]))
        self._logged_episodes = len(self.episodes)
        self._logged_evals = len(self.evals)
        if self.run is not None and gathered is not None:
            for episode in sorted(e for _, episodes, _ in gathered for e in episodes):
                self.run.episode(episode)
            for evaluation in sorted(e for _, _, evals in gathered for e in evals):
                self.run.evaluation(evaluation)
            self.run.interval(record)
            LOG.info("%s", self.run.progress(record, self.total_steps))
        self.interval.reset(env_steps, self.learner.grad_steps)
        return True

    def checkpoint_state(self) -> StateTree:
        """The episodes not logged yet and the interval's sums (keys of the loop tree)."""
        return {"episodes": episodes_tree(self.episodes[self._logged_episodes:]),
                "evals": episodes_tree(self.evals[self._logged_evals:]),
                "interval": self.interval.checkpoint_state()}

    def restore_state(self, tree: StateTree, unlogged: list[StateTree]) -> None:
        """The interval of ``tree`` and the unlogged episodes of the loop trees ``unlogged``
        (this learner's own, or, on a resized restart, every old learner's on learner 0)."""
        self.interval.restore_state(tree["interval"])
        self.episodes = [e for t in unlogged for e in episodes_from(t["episodes"])]
        self.evals = [e for t in unlogged for e in episodes_from(t["evals"])]
        self._logged_episodes = self._logged_evals = 0
