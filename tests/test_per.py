"""Prioritized experience replay (Schaul et al. 2016) as a replay option of every algorithm:
priorities of new, sampled and forgotten rows, the importance weights and their annealing,
and the weights applied to the loss."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from learners import ACT, OBS, small_learner

from hpc_refer.algorithms.kit.base import ReferTerms
from hpc_refer.algorithms.registry import ALGORITHMS
from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.loop.learner import Learner, per_beta_at
from hpc_refer.replay.shard import HAS_ACTION, PriorityConfig, ReplayShard
from hpc_refer.report.records import OPEN, TERMINATED, TRUNCATED, Chunk


def chunk(rng: np.random.Generator, n: int, end, source: int = 0) -> Chunk:
    states = n + (end == TRUNCATED)
    return Chunk(rng.standard_normal((states, OBS)).astype(np.float32),
                 rng.standard_normal((n, ACT)).astype(np.float32),
                 rng.standard_normal(n).astype(np.float32),
                 np.zeros((n, ACT), np.float32), np.full((n, ACT), 0.5, np.float32), end, source)


def per_replay(capacity: int = 64) -> ReplayShard:
    return ReplayShard(capacity, OBS, ACT, 0.99, True, PriorityConfig(alpha=0.6, eps=1e-6))


def test_new_transitions_get_the_largest_priority_and_open_tails_wait():
    rng = np.random.default_rng(0)
    replay = per_replay()
    first = replay.add(chunk(rng, 5, TRUNCATED), 5.0)
    tree = replay.tree
    assert tree is not None
    assert tree.get(first[:5]).tolist() == [1.0] * 5, "max priority (1 on an empty tree)"
    assert tree.get(first[5:]).tolist() == [0.0], "the final state has no action"
    replay.update_priorities(first[:2], np.array([3.0, -0.5]))
    top = (3.0 + 1e-6) ** 0.6
    opened = replay.add(chunk(rng, 4, OPEN, source=1), 5.0)
    assert tree.get(opened[:3]).tolist() == pytest.approx([top] * 3)
    assert tree.get(opened[3:]).tolist() == [0.0], "no successor yet: not sampleable"
    closing = replay.add(chunk(rng, 2, TERMINATED, source=1), 5.0)
    assert tree.get(opened[3:]).tolist() == pytest.approx([top]), "linked now"
    assert tree.get(closing).tolist() == pytest.approx([top] * 2)


def test_forgotten_rows_lose_their_priority_and_are_never_sampled():
    rng = np.random.default_rng(1)
    replay = per_replay(capacity=12)
    old = replay.add(chunk(rng, 8, TERMINATED), 5.0)
    # 6 transitions and the final state: overwrites 3 old rows, the last with the final state
    new = replay.add(chunk(rng, 6, TRUNCATED, source=1), 5.0)
    tree = replay.tree
    assert tree is not None
    assert set(old[:3]) <= set(new), "FIFO reused the rows"
    assert tree.get(new[-1:]).tolist() == [0.0], "a forgotten transition's priority is gone"
    assert tree.total == pytest.approx(float(replay.n_transitions))
    rows = replay.sample_rows(500, np.random.default_rng(2))
    assert ((replay.flags[rows] & HAS_ACTION) != 0).all()
    assert replay.sampleable(rows).all()


def test_importance_weights_are_normalised_by_their_max():
    """w_k = (N P(k))^-beta_IS / max_j w_j over the minibatch."""
    rng = np.random.default_rng(3)
    replay = per_replay()
    rows = replay.add(chunk(rng, 6, TERMINATED), 5.0)
    errors = np.array([0.1, 1.0, 2.0, 0.0, 4.0, 0.5])
    replay.update_priorities(rows, errors)
    p = (np.abs(errors) + 1e-6) ** 0.6
    probs = p / p.sum()
    w = (6 * probs) ** -0.7
    np.testing.assert_allclose(replay.importance_weights(rows, 0.7), w / w.max(), rtol=1e-5)
    uniform = ReplayShard(64, OBS, ACT, 0.99)
    uniform.add(chunk(rng, 6, TERMINATED), 5.0)
    assert uniform.importance_weights(rows, 0.7).tolist() == [1.0] * 6


def test_beta_is_is_annealed_linearly_to_one():
    assert per_beta_at(0, 0.4, 100) == 0.4
    assert per_beta_at(50, 0.4, 100) == pytest.approx(0.7)
    assert per_beta_at(100, 0.4, 100) == 1.0
    assert per_beta_at(10**6, 0.4, 100) == 1.0


def make(algorithm: str) -> Learner:
    """A PER learner (the paper's baseline: plain ER) filled with six episodes."""
    learner = small_learner(algorithm, {"mode": "er"}, sampling="per", per_alpha=0.6,
                            per_beta=0.4)
    rng = np.random.default_rng(4)
    for e in range(6):
        learner.store(chunk(rng, 30, TERMINATED if e % 2 else TRUNCATED, e))
    learner.update_start(learner.replay.size, 0)
    return learner


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_a_step_sets_the_sampled_rows_priorities_from_their_errors(algorithm, monkeypatch):
    learner = make(algorithm)
    seen = []
    original = learner.replay.sample_rows
    monkeypatch.setattr(learner.replay, "sample_rows",
                        lambda b, rng: seen.append(original(b, rng)) or seen[-1])
    batches = []
    original_batch = learner.replay.batch
    monkeypatch.setattr(learner.replay, "batch",
                        lambda rows, beta: batches.append((beta, original_batch(rows, beta)))
                        or batches[-1][1])
    for _ in range(3):
        result = learner.train_step()
    rows = seen[-1]
    tree = learner.replay.tree
    assert tree is not None
    last = {int(r): e for r, e in zip(rows, result.error, strict=True)}  # last write wins
    keys = np.array(sorted(last))
    want = (np.abs([last[k] for k in keys]) + 1e-6) ** 0.6
    np.testing.assert_allclose(tree.get(keys), want, rtol=1e-5)
    assert [b for b, _ in batches] == pytest.approx([per_beta_at(t, 0.4, 1000)
                                                     for t in range(3)])
    weights = batches[-1][1].weight
    assert weights.max() == pytest.approx(1.0) and weights.min() < 1.0


def test_vracer_loss_takes_the_importance_weights():
    """A sample of weight 0 gives no gradient; weight 2 doubles its contribution."""
    learner = make(VRacer.name)
    replay = learner.replay
    rows = replay.sample_rows(8, np.random.default_rng(0))
    algo = learner.algo
    terms = ReferTerms(1.0, 5.0, 1.0)

    def grads(weight: np.ndarray) -> list[torch.Tensor]:
        batch = replay.batch(rows)._replace(weight=weight.astype(np.float32))
        loss, *_ = algo.losses(batch, terms)  # type: ignore[attr-defined]
        algo.net.zero_grad()  # type: ignore[attr-defined]
        loss.backward()
        return [p.grad.clone() for p in algo.net.parameters()]  # type: ignore[attr-defined]

    only_first = grads(np.eye(8)[0])
    first_twice = grads(2 * np.eye(8)[0])
    rest = grads(1.0 - np.eye(8)[0])
    everything = grads(np.ones(8))
    for a, b, c, d in zip(only_first, first_twice, rest, everything, strict=True):
        torch.testing.assert_close(b, 2 * a)
        torch.testing.assert_close(a + c, d, rtol=1e-5, atol=1e-7)
