"""The run report: ``python -m hpc_refer.report RUN_DIR [RUN_DIR ...]``.

One static HTML page per run, or per group of runs of one setting (seeds: the same
environment and ReF-ER mode, as :mod:`hpc_refer.report.curves` labels them), self-contained: the
figures are inline SVG drawn by matplotlib (pictures inside them as data URIs), nothing is
fetched when it is opened, so it can be copied off a cluster and opened anywhere. It shows
what the run directories hold (the files and records named in :mod:`hpc_refer.report.schema`), and
says what is absent:

* the learning curve: windowed mean return over seeds with the 20-80% band, as the paper
  draws it, and the evaluation rounds of the mean policy (``eval.csv``);
* ReF-ER's state against environment steps: beta (eq. 12), c_max and the learning rate
  (eq. 13), the far-policy fraction with its target D;
* histograms of log10 rho of the stored transitions over time (``rho_hist`` of
  ``train.jsonl``), with the near-policy band 1/c_max < rho < c_max;
* the algorithm's named statistics of its gradient steps (``stats`` of the interval records:
  losses, kl, near_fraction, ...);
* environment and gradient steps/s over the run, and environment steps/s per actor rank
  (from each rank's episodes);
* solver faults over the run, and the log lines that name them;
* the solver's episode metrics (KS: energy) as windowed means, and its per-step series
  (``series/env-<k>.h5``: the last episodes of each environment's ``step_metrics``);
* pictures a flow environment contributes (``fields/env-<k>.npz``: KS draws u(x, t) of the
  last episode of each environment; ``snapshots/env-<k>-episode-<n>.h5`` of ``--snapshot``:
  the newest snapshot of each environment, e.g. CylinderJets' vorticity);
* the resolved configuration and the machine(s) the run started on.

A run writes its own report every ``run.report_every`` environment steps and at its end
(``--report-every``), atomically (a copy taken mid-write is never half a page).
"""

from __future__ import annotations

import argparse
import html
import json
import math
import re
import sys
import time
import tomllib
from collections import defaultdict
from pathlib import Path
from typing import Any

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from hpc_refer.report.agents import agent_count, agents_section
from hpc_refer.report.curves import auto_window, draw_learning_curves, run_label, window_means
from hpc_refer.report.figures import absent, figure, read_csv, reference
from hpc_refer.report.lock import died_message, inspect
from hpc_refer.report.schema import (
    CONFIG_FILE,
    EPISODE_FIELDS,
    EPISODES_FILE,
    EVAL_FILE,
    FIELDS_DIR,
    LOG_FILE,
    MACHINE_FILE,
    REPORT_FILE,
    RHO_EDGES,
    SERIES_DIR,
    SNAPSHOTS_DIR,
    STATE_FILE,
    TRAIN_FILE,
    IntervalRecord,
    read_intervals,
    read_state,
)
from hpc_refer.report.series import read_series
from hpc_refer.report.snapshots import draw_snapshot
from hpc_refer.report.starts import starts_section

DIAGNOSTICS = (("beta", "beta (penalty coefficient, eq. 12)"),
               ("c_max", "c_max (eq. 13)"),
               ("lr", "learning rate (eq. 13)"),
               ("far_fraction", "far-policy fraction"))
"""The ReF-ER state drawn against environment steps: (interval record field, axis title)."""

STYLE = """
body { font-family: sans-serif; margin: 1.5em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; border-bottom: 1px solid #ccc; }
figure { margin: 0.5em 0 1.5em 0; } figcaption { font-size: 0.9em; color: #555; }
figure svg { max-width: 100%; height: auto; }
table { border-collapse: collapse; font-size: 0.9em; }
td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: left; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; font-size: 0.85em; }
.absent { color: #777; font-style: italic; }
"""


