"""Learner benchmark (issue: foundation): ``python bench/bench_learner.py [--quick]``.

1. Learner steps/s (``Learner.train_step``) of V-RACER, DDPG and NAF + ReF-ER at their default
   batches, eager and compiled (``run.compile``), on one core with a full replay (2^18 states,
   HalfCheetah sizes: 17 observations, 6 actions, episodes of 1000 steps), median of blocks
   taken in turns; in the same run the bare MLP update that the machine notes use as
   reference (17-128-128-13, Adam, MSE, B = 256), so that they compare as ratios on a noisy
   machine.
2. End-to-end environment steps/s on HalfCheetah-v5 in one process, while training (1 gradient
   step per environment step; eager and compiled) and before training starts (acting only).
3. Memory of a full 2^18 replay: resident memory added by allocating and filling it, against
   the raw bytes of its columns.

Writes bench/results/learner.json (``--name``: another file, ``--out``: another directory).
``--size`` (replay states, default 2^18), ``--algorithms`` and ``--e2e-steps`` shrink it;
``--smoke`` runs ``--quick --size 4096 --algorithms vracer --e2e-steps 1200``, both learner
steps, eager and compiled, so the compiled path of the benchmarks runs here (the other
scripts' smoke runs are eager: a compile costs 5-25 s on two cores; bench/common.py).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from common import median, parse, rate, smoke, synthetic_episode, write

from hpc_refer.algorithms.kit.collectives import SerialReducer
from hpc_refer.algorithms.registry import ALGORITHMS
from hpc_refer.config.resolve import build_config
from hpc_refer.loop.learner import Learner
from hpc_refer.replay.shard import ReplayShard
from hpc_refer.report.metrics import RunDirectory
from hpc_refer.run.learning import make_learner, train_local

OBS, ACT, T = 17, 6, 1000


def rss_bytes() -> int:
    """Resident set size of this process now."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * 4096


def fill(learner: Learner, rng: np.random.Generator, states: int) -> None:
    """Store synthetic truncated episodes of T steps (mu near the policy) until ``states``."""
    while learner.replay.size < states:
        learner.store(synthetic_episode(rng, T, OBS, ACT))


def bench_memory(size: int) -> dict:
    """RSS added by a full replay, after a warm-up that compiles and loads everything else."""
    warm = build_config({"replay": {"size": 4 * T}})
    fill(make_learner(warm, OBS, ACT, SerialReducer()), np.random.default_rng(1), 4 * T)
    gc.collect()
    before = rss_bytes()
    cfg = build_config({"replay": {"size": size}})
    learner = make_learner(cfg, OBS, ACT, SerialReducer())
    fill(learner, np.random.default_rng(0), size)
    after = rss_bytes()
    raw = learner.replay.column_bytes
    return {"states": size, "column_bytes": raw, "rss_added_bytes": after - before,
            "ratio": (after - before) / raw, "learner": learner}


def bare_mlp_update() -> Callable[[], None]:
    """The reference: a bare torch MLP update of the same size (17-128-128-13, tanh, Adam,
    MSE, B = 256), eager, as the machine notes measure it."""
    net = torch.nn.Sequential(torch.nn.Linear(17, 128), torch.nn.Tanh(),
                              torch.nn.Linear(128, 128), torch.nn.Tanh(),
                              torch.nn.Linear(128, 13))
    opt = torch.optim.Adam(net.parameters(), lr=1e-4)
    x, y = torch.randn(256, 17), torch.randn(256, 13)

    def update() -> None:
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()

    return update


def bench_gradient_steps(vracer_replay: ReplayShard, n: int, repeats: int,
                         algorithms: list[str]) -> dict:
    """Learner steps/s of each algorithm (its default batch), eager and compiled, on full
    replays (``vracer_replay`` for V-RACER, one without V-tbc filled here for DDPG and NAF),
    and the bare MLP update; the candidates take turns block by block (``repeats`` rounds of
    ``n`` calls each), so that load changes hit them alike."""
    steps: dict[str, Callable[[], None]] = {"mlp": bare_mlp_update()}
    compile_s: dict[str, float] = {}
    size = vracer_replay.capacity
    replays = {True: vracer_replay}
    for name in algorithms:
        for mode in ("off", "on"):
            cfg = build_config({"run": {"algorithm": name, "compile": mode},
                                "replay": {"size": size}})
            learner = make_learner(cfg, OBS, ACT, SerialReducer())
            if cfg.algorithm.retrace not in replays:
                fill(learner, np.random.default_rng(0), size)
                replays[cfg.algorithm.retrace] = learner.replay
            learner.replay = replays[cfg.algorithm.retrace]
            learner.update_start(size, 0)
            learner.train_step()
            if learner.step.compiled:
                compile_s[name] = learner.step.compile_seconds
            for _ in range(50):
                learner.train_step()
            steps[f"{name}_{'compiled' if mode == 'on' else 'eager'}"] = learner.train_step
    rates: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(repeats):
        for k, fn in steps.items():
            rates[k] += rate(fn, n, 1)
    medians = {k: median(v) for k, v in rates.items()}
    return {"steps_per_s": rates, "median": medians, "compile_seconds": compile_s,
            "over_mlp": {k: v / medians["mlp"] for k, v in medians.items() if k != "mlp"}}


