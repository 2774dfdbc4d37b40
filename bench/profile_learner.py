"""Where the time of one learner step goes (issue 11, point 1).

    python bench/profile_learner.py [--algorithm vracer|ddpg|naf] [--compile off|on]
                                    [--steps 400] [--size 262144] [--out DIR] [--smoke]

One learner, one core, B = 256, 2x128, a full replay of HalfCheetah sizes (synthetic episodes,
as bench_learner.py). The real ``Learner.train_step`` runs unchanged; the methods it calls are
wrapped by timers (a wrapper costs about a microsecond), and the step's own code outside them
is what is left of the step's wall time. Phases:

    sample       replay.sample_rows (uniform or PER)
    gather       replay.batch: the minibatch columns, Q-ret, weights
    forward      the algorithm's losses(): network forward, log-probs, rho, losses (eager)
    backward     loss.backward() (eager)
    reduce+adam  the gradient reduction and the optimizer step (apply_gradients less
                 backward; eager)
    network      with ``--compile on``: forward, losses, backward and Adam, one compiled graph
    refresh      replay.refresh: stored V and rho, the eq. 8 backward pass of the episodes
    bootstrap    the values of the states after the sampled rows (a second forward) and
                 bootstrap_rows
    counts       far-policy counts and the beta/c_max update (eqs. 12-13)
    other        the rest of train_step and of the algorithm's step (Python, numpy glue)

Writes bench/results/profile_<algorithm>-<eager|compiled>.json (``--out``: another directory):
milliseconds per step and fractions, the load. ``--smoke``: 20 eager steps on a replay of
4,096 states (bench/common.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from bench_learner import fill
from common import parse, smoke, write

from hpc_refer.algorithms.kit.collectives import SerialReducer
from hpc_refer.algorithms.kit.compiled import CompiledStep
from hpc_refer.algorithms.kit.step import GradientAverage
from hpc_refer.algorithms.registry import ALGORITHMS
from hpc_refer.config.resolve import build_config, default_algorithm
from hpc_refer.run.learning import make_learner

TIMES: dict[str, float] = defaultdict(float)


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with its wall time added to TIMES[name]."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMES[name] += time.perf_counter() - t
    return wrapper


def smoke_runs(out: Path) -> list[list[str]]:
    return [["--steps", "20", "--size", "4096"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithm", default=default_algorithm(), choices=sorted(ALGORITHMS))
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--compile", default="off", choices=["off", "on"],
                        help="the learner step eager or compiled (run.compile)")
    parser.add_argument("--size", type=int, default=2**18)
    args = parse(parser, argv, smoke_runs)
    if args.smoke:
        return smoke(main, smoke_runs, args.out)
    torch.set_num_threads(1)
    config = build_config({"run": {"algorithm": args.algorithm, "compile": args.compile},
                           "replay": {"size": args.size}})
    learner = make_learner(config, 17, 6, SerialReducer())
    learner.start_env_steps = 0
    fill(learner, np.random.default_rng(0), args.size)
    replay, algo = learner.replay, learner.algo
    for _ in range(50):  # warm-up: allocations, numba, first Adam steps
        learner.train_step()
    replay.sample_rows = timed("sample", replay.sample_rows)
    replay.batch = timed("gather", replay.batch)
    algo.losses = timed("forward", algo.losses)
    replay.refresh = timed("refresh", replay.refresh)
    replay.bootstrap_rows = timed("bootstrap", replay.bootstrap_rows)
    algo.values = timed("bootstrap", algo.values)
    learner.far_counts = timed("counts", learner.far_counts)
    learner.refer.update = timed("counts", learner.refer.update)
    average, adam = GradientAverage.__call__, torch.optim.Adam.step
    GradientAverage.__call__ = timed("reduce+adam", average)  # type: ignore[method-assign]
    torch.optim.Adam.step = timed("reduce+adam", adam)  # type: ignore[method-assign]
    step = CompiledStep.__call__
    CompiledStep.__call__ = timed("network", step)  # type: ignore[method-assign]
    backward = torch.Tensor.backward
    torch.Tensor.backward = timed("backward", backward)  # type: ignore[method-assign]
    load0 = os.getloadavg()[0]
    TIMES.clear()
    t = time.perf_counter()
    for _ in range(args.steps):
        learner.train_step()
    total = time.perf_counter() - t
    torch.Tensor.backward = backward  # type: ignore[method-assign]
    CompiledStep.__call__ = step  # type: ignore[method-assign]
    GradientAverage.__call__ = average  # type: ignore[method-assign]
    torch.optim.Adam.step = adam  # type: ignore[method-assign]
    TIMES["other"] = total - sum(TIMES.values())
    per_step = {k: 1e3 * v / args.steps for k, v in TIMES.items()}
    fractions = {k: v / total for k, v in TIMES.items()}
    mode = "compiled" if args.compile == "on" else "eager"
    out = {"algorithm": args.algorithm, "step": mode, "steps": args.steps, "replay_size": args.size,
           "batch": config.algorithm.batch, "steps_per_s": args.steps / total,
           "ms_per_step": per_step, "fractions": fractions,
           "load_avg_before": round(load0, 2), "load_avg_after": round(os.getloadavg()[0], 2)}
    path = write(f"profile_{args.algorithm}-{mode}", out)
    print(f"{args.algorithm} ({mode}): {args.steps / total:.0f} steps/s, load {load0:.2f}")
    for k in sorted(per_step, key=per_step.get, reverse=True):
        print(f"  {k:12s} {per_step[k]:7.3f} ms  {100 * fractions[k]:5.1f} %")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
