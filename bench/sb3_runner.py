"""One Stable-Baselines3 run for bench/sample_efficiency.py, in files a run directory of
hpc_refer would hold, so that one reader compares both:

    python bench/sb3_runner.py {sac,td3,crossq,crossq-256} ENV_ID STEPS SEED RUN_DIR
        [--eval-every N] [--eval-episodes K] [--learning-starts N] [--critic-width W]
    python bench/sb3_runner.py --smoke [--out DIR]

writes ``RUN_DIR/episodes.csv`` (env_step, rank, return, length, wall_s: every training
episode, at the step where it ended), ``RUN_DIR/eval.csv`` (the deterministic policy every
``--eval-every`` steps, ``--eval-episodes`` episodes) and ``RUN_DIR/state.txt`` (finished).
SB3's defaults otherwise (256 x 256, Adam 3e-4 for SAC and 1e-3 for TD3, B = 256, one gradient
step per env step), with ``learning_starts`` 10,000 as the RL Zoo's MuJoCo settings;
``crossq`` is sb3-contrib's CrossQ with its defaults (actor 256 x 256, critics 1024 x 1024,
Adam 1e-3 with beta1 0.5, policy delay 3), ``crossq-256`` the same with 256 x 256 critics
(``--critic-width W``: W x W critics for either).
Needs the ``bench`` extra (``pip install -e ".[bench]"``). ``--smoke`` (bench/common.py): SAC on
Pendulum-v1, 300 steps from 100, one evaluation episode every 150 steps, in DIR/sb3-sac (the
run's files, no JSON).
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from common import parse, smoke
from stable_baselines3 import SAC, TD3
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.noise import NormalActionNoise

FIELDS = ("env_step", "rank", "return", "length", "wall_s")


class Recorder(BaseCallback):
    """Writes every finished training episode, and evaluation rounds of the mean policy."""

    def __init__(self, run_dir: Path, env_id: str, seed: int, eval_every: int,
                 eval_episodes: int) -> None:
        super().__init__()
        self.t0 = time.perf_counter()
        self.episodes = (run_dir / "episodes.csv").open("w", newline="")
        self.evals = (run_dir / "eval.csv").open("w", newline="")
        self.writer, self.eval_writer = csv.writer(self.episodes), csv.writer(self.evals)
        self.writer.writerow(FIELDS)
        self.eval_writer.writerow(FIELDS)
        self.ret, self.length = 0.0, 0
        self.eval_env = gym.make(env_id)
        self.seed, self.eval_every, self.eval_episodes = seed, eval_every, eval_episodes

    def _on_step(self) -> bool:
        self.ret += float(self.locals["rewards"][0])
        self.length += 1
        step = self.num_timesteps
        if self.locals["dones"][0]:
            self.writer.writerow((step, 0, f"{self.ret:.6g}", self.length,
                                  f"{time.perf_counter() - self.t0:.3f}"))
            self.episodes.flush()
            self.ret, self.length = 0.0, 0
        if self.eval_every and step % self.eval_every == 0:
            self.evaluate(step)
        return True

    def evaluate(self, step: int) -> None:
        for k in range(self.eval_episodes):
            obs, _ = self.eval_env.reset(seed=10_000 * self.seed + step + k)
            ret, length, done = 0.0, 0, False
            while not done:
                action, _ = self.model.predict(obs, deterministic=True)
                obs, reward, terminated, truncated, _ = self.eval_env.step(action)
                ret, length = ret + float(reward), length + 1
                done = terminated or truncated
            self.eval_writer.writerow((step, 0, f"{ret:.6g}", length,
                                       f"{time.perf_counter() - self.t0:.3f}"))
        self.evals.flush()

    def _on_training_end(self) -> None:
        self.episodes.close()
        self.evals.close()
        self.eval_env.close()


def crossq() -> type[BaseAlgorithm]:
    """sb3-contrib's CrossQ (imported when asked for: the ``bench`` extra holds it)."""
    from sb3_contrib import CrossQ

    return CrossQ


ALGORITHMS: dict[str, tuple[Any, dict[str, Any]]] = {
    "sac": (lambda: SAC, {}),
    "td3": (lambda: TD3, {}),
    "crossq": (crossq, {}),
    "crossq-256": (crossq, {"policy_kwargs": {"net_arch": {"pi": [256, 256],
                                                           "qf": [256, 256]}}}),
}
"""Each runner's algorithm (a function that imports its class) and its keywords beyond SB3's
defaults."""


def smoke_runs(out: Path) -> list[list[str | Path]]:
    return [["sac", "Pendulum-v1", "300", "0", out / "sb3-sac", "--eval-every", "150",
             "--eval-episodes", "1", "--learning-starts", "100"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("algorithm", choices=tuple(ALGORITHMS))
    parser.add_argument("env_id")
    parser.add_argument("steps", type=int)
    parser.add_argument("seed", type=int)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--eval-every", type=int, default=10_000)
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--learning-starts", type=int, default=10_000)
    parser.add_argument("--critic-width", type=int, default=None,
                        help="CrossQ's critics W x W (default: the algorithm's)")
    args = parse(parser, argv, smoke_runs)
    if args.smoke:
        return smoke(main, smoke_runs, args.out)
    torch.set_num_threads(1)
    args.run_dir.mkdir(parents=True, exist_ok=False)
    env = gym.make(args.env_id)
    kwargs: dict[str, Any] = {"learning_starts": args.learning_starts, "seed": args.seed,
                              "device": "cpu", "verbose": 0}
    if args.algorithm == "td3":
        n = env.action_space.shape[0]
        kwargs["action_noise"] = NormalActionNoise(np.zeros(n), 0.1 * np.ones(n))
    cls, extra = ALGORITHMS[args.algorithm]
    if args.critic_width is not None:
        if not args.algorithm.startswith("crossq"):
            parser.error("--critic-width is CrossQ's")
        width = [args.critic_width] * 2
        extra = {"policy_kwargs": {"net_arch": {"pi": [256, 256], "qf": width}}}
    model = cls()("MlpPolicy", env, **kwargs, **extra)
    recorder = Recorder(args.run_dir, args.env_id, args.seed, args.eval_every,
                        args.eval_episodes)
    model.learn(total_timesteps=args.steps, callback=recorder)
    (args.run_dir / "state.txt").write_text("finished\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
