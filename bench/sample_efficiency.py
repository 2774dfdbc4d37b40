"""Return per environment step, hpc_refer's algorithms beside Stable-Baselines3's SAC and TD3
(issue 24, point 1): the same env ids, env-step budget and seeds, then one report.

    python bench/sample_efficiency.py run [--tasks T ...] [--agents A ...] [--steps N]
        [--seeds S ...] [--root DIR] [--jobs J]
    python bench/sample_efficiency.py report [--root DIR ...] [--name NAME] [--window W]
        [--reference FILE] [--out DIR]
    python bench/sample_efficiency.py archive [--root DIR] [--to DIR]
    python bench/sample_efficiency.py --smoke [--out DIR]

``run`` starts every (task, agent, seed) not finished yet under ``--root`` (default
``bench/runs/sample_efficiency``), ``--jobs`` at a time (one core each); ``report`` reads them
and writes ``bench/results/<name>.json`` (per task, budget and agent: the mean over seeds of
the return in the last window and of the last evaluation of the mean policy, the 20th and 80th
percentiles, each seed's values, wall time, milliseconds per environment step once learning
runs (:func:`step_ms`) and ``over_sac``, the ratio to SB3 SAC's of the same run set),
``<name>.md`` (the table) and ``<name>.png`` (return against env steps, mean over seeds with the
20-80 % band, one panel per task). The published anchors at 10^5 steps are in the JSON beside
them. Across tasks (``aggregate`` in the JSON, a second table in the ``.md``), per budget and
agent: the interquartile mean (IQM) over all runs of every task of the return normalised by SB3
SAC's mean return on that task, x_{k,m} = R_{k,m} / Rbar_SAC,m, with its 95 % stratified-bootstrap
confidence interval (runs resampled within each task; rliable, Agarwal et al. 2021, 50,000
resamples), for the last window's return and for the evaluation of the mean policy. Rbar_SAC,m
is ``sb3-sac``'s mean in the same report where it ran on task m, else the one in ``--reference``
(default: the committed ``sample_efficiency.json``); an agent enters the aggregate only with runs
on every task that has a reference, and with as many seeds on each as its fewest (the lowest
seeds). Two agents differ only where their intervals do not overlap.

``tests --report JSON --pairs A:B ...`` runs Welch's t-test (two-sided, unequal variances) of
agent A against B on every task of a committed report, for the last window's return and the
evaluation, from the per-seed values (``<name>_by_seed``; a three-seed report written before
it stored them gives them back from its mean and 20-80 % band, as ``ablation.py tests`` does).

``archive`` copies the text files of the finished runs under ``--root`` (config, episodes,
evaluations, logs; no HDF5) into ``--to`` (default ``bench/results/seeds/sample_efficiency``),
so that the runs behind a committed report are committed with it and a later session adds seeds
to them: ``report --root bench/results/seeds/sample_efficiency NEW_ROOT``.

An agent is SB3's (``sb3-sac``, ``sb3-td3``, sb3-contrib's ``sb3-crossq`` and
``sb3-crossq-256``: bench/sb3_runner.py, the ``bench`` extra) or one of hpc_refer's named
settings (:data:`HPC_AGENTS`: flags of ``python -m hpc_refer.run``).

``--smoke`` (bench/common.py): ``run`` of ``vracer`` and ``sac-er`` on Pendulum-v1, one seed,
400 steps, evaluated every 200, under DIR/runs, with ``sb3-sac`` beside them where
stable-baselines3 is installed (said in one line where it is not), then ``report`` at the
400-step budget in 200-step windows into DIR.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import re
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from ablation import Job, execute, seeds_from_band
from common import (
    RESULTS,
    mean_interval,
    out_flag,
    parse,
    repository_path,
    smoke,
    welch,
    write,
)

from hpc_refer.report.curves import evaluation_rounds, seed_band, windowed_returns
from hpc_refer.report.schema import TRAIN_FILE, read_intervals

ROOT = Path(__file__).resolve().parent / "runs" / "sample_efficiency"
ARCHIVE = RESULTS / "seeds" / "sample_efficiency"
"""Where ``archive`` keeps the text files of finished runs, committed beside the reports."""
ARCHIVED = (".toml", ".csv", ".txt", ".json", ".jsonl")
"""The kinds of file of a run directory that ``archive`` copies (no HDF5, no lock)."""
REFERENCE = RESULTS / "sample_efficiency.json"
"""The report whose ``sb3-sac`` means normalise the tasks the runs at hand have none for."""
TASKS = ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5")
WINDOW = 5_000
"""Environment steps per window of the learning curves (and of the final return)."""

LEARN_START = ["--replay.learn-start", "10000"]
CROSSQ_256 = ["--algorithm", "crossq", "--crossq.critic-hidden", "256,256"]
SB3_LOOP = ["--replay.scaling", "none", "--replay.warmup", "uniform", "--chunk-len", "1"]
"""Stable-Baselines3's loop settings: no input or reward scaling, uniform warm-up, the acting
copy refreshed every step."""
RESET_EVERY = "12000"
"""Gradient steps between the resets of the ``-reset`` agents (issue 36, point 2): on Pendulum-v1
(learning from 1,000 steps, evaluated at 5,000) two resets at ratio 8 and one at 4, the last
1,000 environment steps before the evaluation."""
UTD = {"": [], **{f"-utd{r}": ["--replay.grad-ratio", str(r), "--compile", "on"]
                    for r in (4, 8)}}
"""Update-to-data ratio suffixes of the high-ratio agents (none: ratio 1), compiled learner
step always (``--compile auto`` leaves a short run with fewer than 20,000 steps eager)."""
HPC_AGENTS: dict[str, list[str]] = {
    "vracer": [*LEARN_START],
    "vracer-er": [*LEARN_START, "--refer.mode", "er"],
    "ddpg": ["--algorithm", "ddpg", *LEARN_START],
    "naf": ["--algorithm", "naf", *LEARN_START],
    "sac-er": ["--algorithm", "sac", "--refer.mode", "er", *LEARN_START],
    "sac-er-relu": ["--algorithm", "sac", "--refer.mode", "er", "--sac.activation", "relu",
                    *LEARN_START],
    "sac-refer": ["--algorithm", "sac", *LEARN_START],
    "sac-refer-beta1": ["--algorithm", "sac", "--refer.beta-init", "1", *LEARN_START],
    "td3": ["--algorithm", "td3", *LEARN_START],
    "td3-er": ["--algorithm", "td3", "--refer.mode", "er", *LEARN_START],
    "crossq": ["--algorithm", "crossq", *LEARN_START],
    "crossq-er": ["--algorithm", "crossq", "--refer.mode", "er", *LEARN_START],
    "crossq-256": ["--algorithm", "crossq", "--crossq.critic-hidden", "256,256", *LEARN_START],
    "crossq-er-256": ["--algorithm", "crossq", "--refer.mode", "er", "--crossq.critic-hidden",
                      "256,256", *LEARN_START],
    "crossq-beta1-256": ["--algorithm", "crossq", "--refer.beta-init", "1",
                         "--crossq.critic-hidden", "256,256", *LEARN_START],
    **{f"crossq-er-{name}-256": ["--algorithm", "crossq", "--refer.mode", "er",
                                 "--crossq.critic-hidden", "256,256", *flags, *LEARN_START]
       for name, flags in (("noscale", ["--replay.scaling", "none"]),
                           ("uniform", ["--replay.warmup", "uniform"]),
                           ("chunk1", ["--chunk-len", "1"]),
                           ("sb3", SB3_LOOP))},
    **{f"crossq{mode}-sb3-256{utd}{reset}": [*CROSSQ_256, *er, *SB3_LOOP, *ratio, *resets,
                                             *LEARN_START]
       for mode, er in (("", []), ("-er", ["--refer.mode", "er"]))
       for utd, ratio in UTD.items()
       for reset, resets in (("", []), ("-reset", ["--replay.reset-every", RESET_EVERY]))
       if utd or not reset},
    "crossq-sb3-actor1-256": [*CROSSQ_256, *SB3_LOOP, "--refer.rule1-critics", "false",
                              *LEARN_START],
    "crossq-sb3-D0.3-256": [*CROSSQ_256, *SB3_LOOP, "--refer.D", "0.3", *LEARN_START],
    **{f"sac-er-sb3{norm}{utd}": ["--algorithm", "sac", "--refer.mode", "er", "--sac.activation",
                                  "relu", *SB3_LOOP, *layer_norm, *ratio, *LEARN_START]
       for norm, layer_norm in (("", []), ("-ln", ["--sac.critic-layer-norm", "true"]))
       for utd, ratio in UTD.items()},
}
"""hpc_refer's settings by name: flags of ``python -m hpc_refer.run``."""
SB3_AGENTS = ("sb3-sac", "sb3-td3", "sb3-crossq", "sb3-crossq-256")

