"""CylinderJets drag reduction (issue 13, point 5): V-RACER + ReF-ER with several environment
teams under mpirun, then the trained mean policy against the uncontrolled flow.

``python bench/cylinder_control.py [--ranks 4] [--ranks-per-env 1] [--steps 100000]
[--horizon 240] [--seed 0] [--agents] [--out DIR] [--smoke]``

(``--agents``: the two jets as two agents, ``CylinderJetsAgents``, for the same number of
simulation steps: ``run.steps`` is twice ``--steps``.)

1. makes the start state of ``--resolution`` (default 20) if it is missing
   (``python -m hpc_refer.envs.cylinder_jets --make-start``; ``--start-file``: another file
   than the cache's, made ``--start-time`` time units from the kicked start if missing);
2. trains: ``mpirun -n RANKS python -m hpc_refer.run --env CylinderJets --learners 1 ...``
   (1 learner and (RANKS - 1) / ranks-per-env environment teams, episodes of ``--horizon``
   control steps; the other settings are :data:`TRAIN_FLAGS`) into ``--run-dir``
   (``--skip-train`` reuses a finished run there; ``--continue-to N`` resumes it from its last
   checkpoint, ``--restart``, up to N steps);
3. evaluates, in this process, the trained mean policy m_w(s) (the action box's clip of it,
   as training maps actions) and the uncontrolled flow (action 0) from the same start phases
   (reset seeds EVAL_SEED0 + k, never used in training), each over ``--eval-horizon`` control
   steps (default 240): the mean c_D and c_L over the jets' transient (steps 1-EVAL_CUT,
   the first 2 time units) and over the rest (steps 81-240, the controlled regime, where
   Rabault et al. measured), and the drag reduction 100 (1 - c_D,controlled /
   c_D,uncontrolled) of each;
4. writes ``bench/results/<name>.json`` (command, machine and load, rank layout, wall-clock,
   figures) and the PNGs ``<name>-learning.png`` (return and episode-mean c_D against
   environment steps), ``<name>-series.png`` (c_D, c_L and the jet action with and without
   control, one start phase) and ``<name>-vorticity.png`` (the vorticity at the end of that
   evaluation, without and with control); ``--out DIR``: all of them into DIR.

``--smoke`` (bench/common.py): ``mpirun -n 2`` (1 learner, 1 team), 80 steps in episodes of
40, a start state of 0.5 time units made in DIR, the run in DIR/run, one start phase
evaluated over 20 control steps.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from common import parse, smoke, write

import hpc_refer.envs.cylinder_jets as cj
from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.loop.policy_file import load_policy
from hpc_refer.report.snapshots import draw_snapshot, snapshot_scale

EVAL_SEED0 = 10**6
EVAL_CUT = 80
"""Control steps of the jets' transient in an evaluation (2 time units): the controlled regime
is reached after about 1 (section 11 of BENCHMARKS.md), so steps 1-80 hold all of it."""
TRAIN_FLAGS = (f"--{VRacer.name}.gamma", "0.97", f"--{VRacer.name}.lr", "3e-4",
               "--refer.beta-init", "1.0",
               "--replay.size", "65536", "--replay.learn-start", "2000",
               "--eval-every", "10000", "--eval-episodes", "2", "--snapshot", "every:300",
               "--checkpoint-every", "10000")
"""V-RACER + ReF-ER settings of the run: a short horizon (gamma 0.97: about 33 control steps,
2.5 shedding periods, Rabault's PPO used 0.97 too), configs/ks.toml's learning rate and
beta_init, a replay memory of 65,536 steps and learning from 2,000 stored steps; a checkpoint
(and policy.h5) every 10,000 steps."""

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "PRTE_ALLOW_RUN_AS_ROOT": "1", "PRTE_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe", "OMPI_MCA_btl": "^ofi",
           "OMPI_MCA_mpi_yield_when_idle": "1"}
"""Open MPI settings of this machine (root, more ranks than cores, no busy polling)."""


def train_command(args: argparse.Namespace, start: Path) -> list[str]:
    """The mpirun command line of the training run (``--agents``: CylinderJetsAgents, two
    transitions per simulation step, so ``run.steps`` is twice ``--steps``)."""
    steps = args.steps * (2 if args.agents else 1)
    return ["mpirun", "-n", str(args.ranks), sys.executable, "-m", "hpc_refer.run",
            "--env", "CylinderJetsAgents" if args.agents else "CylinderJets",
            "--env.resolution", str(args.resolution),
            "--env.start_file", str(start), "--learners", "1",
            "--env.horizon", str(args.horizon),
            "--ranks-per-env", str(args.ranks_per_env), "--steps", str(steps),
            "--seed", str(args.seed), "--log-every", str(max(steps // 50, 1)),
            "--run-dir", str(args.run_dir), *TRAIN_FLAGS]


def run_episode(env: cj.CylinderJets | cj.CylinderJetsAgents, seed: int, horizon: int,
                policy: object | None) -> dict[str, np.ndarray]:
    """One evaluation from reset(seed) over ``horizon`` control steps (past the training
    episode's truncation): per step c_D, c_L (control-step means) and the jet action (with
    agents, q = (a0 - a1) / 2, the single agent's action that gives the same jets)."""
    agents = isinstance(env, cj.CylinderJetsAgents)
    obs = env.reset(seed)
    rows = []
    for _ in range(horizon):
        mean = (policy(obs)[0] if policy is not None  # type: ignore[operator]
                else np.zeros((2, 1) if agents else 1))
        action = np.clip(np.asarray(mean, np.float64), -1.0, 1.0)
        obs, _, _ = env.step(action)
        jet = 0.5 * (action[0, 0] - action[1, 0]) if agents else action[0]
        rows.append((*env.step_values(), float(jet)))
    out = np.array(rows)
    return {"cD": out[:, 0], "cL": out[:, 1], "action": out[:, 2]}


def summary(runs: list[dict[str, np.ndarray]], cut: int) -> dict[str, float]:
    """Mean c_D and c_L (and mean |c_L|) over steps [0, cut) and [cut, end) of every run."""
    out: dict[str, float] = {}
    for part, sl in (("transient", slice(0, cut)), ("after_transient", slice(cut, None))):
        cd = np.concatenate([r["cD"][sl] for r in runs])
        cl = np.concatenate([r["cL"][sl] for r in runs])
        if cd.size:
            out[f"cD_{part}"] = float(cd.mean())
            out[f"cL_{part}"] = float(cl.mean())
            out[f"abs_cL_{part}"] = float(np.abs(cl).mean())
    return out


def learning_curve(run_dir: Path, out: Path, window: int = 30) -> dict[str, float]:
    """Windowed return and episode-mean c_D against environment steps (episodes.csv); the
    first and last windows' means."""
    with open(run_dir / "episodes.csv") as f:
        rows = list(csv.DictReader(f))
    steps = np.array([float(r["env_step"]) for r in rows])
    ret = np.array([float(r["return"]) for r in rows])
    cd = np.array([float(r["cD"]) for r in rows])
    kernel = np.ones(window) / window
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4), layout="constrained")
    for ax, y, label in ((axes[0], ret, "episode return"), (axes[1], cd, "episode-mean c_D")):
        ax.plot(steps, y, ".", ms=2, alpha=0.3, color="0.5")
        if y.size >= window:
            ax.plot(steps[window - 1:], np.convolve(y, kernel, "valid"), "C0",
                    label=f"mean of {window} episodes")
        ax.set_xlabel("environment steps")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.suptitle("CylinderJets, V-RACER + ReF-ER: training episodes (stochastic policy)")
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return {"episodes": len(rows), "return_first": float(ret[:window].mean()),
            "return_last": float(ret[-window:].mean()), "cD_first": float(cd[:window].mean()),
            "cD_last": float(cd[-window:].mean())}


