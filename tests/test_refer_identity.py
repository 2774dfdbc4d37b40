"""ReF-ER reduces to plain experience replay where its rules cannot act (issue 39, point 3): a
cut-off C = 10^6 (c_max = 1 + C: Rule 1 drops nothing while every rho lies in [1/c_max,
c_max]), beta at 1 (beta_init 1, and eq. 12 keeps it there, its fixed point while no sample
is far: eq. 10's objective weighs 1 and the KL penalty 0) and no annealing (A = 0: c_max and
the learning rate stay put, eq. 13) give exactly plain ER's numbers, step by step, for every
algorithm: the same parameters after every gradient step, bit for bit. A difference would be
a term of ReF-ER that acts where the paper says it does not (a gradient through the penalty,
a mask, an annealed rate).

The replay holds what the initial policy itself would store (mu = pi_w, so rho = 1 at the
first step): a large C alone does not make every sample near, since rho of a behaviour far
from pi_w can be below 10^-6 (the synthetic chunks of tests/test_learner_wiring.py give
TD3, SAC and CrossQ 12 % far samples even at C = 10^6)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from learners import ACT, OBS, small_learner

from hpc_refer.algorithms.registry import ALGORITHMS
from hpc_refer.loop.learner import Learner
from hpc_refer.report.records import TERMINATED, TRUNCATED, Chunk

IDENTITY = {"mode": "refer", "C": 1e6, "A": 0.0, "beta_init": 1.0}
"""ReF-ER with nothing left for its rules to do."""


def parameters(learner: Learner) -> list[np.ndarray]:
    """Every tensor of the algorithm's modules (networks and targets) and optimizers."""
    state = learner.algo.checkpoint_state()
    out: list[np.ndarray] = []

    def visit(tree: object) -> None:
        if isinstance(tree, dict):
            for key in sorted(tree):
                visit(tree[key])
        elif isinstance(tree, np.ndarray | torch.Tensor):
            out.append(np.asarray(tree))
    visit(state)
    return out


def fill_on_policy(learner: Learner, episodes: int = 6, seed: int = 0) -> None:
    """Episodes of 30 steps, alternately terminated and truncated, whose actions the
    learner's own behaviour policy draws (mu = pi_w)."""
    rng = np.random.default_rng(seed)
    for e in range(episodes):
        n, end = 30, TERMINATED if e % 2 else TRUNCATED
        obs = rng.standard_normal((n + (end == TRUNCATED), OBS)).astype(np.float32)
        with torch.no_grad():
            mean, std = learner.algo.behaviour.policy(torch.from_numpy(obs[:n]))
        mean, std = mean.numpy(), np.broadcast_to(std.numpy(), mean.shape).copy()
        act = (mean + std * rng.standard_normal((n, ACT))).astype(np.float32)
        learner.store(Chunk(obs, act, rng.standard_normal(n).astype(np.float32), mean, std,
                            end, e))
    learner.update_start(learner.replay.size, 0)


def steps(learner: Learner, count: int) -> list[list[np.ndarray]]:
    """The parameters after each of ``count`` gradient steps, from a fixed torch generator
    state (SAC, TD3 and CrossQ draw noise in their losses from torch's global generator)."""
    torch.manual_seed(1)
    out = []
    for _ in range(count):
        result = learner.train_step()
        assert float(np.mean(result.stats["near_fraction"])) == 1.0
        out.append(parameters(learner))
    return out


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_refer_without_room_to_act_is_plain_er_step_by_step(algorithm):
    learners = []
    for refer in (IDENTITY, {"mode": "er"}):
        torch.manual_seed(0)
        learner = small_learner(algorithm, refer=refer)
        fill_on_policy(learner)
        learners.append(learner)
    refer, er = learners
    assert refer.refer.c_max == 1.0 + 1e6
    for step, (a, b) in enumerate(zip(steps(refer, 12), steps(er, 12), strict=True)):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y, err_msg=f"{algorithm}, after step {step + 1}")
    assert refer.refer.beta == 1.0 and refer.refer.c_max == 1.0 + 1e6
    assert refer.replay.n_far == 0
