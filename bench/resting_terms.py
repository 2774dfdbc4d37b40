"""What leaving out the resting optimizers' terms saves (issue 36, point 6): CrossQ's actor and
temperature step every third gradient step, TD3's actor every other; since the change the
loss leaves out their terms on the other steps (``Algorithm.loss_terms``'s ``resting``).

    python bench/resting_terms.py [--algorithms crossq td3] [--width W] [--blocks K]
        [--steps N] [--compile {on,off}] [--out DIR] [--smoke]

Per algorithm, two learners of HalfCheetah's sizes (17 states, 6 actions) with the same
networks and a replay of 2^16 synthetic states (bench_learner.py): one as the algorithm is, one
whose loss computes every term each step (the path a plug-in without ``resting`` takes). Their
``Learner.train_step`` runs in alternating timed blocks of ``--steps`` steps (a multiple of
the schedule's period), so that the machine's load falls on both alike; the figure is the
median over blocks of the ratio of their step times, beside the floating-point operations
per step of each (torch's FlopCounterMode over one period of eager losses and their
backward passes; the compiled graph of a resting step already dropped the unused gradients'
arithmetic before, so eager and compiled gain differently). CrossQ's critics are
``--width`` x ``--width`` (its actor 256 x 256); TD3's networks its defaults. Writes
bench/results/resting_terms.json. ``--smoke``: CrossQ at width 32, eager, 2 blocks of 6
steps on a replay of 4,096 states (bench/common.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from bench_learner import fill
from common import median, parse, smoke, write
from torch.utils.flop_counter import FlopCounterMode

from hpc_refer.algorithms.kit.base import Losses, TensorBatch
from hpc_refer.algorithms.kit.collectives import SerialReducer
from hpc_refer.algorithms.kit.step import due, resting
from hpc_refer.config.resolve import build_config
from hpc_refer.loop.learner import Learner, make_step
from hpc_refer.replay.near import NearBounds
from hpc_refer.run.learning import make_learner

OBS, ACT = 17, 6


def learner(name: str, width: int, compile_mode: str, size: int, every_term: bool) -> Learner:
    """A learner of ``name`` (seed 0: the same networks for both kinds), its replay filled;
    ``every_term``: its loss ignores ``resting`` (computes every term each step)."""
    table: dict[str, Any] = {"critic_hidden": [width, width]} if name == "crossq" else {}
    config = build_config({"run": {"algorithm": name, "compile": compile_mode},
                           name: table, "refer": {"mode": "er"}, "replay": {"size": size}})
    out = make_learner(config, OBS, ACT, SerialReducer())
    if every_term:
        algo = out.algo
        loss_terms = type(algo).loss_terms

        def every(batch: TensorBatch, beta: float | torch.Tensor, bounds: NearBounds,
                  resting: frozenset[str]) -> Losses:
            return loss_terms(algo, batch, beta, bounds)

        algo.step_loss_terms = every  # type: ignore[method-assign]
        out.step = make_step(algo, None, compile_mode == "on")
    out.start_env_steps = 0
    fill(out, np.random.default_rng(0), size)
    return out


def flops_per_step(trainee: Learner, period: int) -> float:
    with FlopCounterMode(display=False) as count:
        for t in range(period):
            trainee.algo.losses(trainee.replay.batch(
                trainee.replay.sample_rows(trainee.local_batch, trainee.rng), 0.0),
                trainee.terms, resting(trainee.algo, due(trainee.algo, t))).loss.backward()
    return count.get_total_flops() / period


def measure(name: str, args: argparse.Namespace) -> dict[str, Any]:
    pair = {kind: learner(name, args.width, args.compile, args.size, kind == "every_term")
            for kind in ("resting_left_out", "every_term")}
    period = max(spec.every for spec in pair["resting_left_out"].algo.optimizers.values())
    steps = max(period, args.steps - args.steps % period)
    for trainee in pair.values():  # compile, allocations, the first Adam steps
        for _ in range(3 * period):
            trainee.train_step()
    times: dict[str, list[float]] = {kind: [] for kind in pair}
    for _ in range(args.blocks):
        for kind, trainee in pair.items():
            start = time.perf_counter()
            for _ in range(steps):
                trainee.train_step()
            times[kind].append((time.perf_counter() - start) / steps * 1e3)
    ratios = [e / r for e, r in zip(times["every_term"], times["resting_left_out"],
                                    strict=True)]
    flops = {kind: flops_per_step(t, period) for kind, t in pair.items()}
    out = {"period": period, "steps_per_block": steps, "ms_per_step": times,
           "median_ms_per_step": {k: median(v) for k, v in times.items()},
           "median_speedup": median(ratios), "gflop_per_step": {
               k: v / 1e9 for k, v in flops.items()},
           "compiled": {k: t.step.compiled for k, t in pair.items()}}
    print(f"{name}: {out['median_ms_per_step']['every_term']:.2f} ms per step with every term, "
          f"{out['median_ms_per_step']['resting_left_out']:.2f} with the resting ones left out:"
          f" x{out['median_speedup']:.2f} (median of {args.blocks} paired blocks); "
          f"{flops['every_term'] / 1e9:.3f} -> {flops['resting_left_out'] / 1e9:.3f} GFLOP",
          flush=True)
    return out


def smoke_runs(out: Path) -> list[list[str]]:
    return [["--algorithms", "crossq", "--width", "32", "--compile", "off", "--blocks", "2",
             "--steps", "6", "--size", "4096"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithms", nargs="+", default=["crossq", "td3"],
                        choices=["crossq", "td3"])
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--size", type=int, default=2**16)
    parser.add_argument("--compile", choices=("on", "off"), default="on")
    args = parse(parser, argv, smoke_runs)
    if args.smoke:
        return smoke(main, smoke_runs, args.out)
    torch.set_num_threads(1)
    results = {name: measure(name, args) for name in args.algorithms}
    write("resting_terms", {"critic_width_crossq": args.width, "compile": args.compile,
                            "replay_states": args.size, "blocks": args.blocks,
                            "algorithms": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
