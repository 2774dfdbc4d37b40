"""Learner benchmark (issue: foundation): ``python bench/bench_learner.py [--quick]``.

1. Gradient steps/s of V-RACER + ReF-ER at B = 256 on one core, replay full (2^18 states,
   HalfCheetah sizes: 17 observations, 6 actions, episodes of 1000 steps), median of blocks;
   in the same run the bare MLP update that the machine notes use as reference (17-128-128-13,
   Adam, MSE, B = 256), so that the two can be compared as a ratio on a noisy machine.
2. End-to-end environment steps/s on HalfCheetah-v5 in one process, while training (1 gradient
   step per environment step) and before training starts (acting only).
3. Memory of a full 2^18 replay: resident memory added by allocating and filling it, against
   the raw bytes of its columns.

Writes bench/results/learner.json.
"""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path

import numpy as np
import torch
from common import median, rate, synthetic_episode, write

from hpc_refer.config import build_config
from hpc_refer.learner import Learner
from hpc_refer.metrics import RunDirectory
from hpc_refer.parallel import SerialReducer
from hpc_refer.training import make_learner, train_local

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


def bench_gradient_steps(learner: Learner, n: int, repeats: int) -> dict:
    learner.update_start(learner.replay.size, 0)
    for _ in range(50):
        learner.train_step()
    steps = rate(learner.train_step, n, repeats)
    net = torch.nn.Sequential(torch.nn.Linear(17, 128), torch.nn.Tanh(),
                              torch.nn.Linear(128, 128), torch.nn.Tanh(),
                              torch.nn.Linear(128, 13))
    opt = torch.optim.Adam(net.parameters(), lr=1e-4)
    x, y = torch.randn(256, 17), torch.randn(256, 13)

    def mlp_update() -> None:
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()

    mlp = rate(mlp_update, n, repeats)
    return {"vracer_steps_per_s": steps, "vracer_median": median(steps),
            "mlp_updates_per_s": mlp, "mlp_median": median(mlp),
            "vracer_over_mlp": median(steps) / median(mlp)}


def bench_end_to_end(steps: int, tmp: Path) -> dict:
    out = {}
    for label, start in (("training", 2000), ("acting_only", 10**9)):
        cfg = build_config({"run": {"env": "HalfCheetah-v5", "steps": steps,
                                    "log_every": steps},
                            "replay": {"size": 2**18, "learn_start": min(start, 2**18)}})
        run = RunDirectory(tmp / label, cfg, quiet=True)
        t = time.perf_counter()
        train_local(cfg, run)
        run.close()
        out[f"{label}_env_steps_per_s"] = steps / (time.perf_counter() - t)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short blocks (a smoke run)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    n, repeats, e2e = (50, 3, 3000) if args.quick else (500, 7, 12000)
    memory = bench_memory(2**18)
    learner = memory.pop("learner")
    grads = bench_gradient_steps(learner, n, repeats)
    del learner
    gc.collect()
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        e2e_rates = bench_end_to_end(e2e, Path(tmp))
    path = write("learner", {"gradient": grads, "end_to_end": e2e_rates, "memory": memory,
                             "targets": {"vracer_steps_per_s": 500, "memory_ratio": 1.5}})
    print(f"V-RACER gradient steps/s (B=256, one core): median {grads['vracer_median']:.0f} "
          f"(bare MLP update {grads['mlp_median']:.0f}/s, ratio {grads['vracer_over_mlp']:.2f})")
    print(f"end to end HalfCheetah-v5: {e2e_rates['training_env_steps_per_s']:.0f} steps/s "
          f"training, {e2e_rates['acting_only_env_steps_per_s']:.0f} steps/s acting only")
    print(f"replay 2^18 states: {memory['rss_added_bytes'] / 2**20:.1f} MiB resident for "
          f"{memory['column_bytes'] / 2**20:.1f} MiB of columns (x{memory['ratio']:.2f})")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