def bench_end_to_end(steps: int, tmp: Path, size: int = 2**18) -> dict:
    """HalfCheetah-v5 in one process: env steps/s while training (1 gradient step per env
    step from step 2,000, or half the run if shorter; eager and compiled learner step: the
    median of the interval rates after the first training interval, which holds the
    compile) and acting only; a replay of ``size`` states."""
    out = {}
    start = min(2000, steps // 2)
    cases = (("training_eager", start, "off"), ("training_compiled", start, "on"),
             ("acting_only", 10**9, "off"))
    for label, start, mode in cases:
        cfg = build_config({"run": {"env": "HalfCheetah-v5", "steps": steps,
                                    "log_every": steps // 6, "compile": mode},
                            "replay": {"size": size, "learn_start": min(start, size)}})
        run = RunDirectory(tmp / label, cfg)
        t = time.perf_counter()
        train_local(cfg, run)
        run.close()
        wall = time.perf_counter() - t
        records = [json.loads(x) for x in (tmp / label / "train.jsonl").read_text().splitlines()]
        steady = [r["env_steps_per_s"] for r in records[2:]] or [steps / wall]
        out[f"{label}_env_steps_per_s"] = median(steady)
        out[f"{label}_wall_s"] = wall
    return out


def smoke_runs(out: Path) -> list[list[str]]:
    return [["--quick", "--size", "4096", "--algorithms", "vracer", "--e2e-steps", "1200"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short blocks")
    parser.add_argument("--name", default="learner",
                        help="results file bench/results/NAME.json (another machine's figures "
                             "beside this one's)")
    parser.add_argument("--size", type=int, default=2**18, help="replay states")
    parser.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS),
                        choices=sorted(ALGORITHMS))
    parser.add_argument("--e2e-steps", type=int,
                        help="environment steps of each end-to-end run (default 30,000; "
                             "--quick 6,000)")
    args = parse(parser, argv, smoke_runs)
    if args.smoke:
        return smoke(main, smoke_runs, args.out)
    torch.set_num_threads(1)
    n, repeats, e2e = (50, 3, 6000) if args.quick else (500, 7, 30000)
    e2e = args.e2e_steps or e2e
    memory = bench_memory(args.size)
    learner = memory.pop("learner")
    grads = bench_gradient_steps(learner.replay, n, repeats, args.algorithms)
    del learner
    gc.collect()
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        e2e_rates = bench_end_to_end(e2e, Path(tmp), args.size)
    path = write(args.name, {"gradient": grads, "end_to_end": e2e_rates, "memory": memory,
                             "targets": {"vracer_steps_per_s": 500, "memory_ratio": 1.5}})
    mlp = grads["median"]["mlp"]
    print(f"gradient steps/s, one core, full replay of {args.size} states (bare MLP update "
          f"{mlp:.0f}/s):")
    for name in args.algorithms:
        eager, compiled = (grads["median"][f"{name}_{m}"] for m in ("eager", "compiled"))
        print(f"  {name}: eager {eager:.0f}/s ({eager / mlp:.2f}x), compiled {compiled:.0f}/s "
              f"({compiled / mlp:.2f}x)")
    print("end to end HalfCheetah-v5, one process: training "
          f"{e2e_rates['training_eager_env_steps_per_s']:.0f} (eager) / "
          f"{e2e_rates['training_compiled_env_steps_per_s']:.0f} (compiled) steps/s, "
          f"acting only {e2e_rates['acting_only_env_steps_per_s']:.0f} steps/s")
    print(f"replay {args.size} states: {memory['rss_added_bytes'] / 2**20:.1f} MiB resident "
          f"for {memory['column_bytes'] / 2**20:.1f} MiB of columns (x{memory['ratio']:.2f})")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
