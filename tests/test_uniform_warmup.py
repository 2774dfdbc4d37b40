"""``replay.warmup = uniform`` (issue 36.3): the actors' first steps uniform in the action
box, stored so that ReF-ER's rho is exact and Rule 2's gradient is the true KL's.

Each test names its break: the warm-up never ending or not starting, actions outside the box
or not uniform, a restart that forgets the steps left, a wrong log mu (clip or tanh), the
moments of the Gaussian that Rule 2 reads, a run that ignores the option.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from learners import small_learner

from hpc_refer.algorithms.kit.networks import (
    gaussian_kl,
    gaussian_log_prob,
    uniform_behaviour,
)
from hpc_refer.algorithms.kit.program import UNIFORM_STD
from hpc_refer.algorithms.vracer import GaussianPolicyValueNet
from hpc_refer.config.modes import ActionBounds, ConfigError
from hpc_refer.config.resolve import build_config
from hpc_refer.config.tables import NetworkShape
from hpc_refer.envs.driver import TeamDriver
from hpc_refer.envs.gym_env import GymEnv
from hpc_refer.loop.actor import Actor
from hpc_refer.replay.shard import HAS_ACTION
from hpc_refer.report.records import OPEN, Chunk
from hpc_refer.run.roles import warmup_steps


def pendulum_actor(bounds: str, warmup: int, seed: int = 0) -> Actor:
    env = TeamDriver(GymEnv("Pendulum-v1"), None)  # action box [-2, 2]
    net = GaussianPolicyValueNet(env.obs_dim, env.act_dim, NetworkShape((8,)), 0.5)
    return Actor(env, net.program(), ActionBounds(bounds), seed=seed, chunk_len=50,
                 warmup_steps=warmup)


def steps(actor: Actor, n: int) -> list[Chunk]:
    out = []
    for _ in range(n):
        chunk, _ = actor.step()
        if chunk is not None:
            out.append(chunk)
    return out


@pytest.mark.parametrize("bounds", ["clip", "tanh"])
def test_the_first_steps_are_uniform_in_the_box_then_the_policy_acts(bounds):
    actor = pendulum_actor(bounds, warmup=1000)
    chunks = steps(actor, 1100)
    act = np.concatenate([c.act for c in chunks])
    std = np.concatenate([c.mu_std for c in chunks])
    assert (std[:1000] == UNIFORM_STD).all() and (std[1000:] > 0).all()
    a = actor.to_env(act[:1000]) / 2.0  # the box [-2, 2] back to [-1, 1]
    assert np.abs(a).max() <= 1.0
    # uniform on [-1, 1]: mean 0 (sd 0.018 over 1,000 draws), E[a^2] = 1/3 (sd 0.009), and
    # each quarter of the interval holds a quarter of the draws
    assert abs(a.mean()) < 0.08 and abs((a**2).mean() - 1 / 3) < 0.04
    counts = np.histogram(a, bins=4, range=(-1, 1))[0]
    assert (np.abs(counts - 250) < 60).all(), counts


def test_a_restored_actor_takes_the_warm_up_steps_left_and_the_same_actions():
    actor = pendulum_actor("tanh", warmup=120, seed=3)
    steps(actor, 70)
    tree = actor.checkpoint_state()
    assert tree["warmup_left"] == 50
    again = pendulum_actor("tanh", warmup=120, seed=99)
    again.load(actor.params)  # the policy copy is the caller's to restore
    again.restore_state(tree)
    ahead, resumed = steps(actor, 130), steps(again, 130)
    for c, d in zip(ahead, resumed, strict=True):
        np.testing.assert_array_equal(c.act, d.act)
        np.testing.assert_array_equal(c.mu_std, d.mu_std)
    std = np.concatenate([c.mu_std for c in resumed])
    # the 20 steps taken and not sent yet (in the checkpoint), then the 50 left
    assert (std[:70] == UNIFORM_STD).all() and (std[70:] > 0).all()


def test_an_unbounded_action_dimension_is_refused_with_the_option_named():
    env = TeamDriver(GymEnv("Pendulum-v1"), None)
    env.low, env.high = np.array([-np.inf]), np.array([np.inf])
    net = GaussianPolicyValueNet(env.obs_dim, env.act_dim, NetworkShape((8,)), 0.5)
    with pytest.raises(ValueError, match=r"replay\.warmup = uniform needs a bounded action "
                                         r"box.*\[0\] of 1 are unbounded.*= policy"):
        Actor(env, net.program(), ActionBounds.CLIP, seed=0, chunk_len=50, warmup_steps=10)
    Actor(env, net.program(), ActionBounds.CLIP, seed=0, chunk_len=50)  # no warm-up: accepted


def test_the_option_is_checked_and_split_over_actors_and_agents():
    with pytest.raises(ConfigError, match=r"replay\.warmup.*policy, uniform"):
        build_config({"replay": {"warmup": "random"}})
    cfg = build_config({"replay": {"warmup": "uniform", "learn_start": 1000, "size": 4096}})
    assert warmup_steps(cfg, 1, 1) == 1000 and warmup_steps(cfg, 3, 2) == 167
    assert warmup_steps(build_config({"replay": {"learn_start": 1000}}), 1, 1) == 0


@pytest.mark.parametrize("squashed", [False, True])
def test_log_mu_is_the_uniforms_density_of_the_stored_u(squashed):
    """log mu by hand: U(-1, 1)^A has density 2^-A; u = atanh(a) has density
    2^-A prod(1 - tanh(u)^2) (checked against a numerical derivative of atanh's inverse)."""
    rng = np.random.default_rng(0)
    a = rng.uniform(-0.999, 0.999, (200, 3))
    u = torch.from_numpy(np.arctanh(a) if squashed else a)
    log_mu, mean, std = uniform_behaviour(u, squashed)
    h = 1e-6
    du = (np.tanh(u.numpy() + h) - np.tanh(u.numpy() - h)) / (2 * h)  # da/du
    expected = np.log(0.5 * (du if squashed else np.ones_like(du))).sum(-1)
    np.testing.assert_allclose(log_mu.numpy(), expected, rtol=1e-6, atol=1e-6)
    assert (mean == 0).all()
    # the Gaussian of mu's second moment: E[u^2] by Monte Carlo over 10^6 draws
    draws = rng.uniform(-1, 1, 1_000_000)
    second = float(np.mean((np.arctanh(draws) if squashed else draws) ** 2))
    assert std[0, 0].item() ** 2 == pytest.approx(second, rel=0.01)


@pytest.mark.parametrize("squashed", [False, True])
def test_rule_2s_gradient_from_the_moment_gaussian_is_the_true_kls(squashed):
    """d/d(m, s) KL(mu || N(m, s^2)) = -E_mu[d log N(u; m, s)]: the Monte Carlo gradient
    over 4 x 10^5 uniform draws equals the one of KL(N(0, v) || pi) that Rule 2 computes."""
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (400_000, 1))
    u = torch.from_numpy(np.arctanh(np.clip(a, -1 + 1e-6, 1 - 1e-6)) if squashed else a)
    _, mu_mean, mu_std = uniform_behaviour(u[:1], squashed)
    m = torch.tensor([[0.3]], dtype=torch.float64, requires_grad=True)
    s = torch.tensor([[0.7]], dtype=torch.float64, requires_grad=True)
    exact = torch.autograd.grad(gaussian_kl(mu_mean, mu_std, m, s).sum(), (m, s))
    sampled = torch.autograd.grad(-gaussian_log_prob(u, m, s).mean(), (m, s))
    for g, h in zip(exact, sampled, strict=True):
        assert g.item() == pytest.approx(h.item(), rel=0.02)


