"""Learner cost of a recurrent cell (issue 27, point 3): ``python bench/bench_recurrent.py``.

Gradient steps/s (``Learner.train_step``) of V-RACER, SAC and DDPG with ReF-ER, feed-forward
and with a GRU cell (width 32, BPTT over W = 16 steps: B / W sequences of W rows, the same
B rows a step), eager and compiled, on one core with a replay of 2^16 states (HalfCheetah
sizes: 17 observations, 6 actions, episodes of 1000 steps; a recurrent row also holds its
32-value carry). The candidates take turns block by block (``--repeats`` rounds of ``--n``
steps each) so that load changes hit them alike; medians. Writes
``bench/results/recurrent_learner.json`` (``--out``: another directory). ``--size`` (replay
states) and ``--compile`` (the learner steps: ``off on``, both by default) shrink it;
``--smoke``: the three algorithms, eager, 5 steps a block, one round, 4,096 states
(bench/common.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from common import median, parse, rate, smoke, synthetic_episode, write

from hpc_refer.algorithms.kit.collectives import SerialReducer
from hpc_refer.config.resolve import build_config
from hpc_refer.loop.learner import Learner
from hpc_refer.run.learning import make_learner

OBS, ACT, T, SIZE = 17, 6, 1000, 2**16
ALGORITHMS = ("vracer", "sac", "ddpg")


def learner_of(name: str, cell: str, compile_mode: str, size: int = SIZE) -> Learner:
    """A learner of ``name`` with ``cell`` on a full replay of ``size`` synthetic states."""
    cfg = build_config({"run": {"algorithm": name, "compile": compile_mode},
                        name: {"cell": cell}, "replay": {"size": size}})
    learner = make_learner(cfg, OBS, ACT, SerialReducer())
    rng = np.random.default_rng(0)
    while learner.replay.size < size:
        learner.store(synthetic_episode(rng, T, learner.algo.row_dim, ACT))
    learner.update_start(size, 0)
    for _ in range(30):  # compile and warm up
        learner.train_step()
    return learner


def smoke_runs(out: Path) -> list[list[str]]:
    return [["--n", "5", "--repeats", "1", "--size", "4096", "--compile", "off"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="steps per block")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of blocks")
    parser.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS))
    parser.add_argument("--size", type=int, default=SIZE, help="replay states")
    parser.add_argument("--compile", nargs="+", choices=("off", "on"), default=["off", "on"],
                        help="learner steps to time: eager (off), compiled (on)")
    args = parse(parser, argv, smoke_runs)
    if args.smoke:
        return smoke(main, smoke_runs, args.out)
    torch.set_num_threads(1)
    steps: dict[str, Callable[[], object]] = {}
    for name in args.algorithms:
        for cell in ("none", "gru"):
            for mode in args.compile:
                learner = learner_of(name, cell, mode, args.size)
                kind = "compiled" if learner.step.compiled else "eager"
                steps[f"{name}_{'mlp' if cell == 'none' else 'gru'}_{kind}"] = \
                    learner.train_step
    rates: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(args.repeats):
        for k, fn in steps.items():
            rates[k] += rate(fn, args.n, 1)
    medians = {k: median(v) for k, v in rates.items()}
    over = {k: medians[k] / medians[k.replace("_gru_", "_mlp_")] for k in medians
            if "_gru_" in k and k.replace("_gru_", "_mlp_") in medians}
    path = write("recurrent_learner", {"steps_per_s": rates, "median": medians,
                                       "gru_over_mlp": over, "replay_states": args.size,
                                       "cell_width": 32, "bptt": 16})
    for k, v in medians.items():
        print(f"{k}: {v:.0f} steps/s" + (f" ({over[k]:.2f}x the MLP's)" if k in over else ""))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
