"""The run directory's files and the fields of their records: the one place that names them.

Plain data (numpy and the standard library only): the writer
(:mod:`hpc_refer.report.metrics`), the tools that read run files (:mod:`hpc_refer.report.build`,
:mod:`hpc_refer.report.curves`) and the learner that bins rho all take the names from here.

Layout of ``runs/<name>/``::

    config.toml       the resolved configuration (defaults < TOML file < flags)
    episodes.csv      EPISODE_FIELDS (env_step, rank, return, length, wall_s, agent), then the
                      solver's episode metrics (e.g. KS: energy): one line per finished
                      episode; wall_s: when it ended, in seconds since the run started
                      (:mod:`hpc_refer.report.clock`: read on its actor, continued by a resumed
                      run; nan where a checkpoint written before did not keep it); agent:
                      whose episode (0..n_agents-1 of its simulation; 0 for one agent; a run
                      directory written before agents has no such column and keeps none)
    train.jsonl       one IntervalRecord per interval of ``run.log_every`` environment steps
    eval.csv          evaluation episodes of the mean policy (``run.eval_every`` > 0), the
                      columns of episodes.csv
    log.txt           the progress lines and messages of rank 0, and the stop record of
                      whichever rank recorded why the run stopped (its rank in the line)
    state.txt         one line (RunState): ``running``, ``finished``, ``preempted: signal
                      <n>`` (stopped by a signal: resume it) or ``failed: <reason>``
    state.txt.claim   created (exclusively) by the first stop record of a start, so that one
                      rank writes state.txt's stop line; removed when the next start runs
    run.lock          held by the running job (:mod:`hpc_refer.report.lock`): host, pid, since
    machine.json      one entry per start of the run: host, CPU, cores, library versions,
                      world size and rank layout
    report.html       with ``run.report_every``: the run report (python -m hpc_refer.report)
    fields/           env-<k>.npz: the last episode's field of environment k, for solvers
                      that provide ``episode_field()`` (KS: u(x, t))
    series/           env-<k>.h5: environment k's ``step_metrics`` per step
                      (:mod:`hpc_refer.report.series`)
    snapshots/        env-<k>-episode-<n>.h5 (and .png) of ``run.snapshot``
    policy.h5         the latest policy (``python -m hpc_refer.evaluate RUN_DIR``)
    tensorboard/      with ``run.tensorboard``: the interval records' numbers
                      (``train/<key>``, ``rho_hist`` as a histogram) and each episode's return,
                      length and metrics (``episode/<name>``), by environment step
    checkpoints/      step-<env step>/ with one HDF5 part per rank and manifest.json
                      (:mod:`hpc_refer.loop.checkpoint`)

A line of train.jsonl
---------------------
One JSON object, **flat**: the fixed fields of :class:`IntervalRecord` by name (``rho_hist``
a list of counts, ``compiled`` a boolean), then the algorithm's named statistics beside them
(``loss_pi``, ``kl``, ``near_fraction``, ...: the keys that are not fixed fields). Flat, so
that every reader of the files written before the record was typed (``record["loss_v"]``,
TensorBoard's ``train/loss_v``) reads the new ones alike; a statistic may therefore not take a
fixed field's name (:class:`IntervalRecord` refuses it). Lines written before a field existed
read as :data:`ABSENT` says.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

CONFIG_FILE = "config.toml"
EPISODES_FILE = "episodes.csv"
TRAIN_FILE = "train.jsonl"
EVAL_FILE = "eval.csv"
LOG_FILE = "log.txt"
STATE_FILE = "state.txt"
STOP_CLAIM_FILE = "state.txt.claim"
LOCK_FILE = "run.lock"
MACHINE_FILE = "machine.json"
POLICY_FILE = "policy.h5"
REPORT_FILE = "report.html"
FIELDS_DIR = "fields"
SERIES_DIR = "series"
SNAPSHOTS_DIR = "snapshots"
TENSORBOARD_DIR = "tensorboard"

METRIC_FILES = (EPISODES_FILE, TRAIN_FILE, EVAL_FILE)
"""The files a checkpoint records the length of (``RunDirectory.offsets``): a resumed run cuts
them back to it."""

STATES = ("running", "preempted", "finished", "failed")
"""The states ``state.txt`` names (:class:`RunState`)."""


class RunState(NamedTuple):
    """The line of ``state.txt``: a state of :data:`STATES` and, for a stop, why
    (``preempted: signal 10``, ``failed: env 0 ...``; ``running`` and ``finished`` have none).
    The state never holds ``:``, so readers that split the line at the first ``:`` read it."""

    state: str
    reason: str = ""

    @classmethod
    def of(cls, state: str, reason: str = "") -> RunState:
        """A validated state line: ``state`` one of :data:`STATES` (ValueError naming them),
        ``reason`` on one line (its runs of white space, newlines included, as one space)."""
        if state not in STATES:
            raise ValueError(f"state = {state!r} is invalid: allowed are {', '.join(STATES)}")
        return cls(state, " ".join(reason.split()))

    def line(self) -> str:
        """``state`` or ``state: reason``, without a newline."""
        return f"{self.state}: {self.reason}" if self.reason else self.state

    @classmethod
    def parse(cls, text: str) -> RunState:
        """Read a line of :meth:`line` (or a bare state, as written before reasons were);
        ValueError names an unknown state and the allowed ones."""
        state, _, reason = text.strip().partition(":")
        return cls.of(state.strip(), reason)


def read_state(path: Path) -> RunState | None:
    """The state line of ``path`` (a run directory's ``state.txt``); None without the file."""
    if not path.is_file():
        return None
    try:
        return RunState.parse(path.read_text())
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None

EPISODE_FIELDS = ("env_step", "rank", "return", "length", "wall_s", "agent")
"""The fixed columns of episodes.csv and eval.csv; the solver's episode metrics follow them."""

FIELDS_BEFORE_AGENTS = EPISODE_FIELDS[:-1]
"""The fixed columns of a run directory written before agents (no ``agent``): a restart of
such a run keeps them."""

RHO_EDGES = np.linspace(-2.0, 2.0, 41)
"""Bin edges of log10(rho) in the interval records' ``rho_hist`` (0.01 to 100 in 40 bins;
rarer values are counted in the end bins): far-policy samples lie beyond log10 c_max on
either side of 0."""


@dataclass(frozen=True)
class IntervalRecord:
    """One line of ``train.jsonl``: a logging interval of ``run.log_every`` environment steps,
    as learner 0 sums it up (rates over the interval, the rest at its end; counts over all
    learners). The constructor converts each field to its declared type (``rho_hist`` to a
    tuple of ints, ``stats`` to a dict of floats)."""

    env_step: int
    """Environment steps of all actors at the end of the interval."""
    grad_step: int
    """Gradient steps taken so far."""
    env_steps_per_s: float
    grad_steps_per_s: float
    learner_busy: float
    """The fraction of the interval learner 0 was not waiting for data."""
    beta: float
    """ReF-ER's penalty coefficient (eq. 12)."""
    c_max: float
    """The near-policy bound (eq. 13)."""
    lr: float
    """The annealed learning rate (eq. 13)."""
    far_fraction: float
    """Far-policy stored transitions / stored transitions."""
    stored: int
    """Transitions stored in the replay (all learners)."""
    reward_scale: float
    """1 / std of the stored rewards."""
    solver_faults: int
    """Solver faults of all actors so far."""
    rho_hist: tuple[int, ...]
    """Counts of log10 rho of the stored transitions in the bins of :data:`RHO_EDGES`."""
    compiled: bool = False
    """Whether the learner's gradient step ran compiled (``torch.compile``) in this interval;
    False before the first step and for lines written before the field existed."""
    stats: Mapping[str, float] = field(default_factory=dict)
    """The algorithm's named statistics, means over the interval's gradient steps (losses,
    kl, near_fraction, ...; empty without a gradient step)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.type in ("int", "float", "bool"):
                cast = {"int": int, "float": float, "bool": bool}[f.type]
                object.__setattr__(self, f.name, cast(getattr(self, f.name)))
        object.__setattr__(self, "rho_hist", tuple(int(n) for n in self.rho_hist))
        stats = {str(k): float(v) for k, v in self.stats.items()}
        clash = sorted(set(stats) & set(RECORD_KEYS))
        if clash:
            raise ValueError(f"the statistics {', '.join(clash)} take the names of fixed "
                             "fields of an interval record")
        object.__setattr__(self, "stats", stats)

    def scalars(self) -> dict[str, float]:
        """The record's numbers by their train.jsonl key: the fixed numeric fields (not
        ``rho_hist``, not ``compiled``), then the statistics."""
        fixed = {name: float(getattr(self, name)) for name in SCALAR_KEYS}
        return {**fixed, **self.stats}

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the line: flat (see the module's docstring)."""
        out: dict[str, Any] = {name: getattr(self, name) for name in RECORD_KEYS}
        out["rho_hist"] = list(self.rho_hist)
        return {**out, **self.stats}

    def to_json(self) -> str:
        """The line of train.jsonl (without its newline)."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, line: str) -> IntervalRecord:
        """Read a line of train.jsonl, written by this version or an earlier one: fixed
        fields by name (a field the line lacks as :data:`ABSENT` says), every other key a
        statistic. ValueError (``json.JSONDecodeError`` for a line that is no JSON, such as a
        line cut by a killed run) says what is wrong."""
        data = json.loads(line)
        if not isinstance(data, dict):
            raise ValueError(f"a train.jsonl line is a JSON object, not {line[:40]!r}")
        values = {**ABSENT, **{k: data[k] for k in RECORD_KEYS if k in data}}
        missing = [k for k in RECORD_KEYS if k not in values]
        if missing:
            raise ValueError(f"a train.jsonl line without {', '.join(missing)}: {line[:60]!r}")
        stats = {k: v for k, v in data.items() if k not in values}
        wrong = [k for k, v in stats.items()
                 if isinstance(v, bool) or not isinstance(v, int | float)]
        if wrong:
            raise ValueError(f"train.jsonl keys {', '.join(wrong)} are neither fixed fields "
                             "nor statistics (numbers)")
        return cls(**values, stats=stats)


RECORD_KEYS = tuple(f.name for f in fields(IntervalRecord) if f.name != "stats")
"""The fixed keys of a train.jsonl line, in their order."""
SCALAR_KEYS = tuple(k for k in RECORD_KEYS if k not in ("rho_hist", "compiled"))
"""The fixed keys whose values are numbers."""
ABSENT: Mapping[str, Any] = {"learner_busy": math.nan, "solver_faults": 0, "rho_hist": (),
                             "compiled": False}
"""What a fixed field reads as in a line written before the field was added: ``compiled`` is
absent from every line written before the record was typed; ``learner_busy``,
``solver_faults`` and ``rho_hist`` from those of the first versions."""


def read_intervals(path: Path) -> list[IntervalRecord]:
    """The records of a train.jsonl file ([] when there is none); a line that is no JSON (the
    last one, cut by a killed run) is skipped."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(IntervalRecord.from_json(line))
        except json.JSONDecodeError:
            continue
    return out


