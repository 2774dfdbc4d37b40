"""Several agents against one agent on Kuramoto-Sivashinsky (issue 26, point 4).

Settings, each trained with ``configs/ks.toml`` (V-RACER + ReF-ER) for the same number S of
simulation steps (control steps of the flow, what a CFD user pays for):

``single``  one agent drives all N actuators and sees all 2N sensors (N = 4: the built-in
            ``KS``; N = 8: :class:`KSJoint` on L = 44), reward the global shaped energy
            rate; ``run.steps`` = S.
``agents``  ``KSAgents`` with ``--env.agents N``: N agents share one policy, each seeing the
            sensors of its segment and its two neighbours, rewarded by its own segment's
            energy rate; ``run.steps`` = N S (N transitions per simulation step).
``matched`` the control of ``agents`` (issue 39, point 1): the single agent given what the
            N agents get besides locality and shared weights, per simulation step as many
            gradient steps (``--replay.grad-ratio`` N g), a replay covering as many
            simulation steps (``--replay.size`` N_RM / N) and the learning start at the same
            simulation step (``--replay.learn-start`` / N, at least the minibatch B: 256
            instead of 250 for N = 8); g, N_RM, B and the learning start are
            ``configs/ks.toml``'s.

Then each run's mean policy is evaluated (``python -m hpc_refer.evaluate``, 10 episodes,
``--baseline zero``: the uncontrolled flow from the same seeds), and the policy trained
with N = 4 agents on L = 22 is evaluated unchanged on N = 8 agents on L = 44 (transfer).
The figure of merit is <E>, the mean energy over an episode (lower is better). The report
gives per setting the mean over seeds with its 95 % t-interval and Welch's t-tests of
``agents`` and ``matched`` against ``single`` and of ``agents`` against ``matched``.

    python bench/ks_agents.py run [--steps S] [--seeds 0 1 2] [--jobs 1]
    python bench/ks_agents.py report [--out DIR]
    python bench/ks_agents.py --smoke [--out DIR]

Runs go to ``bench/runs/ks_agents/<setting>-N<n>-seed<k>`` (``--root``: another directory);
the report writes ``bench/results/ks_agents.{json,md,png}`` (``--out``: another directory,
``--name``: another stem).
``--only``: some of the runs. ``--smoke`` (bench/common.py): ``agents-N4`` (which the transfer
needs) and ``matched-N8`` (:class:`KSJoint` with the matched replay), the two runs whose
code is this script's, one seed, S = 100 simulation steps, under DIR/runs, evaluated, the
transfer too, then the report into DIR.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import tomli_w
from ablation import Job, execute
from common import mean_interval, out_flag, parse, smoke, welch, write

from hpc_refer.config.resolve import build_config, load_toml
from hpc_refer.envs.interface import Status
from hpc_refer.envs.ks_agents import KuramotoSivashinskyAgents

HERE = Path(__file__).resolve().parent
ROOT = HERE / "runs" / "ks_agents"
CONFIG = HERE.parent / "configs" / "ks.toml"
SETTINGS = ("single", "agents", "matched")
SIZES = (4, 8)


class KSJoint:
    """One agent driving every actuator of ``KSAgents`` with N = 8 (L = 44): it sees the 16
    sensors (two per segment, each agent's own pair), acts on the 8 actuators, and is
    rewarded by the mean of the agents' rewards (the global shaped energy rate, as ``KS``
    is for N = 4)."""

    agents = 8
    obs_dim = 2 * agents
    act_dim = agents
    low = -np.ones(agents)
    high = np.ones(agents)
    episode_metrics = ("energy",)
    field_label = "u(x, t)"

    def __init__(self, team: object = None) -> None:
        self.flow = KuramotoSivashinskyAgents(None, agents=self.agents)

    def _joint(self, states: np.ndarray) -> np.ndarray:
        return np.asarray(states[:, 2:4], np.float32).ravel()  # each agent's own sensors

    def reset(self, seed: int | None = None) -> np.ndarray:
        return self._joint(self.flow.reset(seed))

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, Status]:
        states, rewards, statuses = self.flow.step(np.asarray(action).reshape(-1, 1))
        return self._joint(states), float(np.mean(rewards)), Status(int(statuses[0]))

    def episode_values(self) -> tuple[float, ...]:
        return tuple(self.flow.episode_values())

    def episode_field(self) -> np.ndarray:
        return self.flow.episode_field()

    def close(self) -> None:
        self.flow.close()


def env_flags(setting: str, n: int) -> list[str]:
    """The environment flags of a setting, and for ``matched`` the replay's."""
    if setting == "agents":
        return ["--env", "KSAgents", "--env.agents", str(n)]
    single = ["--env", "KS"] if n == 4 else ["--env", "ks_agents:KSJoint"]
    if setting == "single":
        return single
    config = build_config(load_toml(CONFIG))
    replay = config.replay
    return [*single, "--replay.grad-ratio", f"{n * replay.grad_ratio:g}",
            "--replay.size", str(replay.size // n),
            "--replay.learn-start", str(max(replay.learn_start // n, config.algorithm.batch))]


def run_dir(setting: str, n: int, seed: int, root: Path = ROOT) -> Path:
    return root / f"{setting}-N{n}-seed{seed}"


def python() -> list[str]:
    return [sys.executable, "-m"]


def runs(only: list[str] | None) -> list[tuple[str, int]]:
    """The (setting, N) pairs to run: all, or those named ``<setting>-N<n>`` in ``only``."""
    pairs = [(setting, n) for n in SIZES for setting in SETTINGS]
    return [p for p in pairs if only is None or f"{p[0]}-N{p[1]}" in only]


def cmd_run(args: argparse.Namespace) -> int:
    os.environ.update(_env())  # the runs load ks_agents:KSJoint from this directory
    jobs = []
    for seed in args.seeds:
        for setting, n in runs(args.only):
            d = run_dir(setting, n, seed, args.root)
            if (d / "policy.h5").is_file() and (d / "state.txt").read_text().startswith(
                    "finished"):
                continue
            if d.exists():
                shutil.rmtree(d)
            steps = args.steps * (n if setting == "agents" else 1)
            argv = [*python(), "hpc_refer.run", "--config", str(CONFIG),
                    *env_flags(setting, n), "--steps", str(steps), "--seed", str(seed),
                    "--log-every", str(max(steps // 20, 1)), "--run-dir", str(d)]
            jobs.append(Job(d.name, argv, d.with_name(d.name + ".log")))
    codes = execute(jobs, args.jobs)
    if any(codes):
        return 1
    for seed in args.seeds:
        for setting, n in runs(args.only):
            d = run_dir(setting, n, seed, args.root)
            evaluate(d, d / "evaluation.json")
        if ("agents", 4) in runs(args.only):
            transfer(seed, args.root)
    return 0


def evaluate(d: Path, out: Path, policy: Path | None = None) -> None:
    """The mean policy of ``d`` over 10 episodes, beside the uncontrolled flow."""
    argv = [*python(), "hpc_refer.evaluate", str(d), "--episodes", "10", "--baseline", "zero",
            "--out", str(out)] + (["--policy", str(policy)] if policy is not None else [])
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=_env())


def transfer(seed: int, root: Path = ROOT) -> None:
    """The N = 4 agents' policy evaluated unchanged on N = 8 agents (L = 44)."""
    trained = run_dir("agents", 4, seed, root)
    d = root / f"transfer-N4to8-seed{seed}"
    d.mkdir(parents=True, exist_ok=True)
    config = tomllib.loads((trained / "config.toml").read_text())
    config.setdefault("env", {})["agents"] = 8
    (d / "config.toml").write_text(tomli_w.dumps(config))
    evaluate(d, d / "evaluation.json", trained / "policy.h5")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def last_window(d: Path, fraction: float = 0.2) -> float:
    """Mean <E> of the training episodes in the last ``fraction`` of the run's steps."""
    with (d / "episodes.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["energy"] not in ("", "nan")]
    last = max(int(r["env_step"]) for r in rows)
    kept = [float(r["energy"]) for r in rows if int(r["env_step"]) >= (1 - fraction) * last]
    return float(np.mean(kept))


def cmd_report(args: argparse.Namespace) -> int:
    results: dict[str, dict] = {}
    for d in sorted(args.root.glob("*-seed*")):
        ev = d / "evaluation.json"
        if not ev.is_file():
            continue
        stats = json.loads(ev.read_text())
        name, seed = d.name.rsplit("-seed", 1)
        entry = results.setdefault(name, {"seeds": [], "policy_energy": [],
                                          "uncontrolled_energy": [], "train_energy": []})
        entry["seeds"].append(int(seed))
        entry["policy_energy"].append(stats["energy_mean"])
        entry["uncontrolled_energy"].append(stats["baseline"]["energy_mean"])
        if (d / "episodes.csv").is_file():
            entry["train_energy"].append(last_window(d))
    for entry in results.values():
        for key in ("policy_energy", "uncontrolled_energy", "train_energy"):
            entry[f"{key}_mean"] = float(np.mean(entry[key])) if entry[key] else None
        entry["policy_energy_ci95"] = mean_interval(entry["policy_energy"])
    lines = ["| setting | seeds | <E> trained policy [95 % t-interval] | <E> uncontrolled | "
             "ratio | <E> last 20 % of training |", "|---|---|---|---|---|---|"]
    for name, e in results.items():
        ratio = e["policy_energy_mean"] / e["uncontrolled_energy_mean"]
        train = "-" if e["train_energy_mean"] is None else f"{e['train_energy_mean']:.3f}"
        ci = e["policy_energy_ci95"]
        shown = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
        lines.append(f"| {name} | {len(e['seeds'])} | {e['policy_energy_mean']:.3f}{shown} | "
                     f"{e['uncontrolled_energy_mean']:.3f} | {ratio:.2f} | {train} |")
    tests = welch_tests(results)
    if tests:
        lines += ["", "| N | setting | against | <E> | <E> against | Welch's p |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {t['n']} | {t['setting']} | {t['against']} | {t['mean']:.3f} | "
                  f"{t['mean_against']:.3f} | {t['p']:.3f} |" for t in tests]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = list(results)
    for k, name in enumerate(names):
        e = results[name]
        ax.scatter([k] * len(e["policy_energy"]), e["policy_energy"], color="C0")
        ax.scatter([k] * len(e["uncontrolled_energy"]), e["uncontrolled_energy"], color="C3",
                   marker="x")
    ax.set_xticks(range(len(names)), names, rotation=20, fontsize=8)
    ax.set_ylabel("<E> (mean energy per episode)")
    ax.set_title("KS: trained mean policy (dots) vs uncontrolled (crosses)", fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out / f"{args.name}.png", dpi=120)
    print(write(args.name, {"steps_per_simulation": args.steps, "settings": results,
                              "tests": tests}))
    print("\n".join(lines))
    return 0


COMPARED = (("agents", "single"), ("matched", "single"), ("agents", "matched"))
"""The pairs of settings the report tests, per N."""


def welch_tests(results: dict[str, dict]) -> list[dict[str, Any]]:
    """Welch's t-test (two-sided, unequal variances) of the trained policies' <E> of each pair
    of :data:`COMPARED` settings with the same N, where both have two seeds or more."""
    tests = []
    for n in SIZES:
        for setting, against in COMPARED:
            a, b = results.get(f"{setting}-N{n}"), results.get(f"{against}-N{n}")
            if a is None or b is None or min(len(a["policy_energy"]),
                                             len(b["policy_energy"])) < 2:
                continue
            tests.append({"n": n, "setting": setting, "against": against,
                          **welch(a["policy_energy"], b["policy_energy"])})
    return tests


def smoke_runs(out: Path) -> list[list[str | Path]]:
    return [["run", "--steps", "100", "--seeds", "0", "--only", "agents-N4", "matched-N8",
             "--jobs", "2", "--root", out / "runs"],
            ["report", "--steps", "100", "--root", out / "runs"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train every setting, then evaluate")
    run.add_argument("--steps", type=int, default=20_000, help="simulation steps S per run")
    run.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    run.add_argument("--jobs", type=int, default=1, help="runs at a time (one core each)")
    run.add_argument("--only", nargs="+", metavar="SETTING-N<n>",
                     choices=[f"{s}-N{n}" for s, n in runs(None)],
                     help="these runs alone (default: all; the transfer needs agents-N4)")
    report = sub.add_parser("report", help="tables and figure from the finished runs")
    report.add_argument("--steps", type=int, default=20_000)
    report.add_argument("--name", default="ks_agents",
                        help="stem of the JSON, table and figure (default ks_agents)")
    for p in (run, report):
        p.add_argument("--root", type=Path, default=ROOT,
                       help="run directories (default bench/runs/ks_agents)")
    out_flag(report)
    args = parse(parser, argv, smoke_runs)
    if args.smoke:
        return smoke(main, smoke_runs, args.out)
    return cmd_run(args) if args.command == "run" else cmd_report(args)


if __name__ == "__main__":
    sys.exit(main())
