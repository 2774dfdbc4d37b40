"""Acting speed on HalfCheetah-v5 (issues 11, point 3, and 35, point 6): MuJoCo alone, an
actor whose policy runs in numpy (what actors do), and the same actor with the policy in torch
(the previous path), interleaved in one run so that their ratio holds on a loaded machine. The
actor's driver is built as a run builds it, with ``run.env_step_timeout``'s default, so each
solver call pays for its deadline (the SIGALRM timer) as in training.

    python bench/bench_actor.py [--steps 5000] [--repeats 5] [--out DIR] [--smoke]

Writes bench/results/actor.json (``--out``: another directory): steps/s (median over repeats)
of each, the ratios, the actor's own cost per step (``actor_overhead_us``: the numpy actor's
time per step less MuJoCo's, median over repeats) and, the figure to compare between
machines and loads, ``overhead_over_mujoco_step``: that cost over one MuJoCo step, each
repeat's own ratio, their median; and the load average before and after. ``--smoke``: 200
steps, one repeat (bench/common.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from common import median, parse, smoke, write

from hpc_refer.algorithms.vracer import GaussianPolicyValueNet
from hpc_refer.config.modes import ActionBounds
from hpc_refer.config.tables import NetworkShape, RunConfig
from hpc_refer.envs.driver import TeamDriver
from hpc_refer.envs.gym_env import GymEnv
from hpc_refer.loop.actor import Actor


class TorchPolicyActor(Actor):
    """The actor with mu evaluated by the torch module (one call per step). Its policy is
    feed-forward, so the carry that :meth:`Actor._policy` returns third is None. It is
    built like the numpy actor, from the network's program, and keeps the network."""

    def __init__(self, env: TeamDriver, net: GaussianPolicyValueNet) -> None:
        super().__init__(env, net.program(), ActionBounds.CLIP, seed=0, chunk_len=1000)
        self.net = net

    @torch.inference_mode()
    def _policy(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, None]:
        mean, std = self.net.policy(torch.from_numpy(obs)[None])
        return mean[0].numpy(), std.expand_as(mean)[0].numpy(), None


def actor_rate(torch_policy: bool, steps: int) -> float:
    env = TeamDriver(GymEnv("HalfCheetah-v5"), None, timeout=RunConfig.env_step_timeout)
    net = GaussianPolicyValueNet(env.obs_dim, env.act_dim, NetworkShape((128, 128)), 0.5)
    actor = (TorchPolicyActor(env, net) if torch_policy else
             Actor(env, net.program(), ActionBounds.CLIP, seed=0, chunk_len=1000))
    actor.step()  # the first reset
    t = time.perf_counter()
    for _ in range(steps):
        actor.step()
    rate = steps / (time.perf_counter() - t)
    env.close()
    return rate


def mujoco_rate(steps: int) -> float:
    env = GymEnv("HalfCheetah-v5")
    env.reset(0)
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (steps, env.act_dim))
    t = time.perf_counter()
    for a in actions:
        _, _, status = env.step(a)
        if status:
            env.reset()
    rate = steps / (time.perf_counter() - t)
    env.close()
    return rate


def smoke_runs(out: Path) -> list[list[str]]:
    return [["--steps", "200", "--repeats", "1"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parse(parser, argv, smoke_runs)
    if args.smoke:
        return smoke(main, smoke_runs, args.out)
    torch.set_num_threads(1)
    load0 = os.getloadavg()[0]
    rates: dict[str, list[float]] = {"mujoco": [], "actor_numpy": [], "actor_torch": []}
    for _ in range(args.repeats):
        rates["mujoco"].append(mujoco_rate(args.steps))
        rates["actor_numpy"].append(actor_rate(False, args.steps))
        rates["actor_torch"].append(actor_rate(True, args.steps))
    med = {k: median(v) for k, v in rates.items()}
    overheads = [1e6 / a - 1e6 / m for a, m in zip(rates["actor_numpy"], rates["mujoco"],
                                                      strict=True)]
    ratios = [o * m / 1e6 for o, m in zip(overheads, rates["mujoco"], strict=True)]
    out = {"steps_per_s": med, "samples": rates,
           "numpy_over_torch": med["actor_numpy"] / med["actor_torch"],
           "numpy_actor_over_mujoco": med["actor_numpy"] / med["mujoco"],
           "mujoco_step_us": 1e6 / med["mujoco"], "actor_overhead_us": median(overheads),
           "overhead_over_mujoco_step": median(ratios),
           "env_step_timeout_s": RunConfig.env_step_timeout,
           "load_avg_before": round(load0, 2), "load_avg_after": round(os.getloadavg()[0], 2)}
    path = write("actor", out)
    print(f"MuJoCo alone {med['mujoco']:.0f} steps/s | actor, numpy policy "
          f"{med['actor_numpy']:.0f} | actor, torch policy {med['actor_torch']:.0f} | "
          f"numpy/torch {out['numpy_over_torch']:.2f} | actor overhead "
          f"{out['actor_overhead_us']:.1f} us = {out['overhead_over_mujoco_step']:.2f} of a "
          f"MuJoCo step ({out['mujoco_step_us']:.1f} us) | load {load0:.2f} -> "
          f"{out['load_avg_after']:.2f}; wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
