"""Acting with several agents (issue 26, point 2): the actor of agents evaluates the policy
copy once per simulation step on the [N, obs_dim] states; what that saves against one call
per agent, measured on a solver that costs nothing (so the actor's own work is all there is).

    python bench/bench_agents_actor.py [--agents 2 8 32 128] [--steps 2000] [--repeats 5]

For each N: transitions/s of :class:`~hpc_refer.loop.actor.Actor` as it is (one batched numpy
forward per step over its N lanes) and of the same actor with one forward per agent, interleaved
in one run so that their ratio holds on a loaded machine (2 x 128 softsign V-RACER network,
obs_dim 8, act_dim 1, chunks of 256). Writes bench/results/agents_actor.json (``--out``:
another directory). ``--smoke``: N = 2 and 4, 100 steps, one repeat (bench/common.py).
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
from hpc_refer.config.tables import NetworkShape
from hpc_refer.envs.driver import TeamDriver
from hpc_refer.envs.interface import Status
from hpc_refer.loop.actor import Actor

OBS, ACT = 8, 1


class Free:
    """N agents whose simulation costs nothing: random states, zero rewards, 100-step
    episodes."""

    obs_dim, act_dim = OBS, ACT
    low, high = -np.ones(ACT), np.ones(ACT)

    def __init__(self, team: object = None, agents: int = 8) -> None:
        self.n_agents = agents
        self.rng = np.random.default_rng(0)
        self.t = 0
        self.steps = 0

    def reset(self, seed: int | None = None) -> np.ndarray:
        self.t = 0
        return self.rng.standard_normal((self.n_agents, OBS))

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        self.t += 1
        self.steps += 1
        status = Status.TRUNCATED if self.t == 100 else Status.CONTINUE
        return (self.rng.standard_normal((self.n_agents, OBS)), np.zeros(self.n_agents),
                np.full(self.n_agents, int(status)))

    def close(self) -> None:
        """Nothing to release."""


class PerAgentActor(Actor):
    """The actor of agents with one policy call per agent (what batching replaces)."""

    def _policy(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        rows = [super(PerAgentActor, self)._policy(o) for o in obs]
        carry = None if rows[0][2] is None else np.stack([c for _, _, c in rows])
        return np.stack([m for m, _, _ in rows]), np.stack([s for _, s, _ in rows]), carry


def rate(cls: type[Actor], agents: int, steps: int) -> float:
    """Transitions per second of ``steps`` simulation steps."""
    env = TeamDriver(Free(agents=agents), None)
    torch.manual_seed(0)
    net = GaussianPolicyValueNet(OBS, ACT, NetworkShape((128, 128)), 0.5)
    actor = cls(env, net.program(), ActionBounds.CLIP, seed=0, chunk_len=256)
    actor.grant(256)
    t = time.perf_counter()
    while env.env.steps < steps:
        actor.step()
    return steps * agents / (time.perf_counter() - t)


def smoke_runs(out: Path) -> list[list[str]]:
    return [["--agents", "2", "4", "--steps", "100", "--repeats", "1"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[2, 8, 32, 128])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parse(parser, argv, smoke_runs)
    if args.smoke:
        return smoke(main, smoke_runs, args.out)
    torch.set_num_threads(1)
    load_before = os.getloadavg()[0]
    out = {}
    for n in args.agents:
        batched, per_agent = [], []
        for _ in range(args.repeats):
            batched.append(rate(Actor, n, args.steps))
            per_agent.append(rate(PerAgentActor, n, args.steps))
        out[str(n)] = {"batched_transitions_per_s": median(batched),
                       "per_agent_transitions_per_s": median(per_agent),
                       "speedup": median(batched) / median(per_agent)}
        print(f"N = {n}: batched {median(batched):,.0f} transitions/s, one call per agent "
              f"{median(per_agent):,.0f}/s, x{median(batched) / median(per_agent):.2f}")
    print(write("agents_actor", {"steps": args.steps, "repeats": args.repeats,
                                 "load_before": load_before,
                                 "load_after": os.getloadavg()[0], "agents": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