LOG_LINE = re.compile(r"^(?P<time>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) \[(?P<rank>\d+)\] "
                      r"(?P<message>.*)$")
"""A line of log.txt (:mod:`hpc_refer.report.logs`): ``<date> <time> [<rank>] <message>``, the
message of a warning or an error starting with ``warning: `` or ``error: ``."""


START_LINE = re.compile(r"^run directory .*?(?:, resumed from .*step-(?P<step>\d+))?$")
"""The message that begins each start of a run (learner 0, :mod:`hpc_refer.run.main`), with
the step of the checkpoint it resumed from."""
STOP_LINE = re.compile(r"^stopped at step (?P<step>\d+) \((?P<why>.*)\); resume with: ")
"""The message of a run that stopped before its steps (a signal, a failure, lost ranks)."""
STEP_LINE = re.compile(r"^steps (?P<step>\d+)/\d+ ")
"""A progress line (:func:`~hpc_refer.report.metrics.progress_line`)."""


def parse_log_time(text: str) -> datetime:
    """The time of a log line (:data:`LOG_LINE`'s ``time``)."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S")


def log_messages(path: Path) -> list[str]:
    """The messages of log.txt, without their time and rank (lines of other forms, as
    written before the log was time-stamped, as they are)."""
    out = []
    for line in path.read_text().splitlines():
        match = LOG_LINE.match(line)
        out.append(match["message"] if match else line)
    return out