def series_figure(base: dict[str, np.ndarray], ctrl: dict[str, np.ndarray], dt: float,
                  cut: int, out: Path) -> None:
    """c_D, c_L and the action over one evaluation, uncontrolled and controlled."""
    t = dt * np.arange(1, base["cD"].size + 1)
    fig, axes = plt.subplots(3, 1, figsize=(9, 6.5), sharex=True, layout="constrained")
    for key, ax in zip(("cD", "cL", "action"), axes, strict=True):
        ax.plot(t, base[key], "0.4", label="uncontrolled (a = 0)")
        ax.plot(t, ctrl[key], "C3", label="trained mean policy")
        ax.axvline(dt * cut, color="k", lw=0.6, ls=":")
        ax.set_ylabel({"cD": "c_D", "cL": "c_L", "action": "jet action a"}[key])
    axes[0].legend(fontsize=8)
    axes[-1].set_xlabel("time since the evaluation's start (dotted: end of the transient window)")
    fig.savefig(out, dpi=110)
    plt.close(fig)


def vorticity_figure(snaps: list[tuple[str, np.ndarray]],
                     env: cj.CylinderJets | cj.CylinderJetsAgents, out: Path) -> None:
    """The vorticity of each snapshot, one panel each, on one colour scale."""
    vmax = max(snapshot_scale(image) for _, image in snaps)
    fig, axes = plt.subplots(len(snaps), 1, figsize=(10, 2.4 * len(snaps)),
                             layout="constrained")
    for ax, (title, image) in zip(np.atleast_1d(axes), snaps, strict=True):
        shown = draw_snapshot(ax, f"vorticity (U_mean / D), {title}", image,
                              env.snapshot_extent, env.snapshot_circles, vmax)
        fig.colorbar(shown, ax=ax, shrink=0.9)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def smoke_runs(out: Path) -> list[list[str | Path]]:
    return [["--ranks", "2", "--steps", "80", "--horizon", "40", "--eval-seeds", "1",
             "--eval-horizon", "20", "--run-dir", out / "run", "--start-file",
             out / "start.h5", "--start-time", "0.5"]]


