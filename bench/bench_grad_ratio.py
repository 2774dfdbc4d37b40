"""The learner at high update ratios (issue 24, point 6):
``python bench/bench_grad_ratio.py [--quick] [--ratios 1 4 10] [--out DIR] [--smoke]``.

HalfCheetah-v5, V-RACER + ReF-ER with its compiled learner step (2 x 128, B = 256), trained
through the real entry point at ``replay.grad_ratio`` 1, 4 and 10 from env step 5,000:

(a) one process (``python -m hpc_refer.run``): the learner and the actor take turns;
(b) two learners and two actors (``mpirun -n 4 ... --learners 2``: each learner serves its
    own actor's shard; global batch fixed, B / 2 on each learner), on the two cores: twice
    as many ranks as cores, so (b) measures what the reductions and the oversubscription
    cost here, not a cluster's scaling.

Per run: env steps/s and gradient steps/s in the steady state (medians over the train.jsonl
intervals after the first with training, which holds the compile) and the learner's busy
fraction. Beside them, measured in this process in turns with the bare MLP update that the
machine notes use as reference (bench_learner.py), the rate of ``Learner.train_step`` alone
on a full 2^18 replay: the ceiling of (a)'s gradient steps/s. What (a) falls short of it is
the actor's turns (an env step and a policy forward per ``grad_ratio`` gradient steps) plus
the loop around each step (polling, counters, schedules): the most that taking several
gradient steps per loop iteration could win.

Writes bench/results/grad_ratio.json (``--out``: another directory). ``--learn-start``,
``--gradient-steps`` (per run after the learning start), ``--compile``, ``--chunk-len`` (the
runs'), ``--size`` and ``--block``/``--repeats`` (the ceiling's replay and timed blocks) shrink
it; ``--smoke``: one ratio, 2, both layouts (``mpirun -n 4``), eager, 300 steps to the
learning start and 200 gradient steps in chunks of 25, the ceiling on 4,096 states in one
block of 20 steps (bench/common.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from bench_learner import bare_mlp_update, fill
from bench_mpi import mpirun
from common import median, parse, rate, smoke, write

from hpc_refer.algorithms.kit.collectives import SerialReducer
from hpc_refer.config.resolve import build_config
from hpc_refer.run.learning import make_learner

LEARN_START = 5000
TRAIN_GRADIENT_STEPS = 50_000
"""Gradient steps of each run after the learning start (about 40 s of learner time)."""


def flags(ratio: float, run_dir: Path, train_env_steps: int, learn_start: int = LEARN_START,
          compile_mode: str = "on", chunk_len: int | None = None) -> list[str]:
    steps = learn_start + train_env_steps
    chunk = [] if chunk_len is None else ["--chunk-len", str(chunk_len)]
    return ["-m", "hpc_refer.run", *chunk, "--env", "HalfCheetah-v5", "--steps", str(steps),
            "--replay.learn-start", str(learn_start), "--replay.grad-ratio", str(ratio),
            "--compile", compile_mode, "--checkpoint-every", "0", "--eval-every", "0",
            "--log-every", str(max(train_env_steps // 6, 1)), "--run-dir", str(run_dir)]


def steady(run_dir: Path) -> dict:
    """Medians of the interval records after the first one with training."""
    records = [json.loads(x) for x in (run_dir / "train.jsonl").read_text().splitlines()]
    training = [r for r in records if r["grad_step"] > 0][1:]
    if not training:
        raise SystemExit(f"{run_dir.name}: no interval after the compile's: too short a run")
    return {k: median([r[k] for r in training])
            for k in ("env_steps_per_s", "grad_steps_per_s", "learner_busy")}


def one_process(ratio: float, train_env_steps: int, tmp: Path, learn_start: int = LEARN_START,
                compile_mode: str = "on", chunk_len: int | None = None) -> dict:
    run_dir = tmp / f"one-{ratio:g}"
    subprocess.run([sys.executable, *flags(ratio, run_dir, train_env_steps, learn_start,
                                           compile_mode, chunk_len)],
                   check=True, capture_output=True, cwd=tmp)
    return steady(run_dir)


def two_learners(ratio: float, train_env_steps: int, tmp: Path, learn_start: int = LEARN_START,
                 compile_mode: str = "on", chunk_len: int | None = None) -> dict:
    run_dir = tmp / f"two-{ratio:g}"
    mpirun(4, [*flags(ratio, run_dir, train_env_steps, learn_start, compile_mode, chunk_len),
               "--learners", "2"], cwd=str(tmp))
    return steady(run_dir)


def learner_ceiling(n: int, repeats: int, size: int = 2**18, compile_mode: str = "on") -> dict:
    """``Learner.train_step`` of the (compiled) V-RACER step on a full replay of ``size``
    states and the bare MLP update, block by block in turns (medians)."""
    cfg = build_config({"run": {"compile": compile_mode}, "replay": {"size": size}})
    learner = make_learner(cfg, 17, 6, SerialReducer())
    fill(learner, np.random.default_rng(0), size)
    learner.update_start(size, 0)
    for _ in range(50):
        learner.train_step()
    steps = {"mlp": bare_mlp_update(), "train_step": learner.train_step}
    rates: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(repeats):
        for k, fn in steps.items():
            rates[k] += rate(fn, n, 1)
    medians = {k: median(v) for k, v in rates.items()}
    return {"steps_per_s": rates, "median": medians,
            "over_mlp": medians["train_step"] / medians["mlp"]}


def smoke_runs(out: Path) -> list[list[str]]:
    return [["--ratios", "2", "--learn-start", "300", "--gradient-steps", "200",
             "--compile", "off", "--chunk-len", "25", "--size", "4096", "--block", "20",
             "--repeats", "1"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="half the steps")
    parser.add_argument("--ratios", type=float, nargs="+", default=[1.0, 4.0, 10.0])
    parser.add_argument("--learn-start", type=int, default=LEARN_START,
                        help="environment steps before training")
    parser.add_argument("--gradient-steps", type=int, default=TRAIN_GRADIENT_STEPS,
                        help="gradient steps of each run after the learning start")
    parser.add_argument("--compile", choices=("on", "off"), default="on",
                        help="the learner step of the runs and of the ceiling")
    parser.add_argument("--chunk-len", type=int,
                        help="the runs' --chunk-len (default hpc_refer's, 1000 steps)")
    parser.add_argument("--size", type=int, default=2**18, help="replay states of the ceiling")
    parser.add_argument("--block", type=int, default=500,
                        help="learner steps per timed block of the ceiling (--quick: half)")
    parser.add_argument("--repeats", type=int, default=7, help="timed blocks of the ceiling")
    args = parse(parser, argv, smoke_runs)
    if args.smoke:
        return smoke(main, smoke_runs, args.out)
    torch.set_num_threads(1)
    scale = 2 if args.quick else 1
    ceiling = learner_ceiling(args.block // scale, args.repeats, args.size, args.compile)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for ratio in args.ratios:
            train = int(args.gradient_steps / scale / ratio)
            for layout, fn in (("one process", one_process), ("2 learners", two_learners)):
                out = fn(ratio, train, Path(tmp), args.learn_start, args.compile,
                         args.chunk_len)
                out.update(grad_ratio=ratio, layout=layout, train_env_steps=train,
                           of_ceiling=out["grad_steps_per_s"] / ceiling["median"]["train_step"])
                runs.append(out)
                print(f"grad_ratio {ratio:g}, {layout}: {out['env_steps_per_s']:.0f} env "
                      f"steps/s, {out['grad_steps_per_s']:.0f} gradient steps/s "
                      f"({out['of_ceiling']:.2f} of train_step alone), learner busy "
                      f"{out['learner_busy']:.2f}", flush=True)
    path = write("grad_ratio", {"ceiling": ceiling, "runs": runs})
    med = ceiling["median"]
    print(f"train_step alone {med['train_step']:.0f}/s, bare MLP {med['mlp']:.0f}/s "
          f"({ceiling['over_mlp']:.2f}x); wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