PUBLISHED = {
    "Tianshou SAC (10 seeds)": {"HalfCheetah-v5": 6515, "Hopper-v5": 2613, "Walker2d-v5": 1305},
    "CrossQ": {"HalfCheetah-v5": 8112, "Hopper-v5": 2764, "Walker2d-v5": 3914,
               "Ant-v5": 2299},
}
"""Published mean returns at 10^5 environment steps (issue 24), for the report."""


class RunKey(NamedTuple):
    task: str
    agent: str
    seed: int

    def directory(self, root: Path) -> Path:
        return root / self.task / f"{self.agent}-seed{self.seed}"


def command(key: RunKey, steps: int, run_dir: Path, eval_every: int,
            learn_start: int | None = None) -> list[str]:
    """The command line of one run; ``learn_start`` replaces every agent's 10,000 steps
    before learning (a short task's budget)."""
    if key.agent in SB3_AGENTS:
        start = [] if learn_start is None else ["--learning-starts", str(learn_start)]
        return [sys.executable, str(Path(__file__).with_name("sb3_runner.py")),
                key.agent.removeprefix("sb3-"), key.task, str(steps), str(key.seed),
                str(run_dir), "--eval-every", str(eval_every), *start]
    start = [] if learn_start is None else ["--replay.learn-start", str(learn_start)]
    return [sys.executable, "-m", "hpc_refer.run", "--env", key.task, "--steps", str(steps),
            "--seed", str(key.seed), "--run-dir", str(run_dir), "--eval-every",
            str(eval_every), "--eval-episodes", "5", "--log-every", str(eval_every),
            "--checkpoint-every", "0", *HPC_AGENTS[key.agent], *start]


