"""Slow environments that never wait for each other (issue 38, point 7):
``python bench/slow_envs.py`` -> ``bench/results/slow_envs.json``.

``mpirun -n L+E python -m hpc_refer.run --learners L`` with E environment teams of one rank
each, whose solver (:mod:`sleeping_solver`, ``bench.sleeping_solver:SleepingSolver``) sleeps
U[lo, hi] seconds per step (0.5-2 s by default) and does no work. Two cases:

- ``uniform``: every team draws from U[lo, hi];
- ``slow``: team 0 draws from U[4 lo, 4 hi] (``--slow-factor``), the others from U[lo, hi].

Each solver logs the wall-clock start and end of every step (RUN_DIR/sleeping/env-k.csv),
from which the script measures, per case:

- ``steps_per_s``: the environment steps per second of all teams in the steady window (from
  the moment the last team took its first step to the moment the first team took its last
  one: start-up and the end of the budget left out), and ``run_steps_per_s``, all steps over
  the whole stepping time (first step of any team to the last step of any team);
- ``ideal_steps_per_s``: the sum over teams of 1 / (the mean of their step-time
  distribution), the rate if no team ever waited for anything but its solver;
  ``realized_ideal_steps_per_s`` the same from the step times the solvers actually slept;
  ``ratio`` = steps_per_s / ideal_steps_per_s (target >= 0.9);
- per team: its steps, its ideal share of the steps (its rate over the sum of the rates),
  the fraction of its steady window spent inside the solver, the mean time between its steps
  (actor work and, at an episode end, the round trip to its learner) and the longest;
- the learner: ``learner_busy`` (1 - the time learner 0 spent blocked waiting for a message,
  over train.jsonl's intervals, weighted by their length), gradient steps, and the CPU seconds
  that learner and actor ranks used (from /proc: busy-polling shows there);
- memory: the peak resident memory of each rank (VmHWM) and the peak of the ranks' summed
  proportional set size (shared pages counted once).

Run directories go to bench/runs/slow_envs/<case> (``--out``: OUT/runs/slow_envs/<case>),
mpirun's output beside them (<case>.out); the runs stop when their ranks take more than
``--max-memory-gib`` (16 GiB). The learners train a small V-RACER (``--hidden``,
``--batch``) once ``--learn-start`` steps are stored.
Budgets: ``--teams`` and ``--learners`` (56 and 8), ``--lo``/``--hi`` (seconds),
``--seconds`` (each case's steps are that many seconds at the ideal rate) or ``--steps``,
``--episode-len``, ``--cases``. ``--smoke`` (bench/common.py): 2 teams + 1 learner, steps of
10-40 ms, both cases, 120 steps each.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from common import REPOSITORY, parse, repository_path, runs_dir, smoke, write
from sleeping_solver import log_path, mean_step_s

SOLVER = "bench.sleeping_solver:SleepingSolver"
MPI_SETTINGS = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "PRTE_ALLOW_RUN_AS_ROOT": "1", "PRTE_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe", "OMPI_MCA_btl": "^ofi",
    "OMPI_MCA_mpi_yield_when_idle": "1",
}
"""Open MPI 5 as root, more ranks than cores, waiting ranks yield (tests/mpi_launch.py)."""


def run_env() -> dict[str, str]:
    """os.environ, the venv first on PATH, the repository on PYTHONPATH, Open MPI's settings."""
    env = {**os.environ, **MPI_SETTINGS, "PYTHONUNBUFFERED": "1"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{REPOSITORY}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return env


def factors(teams: int, slow_factor: float | None) -> list[float]:
    """Each team's step-time factor: team 0 ``slow_factor`` times slower, or none."""
    return [slow_factor if (slow_factor and e == 0) else 1.0 for e in range(teams)]


def ideal_rates(teams: int, lo: float, hi: float, slow_factor: float | None) -> np.ndarray:
    """Each team's steps per second if it never waited: 1 / its mean step time."""
    return np.array([1.0 / mean_step_s(lo, hi, f) for f in factors(teams, slow_factor)])


def run_command(teams: int, learners: int, steps: int, run_dir: Path, args: argparse.Namespace,
                slow_factor: float | None) -> list[str]:
    """The mpirun command line of one case."""
    mpirun = shutil.which("mpirun", path=str(Path(sys.executable).parent)) or "mpirun"
    solver = ["--env", SOLVER, "--env.lo", str(args.lo), "--env.hi", str(args.hi),
              "--env.episode_len", str(args.episode_len)]
    if slow_factor:
        solver += ["--env.slow_env", "0", "--env.slow_factor", str(slow_factor)]
    return [mpirun, "-n", str(learners + teams), sys.executable, "-m", "hpc_refer.run",
            "--learners", str(learners), *solver, "--steps", str(steps),
            "--replay.learn-start", str(args.learn_start), "--vracer.batch", str(args.batch),
            "--vracer.hidden", args.hidden, "--seed", str(args.seed),
            "--run-dir", str(run_dir)]


class RankWatch:
    """Samples /proc every ``every`` seconds for the ranks of one run (their command line
    names its run directory): each rank's peak resident memory (VmHWM, shared library pages
    counted in every rank), CPU seconds and role (by OMPI_COMM_WORLD_RANK), and the peak of
    the ranks' summed proportional set size (Pss: a shared page counted once in all; what
    the ranks take from the machine's memory)."""

    def __init__(self, run_dir: Path, learners: int, limit_gib: float,
                 on_limit: Callable[[], None], every: float = 1.0) -> None:
        self.key, self.learners, self.every = str(run_dir), learners, every
        self.limit_mib, self.on_limit = 1024 * limit_gib, on_limit
        self.ranks: dict[int, dict[str, float]] = {}
        self.peak_sum_mib = 0.0
        self.over_limit = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RankWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        while not self._stop.wait(self.every):
            total = 0.0
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    proc = Path("/proc") / pid
                    cmd = (proc / "cmdline").read_bytes().split(b"\0")
                    if b"hpc_refer.run" not in cmd or self.key.encode() not in cmd:
                        continue
                    env = dict(x.split(b"=", 1) for x in (proc / "environ").read_bytes()
                               .split(b"\0") if b"=" in x)
                    rank = int(env.get(b"OMPI_COMM_WORLD_RANK", b"-1"))
                    status = {x.split(":")[0]: x.split(":")[1].split()
                              for x in (proc / "status").read_text().splitlines()}
                    stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                    pss = next(int(x.split()[1]) for x in (proc / "smaps_rollup").read_text()
                               .splitlines() if x.startswith("Pss:")) / 1024
                except (OSError, ValueError, IndexError, StopIteration):
                    continue
                hwm = int(status["VmHWM"][0]) / 1024
                total += pss
                self.ranks[rank] = {"hwm_mib": hwm,
                                    "cpu_s": (int(stat[11]) + int(stat[12])) / tick}
            self.peak_sum_mib = max(self.peak_sum_mib, total)
            if total > self.limit_mib and not self.over_limit:
                self.over_limit = True
                self.on_limit()

    def summary(self) -> dict[str, Any]:
        def of(ranks: list[int]) -> dict[str, float]:
            rows = [self.ranks[r] for r in ranks if r in self.ranks]
            if not rows:
                return {}
            return {"ranks": len(rows),
                    "peak_rss_mib_max": round(max(x["hwm_mib"] for x in rows), 1),
                    "peak_rss_mib_mean": round(float(np.mean([x["hwm_mib"] for x in rows])), 1),
                    "cpu_s_total": round(sum(x["cpu_s"] for x in rows), 1)}

        learners = [r for r in self.ranks if 0 <= r < self.learners]
        actors = [r for r in self.ranks if r >= self.learners]
        return {"learners": of(learners), "actors": of(actors),
                "peak_pss_sum_gib": round(self.peak_sum_mib / 1024, 2)}


def read_steps(run_dir: Path, teams: int) -> list[np.ndarray]:
    """Each team's steps as rows (start, end), wall-clock seconds."""
    out = []
    for e in range(teams):
        path = log_path(run_dir, e)
        rows = np.loadtxt(path, delimiter=",", ndmin=2) if path.stat().st_size else np.zeros(
            (0, 2))
        out.append(rows.reshape(-1, 2))
    return out


def learner_figures(run_dir: Path) -> dict[str, Any]:
    """Learner 0's busy fraction over the run (train.jsonl's intervals weighted by their
    length: env steps / env steps per s) and its gradient steps."""
    records = [json.loads(x) for x in (run_dir / "train.jsonl").read_text().splitlines()]
    steps = np.diff([0] + [r["env_step"] for r in records])
    rates = np.array([r["env_steps_per_s"] for r in records])
    dt = np.where(rates > 0, steps / np.maximum(rates, 1e-12), 0.0)
    busy = np.array([r["learner_busy"] for r in records])
    return {"learner_busy": round(float((busy * dt).sum() / max(dt.sum(), 1e-12)), 4),
            "learner_busy_per_interval": [round(float(b), 3) for b in busy],
            "grad_steps": records[-1]["grad_step"], "env_steps": records[-1]["env_step"]}


def wait_figures(waits: np.ndarray) -> dict[str, float] | None:
    """Mean, 90th percentile and largest of the waits of all teams at their episode ends
    (from the end of an episode's last step to the start of the next episode's first: the
    chunk's round trip to the learner and the actor's reset), seconds."""
    if not waits.size:
        return None
    return {"mean": round(float(waits.mean()), 3), "p90": round(float(np.quantile(waits, 0.9)), 3),
            "max": round(float(waits.max()), 3)}


def analyse(run_dir: Path, teams: int, lo: float, hi: float, slow_factor: float | None,
            episode_len: int) -> dict[str, Any]:
    """The figures of one case from its solvers' step logs and train.jsonl."""
    logs = read_steps(run_dir, teams)
    rates = ideal_rates(teams, lo, hi, slow_factor)
    counts = np.array([len(x) for x in logs])
    first = min(x[0, 0] for x in logs if len(x))
    last = max(x[-1, 1] for x in logs if len(x))
    t0 = max(x[0, 0] for x in logs)  # every team is stepping from here ...
    t1 = min(x[-1, 1] for x in logs)  # ... until one team took its last step
    in_window = sum(int(((x[:, 1] > t0) & (x[:, 1] <= t1)).sum()) for x in logs)
    window = max(t1 - t0, 1e-9)
    durations = np.concatenate([x[:, 1] - x[:, 0] for x in logs])
    realized = np.array([1.0 / np.mean(x[:, 1] - x[:, 0]) for x in logs])
    total = int(counts.sum())
    share = rates / rates.sum()
    per_team = []
    end_waits = []
    for e, x in enumerate(logs):
        gaps = x[1:, 0] - x[:-1, 1]
        boundary = (np.arange(1, len(x)) % episode_len) == 0  # gap before an episode's step 1
        end_waits.append(gaps[boundary])
        inside = np.clip(np.minimum(x[:, 1], t1) - np.maximum(x[:, 0], t0), 0, None).sum()
        per_team.append({
            "team": e, "steps": int(counts[e]), "ideal_share": round(float(share[e] * total), 1),
            "steps_over_ideal_share": round(float(counts[e] / (share[e] * total)), 3),
            "mean_step_s": round(float(np.mean(x[:, 1] - x[:, 0])), 4),
            "in_solver_fraction": round(float(inside / window), 4),
            "gap_in_episode_mean_ms": round(1e3 * float(gaps[~boundary].mean()), 2)
            if (~boundary).any() else None,
            "gap_episode_end_mean_ms": round(1e3 * float(gaps[boundary].mean()), 2)
            if boundary.any() else None,
            "gap_max_s": round(float(gaps.max()), 3) if len(gaps) else None,
            "first_step_after_s": round(float(x[0, 0] - first), 2),
            "idle_at_end_s": round(float(last - x[-1, 1]), 2)})
    ideal = float(rates.sum())
    rate = in_window / window
    out: dict[str, Any] = {
        "teams": teams, "slow_factor": slow_factor,
        "step_time_s": {"distribution": f"U[{lo}, {hi}]" + (
            f", team 0: U[{slow_factor * lo}, {slow_factor * hi}]" if slow_factor else ""),
            "mean": round(float(durations.mean()), 4), "min": round(float(durations.min()), 4),
            "max": round(float(durations.max()), 4)},
        "env_steps": total,
        "steps_per_s": round(rate, 3),
        "ideal_steps_per_s": round(ideal, 3),
        "ratio": round(rate / ideal, 4),
        "realized_ideal_steps_per_s": round(float(realized.sum()), 3),
        "ratio_to_realized": round(rate / float(realized.sum()), 4),
        "steady_window_s": round(window, 2), "steps_in_window": in_window,
        "run_steps_per_s": round(total / max(last - first, 1e-9), 3),
        "run_ratio": round(total / max(last - first, 1e-9) / ideal, 4),
        "stepping_s": round(last - first, 2),
        "ramp_up_s": round(t0 - first, 2), "tail_s": round(last - t1, 2),
        "team_in_solver_fraction_mean": round(float(np.mean(
            [t["in_solver_fraction"] for t in per_team])), 4),
        "per_team": per_team,
        "episode_end_wait_s": wait_figures(np.concatenate(end_waits)),
        **learner_figures(run_dir),
    }
    if slow_factor:
        fast = counts[1:]
        out["slow_team_steps"] = int(counts[0])
        out["fast_team_steps_mean"] = round(float(fast.mean()), 2)
        out["fast_over_slow"] = round(float(fast.mean() / max(counts[0], 1)), 3)
        out["fast_over_slow_ideal"] = round(float(rates[1] / rates[0]), 3)
    return out


def run_case(name: str, args: argparse.Namespace, slow_factor: float | None,
             runs: Path) -> dict[str, Any]:
    """Launch one case, watch its ranks, and analyse it."""
    rates = ideal_rates(args.teams, args.lo, args.hi, slow_factor)
    steps = args.steps or max(args.teams, round(args.seconds * float(rates.sum())))
    run_dir = runs / name
    if run_dir.exists():
        shutil.rmtree(run_dir)
    runs.mkdir(parents=True, exist_ok=True)
    command = run_command(args.teams, args.learners, steps, run_dir, args, slow_factor)
    print(f"slow_envs: {name}: {' '.join(command[1:])}", flush=True)
    load_before = os.getloadavg()
    started = time.time()
    log = (runs / f"{name}.out").open("w")
    proc = subprocess.Popen(command, env=run_env(), stdout=log, stderr=subprocess.STDOUT)
    with RankWatch(run_dir, args.learners, args.max_memory_gib, proc.terminate) as watch:
        returncode = proc.wait(timeout=args.timeout)
    log.close()
    wall = time.time() - started
    if watch.over_limit:
        raise SystemExit(f"slow_envs: {name}: the ranks took more than {args.max_memory_gib} "
                         "GiB (--max-memory-gib): stopped")
    if returncode != 0:
        sys.stderr.write((runs / f"{name}.out").read_text()[-6000:])
        raise SystemExit(f"slow_envs: {name}: mpirun exited {returncode}")
    out = analyse(run_dir, args.teams, args.lo, args.hi, slow_factor, args.episode_len)
    logs = read_steps(run_dir, args.teams)
    first = min(x[0, 0] for x in logs if len(x))
    last = max(x[-1, 1] for x in logs if len(x))
    out.update({
        "command": " ".join(["mpirun", *command[1:3], "python", *command[4:]]).replace(
            str(run_dir), repository_path(run_dir)),
        "run_dir": repository_path(run_dir), "learners": args.learners, "steps_asked": steps,
        "wall_s": round(wall, 1), "start_up_s": round(first - started, 1),
        "shutdown_s": round(started + wall - last, 1),
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "memory_and_cpu": watch.summary()})
    print(f"slow_envs: {name}: {out['steps_per_s']:.2f} steps/s of {out['ideal_steps_per_s']:.2f} "
          f"ideal ({100 * out['ratio']:.1f} %), whole run {100 * out['run_ratio']:.1f} %, "
          f"learner busy {out['learner_busy']:.3f}", flush=True)
    return out


def smoke_runs(out: Path) -> list[list[str]]:
    return [["--teams", "2", "--learners", "1", "--lo", "0.01", "--hi", "0.04",
             "--steps", "120", "--learn-start", "60", "--batch", "16", "--hidden", "8,8"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teams", type=int, default=56, help="environment teams E")
    parser.add_argument("--learners", type=int, default=8, help="learner ranks L")
    parser.add_argument("--lo", type=float, default=0.5, help="shortest step, seconds")
    parser.add_argument("--hi", type=float, default=2.0, help="longest step, seconds")
    parser.add_argument("--slow-factor", type=float, default=4.0,
                        help="how much slower team 0 is in the 'slow' case")
    parser.add_argument("--seconds", type=float, default=150.0,
                        help="each case's steps: this many seconds at the ideal rate")
    parser.add_argument("--steps", type=int, default=0, help="each case's steps (over --seconds)")
    parser.add_argument("--episode-len", type=int, default=10, help="steps per episode")
    parser.add_argument("--cases", nargs="+", choices=("uniform", "slow"),
                        default=["uniform", "slow"])
    parser.add_argument("--learn-start", type=int, default=500,
                        help="stored steps before the learners train")
    parser.add_argument("--batch", type=int, default=64, help="V-RACER's minibatch")
    parser.add_argument("--hidden", default="64,64", help="V-RACER's hidden layers")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=3600.0, help="per case, seconds")
    parser.add_argument("--max-memory-gib", type=float, default=16.0,
                        help="stop a run whose ranks take more memory (summed Pss)")
    parser.add_argument("--name", default="slow_envs", help="results file name (no .json)")
    args = parse(parser, argv, smoke_runs)
    if args.smoke:
        return smoke(main, smoke_runs, args.out)
    runs = runs_dir(args.out, "slow_envs")
    cases = {name: run_case(name, args, args.slow_factor if name == "slow" else None, runs)
             for name in args.cases}
    path = write(args.name, {"teams": args.teams, "learners": args.learners,
                             "step_time_s": [args.lo, args.hi], "slow_factor": args.slow_factor,
                             "episode_len": args.episode_len, "target_ratio": 0.9,
                             "mpi_settings": MPI_SETTINGS, "cases": cases})
    print(f"slow_envs: results in {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
