"""SAC with ReF-ER (issue 24, point 3): the tanh change of variables, the critic target, the
actor's and the temperature's losses against hand computations and torch.distributions;
rho and the KL exact over the stored pre-squash sample; Rules 1 and 2 on the real networks;
the Polyak targets; the eager and the compiled step alike (the noise drawn the same way); a
short learning test."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.distributions import Normal, TransformedDistribution
from torch.distributions.transforms import TanhTransform

from hpc_refer.algorithms import ALGORITHMS, make_algorithm
from hpc_refer.algorithms.base import ReferTerms, TensorBatch
from hpc_refer.algorithms.sac import (
    SAC,
    SACConfig,
    actor_loss,
    critic_target,
    squashed_log_prob,
    temperature_loss,
)
from hpc_refer.algorithms.step import EagerStep
from hpc_refer.config import ActionBounds, ReferConfig, build_config
from hpc_refer.networks import flat_state, gaussian_log_prob
from hpc_refer.replay import Batch

OBS, ACT = 4, 2


def make_sac(mode: str = "refer", **sac) -> SAC:
    cfg = SACConfig(**{"hidden": (16, 16), **sac})
    algo = SAC(OBS, ACT, cfg, ReferConfig(mode=mode), seed=0)
    algo.set_input_scaling(np.zeros(OBS), np.ones(OBS))
    return algo


def make_batch(algo: SAC, n: int = 6, far: tuple[int, ...] = (), seed: int = 0) -> Batch:
    """Rows whose behaviour is the current policy (rho = 1), but for the rows ``far``, whose
    stored mu is shifted by 3 sigma (rho far from 1); the last row is terminal."""
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((n, OBS)).astype(np.float32)
    with torch.no_grad():
        mean, std = (x.numpy() for x in algo.actor(torch.from_numpy(obs)))
    mu_mean = mean.copy()
    mu_mean[list(far)] += 3.0 * std[list(far)]
    act = (mu_mean + std * rng.standard_normal((n, ACT))).astype(np.float32)
    log_mu = gaussian_log_prob(*(torch.from_numpy(x) for x in (act, mu_mean, std))).numpy()
    done = np.zeros(n, np.float32)
    done[-1] = 1.0
    return Batch(np.arange(n), obs, act, mu_mean.astype(np.float32), std.astype(np.float32),
                 log_mu, rng.standard_normal(n).astype(np.float32),
                 rng.standard_normal((n, OBS)).astype(np.float32), done, None,
                 np.ones(n, np.float32))


def test_registered_with_its_table_and_a_squashing_policy():
    assert ALGORITHMS[SAC.name] is SAC and SAC.Config is SACConfig and not SAC.retrace
    cfg = build_config({"run": {"algorithm": SAC.name}})
    assert (cfg.algorithm.hidden, cfg.algorithm.lr, cfg.algorithm.batch, cfg.algorithm.gamma,
            cfg.algorithm.tau) == ((256, 256), 3e-4, 256, 0.99, 0.005)
    assert cfg.action_bounds is ActionBounds.TANH, "its actors always squash"
    algo = make_sac()
    assert algo.target_entropy == -ACT
    assert set(algo.optimizers) == {"actor", "critics", "temperature"}
    assert flat_state(SAC.behaviour_policy(OBS, ACT, algo.config)).size == (
        algo.policy_params().size)


def test_squashed_log_prob_is_torchs_tanh_transformed_gaussian():
    torch.manual_seed(0)
    mean, std = torch.randn(5, ACT), torch.rand(5, ACT) + 0.2
    u = mean + std * torch.randn(5, ACT)
    want = TransformedDistribution(Normal(mean, std), [TanhTransform()]).log_prob(
        torch.tanh(u)).sum(-1)
    torch.testing.assert_close(squashed_log_prob(u, mean, std), want, rtol=1e-4, atol=1e-4)
    big = torch.tensor([[12.0, -15.0]])  # tanh saturates; the stable form stays finite
    assert torch.isfinite(squashed_log_prob(big, torch.zeros(1, 2), torch.ones(1, 2))).all()


def test_critic_target_actor_and_temperature_losses_by_hand():
    rew, done = torch.tensor([1.0, 2.0]), torch.tensor([0.0, 1.0])
    q_next, log_pi_next = torch.tensor([3.0, 5.0]), torch.tensor([-1.0, 4.0])
    alpha = torch.tensor(0.5)
    y = critic_target(rew, done, 0.9, q_next, alpha, log_pi_next)
    torch.testing.assert_close(y, torch.tensor([1.0 + 0.9 * (3.0 + 0.5), 2.0]))
    log_pi = torch.tensor([-2.0, 1.0], requires_grad=True)
    q_pi = torch.tensor([4.0, -1.0], requires_grad=True)
    l_pi = actor_loss(alpha.requires_grad_(), log_pi, q_pi)
    torch.testing.assert_close(l_pi.detach(), torch.tensor([0.5 * -2.0 - 4.0, 0.5 + 1.0]))
    l_pi.sum().backward()
    assert alpha.grad is None, "alpha is held fixed in the actor's loss"
    torch.testing.assert_close(q_pi.grad, -torch.ones(2))
    log_alpha = torch.tensor(math.log(0.5), requires_grad=True)
    l_alpha = temperature_loss(log_alpha, torch.tensor([-3.0, -1.0]), target=-2.0)
    torch.testing.assert_close(l_alpha.detach(), -math.log(0.5) * torch.tensor([-5.0, -3.0]))
    l_alpha.mean().backward()
    assert log_alpha.grad is not None and log_alpha.grad > 0, (
        "the entropy (3 and 1) is above H = -2: a descent step lowers alpha")


def test_rho_and_the_kl_are_exact_over_the_stored_pre_squash_sample():
    """rho of the Gaussians over u equals the ratio of the squashed densities at tanh u (the
    Jacobians cancel), for the stored u of each row."""
    algo = make_sac()
    batch = make_batch(algo, far=(1, 3))
    out = algo.losses(batch, ReferTerms(1.0, 2.0, 1.0))
    t = TensorBatch.of(batch)
    with torch.no_grad():
        mean, std = algo.actor(t.obs)
        ratio = torch.exp(squashed_log_prob(t.act, mean, std)
                          - squashed_log_prob(t.act, t.mu_mean, t.mu_std))
    torch.testing.assert_close(out.rho, torch.clamp(ratio, math.exp(-7), math.exp(7)),
                               rtol=1e-4, atol=1e-6)
    assert out.rho[0] == pytest.approx(1.0, rel=1e-5) and out.rho[1] != pytest.approx(1.0)
    torch.testing.assert_close(out.stats["kl"][0], torch.tensor(0.0), atol=1e-6, rtol=0)


def grads(module: torch.nn.Module, loss: torch.Tensor) -> list[torch.Tensor]:
    module.zero_grad(set_to_none=False)
    loss.backward(retain_graph=True)
    return [p.grad.clone() for p in module.parameters()]


@pytest.mark.parametrize("mode", ["refer", "refer1"])
def test_rule_1_no_actor_and_no_critic_gradient_from_a_far_sample(mode):
    algo = make_sac(mode)
    batch = make_batch(algo, n=1, far=(0,))
    torch.manual_seed(3)
    out = algo.losses(batch, ReferTerms(1.0, 1.5, 1.0))  # beta 1: no KL term either
    assert out.stats["near_fraction"].float().mean() == 0.0
    for module in (algo.actor, algo.critic1, algo.critic2):
        assert max(g.abs().max().item() for g in grads(module, out.loss)) == 0.0
    near = algo.losses(make_batch(algo, n=1), ReferTerms(1.0, 1.5, 1.0))
    for module in (algo.actor, algo.critic1):
        assert max(g.abs().max().item() for g in grads(module, near.loss)) > 0.0


def test_rule_2_weights_the_actor_by_beta_and_adds_the_kl():
    """The actor's gradient at beta is beta g_pi + (1 - beta) g_KL (same noise); the
    critics' gradient does not depend on beta."""
    algo = make_sac()
    batch = make_batch(algo, n=8, far=(2,))
    outs = {}
    for beta in (0.0, 1.0, 0.3):
        torch.manual_seed(5)
        outs[beta] = algo.losses(batch, ReferTerms(beta, 5.0, 1.0))  # c_max 5: all near
    g = {b: grads(algo.actor, o.loss) for b, o in outs.items()}
    for g0, g1, gb in zip(g[0.0], g[1.0], g[0.3], strict=True):
        torch.testing.assert_close(gb, 0.3 * g1 + 0.7 * g0, rtol=1e-4, atol=1e-6)
    c = {b: grads(algo.critic1, o.loss) for b, o in outs.items()}
    for c0, cb in zip(c[0.0], c[0.3], strict=True):
        torch.testing.assert_close(cb, c0)