def finished(run_dir: Path) -> bool:
    state = run_dir / "state.txt"
    return state.is_file() and state.read_text().split(":")[0].strip() == "finished"


def cmd_run(args: argparse.Namespace) -> int:
    unknown = [a for a in args.agents if a not in HPC_AGENTS and a not in SB3_AGENTS]
    if unknown:
        print(f"sample_efficiency: unknown agents {unknown}: allowed are "
              f"{', '.join([*SB3_AGENTS, *HPC_AGENTS])}", file=sys.stderr)
        return 2
    jobs = []
    for task in args.tasks:
        for agent in args.agents:
            for seed in args.seeds:
                key = RunKey(task, agent, seed)
                d = key.directory(args.root)
                if finished(d):
                    continue
                if d.exists():
                    print(f"sample_efficiency: {d} exists but did not finish: remove it to "
                          "run it again", file=sys.stderr)
                    return 2
                d.parent.mkdir(parents=True, exist_ok=True)
                jobs.append(Job(f"{task} {agent} seed {seed}",
                                command(key, args.steps, d, args.eval_every,
                                        args.learn_start),
                                d.with_name(d.name + ".log")))
    print(f"{len(jobs)} runs to go, {args.jobs} at a time")
    codes = execute(jobs, args.jobs)
    return 0 if all(c == 0 for c in codes) else 1


def wall_seconds(run_dir: Path) -> float:
    """The wall time of a run: the last episode's ``wall_s``."""
    with (run_dir / "episodes.csv").open() as f:
        rows = list(csv.DictReader(f))
    return float(rows[-1]["wall_s"]) if rows else float("nan")


def step_ms(run_dir: Path) -> float:
    """Wall milliseconds per environment step once learning runs: the median over the
    train.jsonl intervals with gradient steps, the first left out (it holds the compile), of
    1000 / env_steps_per_s; nan for a run without such intervals (an SB3 run has no
    train.jsonl). In one process the learner and the actor take turns on one core, so this is
    the learner's time per step at the run's update ratio plus the environment's and the
    policy's."""
    path = run_dir / TRAIN_FILE
    if not path.is_file():
        return float("nan")
    rates = [r.env_steps_per_s for r in read_intervals(path) if r.grad_step > 0][1:]
    return float(np.median([1000.0 / x for x in rates if x > 0])) if rates else float("nan")