def test_the_learner_stores_the_exact_log_mu_and_the_moment_gaussian():
    learner = small_learner("sac")  # a squashing algorithm: tanh
    assert learner.squashed
    rng = np.random.default_rng(2)
    m = 20
    act = np.arctanh(rng.uniform(-0.99, 0.99, (m, 2))).astype(np.float32)
    mean = rng.normal(size=(m, 2)).astype(np.float32)
    std = np.full((m, 2), 0.4, np.float32)
    std[:12] = UNIFORM_STD  # the first 12 steps of the warm-up
    mean[:12] = 0.0
    chunk = Chunk(rng.normal(size=(m, 3)).astype(np.float32), act,
                  rng.normal(size=m).astype(np.float32), mean, std, OPEN)
    rows = learner.store(chunk)
    rows = rows[(learner.replay.flags[rows] & HAS_ACTION) != 0]
    replay = learner.replay
    warm, policy = rows[:12], rows[12:]
    expected, _, moment = uniform_behaviour(torch.from_numpy(act[:12]), True)
    np.testing.assert_allclose(replay.log_mu[warm], expected.numpy(), rtol=1e-6)
    np.testing.assert_allclose(replay.mu_std[warm], math.pi / math.sqrt(12), rtol=1e-6)
    assert (replay.mu_mean[warm] == 0).all() and moment[0, 0].item() == pytest.approx(
        math.pi / math.sqrt(12))
    gauss = gaussian_log_prob(*(torch.from_numpy(x[12:]) for x in (act, mean, std)))
    np.testing.assert_allclose(replay.log_mu[policy], gauss.numpy(), rtol=1e-6)
    assert (replay.mu_std[policy] == 0.4).all()


def test_a_run_with_the_uniform_warm_up_stores_it_and_trains(tmp_path):
    """Through the run: SAC on Pendulum, 600 steps, learning from 300: the replay's first 300
    transitions carry the moment Gaussian (tanh: std pi / sqrt(12)), the later ones the
    policy's; the run trains."""
    from hpc_refer.run.learning import train_local

    cfg = build_config({"run": {"algorithm": "sac", "env": "Pendulum-v1", "steps": 600,
                                "compile": "off"},
                        "replay": {"learn_start": 300, "warmup": "uniform"},
                        "sac": {"hidden": [16, 16], "batch": 32}})
    learner = train_local(cfg, None).learner
    replay = learner.replay
    rows = np.flatnonzero(replay.flags[:replay.size] & HAS_ACTION)
    std = replay.mu_std[rows, 0]
    warm = np.isclose(std, math.pi / math.sqrt(12))
    assert warm[:300].all() and warm.sum() == 300
    assert learner.grad_steps >= 200