def test_a_step_moves_the_targets_by_polyak_and_tunes_alpha():
    algo = make_sac(tau=0.2)
    with torch.no_grad():
        for p in algo.target1.parameters():
            p.add_(0.5)
    old = [p.detach().clone() for p in algo.target1.parameters()]
    alpha0 = algo.temperature.log_alpha.item()
    result = EagerStep(algo)(make_batch(algo), ReferTerms(0.5, 2.0, 1.0), 0)
    for p_old, p_new, p_online in zip(old, algo.target1.parameters(),
                                      algo.critic1.parameters(), strict=True):
        torch.testing.assert_close(p_new, 0.8 * p_old + 0.2 * p_online)
    assert algo.temperature.log_alpha.item() != alpha0
    assert {"loss_q", "loss_pi", "kl", "near_fraction", "entropy", "alpha"} <= set(result.stats)
    assert result.value is None and np.isfinite(result.error).all()


def test_the_compiled_step_draws_the_eager_steps_noise():
    """Three steps, the generator seeded alike before each: the compiled step (torch's
    generator inside the graph, ``fallback_random``) moves the weights as the eager one."""
    cfg = build_config({"run": {"algorithm": SAC.name}, SAC.name: {"hidden": [16, 16],
                                                                  "batch": 8}})
    from hpc_refer.learner import make_step

    pair = []
    for compiled in (False, True):
        algo = make_algorithm(cfg, OBS, ACT, seed=1)
        algo.set_input_scaling(np.zeros(OBS), np.ones(OBS))
        pair.append((algo, make_step(algo, None, compiled)))
    for t in range(3):
        batch = make_batch(pair[0][0], n=8, far=(1,), seed=t)
        out = []
        for _, step in pair:
            torch.manual_seed(100 + t)
            out.append(step(batch, ReferTerms(0.7, 2.0, 1.0), t))
        np.testing.assert_allclose(out[1].error, out[0].error, rtol=1e-4, atol=1e-5)
    assert pair[1][1].compiled
    for a, b in zip(pair[0][0].actor.parameters(), pair[1][0].actor.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_sac_learns_pendulum(in_tmp):
    """Plain SAC (refer.mode er) on Pendulum-v1: 6,000 steps lift the return from about
    -1,200 (random) above -700 (the swing-up found: the last episodes' mean)."""
    from hpc_refer.run import main

    args = ["--algorithm", SAC.name, "--env", "Pendulum-v1", "--steps", "6000", "--seed", "0",
            "--refer.mode", "er", f"--{SAC.name}.hidden", "64,64", "--replay.size", "10000",
            "--replay.learn-start", "500", "--log-every", "1000", "--compile", "off",
            "--run-dir", "sac"]
    assert main(args) == 0
    import csv

    with (in_tmp / "sac" / "episodes.csv").open() as f:
        returns = [float(r["return"]) for r in csv.DictReader(f)]
    assert np.mean(returns[:3]) < -900 and np.mean(returns[-5:]) > -700, returns


def test_the_actor_stores_the_pre_squash_sample_and_acts_with_its_tanh(monkeypatch):
    """SAC's actors squash whatever run.action_bounds says: the chunk holds the Gaussian
    samples u (unbounded: some beyond [-1, 1] at the initial sigma of about 1), Pendulum got
    2 tanh(u) (its box is [-2, 2])."""
    from hpc_refer.envs import SolverSpec, make_driver
    from hpc_refer.training import make_actor

    cfg = build_config({"run": {"algorithm": SAC.name, "action_bounds": "clip",
                                "chunk_len": 50}, SAC.name: {"hidden": [8]}})
    env = make_driver(SolverSpec("Pendulum-v1"), None)
    sent: list[np.ndarray] = []
    step = env.step
    monkeypatch.setattr(env, "step", lambda a: sent.append(np.array(a)) or step(a))
    actor = make_actor(cfg, env, 0, 0)
    chunk = None
    while chunk is None:
        chunk, _ = actor.step()
    env.close()
    assert np.abs(chunk.act).max() > 1.0, "the stored actions are the samples u"
    np.testing.assert_allclose(np.array(sent)[: chunk.act.shape[0]], 2.0 * np.tanh(chunk.act),
                               rtol=1e-5, atol=1e-6)