def summary(runs: list[Path], steps: int, window: int = WINDOW) -> dict[str, Any]:
    """Mean over seeds (and 20th/80th percentiles) of the return in the last window before
    ``steps`` and of the evaluation round at the largest step <= ``steps``, each run's values
    in seed order (``<name>_by_seed``, for tests between agents), the 95 % interval of each
    mean (:func:`mean_interval`), the mean wall time and the mean of :func:`step_ms`."""
    values = final_values(runs, steps, window)
    out: dict[str, Any] = {"seeds": len(runs)}
    for name in ("return", "eval"):
        xs = [x for x in values[name] if np.isfinite(x)]
        out[name] = float(np.mean(xs)) if xs else None
        out[f"{name}_p20_p80"] = ([float(v) for v in np.percentile(xs, [20, 80])]
                                  if xs else None)
        out[f"{name}_by_seed"] = [x if np.isfinite(x) else None for x in values[name]]
        out[f"{name}_ci95"] = mean_interval(xs)
    out["wall_s_mean"] = float(np.nanmean([wall_seconds(d) for d in runs]))
    costs = [step_ms(d) for d in runs]
    out["ms_per_step"] = float(np.nanmean(costs)) if np.isfinite(costs).any() else None
    return out


def finished_runs(root: Path) -> list[Path]:
    return [d for d in sorted(root.glob("*/*-seed*")) if d.is_dir() and finished(d)]


def collect(roots: list[Path]) -> dict[str, dict[str, list[Path]]]:
    """Finished runs by task and agent, from every root (a run of the same task, agent and
    seed in two roots raises ValueError: it would count twice)."""
    out: dict[str, dict[str, list[Path]]] = {}
    seen: dict[tuple[str, str], Path] = {}
    for root in roots:
        for d in finished_runs(root):
            key = (d.parent.name, d.name)
            if key in seen:
                raise ValueError(f"{d} and {seen[key]} are the same run (task, agent, seed)")
            seen[key] = d
            agent = d.name.rsplit("-seed", 1)[0]
            out.setdefault(d.parent.name, {}).setdefault(agent, []).append(d)
    return out


def seed_of(run_dir: Path) -> int:
    return int(run_dir.name.rsplit("-seed", 1)[1])


def final_values(runs: list[Path], steps: int, window: int) -> dict[str, list[float]]:
    """Per run (in seed order): the return of the last window before ``steps`` and the
    evaluation round at the largest step <= ``steps`` (nan where there is none)."""
    out: dict[str, list[float]] = {"return": [], "eval": []}
    for d in sorted(runs, key=seed_of):
        ends, means = windowed_returns(d, window)
        inside = means[(ends <= steps) & np.isfinite(means)]
        out["return"].append(float(inside[-1]) if inside.size else float("nan"))
        rounds = evaluation_rounds(d)
        before = None if rounds is None else rounds[1][rounds[0] <= steps]
        out["eval"].append(float(before[-1]) if before is not None and before.size
                           else float("nan"))
    return out


def reference_means(path: Path | None, budget: int) -> dict[str, float]:
    """SB3 SAC's mean return per task at ``budget`` in a committed report ({} without one)."""
    if path is None or not path.is_file():
        return {}
    tasks = json.loads(path.read_text()).get("tasks", {})
    out = {}
    for task, budgets in tasks.items():
        sac = budgets.get(str(budget), {}).get("sb3-sac", {})
        if sac.get("return"):
            out[task] = float(sac["return"])
    return out


