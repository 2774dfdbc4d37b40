"""The actor: bounded actions, the behaviour policy recorded per step, chunks and episodes,
and what a solver fault does to an episode whose first chunks were already sent."""

from __future__ import annotations

import numpy as np
import pytest
from log_records import own_messages

from hpc_refer.algorithms.ddpg import DDPG
from hpc_refer.algorithms.naf import NAF
from hpc_refer.algorithms.vracer import GaussianPolicyValueNet, VRacer
from hpc_refer.config.modes import ActionBounds
from hpc_refer.config.resolve import build_config
from hpc_refer.config.tables import NetworkShape
from hpc_refer.envs.driver import TeamDriver
from hpc_refer.envs.external import SolverFault
from hpc_refer.envs.gym_env import GymEnv, Status
from hpc_refer.loop.actor import Actor
from hpc_refer.loop.learner import Learner
from hpc_refer.replay.shard import HAS_ACTION, TERMINAL
from hpc_refer.report.records import OPEN, TRUNCATED


def make_actor(bounds: str, chunk_len: int = 1000) -> Actor:
    env = TeamDriver(GymEnv("Pendulum-v1"), None)  # action box [-2, 2], 200-step episodes
    net = GaussianPolicyValueNet(env.obs_dim, env.act_dim, NetworkShape((8,)), 0.5)
    return Actor(env, net.program(), ActionBounds(bounds), seed=0, chunk_len=chunk_len)


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


class ScriptedSolver:
    """A solver whose state is (episode, step) and whose every step earns its step index;
    episodes are truncated after 20 steps. At the (episode, step) pairs of ``faults`` it
    fails as an external solver does on an invalid STATE (:class:`SolverFault`)."""

    obs_dim, act_dim = 2, 1
    low, high = np.array([-1.0]), np.array([1.0])

    def __init__(self, faults: set[tuple[int, int]]) -> None:
        self.faults = faults
        self.episode = 0
        self.t = 0

    def reset(self, seed=None):
        self.episode += 1
        self.t = 0
        return np.array([self.episode, 0.0])

    def step(self, action):
        self.t += 1
        if (self.episode, self.t) in self.faults:
            raise SolverFault(f"external env 0: field 'step' = {self.t + 1}, expected {self.t}")
        status = Status.TRUNCATED if self.t == 20 else Status.CONTINUE
        return np.array([self.episode, float(self.t)]), float(self.t), status

    def close(self):
        pass


def test_a_fault_after_chunks_were_sent_truncates_the_episode_at_its_last_valid_state(caplog):
    """Chunks of 4 steps. Episode 1 faults at step 11 (two chunks sent, steps 9-10 pending),
    episode 2 at step 9 (two chunks sent, nothing pending), episode 3 runs its 20 steps.
    Each faulty episode ends as truncated at its last valid state, which bootstraps; the
    faulty step is stored nowhere, and no episode is joined to the next one."""
    solver = ScriptedSolver({(1, 11), (2, 9)})
    # "Rebuilt" after each fault as itself: its episode count goes on (the rebuild of
    # Python solvers is tested in test_faults.py).
    env = TeamDriver(solver, None, factory=lambda team: solver)
    net = GaussianPolicyValueNet(2, 1, NetworkShape((8,)), 0.5)
    actor = Actor(env, net.program(), ActionBounds.CLIP, seed=0, chunk_len=4)
    cfg = build_config({VRacer.name: {"hidden": [8], "batch": 16},
                        "replay": {"size": 256, "learn_start": 64}})
    learner = Learner(VRacer(2, 1, cfg.algorithm, cfg.refer, 0), cfg, 1)
    chunks, episodes = [], []
    for _ in range(11 + 9 + 20):
        chunk, episode = actor.step()
        if chunk is not None:
            chunks.append(chunk)
            learner.store(chunk)
        if episode is not None:
            episodes.append(episode)
    assert actor.faults == 2 and [e.length for e in episodes] == [20]
    assert [(c.act.shape[0], c.obs.shape[0], c.end) for c in chunks] == [
        (4, 4, OPEN), (4, 4, OPEN), (2, 3, TRUNCATED),  # episode 1: final state (1, 10)
        (4, 4, OPEN), (4, 4, OPEN), (0, 1, TRUNCATED),  # episode 2: final state (2, 8) alone
        (4, 4, OPEN), (4, 4, OPEN), (4, 4, OPEN), (4, 4, OPEN), (4, 5, TRUNCATED)]
    assert np.concatenate([c.rew for c in chunks[:3]]).tolist() == list(range(1, 11))
    err = own_messages(caplog)
    assert len(err) == 2 and all("solver fault" in line and "field 'step'" in line
                                 for line in err)

    replay = learner.replay
    rows = {(int(e), int(t)): r for r, (e, t) in enumerate(replay.obs[:replay.size])}
    assert sorted(rows) == ([(1, t) for t in range(11)] + [(2, t) for t in range(9)]
                            + [(3, t) for t in range(21)]), "faulty steps are never stored"
    assert replay.n_transitions == 10 + 8 + 20
    for episode, last in ((1, 10), (2, 8), (3, 20)):
        chain = [rows[episode, t] for t in range(last + 1)]
        assert replay.prev[chain[0]] == -1, f"episode {episode} joined to the one before"
        assert replay.next[chain[:-1]].tolist() == chain[1:]
        assert replay.prev[chain[1:]].tolist() == chain[:-1]
        final = chain[-1]
        assert replay.next[final] == -1 and not replay.flags[final] & HAS_ACTION
        assert not (replay.flags[chain] & TERMINAL).any()
        assert replay.sampleable(np.array(chain[:-1])).all()
        # Truncation: V-tbc of the final state is its value, which Q-ret bootstraps from.
        assert replay.vtbc[final] == replay.value[final] != 0.0
        q_ret = replay.batch(np.array([chain[-2]])).q_ret[0]
        assert q_ret == pytest.approx(replay.reward_scale * last + cfg.algorithm.gamma
                                      * replay.value[final], rel=1e-6)


@pytest.mark.parametrize("algorithm", [VRacer.name, DDPG.name, NAF.name])
def test_the_numpy_policy_equals_the_module_and_follows_its_loads(algorithm):
    """Actors evaluate mu in numpy on views of the module's parameters: the same values as
    ``policy()`` to float32 round-off, before and after a load of new parameters and new
    state statistics (nothing to rebuild)."""
    import torch

    from hpc_refer.algorithms.kit.networks import flat_state, load_flat_state
    from hpc_refer.algorithms.registry import make_algorithm

    config = build_config({"run": {"algorithm": algorithm}})
    learner = make_algorithm(config, 6, 3, seed=1)
    net = type(learner).behaviour_policy(6, 3, config.algorithm)
    numpy_policy = net.numpy_policy()
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((5, 6)).astype(np.float32)
    for _ in range(2):
        flat = flat_state(learner.behaviour)
        load_flat_state(net, flat + rng.standard_normal(flat.size).astype(np.float32) * 0.3)
        net.body.normalizer.set_stats(rng.standard_normal(6), rng.uniform(0.5, 2.0, 6))
        with torch.no_grad():
            mean, std = net.policy(torch.from_numpy(obs))
        for k in range(len(obs)):
            m, s = numpy_policy(obs[k])
            assert m.dtype == np.float32
            np.testing.assert_allclose(m, mean[k].numpy(), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(np.broadcast_to(s, m.shape),
                                       std.expand_as(mean)[k].numpy(), rtol=1e-5, atol=1e-6)
