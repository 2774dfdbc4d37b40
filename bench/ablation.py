"""ReF-ER ablation: ``python bench/ablation.py run ...`` then ``python bench/ablation.py report``.

Trains every combination of algorithms x replay modes x seeds as one
``python -m hpc_refer.run`` process each, then draws and tabulates them as the paper does
(mean return R of the episodes entering the replay memory in windows of 2x10^5 steps, mean over
seeds, band of the 20th-80th percentiles over seeds)::

    python bench/ablation.py run --algorithms vracer ddpg naf --modes er refer --seeds 0 1 \\
        --env HalfCheetah-v5 --steps 500000 --root runs/ablation --jobs 2 [-- EXTRA FLAGS]
    python bench/ablation.py report runs/ablation --name ablation_halfcheetah [--window 200000]

Modes: ``er``, ``refer1``, ``refer2``, ``refer`` are ``--refer.mode M``; ``per`` is prioritized
replay without ReF-ER (``--refer.mode er --replay.sampling per``). Run directories are
``<root>/<env>/<algo>-<mode>-seed<k>`` with the process's output in ``<run dir>.log``; at most
``--jobs`` runs at a time (one core each). A directory holding a finished run (last env_step of
train.jsonl >= --steps) is skipped, so an interrupted ablation is resumed by repeating the
command; a directory holding an unfinished run is refused before anything starts (hpc_refer never
reuses a non-empty run directory: delete it to rerun). Flags after ``--`` go to every run.

``report`` finds the run directories under ROOT (any depth) and groups them by the
(env, algorithm, mode) of their config.toml. Only complete windows (ending at or before the
run's last logged step) are used, and a group's curve is cut to its shortest seed. It writes
``<out>/<NAME>.png`` (one panel per algorithm and env, one line and band per mode),
``<out>/<NAME>.json`` (per group: window centres, mean, p20, p80, seeds, steps reached, final
window's mean return, last beta and far fraction) and ``<out>/<NAME>.md`` (algorithms x modes,
final-window mean return, for BENCHMARKS.md), with ``--out`` defaulting to bench/results.

The JSON also holds each group's ``final_by_seed`` and, per algorithm, Welch's t-test of
each mode's final windows against ``er``'s (``tests``). ``tests REPORT.json --name NAME``
writes those tests for a committed report; one of three seeds written before the per-seed
finals were stored gets them back from its mean, 20th and 80th percentiles (three equations,
three unknowns; the seeds' order is lost).

``python bench/ablation.py --smoke [--out DIR]`` runs both at tiny budgets (bench/common.py):
V-RACER with ``er`` and ``refer``, one seed, 400 steps of Pendulum-v1 (training from 300)
under DIR/runs, then the report of 200-step windows into DIR.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import subprocess
import sys
import threading
import time
import tomllib
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from common import out_flag, repository_path, smoke, welch, write
from common import parse as parse_common
from matplotlib.ticker import FuncFormatter

from hpc_refer.algorithms.registry import ALGORITHMS as REGISTERED
from hpc_refer.config.resolve import default_algorithm
from hpc_refer.report.curves import seed_band, windowed_returns

ALGORITHMS = tuple(sorted(REGISTERED))
"""The registered algorithms, in the order the tables and figures show them."""
MODES = ("er", "refer1", "refer2", "refer", "per")
MODE_COLORS = {"er": "tab:red", "refer1": "tab:orange", "refer2": "tab:green",
               "refer": "tab:blue", "per": "tab:purple"}
CONTROLLED = ("--algorithm", "--env", "--steps", "--seed", "--run-dir", "--refer.mode",
              "--replay.sampling")
"""Flags the ablation sets itself: refused among the extra flags (they would override it)."""


class AblationError(RuntimeError):
    """The ablation cannot start (a run directory in the way, a conflicting extra flag)."""


# ----------------------------------------------------------------------------------- run


@dataclass(frozen=True)
class Combo:
    """One run of the ablation."""

    algorithm: str
    mode: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.algorithm}-{self.mode}-seed{self.seed}"


def mode_flags(mode: str) -> list[str]:
    """The hpc_refer.run flags of an ablation mode (``per``: plain ER with prioritized replay)."""
    if mode == "per":
        return ["--refer.mode", "er", "--replay.sampling", "per"]
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: allowed are {', '.join(MODES)}")
    return ["--refer.mode", mode]


def safe_name(text: str) -> str:
    """``text`` with characters unsafe in paths replaced (as hpc_refer's default run names)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def run_dir_of(root: Path, env: str, combo: Combo) -> Path:
    return root / safe_name(env) / combo.name


def run_command(combo: Combo, env: str, steps: int, run_dir: Path, extra: list[str],
                python: str = sys.executable) -> list[str]:
    """The argv of one run."""
    return [python, "-m", "hpc_refer.run", "--algorithm", combo.algorithm, *mode_flags(combo.mode),
            "--env", env, "--steps", str(steps), "--seed", str(combo.seed),
            "--run-dir", str(run_dir), *extra]


def check_extra(extra: list[str]) -> None:
    """Refuse extra flags that would override what the ablation sets for each run."""
    clash = sorted({a.split("=", 1)[0] for a in extra} & set(CONTROLLED))
    if clash:
        raise AblationError(f"extra flags {', '.join(clash)} are set by the ablation itself "
                            f"(use --algorithms/--modes/--seeds/--env/--steps/--root)")


def last_record(run_dir: Path) -> dict[str, Any]:
    """The last complete line of ``train.jsonl`` ({} if there is none)."""
    path = run_dir / "train.jsonl"
    if not path.is_file():
        return {}
    for line in reversed(path.read_text().splitlines()):
        try:
            return dict(json.loads(line))
        except json.JSONDecodeError:  # a line cut by a killed run
            continue
    return {}


def read_config(run_dir: Path) -> dict[str, Any]:
    with (run_dir / "config.toml").open("rb") as f:
        return tomllib.load(f)


def mode_of(cfg: dict[str, Any]) -> str:
    """The ablation mode of a run's config: ``per`` for ER with prioritized replay."""
    mode = str(cfg["refer"]["mode"])
    if cfg.get("replay", {}).get("sampling", "uniform") == "per":
        return "per" if mode == "er" else f"{mode}+per"
    return mode


def run_state(run_dir: Path, combo: Combo, env: str, steps: int) -> str:
    """``"new"`` (absent or empty directory: run it) or ``"done"`` (finished: skip it); raise
    AblationError for a directory hpc_refer would refuse or that holds another run."""
    if not run_dir.exists() or (run_dir.is_dir() and not any(run_dir.iterdir())):
        return "new"
    if not (run_dir / "config.toml").is_file():
        raise AblationError(f"{run_dir}: not empty and not a run directory: move it away")
    cfg = read_config(run_dir)
    found = (cfg["run"]["algorithm"], mode_of(cfg), cfg["run"]["seed"], cfg["run"]["env"])
    if found != (combo.algorithm, combo.mode, combo.seed, env):
        raise AblationError(f"{run_dir}: holds a run of {found}, not of "
                            f"{(combo.algorithm, combo.mode, combo.seed, env)}")
    reached = int(last_record(run_dir).get("env_step", 0))
    if reached >= steps:
        return "done"
    if reached >= int(cfg["run"]["steps"]):
        raise AblationError(f"{run_dir}: holds a run finished at {reached} steps, fewer than "
                            f"--steps {steps}: choose another --root or delete it")
    raise AblationError(f"{run_dir}: unfinished run ({reached}/{steps} steps; still running, "
                        f"crashed or killed): hpc_refer cannot resume it, delete the directory "
                        f"(and {run_dir}.log) to run it again")


@dataclass(frozen=True)
class Job:
    name: str
    argv: list[str]
    log: Path


def plan(combos: list[Combo], env: str, steps: int, root: Path,
         extra: list[str]) -> tuple[list[Job], list[str]]:
    """The jobs to start and the names of the finished runs skipped; every directory is
    checked before anything starts."""
    check_extra(extra)
    jobs, skipped, errors = [], [], []
    for combo in combos:
        d = run_dir_of(root, env, combo)
        try:
            state = run_state(d, combo, env, steps)
        except AblationError as err:
            errors.append(str(err))
            continue
        if state == "done":
            skipped.append(combo.name)
        else:
            jobs.append(Job(combo.name, run_command(combo, env, steps, d, extra),
                            d.with_name(d.name + ".log")))
    if errors:
        raise AblationError("\n".join(errors))
    return jobs, skipped


def execute(jobs: list[Job], n_parallel: int) -> list[int]:
    """Run the jobs, at most ``n_parallel`` at a time, each with its output in its log file;
    print a line when each starts and ends; return the exit codes."""
    lock = threading.Lock()

    def say(line: str) -> None:
        with lock:
            print(line, flush=True)

    def one(job: Job) -> int:
        job.log.parent.mkdir(parents=True, exist_ok=True)
        say(f"start {job.name}  (log {job.log})")
        t0 = time.perf_counter()
        with job.log.open("w") as log:
            log.write(" ".join(job.argv) + "\n")
            log.flush()
            rc = subprocess.run(job.argv, stdout=log, stderr=subprocess.STDOUT,
                                check=False).returncode
        wall = time.perf_counter() - t0
        shown = f"{wall:.0f} s" if wall < 120 else f"{wall / 60:.1f} min"
        say(f"end   {job.name}  exit {rc}  wall {shown}"
            + ("" if rc == 0 else f"  FAILED, see {job.log}"))
        return rc

    with ThreadPoolExecutor(max_workers=max(n_parallel, 1)) as pool:
        return list(pool.map(one, jobs))


def cmd_run(args: argparse.Namespace, extra: list[str]) -> int:
    combos = [Combo(a, m, s) for a in args.algorithms for m in args.modes for s in args.seeds]
    try:
        jobs, skipped = plan(combos, args.env, args.steps, args.root, extra)
    except AblationError as err:
        print(f"ablation: refused:\n{err}", file=sys.stderr)
        return 2
    for name in skipped:
        print(f"skip  {name}  (finished)")
    print(f"{len(jobs)} runs to do, {len(skipped)} finished, {args.jobs} at a time", flush=True)
    codes = execute(jobs, args.jobs)
    failed = [j.name for j, rc in zip(jobs, codes, strict=True) if rc != 0]
    if failed:
        print(f"ablation: {len(failed)} runs failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


# -------------------------------------------------------------------------------- report


@dataclass
class Run:
    dir: Path
    env: str
    algorithm: str
    mode: str
    seed: int
    steps: int
    """Environment steps reached (last train.jsonl record, else the last episode)."""
    beta: float | None
    far_fraction: float | None


def load_run(run_dir: Path) -> Run:
    cfg = read_config(run_dir)
    last = last_record(run_dir)
    steps = last.get("env_step")
    if steps is None:  # nothing logged yet: the last episode's step
        with (run_dir / "episodes.csv").open() as f:
            steps = max((int(r["env_step"]) for r in csv.DictReader(f)), default=0)
    return Run(run_dir, cfg["run"]["env"], cfg["run"]["algorithm"], mode_of(cfg),
               int(cfg["run"]["seed"]), int(steps), last.get("beta"), last.get("far_fraction"))


def in_progress(run_dir: Path) -> bool:
    """Whether the run's state.txt says it is still running (or was killed while running):
    its last windows are not results yet."""
    state = run_dir / "state.txt"
    return state.is_file() and state.read_text().split(":", 1)[0].strip() == "running"


def find_runs(root: Path) -> list[Run]:
    """The run directories (config.toml and episodes.csv) under ``root``, at any depth, but
    those still running (each named in one line)."""
    runs = []
    for p in sorted(root.rglob("config.toml")):
        if not (p.parent / "episodes.csv").is_file():
            continue
        if in_progress(p.parent):
            print(f"skip  {p.parent}  (still running: not a result yet)")
            continue
        runs.append(load_run(p.parent))
    return runs


def complete_windows(run: Run, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Window ends and mean returns of one run (hpc_refer.report.curves's windows), without the
    windows that end after the last logged step (a run stops up to one chunk after --steps)."""
    ends, means = windowed_returns(run.dir, window)
    keep = ends <= run.steps
    return ends[keep], means[keep]


def group_key(run: Run) -> tuple[str, int, int, str]:
    """Sort key of (env, algorithm, mode): the orders of ALGORITHMS and MODES."""
    order_a = ALGORITHMS.index(run.algorithm) if run.algorithm in ALGORITHMS else len(ALGORITHMS)
    order_m = MODES.index(run.mode) if run.mode in MODES else len(MODES)
    return run.env, order_a, order_m, run.mode


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


@dataclass
class Group:
    env: str
    algorithm: str
    mode: str
    runs: list[Run]
    window: int
    ends: np.ndarray = field(init=False)
    mean: np.ndarray = field(init=False)
    p20: np.ndarray = field(init=False)
    p80: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.ends, self.mean, self.p20, self.p80 = seed_band(
            [complete_windows(r, self.window) for r in self.runs])

    @property
    def centres(self) -> np.ndarray:
        return self.ends - self.window / 2

    @property
    def final(self) -> float | None:
        """Mean over seeds of the mean return in the last complete window."""
        return _finite(self.mean[-1]) if len(self.mean) else None

    @property
    def final_by_seed(self) -> list[float | None]:
        """Each run's mean return in the group's last complete window, in seed order."""
        n = len(self.ends)
        return [_finite(complete_windows(r, self.window)[1][n - 1]) if n else None
                for r in self.runs]

    def summary(self) -> dict[str, Any]:
        def floats(a: np.ndarray) -> list[float | None]:
            return [_finite(x) for x in a]

        return {"env": self.env, "algorithm": self.algorithm, "mode": self.mode,
                "seeds": [r.seed for r in self.runs],
                "runs": [repository_path(r.dir) for r in self.runs],
                "windows": self.centres.tolist(), "mean": floats(self.mean),
                "p20": floats(self.p20), "p80": floats(self.p80),
                "steps_reached": [r.steps for r in self.runs],
                "final_window_end": int(self.ends[-1]) if len(self.ends) else None,
                "final_window_return": self.final,
                "final_by_seed": self.final_by_seed,
                "beta": [_finite(r.beta) for r in self.runs],
                "far_fraction": [_finite(r.far_fraction) for r in self.runs]}


def make_groups(runs: list[Run], window: int) -> list[Group]:
    """Runs grouped by (env, algorithm, mode), each group's runs sorted by seed."""
    by: dict[tuple[str, str, str], list[Run]] = defaultdict(list)
    for r in runs:
        by[(r.env, r.algorithm, r.mode)].append(r)
    groups = [Group(env, algo, mode, sorted(rs, key=lambda r: (r.seed, str(r.dir))), window)
              for (env, algo, mode), rs in by.items()]
    for g in groups:
        seeds = [r.seed for r in g.runs]
        if len(set(seeds)) < len(seeds):
            print(f"ablation: warning: {g.env} {g.algorithm} {g.mode} has repeated seeds "
                  f"{seeds}: {', '.join(str(r.dir) for r in g.runs)}", file=sys.stderr)
    return sorted(groups, key=lambda g: group_key(g.runs[0]))


def _steps_formatter(x: float, _pos: int) -> str:
    return f"{x / 1e6:g}M" if abs(x) >= 1e6 else f"{x / 1e3:g}k" if abs(x) >= 1e3 else f"{x:g}"


def _seeds(n: int) -> str:
    return f"{n} seed" if n == 1 else f"{n} seeds"


def draw(groups: list[Group], out: Path, title: str) -> None:
    """One panel per (env, algorithm), one line (mean over seeds) and band (20th-80th
    percentiles) per mode."""
    envs = sorted({g.env for g in groups})
    algos = sorted({g.algorithm for g in groups},
                   key=lambda a: ALGORITHMS.index(a) if a in ALGORITHMS else len(ALGORITHMS))
    fig, axes = plt.subplots(len(envs), len(algos),
                             figsize=(max(4.8 * len(algos), 6.0), 3.6 * len(envs) + 0.6),
                             squeeze=False)
    window = groups[0].window if groups else 0
    for i, env in enumerate(envs):
        for j, algo in enumerate(algos):
            ax = axes[i][j]
            for g in (g for g in groups if g.env == env and g.algorithm == algo):
                if len(g.ends) == 0:
                    continue
                color = MODE_COLORS.get(g.mode)
                (line,) = ax.plot(g.centres, g.mean, marker="o", markersize=3, color=color,
                                  label=f"{g.mode} ({_seeds(len(g.runs))})")
                ax.fill_between(g.centres, g.p20, g.p80, color=line.get_color(), alpha=0.2,
                                linewidth=0)
            ax.set_title(f"{env}: {algo.upper() if algo != 'vracer' else 'V-RACER'}")
            ax.xaxis.set_major_formatter(FuncFormatter(_steps_formatter))
            ax.grid(alpha=0.3)
            if i == len(envs) - 1:
                ax.set_xlabel("environment steps")
            if j == 0:
                ax.set_ylabel(f"mean return R\n(episodes per {_steps_formatter(window, 0)} "
                              "steps)")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
    fig.suptitle(f"{title}\nline: mean over seeds, band: 20th-80th percentiles over seeds",
                 fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}"


def table(groups: list[Group]) -> str:
    """Markdown: per env, rows = algorithms, columns = modes, cell = final-window mean return
    (mean over seeds) with the number of seeds."""
    out = []
    for env in sorted({g.env for g in groups}):
        gs = [g for g in groups if g.env == env]
        modes = sorted({g.mode for g in gs}, key=lambda m: MODES.index(m) if m in MODES else 99)
        algos = sorted({g.algorithm for g in gs},
                       key=lambda a: ALGORITHMS.index(a) if a in ALGORITHMS else 99)
        ends = sorted({g.ends[-1] for g in gs if len(g.ends)})
        at = f"window ending at {_steps_formatter(ends[0], 0)} steps" if len(ends) == 1 else \
            "last complete window of each group, see the JSON"
        out.append(f"{env}: mean return of the episodes in the last window of "
                   f"{_steps_formatter(gs[0].window, 0)} steps ({at}), mean over n seeds\n")
        out.append("| algorithm | " + " | ".join(modes) + " |")
        out.append("|---|" + "---|" * len(modes))
        for a in algos:
            cells = []
            for m in modes:
                g = next((g for g in gs if g.algorithm == a and g.mode == m), None)
                if g is None:
                    cells.append("")
                elif g.final is None:
                    cells.append(f"- (n={len(g.runs)})")
                else:
                    cells.append(f"{_fmt(g.final)} (n={len(g.runs)})")
            out.append(f"| {a} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def welch_tests(finals: dict[tuple[str, str, str], list[float]]) -> list[dict[str, Any]]:
    """Welch's t-test (two-sided, unequal variances: scipy's ``ttest_ind(equal_var=False)``)
    of each mode's final-window returns against ``er``'s of the same env and algorithm, from
    ``{(env, algorithm, mode): per-seed values}``; groups of fewer than two values have none."""
    tests = []
    for (env, algorithm, mode), xs in finals.items():
        base = finals.get((env, algorithm, "er"))
        if mode == "er" or base is None or len(xs) < 2 or len(base) < 2:
            continue
        tests.append({"env": env, "algorithm": algorithm, "mode": mode, "against": "er",
                      **welch(xs, base)})
    return tests


def seeds_from_band(mean: float, p20: float, p80: float) -> list[float]:
    """The three values x1 <= x2 <= x3 whose mean, 20th and 80th percentiles (numpy's
    linear interpolation: p20 = x1 + 0.4 (x2 - x1), p80 = x2 + 0.6 (x3 - x2)) are the given
    ones: three linear equations in three unknowns, solved exactly. For reports of three
    seeds written before they stored ``final_by_seed`` (the seeds' order is not recoverable)."""
    a = np.array([[0.6, 0.4, 0.0], [0.0, 0.4, 0.6], [1 / 3, 1 / 3, 1 / 3]])
    xs = np.linalg.solve(a, np.array([p20, p80, mean]))
    got = [*np.percentile(xs, [20, 80]).tolist(), float(np.mean(xs))]
    if not (np.all(np.diff(xs) >= -1e-9) and np.allclose(got, [p20, p80, mean], atol=1e-6)):
        raise ValueError(f"no three values have mean {mean}, p20 {p20} and p80 {p80}")
    return xs.tolist()


def cmd_tests(args: argparse.Namespace) -> int:
    """Welch's tests of a committed report's final windows: its ``final_by_seed``, or for a
    report of three seeds without them the values :func:`seeds_from_band` recovers."""
    report = json.loads(args.report.read_text())
    finals, recovered = {}, []
    for g in report["groups"]:
        key = (g["env"], g["algorithm"], g["mode"])
        if g.get("final_by_seed"):
            finals[key] = [x for x in g["final_by_seed"] if x is not None]
        elif len(g["seeds"]) == 3:
            finals[key] = seeds_from_band(g["mean"][-1], g["p20"][-1], g["p80"][-1])
            recovered.append("/".join(key))
    tests = welch_tests(finals)
    path = write(args.name, {"report": repository_path(args.report),
                             "test": "Welch's t-test, two-sided, unequal variances",
                             "finals": [{"env": k[0], "algorithm": k[1], "mode": k[2],
                                         "values": v} for k, v in finals.items()],
                             "recovered_from_band": recovered, "tests": tests})
    for t in tests:
        print(f"{t['env']} {t['algorithm']}: {t['mode']} {t['mean']:.0f} against er "
              f"{t['mean_against']:.0f}, p = {t['p']:.3f}")
    print(f"wrote {path}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    if args.window <= 0:
        print("ablation: error: --window must be > 0", file=sys.stderr)
        return 2
    runs = find_runs(args.root)
    if not runs:
        print(f"ablation: error: no run directories under {args.root}", file=sys.stderr)
        return 2
    groups = make_groups(runs, args.window)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    png, md = out / f"{args.name}.png", out / f"{args.name}.md"
    draw(groups, png, args.name)
    text = table(groups)
    md.write_text(text)
    finals = {(g.env, g.algorithm, g.mode): [x for x in g.final_by_seed if x is not None]
              for g in groups}
    path = write(args.name,
                 {"root": repository_path(args.root), "window": args.window, "figure": png.name,
                  "table": md.name, "groups": [g.summary() for g in groups],
                  "tests": welch_tests(finals)})
    print(text)
    print(f"wrote {path}, {png} and {md}")
    return 0


# ---------------------------------------------------------------------------------- main


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The parsed arguments and the extra flags after ``--`` (for ``run``)."""
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train every combination (one process per run)")
    run.add_argument("--algorithms", nargs="+", choices=ALGORITHMS, default=[default_algorithm()],
                     help="default: vracer")
    run.add_argument("--modes", nargs="+", choices=MODES, default=["er", "refer"],
                     help="per: --refer.mode er --replay.sampling per (default: er refer)")
    run.add_argument("--seeds", nargs="+", type=int, default=[0], help="default: 0")
    run.add_argument("--env", default="HalfCheetah-v5", help="default: HalfCheetah-v5")
    run.add_argument("--steps", type=int, default=1_000_000, help="environment steps per run")
    run.add_argument("--root", type=Path, default=Path("runs/ablation"),
                     help="run directories: ROOT/<env>/<algo>-<mode>-seed<k>")
    run.add_argument("--jobs", type=int, default=1, help="runs at a time (one core each)")
    rep = sub.add_parser("report", help="figure, JSON and markdown table of the runs under ROOT")
    rep.add_argument("root", type=Path, help="directory holding the run directories")
    rep.add_argument("--name", required=True, help="stem of the PNG, JSON and MD files")
    rep.add_argument("--window", type=int, default=200_000,
                     help="environment steps per averaging window (paper: 2e5)")
    out_flag(rep)
    tests = sub.add_parser("tests", help="Welch's tests of a committed report's final windows "
                                         "(three-seed reports without per-seed finals: "
                                         "recovered from the band)")
    tests.add_argument("report", type=Path, help="a report's JSON")
    tests.add_argument("--name", required=True, help="stem of the JSON written")
    out_flag(tests)
    args = parse_common(parser, argv, smoke_runs)
    if args.smoke:
        return args, extra
    if extra and args.command != "run":
        parser.error("flags after -- are only for run")
    if args.command == "run" and (args.jobs < 1 or args.steps < 1):
        parser.error("--jobs and --steps must be >= 1")
    return args, extra


def smoke_runs(out: Path) -> list[list[str | Path]]:
    return [["run", "--algorithms", "vracer", "--modes", "er", "refer", "--seeds", "0",
             "--env", "Pendulum-v1", "--steps", "400", "--root", out / "runs", "--jobs", "2",
             "--", "--replay.learn-start", "300"],
            ["report", out / "runs", "--name", "ablation", "--window", "200"]]


def main(argv: list[str] | None = None) -> int:
    args, extra = parse(sys.argv[1:] if argv is None else argv)
    if args.smoke:
        return smoke(main, smoke_runs, args.out)
    if args.command == "run":
        return cmd_run(args, extra)
    return cmd_report(args) if args.command == "report" else cmd_tests(args)


if __name__ == "__main__":
    sys.exit(main())