def iqm_intervals(scores: dict[str, np.ndarray], reps: int = 50_000,
                  seed: int = 0) -> dict[str, tuple[float, float, float]]:
    """Per agent, the IQM of its (runs x tasks) normalised scores and the 95 % stratified
    bootstrap interval (rliable: runs resampled with replacement within each task)."""
    from rliable import library, metrics

    def iqm(x: np.ndarray) -> np.ndarray:
        return np.array([metrics.aggregate_iqm(x)])

    with warnings.catch_warnings():  # arch's notice about rliable's random_state argument
        warnings.simplefilter("ignore", FutureWarning)
        points, intervals = library.get_interval_estimates(
            scores, iqm, reps=reps, random_state=np.random.RandomState(seed))
    return {a: (float(points[a][0]), float(intervals[a][0, 0]), float(intervals[a][1, 0]))
            for a in scores}


def aggregate(found: dict[str, dict[str, list[Path]]], budget: int, window: int,
              reference: dict[str, float], reps: int = 50_000) -> dict[str, Any]:
    """IQM and 95 % CI across tasks of the returns normalised by SB3 SAC's mean (module doc):
    for ``return`` (last window) and ``eval`` (mean policy), per agent."""
    means = dict(reference)
    for task, agents in found.items():
        if "sb3-sac" in agents and last_step(agents["sb3-sac"], window) >= budget:
            sac = final_values(agents["sb3-sac"], budget, window)["return"]
            means[task] = float(np.nanmean(sac))
    tasks = sorted(t for t in found if t in means and means[t] > 0)
    out: dict[str, Any] = {"tasks": tasks, "sac_means": {t: means[t] for t in tasks},
                           "agents": {}}
    if not tasks:
        return out
    values = {}  # agent -> per task, its runs' final values (each run read once)
    for agent in sorted(set.intersection(*(set(found[t]) for t in tasks))):
        runs = [found[t][agent] for t in tasks]
        if min(last_step(r, window) for r in runs) >= budget:
            values[agent] = [final_values(r, budget, window) for r in runs]
    for kind in ("return", "eval"):
        scores = {}
        for agent, per_task in values.items():
            n = min(len(v[kind]) for v in per_task)
            matrix = np.stack([np.array(v[kind][:n]) / means[t]
                               for v, t in zip(per_task, tasks, strict=True)], axis=1)
            if np.isfinite(matrix).all():
                scores[agent] = matrix
        for agent, (point, lo, hi) in iqm_intervals(scores, reps).items() if scores else ():
            out["agents"].setdefault(agent, {"seeds": int(scores[agent].shape[0])})[kind] = {
                "iqm": point, "ci95": [lo, hi]}
    return out


def last_step(runs: list[Path], window: int = WINDOW) -> int:
    ends = [int(windowed_returns(d, window)[0][-1]) for d in runs]
    return min(ends) if ends else 0


