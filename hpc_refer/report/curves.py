"""Learning curves as in the paper (``python -m hpc_refer.plot RUN_DIR ... --out curves.png``).

For every run, the mean return R of the episodes that ended (entered the replay memory) in
each window of ``--window`` environment steps; runs with the same label (by default the
environment and ReF-ER mode of their config.toml, i.e. seeds of one setting) are drawn as the
mean over runs with a band from the 20th to the 80th percentile. Runs that evaluated their
mean policy during training (``--eval-every``, ``eval.csv``) add a dashed curve: the mean
return of each evaluation round, at the step the round was asked for.
"""

from __future__ import annotations

import argparse
import csv
import sys
import tomllib
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from hpc_refer.report.schema import (
    CONFIG_FILE,
    EPISODES_FILE,
    EVAL_FILE,
    TRAIN_FILE,
    read_intervals,
)


def window_means(steps: np.ndarray, returns: np.ndarray,
                 window: int) -> tuple[np.ndarray, np.ndarray]:
    """Window ends and mean return per window (NaN where no episode ended) of episodes that
    ended at the total environment steps ``steps``: window k holds the steps k*window + 1 to
    (k+1)*window, so an episode logged at step s is in window (s - 1) // window."""
    if len(steps) == 0:
        return np.zeros(0), np.zeros(0)
    steps = np.asarray(steps, dtype=np.int64)
    n_win = int(np.ceil(steps.max() / window))
    idx = np.minimum((steps - 1) // window, n_win - 1)
    sums = np.bincount(idx, weights=np.asarray(returns, dtype=float), minlength=n_win)
    counts = np.bincount(idx, minlength=n_win)
    with np.errstate(invalid="ignore"):
        means = sums / counts
    return (np.arange(n_win) + 1) * window, means


def windowed_returns(run_dir: Path, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Window ends and mean return per window (NaN where no episode ended) of one run."""
    path = run_dir / EPISODES_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir}: no {EPISODES_FILE} (is it a run directory?)")
    with path.open() as f:
        rows = [(int(r["env_step"]), float(r["return"])) for r in csv.DictReader(f)]
    return window_means(np.array([s for s, _ in rows], dtype=np.int64),
                        np.array([r for _, r in rows]), window)


def evaluation_rounds(run_dir: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """Steps and mean return of each evaluation round of a run (None without eval.csv)."""
    path = run_dir / EVAL_FILE
    if not path.is_file():
        return None
    with path.open() as f:
        rows = [(int(r["env_step"]), float(r["return"])) for r in csv.DictReader(f)]
    if not rows:
        return None
    steps = np.array([s for s, _ in rows], dtype=np.int64)
    returns = np.array([r for _, r in rows])
    rounds = np.unique(steps)
    return rounds, np.array([returns[steps == s].mean() for s in rounds])


PAPER_WINDOW = 200_000
"""The paper's averaging window (environment steps)."""
WINDOWS = 20
"""Windows a run is cut into when its length calls for a shorter window than the paper's."""


def auto_window(run_dirs: list[Path]) -> int:
    """The averaging window for these runs: the paper's 2e5 steps when the longest run spans
    at least 20 of them, else a round number of steps (1, 2 or 5 times a power of ten) that
    cuts the longest run into about 20 windows, so a short run draws a curve, not one dot,
    and no shorter than twice the mean spacing of episode ends, so most windows hold an
    episode and the curve is a line, not scattered dots."""
    longest, episodes = 0, 0
    for d in run_dirs:
        path = d / EPISODES_FILE
        if path.is_file():
            with path.open() as f:
                steps = [int(r["env_step"]) for r in csv.DictReader(f)]
            longest = max([longest, *steps])
            episodes = max(episodes, len(steps))
    if longest >= WINDOWS * PAPER_WINDOW:
        return PAPER_WINDOW
    target = max(longest / WINDOWS, 2.0 * longest / max(episodes, 1), 1.0)
    power = 10 ** int(np.floor(np.log10(target)))
    return int(next(m * power for m in (5, 2, 1) if m * power <= target))


def seed_band(curves: list[tuple[np.ndarray, np.ndarray]]
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Window ends, mean over runs, 20th and 80th percentiles over runs of the curves
    ``(ends, means)`` of runs of one setting, cut to the shortest; NaN (a run without an
    episode in a window) is left out of that window's statistics."""
    n = min((len(c[1]) for c in curves), default=0)
    if n == 0:
        empty = np.zeros(0)
        return empty, empty, empty, empty
    x = curves[0][0][:n]
    ys = np.stack([c[1][:n] for c in curves])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a window where no run has an episode
        mean = np.nanmean(ys, axis=0)
        lo, hi = np.nanpercentile(ys, [20, 80], axis=0)
    return x, mean, lo, hi


def run_label(run_dir: Path) -> str:
    """``<env> <mode>`` from the run's config.toml, with ``compiled`` when its learners took
    compiled steps (a train.jsonl record says ``compiled``), so that the two kinds of step
    are told apart. Runs that stepped eagerly (their compile failed, too), have not stepped
    yet or were written before the record held the field get no ``compiled``."""
    with (run_dir / CONFIG_FILE).open("rb") as f:
        cfg = tomllib.load(f)
    label = f"{cfg['run']['env']} {cfg['refer']['mode']}"
    if any(r.compiled for r in read_intervals(run_dir / TRAIN_FILE)):
        label += " compiled"
    return label


def draw_learning_curves(ax: Any, run_dirs: list[Path], window: int) -> dict[str, dict]:
    """Draw the curves of ``run_dirs`` on ``ax``; return per label the window ends, mean,
    20th and 80th percentiles (and the evaluation rounds' means, when there are any)."""
    groups: dict[str, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    evals: dict[str, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    for d in run_dirs:
        label = run_label(d)
        groups[label].append(windowed_returns(d, window))
        rounds = evaluation_rounds(d)
        if rounds is not None:
            evals[label].append(rounds)
    summary: dict[str, dict] = {}
    for label, curves in sorted(groups.items()):
        x, mean, lo, hi = seed_band(curves)
        if len(x) == 0:
            continue
        (line,) = ax.plot(x, mean, marker="." if len(x) <= 2 * WINDOWS else None,
                          label=f"{label} ({len(curves)} runs)")
        ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.25, linewidth=0)
        summary[label] = {"steps": x.tolist(), "mean": mean.tolist(), "p20": lo.tolist(),
                          "p80": hi.tolist(), "runs": len(curves)}
        if evals[label]:
            ex, emean, _, _ = seed_band(evals[label])
            ax.plot(ex, emean, "--", marker=".", color=line.get_color(),
                    label=f"{label}: evaluation of the mean policy")
            summary[label]["eval"] = {"steps": ex.tolist(), "mean": emean.tolist()}
    ax.set_xlabel("environment steps")
    ax.set_ylabel(f"mean return of episodes per {window} steps")
    ax.grid(alpha=0.3)
    if summary:
        ax.legend(fontsize=8)
    return summary


def plot_runs(run_dirs: list[Path], out: Path, window: int, title: str = "") -> dict[str, dict]:
    """Draw the curves to the PNG ``out``; return :func:`draw_learning_curves`' summary."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    summary = draw_learning_curves(ax, run_dirs, window)
    ax.set_title(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hpc_refer.plot",
        description="Plot learning curves (mean over seeds, 20th-80th percentile band) of run "
        "directories written by python -m hpc_refer.run.",
    )
    parser.add_argument("runs", nargs="+", type=Path, help="run directories")
    parser.add_argument("--out", type=Path, default=Path("curves.png"), help="PNG to write")
    parser.add_argument("--window", type=int, default=None,
                        help="environment steps per averaging window (default: the paper's "
                        "2e5, or about 1/20 of the longest run when that is shorter)")
    parser.add_argument("--title", default="", help="figure title")
    args = parser.parse_args(argv)
    if args.window is not None and args.window <= 0:
        print("hpc_refer.plot: error: --window must be > 0", file=sys.stderr)
        return 2
    try:
        window = args.window if args.window is not None else auto_window(args.runs)
        plot_runs(args.runs, args.out, window, args.title)
    except (FileNotFoundError, KeyError, ValueError) as err:  # TOML or train.jsonl errors too
        print(f"hpc_refer.plot: error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {args.out} (mean return per window of {window} environment steps)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