class Run:
    """What one run directory holds, read once (missing files give empty data)."""

    def __init__(self, path: Path) -> None:
        if not (path / CONFIG_FILE).is_file():
            raise FileNotFoundError(f"{path}: no {CONFIG_FILE} (is it a run directory?)")
        self.path = path
        self.name = path.resolve().name
        self.label = run_label(path)
        self.config_text = (path / CONFIG_FILE).read_text()
        self.config = tomllib.loads(self.config_text)
        self.records: list[IntervalRecord] = read_intervals(path / TRAIN_FILE)
        self.episodes = read_csv(path / EPISODES_FILE)
        state = read_state(path / STATE_FILE)
        lock = inspect(path)
        self.died = (died_message(lock.record) if state is not None
                     and state.state == "running" and not lock.held else "")
        """The line that says the run ended without a stop record (killed), else ''."""
        self.state = ("died without a stop record (state.txt: running)" if self.died
                      else state.line() if state is not None else "unknown")
        """What the summary shows: state.txt's line (``failed: <reason>``, ...)."""
        machine = path / MACHINE_FILE
        self.machines: list[dict[str, Any]] = (json.loads(machine.read_text())
                                               if machine.is_file() else [])
        log = path / LOG_FILE
        self.log_lines = log.read_text().splitlines() if log.is_file() else []
        self.fields = _per_env(path / FIELDS_DIR, "npz")
        self.series_files = _per_env(path / SERIES_DIR, "h5")
        self.snapshots = _latest_snapshots(path / SNAPSHOTS_DIR)

    def series(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """Environment steps and values of ``key`` (a fixed numeric field or a statistic) of
        the interval records that hold it."""
        rows = [(r.env_step, values[key]) for r in self.records
                if key in (values := r.scalars())]
        return (np.array([s for s, _ in rows], dtype=float),
                np.array([v for _, v in rows], dtype=float))

    def config_value(self, table: str, key: str) -> Any:
        """``[table] key`` of the run's config.toml (None where absent)."""
        return self.config.get(table, {}).get(key)


def _per_env(directory: Path, suffix: str) -> list[Path]:
    """``directory/env-<k>.<suffix>`` files by environment index."""
    return sorted((p for p in directory.glob(f"env-*.{suffix}")
                   if re.fullmatch(rf"env-\d+\.{suffix}", p.name)),
                  key=lambda p: int(p.stem.split("-")[1]))


def _latest_snapshots(directory: Path) -> list[Path]:
    """The newest ``env-<k>-episode-<n>.h5`` of each environment k, by k."""
    latest: dict[int, tuple[int, Path]] = {}
    for p in directory.glob("env-*-episode-*.h5"):
        match = re.fullmatch(r"env-(\d+)-episode-(\d+)\.h5", p.name)
        if match and int(match[2]) > latest.get(int(match[1]), (0, p))[0]:
            latest[int(match[1])] = (int(match[2]), p)
    return [latest[k][1] for k in sorted(latest)]


def _per_run_lines(runs: list[Run], key: str, ax: Any) -> bool:
    """One line per run of train.jsonl's ``key``; whether anything was drawn."""
    drawn = False
    for run in runs:
        x, y = run.series(key)
        if np.isfinite(y).any():
            ax.plot(x, y, lw=1.2, label=run.name if len(runs) > 1 else None)
            drawn = True
    return drawn


def learning_section(runs: list[Run], window: int | None) -> str:
    with_episodes = [r.path for r in runs if r.episodes]
    if not with_episodes:
        return absent(f"No episode has ended yet ({EPISODES_FILE} is empty).")
    w = window if window is not None else auto_window(with_episodes)
    fig, ax = plt.subplots(figsize=(8, 4.2))
    draw_learning_curves(ax, with_episodes, w)
    evals = " Dashed: mean return of each evaluation round of the mean policy." if any(
        (r.path / EVAL_FILE).is_file() for r in runs) else f" No evaluation rounds ({EVAL_FILE})."
    return figure(fig, f"Mean return of the episodes that ended in each window of {w} "
                        f"environment steps: mean over {len(with_episodes)} run(s), band from "
                        f"the 20th to the 80th percentile over runs.{evals}")


def refer_section(runs: list[Run]) -> str:
    if not any(r.records for r in runs):
        return absent(f"No interval record yet ({TRAIN_FILE} is empty).")
    fig, axes = plt.subplots(2, 2, figsize=(9, 5.5), sharex=True)
    for ax, (key, title) in zip(axes.flat, DIAGNOSTICS, strict=True):
        _per_run_lines(runs, key, ax)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        if key == "far_fraction":
            target = runs[0].config_value("refer", "D")
            if target is not None:
                reference(ax.axhline(float(target), color="k", ls=":", lw=1,
                                      label=f"target D = {target}"))
            ax.legend(fontsize=7)
    for ax in axes[1]:
        ax.set_xlabel("environment steps")
    fig.tight_layout()
    return figure(fig, "ReF-ER against environment steps: beta grows while the far-policy "
                        "fraction exceeds D and shrinks below it; c_max and the learning rate "
                        "anneal as 1 + C / (1 + A t) and eta0 / (1 + A t).")


def rho_section(runs: list[Run]) -> str:
    parts = []
    for run in runs:
        rows = [(r.env_step, r.rho_hist, r.c_max) for r in run.records if sum(r.rho_hist) > 0]
        if not rows:
            parts.append(absent(f"{run.name}: no rho histogram (no stored transition yet, or "
                                 "a run from before rho_hist was recorded)."))
            continue
        steps = np.array([s for s, _, _ in rows], dtype=float)
        counts = np.array([h for _, h, _ in rows], dtype=float)
        frac = counts / counts.sum(axis=1, keepdims=True)
        fig, ax = plt.subplots(figsize=(8, 3.4))
        x_edges = np.concatenate([[steps[0] - (steps[1] - steps[0] if len(steps) > 1 else 1)],
                                  steps])
        mesh = ax.pcolormesh(x_edges, RHO_EDGES, frac.T, cmap="viridis", shading="flat")
        fig.colorbar(mesh, ax=ax, label="fraction of stored transitions")
        c_max = np.array([c for _, _, c in rows], dtype=float)
        reference(ax.plot(steps, np.log10(c_max), "w--", lw=1, label="log10 c_max")[0])
        reference(ax.plot(steps, -np.log10(c_max), "w--", lw=1)[0])
        ax.set_ylabel("log10 rho")
        ax.set_xlabel("environment steps")
        ax.set_title(run.name, fontsize=10)
        ax.legend(fontsize=7, loc="upper right")
        parts.append(figure(fig, f"{run.name}: distribution of log10 rho of the stored "
                                  "transitions at each record; between the dashed lines "
                                  "(1/c_max < rho < c_max) samples are near-policy."))
    return "".join(parts)


def losses_section(runs: list[Run]) -> str:
    """One panel per named statistic of the algorithm (the records' ``stats``: whatever the
    algorithm reports, losses, kl, near_fraction, q, ...), by name."""
    keys = sorted({k for r in runs for rec in r.records for k in rec.stats})
    if not keys:
        return absent("No gradient step yet: no statistics of the algorithm recorded.")
    fig, axes = plt.subplots(1, len(keys), figsize=(3.4 * len(keys), 3.2), squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        _per_run_lines(runs, key, ax)
        ax.set_title(key, fontsize=10)
        ax.set_xlabel("environment steps")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return figure(fig, "Interval means of the algorithm's named statistics of its gradient "
                        "steps (its losses; kl: the mean KL of Rule 2; near_fraction: the "
                        "near-policy fraction of the minibatch).")


def _rank_rates(run: Run) -> dict[int, float]:
    """Environment steps/s of each actor rank: the steps of its episodes after its first,
    over the wall time between its first and last episode end (``wall_s``: when each ended,
    on the run's clock, which a resumed run continues; episodes of unknown end, ``nan``,
    are left out)."""
    by_rank: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for e in run.episodes:
        wall = float(e["wall_s"])
        if math.isfinite(wall):
            by_rank[int(e["rank"])].append((wall, int(e["length"])))
    rates = {}
    for rank, ends in by_rank.items():
        ends.sort()
        span = ends[-1][0] - ends[0][0]
        if len(ends) > 1 and span > 0:
            rates[rank] = sum(n for _, n in ends[1:]) / span
    return rates


def throughput_section(runs: list[Run]) -> str:
    if not any(r.records for r in runs):
        return absent("No interval record yet.")
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    ax = axes[0]
    for run in runs:
        for key, style in (("env_steps_per_s", "-"), ("grad_steps_per_s", "--")):
            x, y = run.series(key)
            ax.plot(x, y, style, lw=1.2, label=f"{key.split('_')[0]} {run.name}"
                    if len(runs) > 1 else key.replace("_", " "))
    ax.set_xlabel("environment steps")
    ax.set_ylabel("steps per second")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax = axes[1]
    labels, values = [], []
    for run in runs:
        for rank, rate in sorted(_rank_rates(run).items()):
            labels.append(f"{rank}" if len(runs) == 1 else f"{run.name}:{rank}")
            values.append(rate)
    if values:
        ax.bar(range(len(values)), values, color="tab:blue")
        ax.set_xticks(range(len(values)), labels, rotation=90 if len(values) > 12 else 0,
                      fontsize=7)
        ax.set_xlabel("actor rank")
    ax.set_ylabel("environment steps per second")
    ax.set_title("per actor rank (from its episodes)", fontsize=10)
    fig.tight_layout()
    return figure(fig, "Left: environment and gradient steps per second of each interval "
                        "(all actors; learners step together, one allreduce per step, so one "
                        "gradient rate serves every learner rank). Right: each actor rank's "
                        "environment steps per second over its episodes.")


FAULT_LINE = re.compile(r"fault|failed|timed out|rebuilt|restart", re.IGNORECASE)


def faults_section(runs: list[Run]) -> str:
    parts = []
    total = {r.name: r.records[-1].solver_faults if r.records else 0 for r in runs}
    if any(total.values()):
        fig, ax = plt.subplots(figsize=(7, 3))
        _per_run_lines(runs, "solver_faults", ax)
        ax.set_xlabel("environment steps")
        ax.set_ylabel("solver faults so far")
        ax.grid(alpha=0.3)
        parts.append(figure(fig, "Solver faults counted by the actors (an episode ended by "
                                  "an invalid answer, an exception or a timeout; the solver "
                                  "was rebuilt)."))
    else:
        parts.append(absent("No solver fault in " + ", ".join(total) + "."))
    for run in runs:
        lines = [line for line in run.log_lines if FAULT_LINE.search(line)]
        if lines:
            shown = "\n".join(lines[-20:])
            parts.append(f"<p>{html.escape(run.name)}: the last {min(len(lines), 20)} of "
                         f"{len(lines)} log lines about faults</p><pre>{html.escape(shown)}"
                         "</pre>")
    return "".join(parts)


def metrics_section(runs: list[Run], window: int | None) -> str:
    names = [c for c in (runs[0].episodes[0] if runs[0].episodes else {})
             if c not in EPISODE_FIELDS]
    if not names:
        return absent("The solver reports no episode metrics (episode_metrics).")
    steps_all = [int(e["env_step"]) for r in runs for e in r.episodes]
    w = window if window is not None else auto_window([r.path for r in runs])
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.2), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        for run in runs:
            steps = np.array([int(e["env_step"]) for e in run.episodes])
            values = np.array([float(e[name]) for e in run.episodes])
            kept = np.isfinite(values)  # nan: an agent that finished before its simulation
            x, y = window_means(steps[kept], values[kept], w)
            ax.plot(x, y, marker=".", lw=1.2, label=run.name if len(runs) > 1 else None)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("environment steps")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return figure(fig, f"The solver's episode metrics, mean per window of {w} environment "
                        f"steps ({len(steps_all)} episodes).")


def fields_section(runs: list[Run]) -> str:
    parts = []
    for run in runs:
        for path in run.fields[:4]:
            with np.load(path) as data:
                field = np.asarray(data["field"], float)
                label = str(data["label"]) if "label" in data else "field"
                episode = int(data["episode"]) if "episode" in data else -1
            if field.ndim != 2 or field.size == 0:
                continue
            fig, ax = plt.subplots(figsize=(8, 3.2))
            image = ax.imshow(field.T, aspect="auto", origin="lower", cmap="RdBu_r",
                              extent=(0, field.shape[0], 0, field.shape[1]))
            fig.colorbar(image, ax=ax, label=label)
            ax.set_xlabel("control step")
            ax.set_ylabel("grid point")
            parts.append(figure(fig, f"{run.name}, {path.stem}: {label} of its last episode "
                                      f"(episode {episode} of that environment)."))
        for path in run.snapshots[:4]:
            with h5py.File(path, "r") as h5:
                name = str(h5.attrs.get("image", next(iter(h5))))
                values = np.asarray(h5[name][()], float)
                extent = h5.attrs.get("extent")
                circles = np.asarray(h5.attrs.get("circles", np.zeros((0, 3))))
                episode, solver = int(h5.attrs["episode"]), str(h5.attrs["solver"])
            box = None if extent is None else (float(extent[0]), float(extent[1]),
                                               float(extent[2]), float(extent[3]))
            bodies = tuple((float(x), float(y), float(r)) for x, y, r in circles)
            fig, ax = plt.subplots(figsize=(9, 2.6))
            fig.colorbar(draw_snapshot(ax, name, values, box, bodies), ax=ax, label=name)
            parts.append(figure(fig, f"{run.name}, {path.stem}: {solver}'s {name} at the end "
                                      f"of episode {episode} (--snapshot; the newest of that "
                                      f"environment)."))
    return "".join(parts) or absent("The environment contributes no pictures "
                                     "(no fields/env-*.npz: its solver has no "
                                     "episode_field(); no snapshots/: no --snapshot).")


SERIES_EPISODES = 3
"""Episodes of each environment's step series drawn (its last ones)."""


def series_section(runs: list[Run]) -> str:
    parts = []
    for run in runs:
        for path in run.series_files[:4]:
            columns = read_series(path)
            names = [n for n in columns if n not in ("episode", "step")]
            episodes = np.unique(columns["episode"])[-SERIES_EPISODES:]
            if not names or episodes.size == 0:
                continue
            fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.2),
                                     squeeze=False)
            for ax, name in zip(axes[0], names, strict=True):
                for episode in episodes:
                    rows = columns["episode"] == episode
                    ax.plot(columns["step"][rows], columns[name][rows], lw=1.2,
                            label=f"episode {episode}")
                ax.set_title(name, fontsize=10)
                ax.set_xlabel("step of the episode")
                ax.grid(alpha=0.3)
            axes[0][0].legend(fontsize=7)
            fig.tight_layout()
            parts.append(figure(fig, f"{run.name}, {path.stem}: the solver's step metrics "
                                      f"over its last {episodes.size} episodes "
                                      f"({columns['step'].size} rows recorded)."))
    return "".join(parts) or absent("The solver reports no step metrics (step_metrics).")