def cmd_report(args: argparse.Namespace) -> int:
    roots = args.root
    try:
        found = collect(roots)
    except ValueError as err:
        print(f"sample_efficiency: {err}", file=sys.stderr)
        return 2
    if not found:
        print(f"sample_efficiency: no finished run under {' '.join(map(str, roots))}",
              file=sys.stderr)
        return 2
    results: dict[str, Any] = {}
    fig, axes = plt.subplots(1, len(found), figsize=(5.2 * len(found), 4.0), squeeze=False)
    window = args.window
    last = f"{window // 1000}k" if window % 1000 == 0 else f"{window}"
    rows = [f"| task | budget | agent | seeds | return (last {last}) | eval (mean policy) | "
            "over SB3 SAC | wall min | ms / step |", "|---|---|---|---|---|---|---|---|---|"]
    for ax, (task, agents) in zip(axes[0], sorted(found.items()), strict=True):
        budgets = sorted({b for b in args.budgets if b <= max(last_step(r, window)
                                                               for r in agents.values())})
        results[task] = {}
        for budget in budgets:
            table = {a: summary(r, budget, window) for a, r in sorted(agents.items())
                     if last_step(r, window) >= budget}
            sac = (table.get("sb3-sac") or {}).get("return")
            for a, s in table.items():
                s["over_sac"] = (s["return"] / sac if sac and s["return"] is not None
                                 and sac > 0 else None)
                wall = s["wall_s_mean"] / 60
                rows.append(f"| {task} | {budget:,} | {a} | {s['seeds']} | {_f(s['return'])} | "
                            f"{_f(s['eval'])} | {_f(s['over_sac'], 2)} | {wall:.1f} | "
                            f"{_f(s['ms_per_step'], 1)} |")
            results[task][str(budget)] = table
        for agent, runs in sorted(agents.items()):
            x, mean, lo, hi = seed_band([windowed_returns(d, window) for d in runs])
            line, = ax.plot(x, mean, label=f"{agent} ({len(runs)})")
            ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2)
        for label, values in PUBLISHED.items():
            if task in values:
                ax.scatter([100_000], [values[task]], marker="*", s=60, label=label)
        ax.set_title(task)
        ax.set_xlabel("environment steps")
        ax.set_ylabel(f"mean episode return per {window:,} steps")
        ax.legend(fontsize=7)
    fig.tight_layout()
    png = args.out / f"{args.name}.png"
    args.out.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    aggregates = {}
    header = ["", "| budget | agent | seeds | IQM return / SB3 SAC [95 % CI] | "
              "IQM eval / SB3 SAC [95 % CI] |", "|---|---|---|---|---|"]
    for budget in sorted(set(args.budgets)):
        agg = aggregate(found, budget, window, reference_means(args.reference, budget),
                        args.reps)
        if not agg["agents"]:
            continue
        aggregates[str(budget)] = agg
        rows += header
        header = []
        for agent, a in agg["agents"].items():
            rows.append(f"| {budget:,} ({len(agg['tasks'])} tasks) | {agent} | {a['seeds']} | "
                        f"{_ci(a.get('return'))} | {_ci(a.get('eval'))} |")
    (args.out / f"{args.name}.md").write_text("\n".join(rows) + "\n")
    path = write(args.name, {"window": window, "root": [repository_path(r) for r in roots],
                             "tasks": results, "aggregate": aggregates,
                             "reference": (repository_path(args.reference)
                                           if args.reference else None),
                             "published_at_1e5": PUBLISHED, "agents": HPC_AGENTS})
    print("\n".join(rows))
    print(f"wrote {path}, {png} and {png.with_suffix('.md')}")
    return 0


