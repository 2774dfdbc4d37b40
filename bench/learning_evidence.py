"""Learning evidence: ``python bench/learning_evidence.py RUN_DIR ... --name NAME``.

Draws the paper-style learning curves of finished (or still running) training runs with
``hpc_refer.plot`` and records, per run, the environment steps reached, the mean return of the
last 20 episodes, and the last logged beta and far-policy fraction, in
``bench/results/<NAME>.json`` next to ``bench/results/<NAME>.png``.

The runs themselves are ordinary trainings, for example::

    python -m hpc_refer.run --env HalfCheetah-v5 --seed 0 --refer.mode refer
    python -m hpc_refer.run --env HalfCheetah-v5 --seed 0 --refer.mode er
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from common import RESULTS, write

from hpc_refer.plot import plot_runs, run_label


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--name", required=True, help="results file stem")
    parser.add_argument("--window", type=int, default=50_000, help="steps per window")
    args = parser.parse_args()
    png = RESULTS / f"{args.name}.png"
    curves = plot_runs(args.runs, png, args.window, title=args.name)
    path = write(args.name, {"runs": [summary(r) for r in args.runs], "curves": curves,
                             "window": args.window, "figure": png.name})
    for r in json.loads(path.read_text())["runs"]:
        print(f"{r['label']:28s} {r['env_steps']:>8d} steps  last-20 return "
              f"{r['mean_return_last_20']:8.1f}  beta {r['beta']:.3f}  far {r['far_fraction']:.3f}")
    print(f"wrote {path} and {png}")


if __name__ == "__main__":
    main()