def shown(path: Path) -> str:
    """``path`` relative to the repository when it is inside, else as it is."""
    root = Path(__file__).resolve().parents[1]
    path = path.resolve()
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4, help="mpirun -n (1 learner + teams)")
    parser.add_argument("--ranks-per-env", type=int, default=1)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--resolution", type=int, default=20)
    parser.add_argument("--horizon", type=int, default=240,
                        help="control steps per training episode (--env.horizon)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run-dir", type=Path, default=Path("build/cylinder_control"))
    parser.add_argument("--skip-train", action="store_true",
                        help="evaluate the finished run in --run-dir")
    parser.add_argument("--continue-to", type=int, default=0,
                        help="resume the run in --run-dir (--restart) up to this many steps")
    parser.add_argument("--eval-seeds", type=int, default=6, help="start phases evaluated")
    parser.add_argument("--eval-horizon", type=int, default=3 * EVAL_CUT)
    parser.add_argument("--name", default="cylinder_control")
    parser.add_argument("--agents", action="store_true",
                        help="the two jets as two mirror-symmetric agents sharing a policy "
                        "(CylinderJetsAgents); --steps counts simulation steps either way")
    parser.add_argument("--start-file", type=Path,
                        help="the start state (default: the cache's file of --resolution)")
    parser.add_argument("--start-time", type=float, default=cj.START_TIME,
                        help="time units from the kicked start of a start state made here")
    args = parse(parser, argv, smoke_runs)
    if args.smoke:
        return smoke(main, smoke_runs, args.out)
    start = args.start_file or cj.start_path(args.resolution)
    if not start.exists():
        print(f"making the start state {start}", flush=True)
        cj.make_start(start, args.resolution, args.start_time)
    command = train_command(args, start)
    if args.continue_to:
        command = [*command[:6], "--restart", str(args.run_dir), "--steps",
                   str(args.continue_to)]
    train_wall = None
    if not args.skip_train:
        if args.run_dir.exists() and not args.continue_to:
            shutil.rmtree(args.run_dir)
        print(" ".join(command), flush=True)
        t0 = time.perf_counter()
        env = {**os.environ, **MPI_ENV,
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        subprocess.run(command, check=True, env=env)
        train_wall = time.perf_counter() - t0
    log = (args.run_dir / "log.txt").read_text() if (args.run_dir / "log.txt").exists() else ""
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    net = load_policy(args.run_dir / "policy.h5").policy
    records = (args.run_dir / "train.jsonl").read_text().splitlines()
    policy = net.numpy_policy()
    flow = cj.CylinderJetsAgents if args.agents else cj.CylinderJets
    env = flow(resolution=args.resolution, start_file=str(start), horizon=args.eval_horizon)
    base, ctrl, snaps = [], [], []
    for k in range(args.eval_seeds):
        seed = EVAL_SEED0 + k
        base.append(run_episode(env, seed, args.eval_horizon, None))
        if k == 0:
            snaps.append(("uncontrolled", env.snapshot()["vorticity"]))  # type: ignore[index]
        ctrl.append(run_episode(env, seed, args.eval_horizon, policy))
        if k == 0:
            snaps.append(("trained mean policy", env.snapshot()["vorticity"]))  # type: ignore[index]
        print(f"phase {k}: c_D {base[-1]['cD'].mean():.4f} uncontrolled, "
              f"{ctrl[-1]['cD'].mean():.4f} controlled", flush=True)
    eval_wall = time.perf_counter() - t0
    cut = EVAL_CUT
    unc, con = summary(base, cut), summary(ctrl, cut)
    reduction = {part: 100 * (1 - con[f"cD_{part}"] / unc[f"cD_{part}"])
                 for part in ("transient", "after_transient") if f"cD_{part}" in unc}
    args.out.mkdir(parents=True, exist_ok=True)
    pngs = {"learning": args.out / f"{args.name}-learning.png",
            "series": args.out / f"{args.name}-series.png",
            "vorticity": args.out / f"{args.name}-vorticity.png"}
    curve = learning_curve(args.run_dir, pngs["learning"])
    series_figure(base[0], ctrl[0], cj.DT_CONTROL, cut, pngs["series"])
    vorticity_figure(snaps, env, pngs["vorticity"])
    teams = (args.ranks - 1) // args.ranks_per_env
    train_log = [line for line in log.splitlines() if line.startswith("steps ")]
    path = write(args.name, {
        "train_command": " ".join(command),
        "layout": f"mpirun -n {args.ranks}: 1 learner + {teams} environment teams of "
                  f"{args.ranks_per_env} rank(s), on {os.cpu_count()} cores",
        "resolution": args.resolution,
        "train_steps": args.continue_to or args.steps,
        "agents": bool(args.agents),
        "train_wall_s": None if train_wall is None else round(train_wall, 1),
        "train_last_progress": train_log[-1] if train_log else "",
        "policy_env_step": json.loads(records[-1])["env_step"] if records else None,
        "eval": {"seeds": [EVAL_SEED0 + k for k in range(args.eval_seeds)],
                 "horizon_control_steps": args.eval_horizon,
                 "training_episode_steps": args.horizon,
                 "note": f"c_D, c_L: means of the control-step means over all phases; "
                         f"transient = steps 1-{cut} (the jets' transient), after_transient = "
                         f"steps {cut + 1} to the end (the controlled regime)",
                 "uncontrolled": unc, "controlled": con,
                 "drag_reduction_percent": reduction,
                 "per_phase_cD": {"uncontrolled": [float(r["cD"].mean()) for r in base],
                                  "controlled": [float(r["cD"].mean()) for r in ctrl]},
                 "mean_abs_action": float(np.mean([np.abs(r["action"]).mean()
                                                   for r in ctrl])),
                 "wall_s": round(eval_wall, 1),
                 "load_avg_1min_before": round(load_before[0], 2)},
        "learning": curve,
        "goal": "drag reduction >= 8 % (issue 13)",
        "git": subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                              text=True, check=False).stdout.strip(),
        "pngs": {k: shown(v) for k, v in pngs.items()},
    })
    print(json.dumps({"drag_reduction_percent": reduction, "uncontrolled": unc,
                      "controlled": con}, indent=2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
