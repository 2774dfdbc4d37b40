"""Recurrent and stacked-observation policies against the feed-forward one on partially
observed tasks, at equal environment steps (issue 27, point 3; issue 39, point 2).

Two tasks (``--task``):

``pendulum``  Pendulum-v1 with the angular velocity removed from the observation
              (``po_envs:PendulumNoVelocity``: cos theta and sin theta only); two consecutive
              observations give the velocity, so about two steps of memory suffice.
``cue``       ``po_envs:CueRecall``: a cue shown at an episode's first step must be given back
              12 to 23 steps later; its optimum needs memory over more than 4 (and, for its
              last 8 answers, more than 16) steps. ``full`` there is ``po_envs:CueShown``, the
              cue seen at every step.

Settings, each trained with the same algorithm, budget and seeds:

``full``     the task fully observed: what the others could reach;
``ff``       the partially observed task, feed-forward policy (sees one observation);
``stack``    ``--env.history 4`` (the last four observations); ``stack16``: the last 16;
``gru``      ``--<algo>.cell gru`` (BPTT over W = 16 steps from the stored carries);
``gru-b4``   the GRU with R2D2's burn-in of 4 steps (``--<algo>.burn-in 4``); ``gru-b8``: 8.

Each run's mean policy is then evaluated over 10 episodes (``python -m hpc_refer.evaluate``),
and each recurrent run's final checkpoint is probed for the staleness of its stored carries
(:func:`staleness`, ``staleness.json`` in the run directory): 512 sequences of its replay
through its final networks, with the stored carries (b = 0), burn-ins of 4 and 8, and the
carries recomputed from each episode's start (b = 64), and per sequence position the mean
|log rho| and the mean of the algorithm's error (the critics' TD error, what prioritized
replay ranks by). The report gives, per setting, the mean over seeds of the training
return in the last 20 % of the run and of the evaluation with its 95 % t-interval, the
learner's gradient steps/s (median of the logged intervals once training runs), Welch's
t-tests of the pairs of :data:`COMPARED` (evaluation and training return), and the probe's
means.

    python bench/partial_observation.py run [--task cue] [--steps 30000] [--seeds 0 1 2]
    python bench/partial_observation.py report [--task cue] [--out DIR]
    python bench/partial_observation.py --smoke [--out DIR]

Runs go to ``bench/runs/partial_observation[_cue]/<setting>-seed<k>`` (``--root``: another
directory); the report writes ``bench/results/partial_observation[_cue].{json,md,png}``
(``--out``: another directory). ``--smoke`` (bench/common.py): ``ff`` and ``gru-b4`` of the
cue task, one seed, 400 steps (training from 300) under DIR/runs, evaluated and probed, then
the report into DIR.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
from ablation import Job, execute
from common import mean_interval, out_flag, parse, smoke, welch, write

from hpc_refer.algorithms.kit.collectives import SerialReducer
from hpc_refer.config.resolve import build_config, load_toml
from hpc_refer.envs.registry import SolverSpec, make_driver
from hpc_refer.loop import checkpoint
from hpc_refer.loop.learner_checkpoint import part_name
from hpc_refer.replay.sequences import follow
from hpc_refer.run.learning import make_learner

HERE = Path(__file__).resolve().parent
RUNS = HERE / "runs"
MASKED = "po_envs:PendulumNoVelocity"


class Task(NamedTuple):
    """A partially observed task of the benchmark and its fully observed twin."""

    masked: str
    full: str
    name: str
    """The results' and the runs' name."""
    title: str
    settings: tuple[str, ...]
    """The settings a run trains unless told others."""


SETTINGS = ("full", "ff", "stack", "stack16", "gru", "gru-b4", "gru-b8")
TASKS = {
    "pendulum": Task(MASKED, "Pendulum-v1", "partial_observation",
                     "Pendulum-v1 without its velocity", ("full", "ff", "stack", "gru")),
    "cue": Task("po_envs:CueRecall", "po_envs:CueShown", "partial_observation_cue",
                "CueRecall: the cue shown once, asked for 12-23 steps later", SETTINGS),
}
PROBE_BURN_INS = (0, 4, 8, 64)
"""The burn-ins of the staleness probe: none, the settings' two, and one back to every
episode's start (64 > the tasks' recurrent horizon: CueRecall's 24 steps; Pendulum's 200 are
not reached, so there it is the longest burn-in probed)."""


def setting_flags(setting: str, algorithm: str, task: str = "pendulum") -> list[str]:
    """The environment and network flags of a setting."""
    t = TASKS[task]
    gru = ["--env", t.masked, f"--{algorithm}.cell", "gru"]
    return {"full": ["--env", t.full],
            "ff": ["--env", t.masked],
            "stack": ["--env", t.masked, "--env.history", "4"],
            "stack16": ["--env", t.masked, "--env.history", "16"],
            "gru": gru,
            "gru-b4": [*gru, f"--{algorithm}.burn-in", "4"],
            "gru-b8": [*gru, f"--{algorithm}.burn-in", "8"]}[setting]


def run_dir(setting: str, seed: int, root: Path) -> Path:
    return root / f"{setting}-seed{seed}"


def _env() -> dict[str, str]:
    """The runs load ``po_envs`` from this directory."""
    return {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def finished(d: Path) -> bool:
    state = d / "state.txt"
    return (d / "policy.h5").is_file() and state.is_file() and state.read_text().startswith(
        "finished")


def cmd_run(args: argparse.Namespace) -> int:
    os.environ.update(_env())
    jobs = []
    for seed in args.seeds:
        for setting in args.settings:
            d = run_dir(setting, seed, args.root)
            if finished(d):
                continue
            if d.exists():
                shutil.rmtree(d)
            argv = [sys.executable, "-m", "hpc_refer.run", "--algorithm", args.algorithm,
                    *setting_flags(setting, args.algorithm, args.task), "--steps",
                    str(args.steps), "--seed", str(seed), "--replay.learn-start",
                    str(args.learn_start), "--log-every", str(max(args.steps // 30, 1)),
                    "--run-dir", str(d)]
            jobs.append(Job(d.name, argv, d.with_name(d.name + ".log")))
    if any(execute(jobs, args.jobs)):
        return 1
    for seed in args.seeds:
        for setting in args.settings:
            d = run_dir(setting, seed, args.root)
            if not (d / "evaluation.json").is_file():
                subprocess.run([sys.executable, "-m", "hpc_refer.evaluate", str(d),
                                "--episodes", "10", "--out", str(d / "evaluation.json")],
                               check=True, stdout=subprocess.DEVNULL, env=_env())
            if setting.startswith("gru") and not (d / "staleness.json").is_file():
                (d / "staleness.json").write_text(json.dumps(staleness(d)) + "\n")
    return 0


def staleness(d: Path, sequences: int = 512, seed: int = 0) -> dict[str, Any]:
    """The staleness of a recurrent run's stored carries, from its final checkpoint: the
    same ``sequences`` sequences of its replay (sampled with ``seed``) through its final
    networks, their first carries the stored ones (b = 0) or those of burn-ins of b steps
    (:data:`PROBE_BURN_INS`), and per sequence position the mean over the valid rows of
    |log rho| (rho = pi_w / mu of the stored action) and of |error| (the algorithm's error:
    the critics' TD error, or Q-ret - V for V-RACER). Nothing is trained."""
    config = build_config(load_toml(d / "config.toml"))
    env = make_driver(SolverSpec.of(config), None)
    learner = make_learner(config, env.obs_dim, env.act_dim, SerialReducer())
    env.close()
    last = checkpoint.latest(d)
    if last is None:
        raise FileNotFoundError(f"{d}: no checkpoint to probe")
    learner.restore_state(checkpoint.read_tree(last / part_name(0))["learner"])
    replay, length = learner.replay, config.algorithm.sequence_length
    rows, valid = follow(replay.sample_rows(sequences, np.random.default_rng(seed)), length,
                         replay.next, replay.flags)
    mask = valid.reshape(-1, length)
    out: dict[str, Any] = {}
    for b in PROBE_BURN_INS:
        batch = replay.batch(rows)
        if b:
            batch = learner.burned_in(batch, rows, b)
        torch.manual_seed(seed)  # a loss that draws noise draws the same for every b
        losses = learner.algo.losses(batch, learner.terms)
        log_rho = np.abs(np.log(np.maximum(losses.rho.numpy(), 1e-30))).reshape(-1, length)
        error = np.abs(losses.error.numpy()).reshape(-1, length)
        out[str(b)] = {name: [float(x[mask[:, t], t].mean()) for t in range(length)]
                       for name, x in (("abs_log_rho", log_rho), ("error", error))}
    return {"checkpoint": last.name, "sequences": sequences, "length": length,
            "by_burn_in": out}


def episodes(d: Path) -> tuple[np.ndarray, np.ndarray]:
    """(env_step, return) of a run's training episodes."""
    with (d / "episodes.csv").open() as f:
        rows = list(csv.DictReader(f))
    return (np.array([int(r["env_step"]) for r in rows]),
            np.array([float(r["return"]) for r in rows]))


def last_window(d: Path, fraction: float = 0.2) -> float:
    steps, returns = episodes(d)
    return float(returns[steps >= (1 - fraction) * steps.max()].mean())


def windowed(steps: np.ndarray, returns: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Mean return of the episodes that ended in each window (edges[i], edges[i + 1]] of
    env steps (nan where none did)."""
    window = np.searchsorted(edges, steps, side="left") - 1
    out = np.full(edges.size - 1, np.nan)
    for i in range(edges.size - 1):
        if np.any(window == i):
            out[i] = returns[window == i].mean()
    return out


def grad_rate(d: Path) -> float:
    """Median gradient steps/s of the logged intervals in which the learner trained."""
    rates = [r["grad_steps_per_s"] for r in map(json.loads, (d / "train.jsonl").open())
             if r.get("grad_steps_per_s", 0) > 0]
    return float(np.median(rates)) if rates else float("nan")


def probe_means(dirs: list[Path]) -> dict[str, dict[str, list[float]]] | None:
    """The staleness probes of ``dirs`` (:func:`staleness`) averaged over the runs, per
    burn-in and position; None where a run has none."""
    probes = [d / "staleness.json" for d in dirs]
    if not all(p.is_file() for p in probes):
        return None
    trees = [json.loads(p.read_text())["by_burn_in"] for p in probes]
    return {b: {k: np.mean([t[b][k] for t in trees], axis=0).tolist() for k in trees[0][b]}
            for b in trees[0]}


COMPARED = (("stack", "ff"), ("stack16", "stack"), ("gru", "ff"), ("gru", "stack16"),
            ("gru-b4", "gru"), ("gru-b8", "gru"))
"""The pairs of settings the report tests (where both ran)."""


def welch_tests(results: dict[str, dict]) -> list[dict[str, Any]]:
    """Welch's t-test (two-sided, unequal variances) of the evaluation and of the training
    return of the last 20 % for each pair of :data:`COMPARED` with two seeds or more each."""
    tests = []
    for setting, against in COMPARED:
        a, b = results.get(setting), results.get(against)
        if a is None or b is None or min(len(a["seeds"]), len(b["seeds"])) < 2:
            continue
        tests += [{"setting": setting, "against": against, "value": value,
                   **welch(a[value], b[value])}
                  for value in ("eval_return", "train_return_last20")]
    return tests


def cmd_report(args: argparse.Namespace) -> int:
    task = TASKS[args.task]
    results: dict[str, dict] = {}
    fig, (ax, ax_rho) = plt.subplots(1, 2, figsize=(12, 4))
    grid = np.linspace(0, 1, 31)
    for k, setting in enumerate(SETTINGS):
        dirs = [d for d in sorted(args.root.glob(f"{setting}-seed*")) if finished(d)
                and (d / "evaluation.json").is_file()]
        if not dirs:
            continue
        evals = [json.loads((d / "evaluation.json").read_text())["return_mean"] for d in dirs]
        results[setting] = {
            "seeds": [int(d.name.rsplit("seed", 1)[1]) for d in dirs],
            "train_return_last20": [last_window(d) for d in dirs],
            "eval_return": evals,
            "eval_return_ci95": mean_interval(evals),
            "grad_steps_per_s": [grad_rate(d) for d in dirs],
        }
        probe = probe_means(dirs) if setting.startswith("gru") else None
        if probe is not None:
            results[setting]["staleness"] = probe
            for b, style in (("0", "-"), (str(PROBE_BURN_INS[-1]), ":")):
                ax_rho.plot(probe[b]["abs_log_rho"], style, color=f"C{k}",
                            label=f"{setting}, carries of b = {b}")
        edges = grid * max(episodes(d)[0].max() for d in dirs)
        c = np.array([windowed(*episodes(d), edges) for d in dirs])
        x = 0.5 * (edges[:-1] + edges[1:])
        ax.plot(x, np.nanmean(c, axis=0), color=f"C{k}", label=setting)
        ax.fill_between(x, np.nanpercentile(c, 20, axis=0), np.nanpercentile(c, 80, axis=0),
                        color=f"C{k}", alpha=0.2)
    for entry in results.values():
        for key in ("train_return_last20", "eval_return", "grad_steps_per_s"):
            entry[f"{key}_mean"] = float(np.mean(entry[key]))
    ff = results.get("ff")
    lines = ["| setting | seeds | return, last 20 % of training | evaluation (10 episodes) "
             "[95 % t-interval] | gradient steps/s (median) |", "|---|---|---|---|---|"]
    for name, e in results.items():
        if ff is not None and name != "ff" and name != "full":
            e["beats_ff_every_seed"] = bool(np.all(
                np.array(e["eval_return"]) > np.mean(ff["eval_return"])))
        ci = e["eval_return_ci95"]
        shown = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
        lines.append(f"| {name} | {len(e['seeds'])} | {e['train_return_last20_mean']:.2f} | "
                     f"{e['eval_return_mean']:.2f}{shown} | "
                     f"{e['grad_steps_per_s_mean']:.0f} |")
    if ff is not None and "gru" in results:
        results["gru"]["grad_rate_over_ff"] = (results["gru"]["grad_steps_per_s_mean"]
                                               / ff["grad_steps_per_s_mean"])
    tests = welch_tests(results)
    if tests:
        lines += ["", "| setting | against | value | mean | mean against | Welch's p |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {t['setting']} | {t['against']} | {t['value']} | {t['mean']:.2f} | "
                  f"{t['mean_against']:.2f} | {t['p']:.3f} |" for t in tests]
    probed = {n: e["staleness"] for n, e in results.items() if "staleness" in e}
    if probed:
        lines += ["", "Staleness probe (final checkpoint, 512 sequences): mean |log rho| at "
                  "sequence positions 0 / 1 / 4 / last, by the burn-in b that starts them",
                  "", "| setting | " + " | ".join(f"b = {b}" for b in PROBE_BURN_INS) + " |",
                  "|---|" + "---|" * len(PROBE_BURN_INS)]
        for name, probe in probed.items():
            cells = [" / ".join(f"{probe[str(b)]['abs_log_rho'][t]:.3f}" for t in (0, 1, 4, -1))
                     for b in PROBE_BURN_INS]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines += ["", "The same for the mean |error| (the critics' TD error)", "",
                  "| setting | " + " | ".join(f"b = {b}" for b in PROBE_BURN_INS) + " |",
                  "|---|" + "---|" * len(PROBE_BURN_INS)]
        for name, probe in probed.items():
            cells = [" / ".join(f"{probe[str(b)]['error'][t]:.3f}" for t in (0, 1, 4, -1))
                     for b in PROBE_BURN_INS]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episode return (mean over seeds, 20-80 %)")
    ax.set_title(task.title, fontsize=10)
    ax.legend(fontsize=8)
    ax_rho.set_xlabel("position in the sequence")
    ax_rho.set_ylabel("mean |log rho| (final networks)")
    ax_rho.set_title("stored carries (solid) against carries from the episode start (dotted)",
                     fontsize=9)
    if probed:
        ax_rho.legend(fontsize=7)
    fig.tight_layout()
    args.out.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out / f"{task.name}.png", dpi=120)
    (args.out / f"{task.name}.md").write_text("\n".join(lines) + "\n")
    print(write(task.name, {"task": task.masked, "full": task.full, "settings": results,
                            "tests": tests}))
    print("\n".join(lines))
    return 0


def smoke_runs(out: Path) -> list[list[str | Path]]:
    return [["run", "--task", "cue", "--steps", "400", "--seeds", "0", "--settings", "ff",
             "gru-b4", "--learn-start", "300", "--jobs", "2", "--root", out / "runs"],
            ["report", "--task", "cue", "--root", out / "runs"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train every setting, then evaluate and probe")
    run.add_argument("--steps", type=int, default=30_000, help="environment steps per run")
    run.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    run.add_argument("--settings", nargs="+", choices=SETTINGS,
                     help="default: the task's (pendulum: full ff stack gru; cue: all)")
    run.add_argument("--algorithm", default="sac")
    run.add_argument("--learn-start", type=int, default=1000,
                     help="stored states before the first gradient step")
    run.add_argument("--jobs", type=int, default=1, help="runs at a time (one core each)")
    report = sub.add_parser("report", help="table and figure from the finished runs")
    for p in (run, report):
        p.add_argument("--task", choices=sorted(TASKS), default="pendulum",
                       help="pendulum (Pendulum-v1 without its velocity) or cue (CueRecall)")
        p.add_argument("--root", type=Path,
                       help="run directories (default bench/runs/partial_observation[_cue])")
    out_flag(report)
    args = parse(parser, argv, smoke_runs)
    if args.smoke:
        return smoke(main, smoke_runs, args.out)
    if args.root is None:
        args.root = RUNS / TASKS[args.task].name
    if args.command == "run" and not args.settings:
        args.settings = list(TASKS[args.task].settings)
    return cmd_run(args) if args.command == "run" else cmd_report(args)


if __name__ == "__main__":
    sys.exit(main())
