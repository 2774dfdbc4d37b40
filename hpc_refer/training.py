"""Training loops of the rank roles. A world of one rank runs learner and actor in one process.

In one process (L = 1, E = 1) the loop alternates: one environment step of the actor, then
the gradient steps owed by the learner (``grad_ratio`` per environment step once training
started). At the end of each chunk the learner stores it and the actor takes the learner's
current parameters, exactly as an actor rank does with its learner rank.
"""

from __future__ import annotations

import time
from dataclasses import asdict

import numpy as np

from hpc_refer.actor import Actor
from hpc_refer.algorithms.vracer import StepStats, VRacer
from hpc_refer.config import Config
from hpc_refer.envs.gym_env import GymEnv
from hpc_refer.learner import Learner
from hpc_refer.metrics import RunDirectory, progress_line
from hpc_refer.networks import GaussianPolicyValueNet

CHUNK_LEN = 1_000_000
"""Chunk length of the single-process loop: whole episodes (the MPI loop makes it settable)."""


class IntervalStats:
    """Means of the step diagnostics and rates over one logging interval."""

    def __init__(self) -> None:
        self.reset(0, 0)

    def reset(self, env_steps: int, grad_steps: int) -> None:
        self.sums: dict[str, float] = {}
        self.count = 0
        self.t0 = time.perf_counter()
        self.env0, self.grad0 = env_steps, grad_steps

    def add(self, stats: StepStats) -> None:
        for k, v in asdict(stats).items():
            self.sums[k] = self.sums.get(k, 0.0) + v
        self.count += 1

    def record(self, learner: Learner, env_steps: int) -> dict[str, float | int | None]:
        dt = max(time.perf_counter() - self.t0, 1e-9)
        refer = learner.algo.refer
        replay = learner.replay
        out: dict[str, float | int | None] = {
            "env_step": env_steps,
            "grad_step": learner.grad_steps,
            "env_steps_per_s": (env_steps - self.env0) / dt,
            "grad_steps_per_s": (learner.grad_steps - self.grad0) / dt,
            "beta": refer.beta,
            "c_max": refer.c_max,
            "lr": refer.learning_rate,
            "far_fraction": replay.n_far / max(replay.n_transitions, 1),
            "stored": replay.n_transitions,
            "reward_scale": replay.reward_scale,
        }
        out.update({k: v / self.count for k, v in self.sums.items()} if self.count else {})
        return out


def train_in_one_process(config: Config, env: GymEnv, run: RunDirectory) -> Learner:
    """Train V-RACER + ReF-ER with one actor and one learner in this process."""
    algo = VRacer(env.obs_dim, env.act_dim, config.vracer, config.refer, config.run.seed)
    learner = Learner(algo, config, env.obs_dim, env.act_dim, config.run.seed + 1)
    policy_copy = GaussianPolicyValueNet(env.obs_dim, env.act_dim, config.vracer.hidden,
                                         config.vracer.sigma_init)
    actor = Actor(env, policy_copy, config.vracer.action_bounds, config.run.seed + 2, CHUNK_LEN)
    actor.load(learner.policy())
    total, every = config.run.steps, config.run.log_every
    interval = IntervalStats()
    for env_steps in range(1, total + 1):
        chunk, episode = actor.step()
        if episode is not None:
            run.episode(env_steps, 0, episode.ret, episode.length)
        if chunk is not None:
            learner.store(chunk)
            learner.update_start(learner.replay.size, env_steps)
            actor.load(learner.policy())
        for _ in range(learner.steps_due(env_steps)):
            interval.add(learner.train_step())
        if env_steps % every == 0 or env_steps == total:
            record = interval.record(learner, env_steps)
            run.interval(record)
            recent = float(np.mean(run.recent)) if run.recent else None
            rate = (env_steps - interval.env0) / max(time.perf_counter() - interval.t0, 1e-9)
            run.log(progress_line(env_steps, total, rate, recent, learner.algo.refer.beta,
                                  float(record["far_fraction"] or 0.0), learner.algo.refer.c_max))
            interval.reset(env_steps, learner.grad_steps)
    return learner
