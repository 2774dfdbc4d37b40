"""The design's example runs on one small machine (issue 38, point 6):
``python bench/example_runs.py`` -> ``bench/results/example_runs.json``.

Two runs of ``mpirun -n 64 python -m hpc_refer.run --learners 8``, oversubscribed on whatever
cores the machine has:

- ``mujoco``: 56 environment teams of one rank stepping ``--env`` (Pendulum-v1; gymnasium);
- ``teams-of-4``: 14 teams of 4 ranks (``--ranks-per-env 4``) of the built-in Diffusion1D
  solver, whose actor drives 3 solver ranks.

For each: every rank's peak resident memory (VmHWM: shared library pages counted in each
rank) by role, the peak of the ranks' summed proportional set size (Pss: what they take from
the machine, shared pages counted once), the CPU seconds of each role (sampled from /proc,
:class:`slow_envs.RankWatch`), the start-up time (launch to ``machine.json``, which rank 0
writes once every rank has started MPI, opened the run and passed the start barrier), the
shutdown time (``state.txt`` = finished, written when the learners' loop ends, to mpirun's
exit) and the whole wall time. Actor and solver ranks import neither torch nor numba
(:mod:`hpc_refer.run.roles`); learners do.

``--steps`` (10,000) and ``--learn-start`` (2,000) size the runs; ``--smoke``: 4 ranks, one
learner, 600 steps of Pendulum.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import REPOSITORY, parse, repository_path, runs_dir, smoke, write
from slow_envs import RankWatch, run_env

CASES = {"mujoco": ["--env", "Pendulum-v1"],
         "teams-of-4": ["--env", "Diffusion1D", "--ranks-per-env", "4"]}


def run_case(name: str, args: argparse.Namespace, runs: Path) -> dict[str, Any]:
    run_dir = runs / name
    if run_dir.exists():
        shutil.rmtree(run_dir)
    runs.mkdir(parents=True, exist_ok=True)
    command = ["mpirun", "-n", str(args.ranks), sys.executable, "-m", "hpc_refer.run",
               "--learners", str(args.learners), *CASES[name], "--steps", str(args.steps),
               "--replay.learn-start", str(args.learn_start), "--run-dir", str(run_dir)]
    print(f"example_runs: {name}: {' '.join(command)}", flush=True)
    load_before = os.getloadavg()
    started = time.time()
    with (runs / f"{name}.out").open("w") as log:
        proc = subprocess.Popen(command, env=run_env(), stdout=log, stderr=subprocess.STDOUT,
                                cwd=REPOSITORY)
        with RankWatch(run_dir, args.learners, args.max_memory_gib, proc.terminate,
                       every=0.5) as watch:
            returncode = proc.wait(timeout=args.timeout)
    ended = time.time()
    if returncode != 0 or watch.over_limit:
        sys.stderr.write((runs / f"{name}.out").read_text()[-4000:])
        raise SystemExit(f"example_runs: {name}: mpirun exited {returncode}"
                         + (" (over --max-memory-gib)" if watch.over_limit else ""))
    out = {"command": " ".join(["mpirun", *command[1:3], "python", *command[4:]]).replace(
               str(run_dir), repository_path(run_dir)),
           "wall_s": round(ended - started, 1),
           "start_up_s": round((run_dir / "machine.json").stat().st_mtime - started, 1),
           "shutdown_s": round(ended - (run_dir / "state.txt").stat().st_mtime, 1),
           "state": (run_dir / "state.txt").read_text().split()[0],
           "load_avg_before": [round(x, 2) for x in load_before],
           "load_avg_after": [round(x, 2) for x in os.getloadavg()],
           "memory_and_cpu": watch.summary()}
    print(f"example_runs: {name}: {out}", flush=True)
    return out


def smoke_runs(out: Path) -> list[list[str]]:
    return [["--ranks", "4", "--learners", "1", "--steps", "600", "--learn-start", "300",
             "--cases", "mujoco"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64, help="MPI ranks")
    parser.add_argument("--learners", type=int, default=8, help="learner ranks")
    parser.add_argument("--steps", type=int, default=10_000, help="environment steps per run")
    parser.add_argument("--learn-start", type=int, default=2_000,
                        help="stored steps before the learners train")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--max-memory-gib", type=float, default=20.0,
                        help="stop a run whose ranks take more memory (summed Pss)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="per case, seconds")
    parser.add_argument("--name", default="example_runs", help="results file name (no .json)")
    args = parse(parser, argv, smoke_runs)
    if args.smoke:
        return smoke(main, smoke_runs, args.out)
    runs = runs_dir(args.out, "example_runs")
    cases = {name: run_case(name, args, runs) for name in args.cases}
    path = write(args.name, {"ranks": args.ranks, "learners": args.learners,
                             "steps": args.steps, "learn_start": args.learn_start,
                             "cases": cases})
    print(f"example_runs: results in {path}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
