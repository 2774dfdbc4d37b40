"""Recurrent and stacked-observation policies against the feed-forward one on a partially
observed task, at equal environment steps (issue 27, point 3).

The task is Pendulum-v1 with the angular velocity removed from the observation
(``po_envs:PendulumNoVelocity``: cos theta and sin theta only). Settings, each trained with
the same algorithm, budget and seeds:

``full``   Pendulum-v1 itself (the velocity observed): what the others could reach;
``ff``     the masked task, feed-forward policy (sees one observation);
``stack``  the masked task, ``--env.history 4`` (the last four observations);
``gru``    the masked task, ``--<algo>.cell gru`` (BPTT over W = 16 steps).

Each run's mean policy is then evaluated over 10 episodes (``python -m hpc_refer.evaluate``).
The report gives, per setting, the mean over seeds of the training return in the last 20 %
of the run and of the evaluation, and the learner's gradient steps/s (median of the logged
intervals once training runs, so the GRU's cost is read against the MLP's from the same
benchmark run).

    python bench/partial_observation.py run [--steps 30000] [--seeds 0 1 2] [--algorithm sac]
    python bench/partial_observation.py report [--out DIR]
    python bench/partial_observation.py --smoke [--out DIR]

Runs go to ``bench/runs/partial_observation/<setting>-seed<k>`` (``--root``: another
directory); the report writes ``bench/results/partial_observation.{json,md,png}`` (``--out``:
another directory). ``--smoke`` (bench/common.py): ``ff`` and ``gru``, one seed, 400 steps
(training from 300) under DIR/runs, evaluated, then the report into DIR.
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

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from ablation import Job, execute
from common import out_flag, parse, smoke, write

HERE = Path(__file__).resolve().parent
ROOT = HERE / "runs" / "partial_observation"
MASKED = "po_envs:PendulumNoVelocity"
SETTINGS = ("full", "ff", "stack", "gru")


def setting_flags(setting: str, algorithm: str) -> list[str]:
    """The environment and network flags of a setting."""
    return {"full": ["--env", "Pendulum-v1"],
            "ff": ["--env", MASKED],
            "stack": ["--env", MASKED, "--env.history", "4"],
            "gru": ["--env", MASKED, f"--{algorithm}.cell", "gru"]}[setting]


def run_dir(setting: str, seed: int, root: Path = ROOT) -> Path:
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
                    *setting_flags(setting, args.algorithm), "--steps", str(args.steps),
                    "--seed", str(seed), "--replay.learn-start", str(args.learn_start),
                    "--log-every", str(max(args.steps // 30, 1)), "--run-dir", str(d)]
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
    return 0


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


def cmd_report(args: argparse.Namespace) -> int:
    results: dict[str, dict] = {}
    fig, ax = plt.subplots(figsize=(7, 4))
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
            "grad_steps_per_s": [grad_rate(d) for d in dirs],
        }
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
    lines = ["| setting | seeds | return, last 20 % of training | evaluation (10 episodes) | "
             "gradient steps/s (median) |", "|---|---|---|---|---|"]
    for name, e in results.items():
        if ff is not None and name in ("stack", "gru"):
            e["beats_ff_every_seed"] = bool(np.all(
                np.array(e["eval_return"]) > np.mean(ff["eval_return"])))
        lines.append(f"| {name} | {len(e['seeds'])} | {e['train_return_last20_mean']:.0f} | "
                     f"{e['eval_return_mean']:.0f} | {e['grad_steps_per_s_mean']:.0f} |")
    if ff is not None and "gru" in results:
        results["gru"]["grad_rate_over_ff"] = (results["gru"]["grad_steps_per_s_mean"]
                                               / ff["grad_steps_per_s_mean"])
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episode return (mean over seeds, 20-80 %)")
    ax.set_title("Pendulum-v1 without its velocity: feed-forward vs history vs GRU", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    args.out.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out / "partial_observation.png", dpi=120)
    (args.out / "partial_observation.md").write_text("\n".join(lines) + "\n")
    print(write("partial_observation", {"task": MASKED, "settings": results}))
    print("\n".join(lines))
    return 0


def smoke_runs(out: Path) -> list[list[str | Path]]:
    return [["run", "--steps", "400", "--seeds", "0", "--settings", "ff", "gru",
             "--learn-start", "300", "--jobs", "2", "--root", out / "runs"],
            ["report", "--root", out / "runs"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train every setting, then evaluate")
    run.add_argument("--steps", type=int, default=30_000, help="environment steps per run")
    run.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    run.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    run.add_argument("--algorithm", default="sac")
    run.add_argument("--learn-start", type=int, default=1000,
                     help="stored states before the first gradient step")
    run.add_argument("--jobs", type=int, default=1, help="runs at a time (one core each)")
    report = sub.add_parser("report", help="table and figure from the finished runs")
    for p in (run, report):
        p.add_argument("--root", type=Path, default=ROOT,
                       help="run directories (default bench/runs/partial_observation)")
    out_flag(report)
    args = parse(parser, argv, smoke_runs)
    if args.smoke:
        return smoke(main, smoke_runs, args.out)
    return cmd_run(args) if args.command == "run" else cmd_report(args)


if __name__ == "__main__":
    sys.exit(main())
