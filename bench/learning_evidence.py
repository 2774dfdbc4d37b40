"""Learning evidence: ``python bench/learning_evidence.py RUN_DIR ... --name NAME``.

Draws the paper-style learning curves of finished (or still running) training runs with
``hpc_refer.report.curves`` and records, per run, the environment steps reached, the mean return of
the last 20 episodes, and the last logged beta and far-policy fraction, in
``bench/results/<NAME>.json`` next to ``bench/results/<NAME>.png``.

The runs themselves are ordinary trainings, for example::

    python -m hpc_refer.run --env HalfCheetah-v5 --seed 0 --refer.mode refer
    python -m hpc_refer.run --env HalfCheetah-v5 --seed 0 --refer.mode er

``--out DIR``: the JSON and PNG go there. ``--smoke`` (bench/common.py) trains one such run,
400 steps of Pendulum-v1 (training from 300) in DIR/runs, and draws it in 200-step windows.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

from common import parse, smoke, write

from hpc_refer.report.curves import plot_runs, run_label


def summary(run_dir: Path) -> dict:
    with (run_dir / "episodes.csv").open() as f:
        episodes = list(csv.DictReader(f))
    records = [json.loads(x) for x in (run_dir / "train.jsonl").read_text().splitlines()]
    last = records[-1] if records else {}
    returns = [float(e["return"]) for e in episodes[-20:]]
    return {"run": run_dir.name, "label": run_label(run_dir),
            "env_steps": int(last.get("env_step", 0)), "episodes": len(episodes),
            "mean_return_last_20": sum(returns) / max(len(returns), 1),
            "beta": last.get("beta"), "far_fraction": last.get("far_fraction")}


SMOKE_RUN = ("--env", "Pendulum-v1", "--steps", "400", "--replay.learn-start", "300")
"""The training run of ``--smoke`` (flags of ``python -m hpc_refer.run``)."""


def smoke_runs(out: Path) -> list[list[str | Path]]:
    return [[out / "runs" / "vracer-seed0", "--name", "learning_evidence", "--window", "200"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--name", required=True, help="results file stem")
    parser.add_argument("--window", type=int, default=50_000, help="steps per window")
    args = parse(parser, argv, smoke_runs)
    if args.smoke:
        run = args.out / "runs" / "vracer-seed0"
        subprocess.run([sys.executable, "-m", "hpc_refer.run", *SMOKE_RUN, "--run-dir",
                        str(run)], check=True, stdout=subprocess.DEVNULL)
        return smoke(main, smoke_runs, args.out)
    png = args.out / f"{args.name}.png"
    curves = plot_runs(args.runs, png, args.window, title=args.name)
    path = write(args.name, {"runs": [summary(r) for r in args.runs], "curves": curves,
                             "window": args.window, "figure": png.name})
    for r in json.loads(path.read_text())["runs"]:
        print(f"{r['label']:28s} {r['env_steps']:>8d} steps  last-20 return "
              f"{r['mean_return_last_20']:8.1f}  beta {r['beta']:.3f}  far {r['far_fraction']:.3f}")
    print(f"wrote {path} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