def _f(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _ci(x: dict[str, Any] | None) -> str:
    return "-" if x is None else f"{x['iqm']:.2f} [{x['ci95'][0]:.2f}, {x['ci95'][1]:.2f}]"


RUN_DIR_LINE = re.compile(r'^run_dir = ".*"$', re.MULTILINE)


def archived_config(text: str, target: Path) -> str:
    """A run's config.toml as ``archive`` keeps it: its ``run.run_dir`` the archived copy's
    path (relative to the repository where it lies inside it), not the machine's where it
    ran."""
    return RUN_DIR_LINE.sub(f'run_dir = "{repository_path(target)}"', text, count=1)


def cmd_archive(args: argparse.Namespace) -> int:
    """Copy the text files of the finished runs under ``--root`` into ``--to`` (runs already
    there are left as they are), each config.toml naming its archived copy
    (:func:`archived_config`)."""
    copied = 0
    for d in finished_runs(args.root):
        target = args.to / d.parent.name / d.name
        if target.exists():
            continue
        target.mkdir(parents=True)
        for f in sorted(d.iterdir()):
            if f.name == "config.toml":
                (target / f.name).write_text(archived_config(f.read_text(), target))
            elif f.is_file() and f.suffix in ARCHIVED:
                shutil.copy2(f, target / f.name)
        copied += 1
    print(f"archived {copied} runs into {args.to}")
    return 0


def by_seed(entry: dict[str, Any], name: str) -> list[float]:
    """The per-seed values of ``name`` (return or eval) of a report's agent entry: its
    ``<name>_by_seed``, or for a report of three seeds written before it stored them the
    values its mean and 20-80 % band determine (:func:`ablation.seeds_from_band`, sorted)."""
    if entry.get(f"{name}_by_seed") is not None:
        return [x for x in entry[f"{name}_by_seed"] if x is not None]
    if entry.get("seeds") == 3 and entry.get(name) is not None:
        return seeds_from_band(entry[name], *entry[f"{name}_p20_p80"])
    return []


def cmd_tests(args: argparse.Namespace) -> int:
    """Welch's t-tests of pairs of agents of a committed report, per task at ``--budget``:
    the return of the last window and the evaluation, from each agent's per-seed values
    (:func:`by_seed`)."""
    report = json.loads(args.report.read_text())
    out: list[dict[str, Any]] = []
    for task, budgets in report["tasks"].items():
        agents = budgets.get(str(args.budget), {})
        for pair in args.pairs:
            a, b = pair.split(":")
            if a not in agents or b not in agents:
                continue
            for name in ("return", "eval"):
                xs, ys = by_seed(agents[a], name), by_seed(agents[b], name)
                if min(len(xs), len(ys)) < 2:
                    continue
                test = welch(xs, ys)
                out.append({"task": task, "agent": a, "against": b, "value": name,
                            "values": xs, "values_against": ys, **test})
                print(f"{task} {name}: {a} {test['mean']:.0f} against {b} "
                      f"{test['mean_against']:.0f}, p = {test['p']:.3f}")
    print(write(args.name, {"report": repository_path(args.report), "budget": args.budget,
                            "test": "Welch's t-test, two-sided, unequal variances",
                            "tests": out}))
    return 0


def have_sb3() -> bool:
    return importlib.util.find_spec("stable_baselines3") is not None


def smoke_runs(out: Path) -> list[list[str | Path]]:
    agents = ["vracer", "sac-er", *(["sb3-sac"] if have_sb3() else [])]
    return [["run", "--tasks", "Pendulum-v1", "--agents", *agents, "--steps", "400",
             "--seeds", "0", "--eval-every", "200", "--jobs", "2", "--root", out / "runs"],
            ["report", "--root", out / "runs", "--budgets", "400", "--window", "200",
             "--reps", "2000"],
            ["archive", "--root", out / "runs", "--to", out / "seeds"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="start the runs not finished yet")
    run.add_argument("--tasks", nargs="+", default=list(TASKS))
    run.add_argument("--agents", nargs="+", default=["sb3-sac", "sac-er", "vracer"])
    run.add_argument("--steps", type=int, default=100_000)
    run.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    run.add_argument("--eval-every", type=int, default=10_000)
    run.add_argument("--learn-start", type=int, default=None,
                     help="environment steps before learning, for every agent (default: "
                          "10,000, the RL Zoo's MuJoCo setting)")
    run.add_argument("--jobs", type=int, default=2)
    run.add_argument("--root", type=Path, default=ROOT)
    report = sub.add_parser("report", help="tables, JSON and the figure of the finished runs")
    report.add_argument("--root", type=Path, nargs="+", default=[ROOT],
                        help="directories of runs (a run in two of them is refused)")
    report.add_argument("--reference", type=Path, default=REFERENCE,
                        help="report whose sb3-sac means normalise the tasks without sb3-sac "
                             "runs here (default: the committed sample_efficiency.json)")
    report.add_argument("--reps", type=int, default=50_000,
                        help="bootstrap resamples of the IQM's interval (default 50,000)")
    report.add_argument("--name", default="sample_efficiency")
    report.add_argument("--budgets", nargs="+", type=int, default=[100_000, 300_000])
    report.add_argument("--window", type=int, default=WINDOW,
                        help=f"environment steps per window (default {WINDOW:,})")
    out_flag(report)
    archive = sub.add_parser("archive", help="copy the finished runs' text files to commit them")
    archive.add_argument("--root", type=Path, default=ROOT)
    archive.add_argument("--to", type=Path, default=ARCHIVE)
    tests = sub.add_parser("tests", help="Welch's t-tests of pairs of agents of a committed "
                                         "report (per task, return and evaluation)")
    tests.add_argument("--report", type=Path, required=True, help="a report's JSON")
    tests.add_argument("--pairs", nargs="+", required=True, metavar="AGENT:AGAINST")
    tests.add_argument("--budget", type=int, default=100_000)
    tests.add_argument("--name", required=True, help="stem of the JSON written")
    out_flag(tests)
    args = parse(parser, argv, smoke_runs, results=RESULTS)
    if args.smoke:
        if not have_sb3():
            print("sample_efficiency: stable-baselines3 is not installed (the bench extra): "
                  "the smoke run leaves out sb3-sac", flush=True)
        return smoke(main, smoke_runs, args.out)
    commands = {"run": cmd_run, "report": cmd_report, "archive": cmd_archive,
                "tests": cmd_tests}
    return commands[args.command](args)


if __name__ == "__main__":
    raise SystemExit(main())