def _machine_table(run: Run) -> str:
    if not run.machines:
        return absent(f"{run.name}: no machine.json.")
    rows = []
    for m in run.machines:
        versions = ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items())
        layout = (f"world {m.get('world')}, {m.get('learners')} learners, "
                  f"{m.get('environment_teams')} teams x {m.get('ranks_per_env')} ranks, "
                  f"{m.get('torch_threads')} torch threads")
        hosts = sorted({r["host"] for r in m.get("ranks", [])})
        host = (f"{m.get('host')} (ranks on {len(hosts)} hosts: {', '.join(hosts)})"
                if len(hosts) > 1 else m.get("host"))
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
            m.get("started"), host, f"{m.get('cpu')} ({m.get('cores')} cores)",
            layout, f"Python {m.get('python')}; {versions}")) + "</tr>")
    return (f"<p>{html.escape(run.name)}</p><table><tr><th>started</th><th>host</th>"
            "<th>CPU</th><th>layout</th><th>software</th></tr>" + "".join(rows) + "</table>")


def _summary(runs: list[Run]) -> str:
    rows = []
    for run in runs:
        last = run.records[-1] if run.records else None
        total = run.config_value("run", "steps")
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
            run.name, run.state, f"{last.env_step if last else 0} / {total}",
            last.grad_step if last else 0, len(run.episodes),
            f"{np.mean([float(e['return']) for e in run.episodes[-20:]]):.4g}"
            if run.episodes else "-")) + "</tr>")
    return ("<table><tr><th>run</th><th>state</th><th>environment steps</th>"
            "<th>gradient steps</th><th>episodes</th><th>mean return, last 20</th></tr>"
            + "".join(rows) + "</table>")


