"""CrossQ end to end, hpc_refer's against sb3-contrib's at the same critic width (issue 36,
point 6: hpc_refer's at least 2x sb3-contrib's steps/s):

    python bench/crossq_speed.py [--width W] [--env ID] [--steps N] [--learn-start N]
        [--repeats R] [--compile {on,off}] [--out DIR] [--smoke]

Each repeat runs ``python -m hpc_refer.run --algorithm crossq`` (actor 256 x 256, critics
W x W, one gradient step per environment step, ``--compile``) and ``bench/sb3_runner.py
crossq --critic-width W`` in turn (the same task, budget and learning start, one torch
thread each, no evaluation). The steady rate of a run is the environment steps per second
between the end of the first episode that ends at least two episodes after the learning start
and the end of its last, both read from its ``episodes.csv`` (``wall_s``, the same clock for
both): the first episode with training holds the compile and, in hpc_refer's one process,
the gradient steps owed for the chunk that crossed the learning start. Writes
``crossq_speed.json``: per implementation the rates of every repeat and their median, and
the ratio of the medians (hpc_refer / sb3-contrib). ``--smoke``: Pendulum-v1, 32-wide critics,
1,000 steps from 300, eager, one repeat (bench/common.py).
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
from pathlib import Path

from common import median, parse, smoke, write

BENCH = Path(__file__).resolve().parent


def steady_rate(episodes_csv: Path, learn_start: int) -> float:
    """Environment steps per second between the first episode end at least two episodes
    after ``learn_start`` and the last episode end (``env_step`` and ``wall_s`` columns)."""
    with episodes_csv.open() as f:
        rows = [(int(r["env_step"]), float(r["wall_s"])) for r in csv.DictReader(f)]
    length = rows[0][0]
    window = [r for r in rows if r[0] >= learn_start + 2 * length]
    if len(window) < 2:
        raise SystemExit(f"{episodes_csv}: fewer than two episodes end after the learning "
                         "start and its first episode; give more --steps")
    (s0, t0), (s1, t1) = window[0], window[-1]
    return (s1 - s0) / (t1 - t0)


def hpc_refer_run(args: argparse.Namespace, run_dir: Path) -> float:
    subprocess.run([sys.executable, "-m", "hpc_refer.run", "--algorithm", "crossq",
                    "--crossq.critic-hidden", f"{args.width},{args.width}", "--env", args.env,
                    "--steps", str(args.steps), "--replay.learn-start", str(args.learn_start),
                    "--compile", args.compile, "--eval-every", "0", "--checkpoint-every", "0",
                    "--run-dir", str(run_dir)], check=True, stdout=subprocess.DEVNULL)
    return steady_rate(run_dir / "episodes.csv", args.learn_start)


def sb3_run(args: argparse.Namespace, run_dir: Path) -> float:
    subprocess.run([sys.executable, str(BENCH / "sb3_runner.py"), "crossq", args.env,
                    str(args.steps), "0", str(run_dir), "--eval-every", "0",
                    "--learning-starts", str(args.learn_start), "--critic-width",
                    str(args.width)], check=True)
    return steady_rate(run_dir / "episodes.csv", args.learn_start)


def smoke_runs(out: Path) -> list[list[str]]:
    return [["--env", "Pendulum-v1", "--width", "32", "--steps", "1000", "--learn-start", "300",
             "--repeats", "1", "--compile", "off"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--steps", type=int, default=7000)
    parser.add_argument("--learn-start", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compile", choices=("on", "off"), default="on")
    args = parse(parser, argv, smoke_runs)
    if args.smoke:
        return smoke(main, smoke_runs, args.out)
    rates: dict[str, list[float]] = {"hpc_refer": [], "sb3_contrib": []}
    with tempfile.TemporaryDirectory(prefix="crossq-speed-") as tmp:
        for k in range(args.repeats):
            for name, run in (("hpc_refer", hpc_refer_run), ("sb3_contrib", sb3_run)):
                rates[name].append(run(args, Path(tmp) / f"{name}-{k}"))
                print(f"repeat {k}: {name} {rates[name][-1]:.1f} steps/s", flush=True)
    medians = {name: median(r) for name, r in rates.items()}
    ratio = medians["hpc_refer"] / medians["sb3_contrib"]
    print(f"median steps/s: hpc_refer {medians['hpc_refer']:.1f}, sb3-contrib "
          f"{medians['sb3_contrib']:.1f}: ratio {ratio:.2f}", flush=True)
    write("crossq_speed", {"env": args.env, "critic_width": args.width, "steps": args.steps,
                           "learn_start": args.learn_start, "compile": args.compile,
                           "rates": rates, "median_steps_per_s": medians,
                           "ratio_hpc_refer_over_sb3": ratio})
    return 0


if __name__ == "__main__":
    sys.exit(main())
