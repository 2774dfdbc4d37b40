"""The actor: bounded actions, the behaviour policy recorded per step, chunks and episodes."""

from __future__ import annotations

import numpy as np
import pytest

from hpc_refer.actor import Actor
from hpc_refer.envs import TeamDriver
from hpc_refer.envs.gym_env import GymEnv
from hpc_refer.networks import GaussianPolicyValueNet
from hpc_refer.replay import OPEN, TRUNCATED


def make_actor(bounds: str, chunk_len: int = 1000) -> Actor:
    env = TeamDriver(GymEnv("Pendulum-v1"), None)  # action box [-2, 2], 200-step episodes
    net = GaussianPolicyValueNet(env.obs_dim, env.act_dim, (8,), 0.5)
    return Actor(env, net, bounds, seed=0, chunk_len=chunk_len)


@pytest.mark.parametrize(("bounds", "expected"), [
    ("clip", [-2.0, -1.0, 0.0, 1.0, 2.0]),
    ("tanh", list(2.0 * np.tanh([-3.0, -0.5, 0.0, 0.5, 3.0]))),
])
def test_actions_are_mapped_into_the_box(bounds, expected):
    actor = make_actor(bounds)
    u = np.array([-3.0, -0.5, 0.0, 0.5, 3.0])
    mapped = [actor.to_env(np.array([x]))[0] for x in u]
    assert mapped == pytest.approx(expected)


def test_chunks_carry_mu_and_end_at_the_time_limit():
    actor = make_actor("clip", chunk_len=64)
    chunks, episodes = [], []
    for _ in range(200):
        chunk, episode = actor.step()
        if chunk is not None:
            chunks.append(chunk)
        if episode is not None:
            episodes.append(episode)
    assert [c.act.shape[0] for c in chunks] == [64, 64, 64, 8]
    assert [c.end for c in chunks] == [OPEN, OPEN, OPEN, TRUNCATED]
    assert chunks[-1].obs.shape[0] == 9, "the final state follows the last action"
    assert len(episodes) == 1 and episodes[0].length == 200
    assert episodes[0].ret == pytest.approx(sum(float(c.rew.sum()) for c in chunks), rel=1e-5)
    # The stored action is the Gaussian sample (unclipped) and mu its mean and std.
    c = chunks[0]
    z = (c.act - c.mu_mean) / c.mu_std
    assert np.all(np.abs(z) < 6) and np.allclose(c.mu_std, 0.5, atol=1e-5)