def render(runs: list[Run], window: int | None = None) -> str:
    """The HTML page of ``runs`` (runs of one setting)."""
    title = f"hpc_refer report: {runs[0].label}" + (
        f" ({len(runs)} runs)" if len(runs) > 1 else f" ({runs[0].name})")
    sections = [
        ("Runs", _summary(runs)),
        ("Learning curve", learning_section(runs, window)),
        ("ReF-ER", refer_section(runs)),
        ("Importance weights rho", rho_section(runs)),
        ("Losses", losses_section(runs)),
        ("Throughput", throughput_section(runs)),
        ("Solver faults", faults_section(runs)),
        ("Starts and stops", starts_section([r.name for r in runs], [r.log_lines for r in runs])),
        ("Episode metrics", metrics_section(runs, window)),
        ("Per-step series", series_section(runs)),
        ("Flow fields", fields_section(runs)),
        ("Configuration", "".join(f"<details><summary>{html.escape(r.name)}: {CONFIG_FILE}"
                                  f"</summary><pre>{html.escape(r.config_text)}</pre>"
                                  "</details>" for r in runs)),
        ("Machine", "".join(_machine_table(r) for r in runs)),
    ]
    if any(agent_count(r.episodes) > 1 for r in runs):  # a section for several agents
        named = [(r.name, r.episodes) for r in runs]
        sections.insert(9, ("Agents", agents_section(
            named, window or auto_window([r.path for r in runs]))))
    body = "".join(f"<section><h2>{html.escape(h)}</h2>{content}</section>"
                   for h, content in sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><p>Written {time.strftime('%Y-%m-%d %H:%M:%S')} "
            f"from {', '.join(html.escape(str(r.path)) for r in runs)}.</p>{body}"
            "</body></html>\n")


def write_report(run_dirs: list[Path], out: Path, window: int | None = None) -> Path:
    """Render the runs ``run_dirs`` (one setting) to ``out`` by an atomic rename."""
    return write_runs([Run(d) for d in run_dirs], out, window)


def write_runs(runs: list[Run], out: Path, window: int | None = None) -> Path:
    """Render ``runs`` (read, of one setting) to ``out`` by an atomic rename."""
    page = render(runs, window)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(page)
    tmp.replace(out)
    return out


def write_run_report(run_dir: Path) -> Path:
    """The report of one run to ``run_dir/report.html`` (what ``run.report_every`` refreshes
    during a run)."""
    return write_report([run_dir], run_dir / REPORT_FILE)


def group_runs(run_dirs: list[Path]) -> dict[str, list[Path]]:
    """Run directories by setting (:func:`~hpc_refer.report.curves.run_label`), in the given
    order."""
    groups: dict[str, list[Path]] = defaultdict(list)
    for d in run_dirs:
        if not (d / CONFIG_FILE).is_file():
            raise FileNotFoundError(f"{d}: no {CONFIG_FILE} (is it a run directory?)")
        groups[run_label(d)].append(d)
    return dict(groups)


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hpc_refer.report",
        description="Write a self-contained HTML report (learning curve over seeds, ReF-ER "
        "state, rho histograms, losses, throughput, solver faults, episode metrics, flow "
        "fields, config, machine) of run directories: one page per setting (runs with the "
        "same environment and ReF-ER mode are seeds of one setting).")
    parser.add_argument("runs", nargs="+", type=Path, help="run directories")
    parser.add_argument("--out", type=Path, default=None,
                        help="the HTML file (one setting only; default: RUN_DIR/report.html "
                        "for one run, report-<setting>.html in --out-dir for several)")
    parser.add_argument("--out-dir", type=Path, default=Path("."),
                        help="where the pages of several runs go (default: .)")
    parser.add_argument("--window", type=int, default=None,
                        help="environment steps per averaging window (default: the paper's "
                        "2e5, or about 1/20 of the longest run)")
    args = parser.parse_args(argv)
    if args.window is not None and args.window <= 0:
        print("hpc_refer.report: error: --window must be > 0", file=sys.stderr)
        return 2
    try:
        groups = group_runs(args.runs)
        if args.out is not None and len(groups) > 1:
            print(f"hpc_refer.report: error: --out names one file, but the runs are "
                  f"{len(groups)} settings ({', '.join(groups)}): use --out-dir",
                  file=sys.stderr)
            return 2
        for label, dirs in groups.items():
            if args.out is not None:
                out = args.out
            elif len(args.runs) == 1:
                out = dirs[0] / REPORT_FILE
            else:
                out = args.out_dir / f"report-{_slug(label)}.html"
            runs = [Run(d) for d in dirs]
            for run in runs:
                if run.died:
                    print(f"{run.path}: {run.died}")
            write_runs(runs, out, args.window)
            print(f"wrote {out} ({label}, {len(dirs)} run(s))")
    except (FileNotFoundError, KeyError, ValueError) as err:
        print(f"hpc_refer.report: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
