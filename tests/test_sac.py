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
from deterministic_batches import gaussian_policy_batch
from torch.distributions import Normal, TransformedDistribution
from torch.distributions.transforms import TanhTransform

from hpc_refer.algorithms.kit.base import ReferTerms, TensorBatch
from hpc_refer.algorithms.kit.networks import flat_state, gaussian_log_prob
from hpc_refer.algorithms.kit.soft import (
    soft_actor_loss,
    soft_target,
    squashed_log_prob,
    temperature_loss,
)
from hpc_refer.algorithms.kit.step import EagerStep
from hpc_refer.algorithms.registry import ALGORITHMS, make_algorithm
from hpc_refer.algorithms.sac import SAC
from hpc_refer.algorithms.tables.sac import SACConfig
from hpc_refer.config.modes import ActionBounds
from hpc_refer.config.resolve import build_config
from hpc_refer.config.tables import ReferConfig
from hpc_refer.replay.shard import Batch

OBS, ACT = 4, 2


def make_sac(mode: str = "refer", **sac) -> SAC:
    cfg = SACConfig(**{"hidden": (16, 16), **sac})
    algo = SAC(OBS, ACT, cfg, ReferConfig(mode=mode), seed=0)
    algo.set_input_scaling(np.zeros(OBS), np.ones(OBS))
    return algo


def make_batch(algo: SAC, n: int = 6, far: tuple[int, ...] = (), seed: int = 0) -> Batch:
    return gaussian_policy_batch(algo, n, far, seed)


def test_registered_with_its_table_and_a_squashing_policy():
    assert ALGORITHMS[SAC.name] is SAC and SAC.Config is SACConfig and not SAC.Config.retrace
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
    y = soft_target(rew, done, 0.9, q_next, alpha, log_pi_next)
    torch.testing.assert_close(y, torch.tensor([1.0 + 0.9 * (3.0 + 0.5), 2.0]))
    log_pi = torch.tensor([-2.0, 1.0], requires_grad=True)
    q_pi = torch.tensor([4.0, -1.0], requires_grad=True)
    l_pi = soft_actor_loss(alpha.requires_grad_(), log_pi, q_pi)
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
    for module in (algo.actor, algo.critics.q[0], algo.critics.q[1]):
        assert max(g.abs().max().item() for g in grads(module, out.loss)) == 0.0
    near = algo.losses(make_batch(algo, n=1), ReferTerms(1.0, 1.5, 1.0))
    for module in (algo.actor, algo.critics.q[0]):
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
    c = {b: grads(algo.critics.q[0], o.loss) for b, o in outs.items()}
    for c0, cb in zip(c[0.0], c[0.3], strict=True):
        torch.testing.assert_close(cb, c0)


def test_a_step_moves_the_targets_by_polyak_and_tunes_alpha():
    algo = make_sac(tau=0.2)
    with torch.no_grad():
        for p in algo.critics.targets[0].parameters():
            p.add_(0.5)
    old = [p.detach().clone() for p in algo.critics.targets[0].parameters()]
    alpha0 = algo.temperature.log_alpha.item()
    result = EagerStep(algo)(make_batch(algo), ReferTerms(0.5, 2.0, 1.0), 0)
    for p_old, p_new, p_online in zip(old, algo.critics.targets[0].parameters(),
                                      algo.critics.q[0].parameters(), strict=True):
        torch.testing.assert_close(p_new, 0.8 * p_old + 0.2 * p_online)
    assert algo.temperature.log_alpha.item() != alpha0
    assert {"loss_q", "loss_pi", "kl", "near_fraction", "entropy", "alpha"} <= set(result.stats)
    assert result.value is None and np.isfinite(result.error).all()


def test_the_compiled_step_draws_the_eager_steps_noise():
    """Three steps, the generator seeded alike before each: the compiled step (torch's
    generator inside the graph, ``fallback_random``) moves the weights as the eager one."""
    cfg = build_config({"run": {"algorithm": SAC.name}, SAC.name: {"hidden": [16, 16],
                                                                  "batch": 8}})
    from hpc_refer.loop.learner import make_step

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
    from hpc_refer.run.main import main

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
    from hpc_refer.envs.registry import SolverSpec, make_driver
    from hpc_refer.run.roles import make_actor

    cfg = build_config({"run": {"algorithm": SAC.name, "action_bounds": "clip",
                                "chunk_len": 50}, SAC.name: {"hidden": [8]}})
    env = make_driver(SolverSpec("Pendulum-v1"), None)
    sent: list[np.ndarray] = []
    step = env.step
    monkeypatch.setattr(env, "step", lambda a: sent.append(np.array(a)) or step(a))
    actor = make_actor(cfg, env, SAC.behaviour_policy(env.obs_dim, env.act_dim,
                                                      cfg.algorithm).program(), 0, 0)
    chunk = None
    while chunk is None:
        chunk, _ = actor.step()
    env.close()
    assert np.abs(chunk.act).max() > 1.0, "the stored actions are the samples u"
    np.testing.assert_allclose(np.array(sent)[: chunk.act.shape[0]], 2.0 * np.tanh(chunk.act),
                               rtol=1e-5, atol=1e-6)


def test_config_bounds_tau_and_alpha_init_with_exact_messages():
    """tau in (0, 1] and alpha_init > 0, each error naming its key, value and allowed range."""
    from hpc_refer.config.modes import ConfigError

    assert SACConfig(tau=1.0).tau == 1.0 and SACConfig(alpha_init=1e-3).alpha_init == 1e-3
    for tau in (0.0, 1.5):
        with pytest.raises(ConfigError) as err:
            SACConfig(tau=tau)
        assert str(err.value) == f"sac.tau = {tau!r} is invalid: allowed values are 0 < tau <= 1"
    with pytest.raises(ConfigError) as err:
        SACConfig(alpha_init=0.0)
    assert str(err.value) == "sac.alpha_init = 0.0 is invalid: allowed values are values > 0"


def test_modules_targets_and_optimizers_as_built():
    """Modules by name, frozen target copies, three fused non-foreach Adams at config.lr."""
    algo = make_sac(lr=1e-2)
    assert algo.modules == {"actor": algo.actor, "critic1": algo.critics.q[0],
                            "critic2": algo.critics.q[1], "target1": algo.critics.targets[0],
                            "target2": algo.critics.targets[1], "temperature": algo.temperature}
    for target, critic in zip(algo.critics.targets, algo.critics.q, strict=True):
        assert target is not critic
        assert not any(p.requires_grad for p in target.parameters())
        assert all(p.requires_grad for p in critic.parameters())
        for a, b in zip(target.parameters(), critic.parameters(), strict=True):
            assert torch.equal(a, b)
    owned = {"actor": list(algo.actor.parameters()),
             "critics": [*algo.critics.q[0].parameters(), *algo.critics.q[1].parameters()],
             "temperature": [algo.temperature.log_alpha]}
    for name, params in owned.items():
        spec = algo.optimizers[name]
        assert isinstance(spec.optimizer, torch.optim.Adam) and spec.lr0 == 1e-2
        (group,) = spec.optimizer.param_groups
        assert group["lr"] == 1e-2 and group["fused"] is True and group["foreach"] is False
        assert [id(p) for p in group["params"]] == [id(p) for p in params], name


def test_critic_target_subtracts_alpha_times_log_pi_next():
    """y = r + gamma (1 - done) (q' - alpha log pi') where alpha / log pi' would differ."""
    y = soft_target(torch.tensor([0.5, 1.0]), torch.tensor([0.0, 0.0]), 0.5,
                      torch.tensor([2.0, -1.0]), torch.tensor(0.5), torch.tensor([2.0, -4.0]))
    torch.testing.assert_close(y, torch.tensor([0.5 + 0.5 * (2.0 - 1.0),
                                                1.0 + 0.5 * (-1.0 + 2.0)]))


def test_squashed_log_prob_sums_the_tanh_correction_over_the_action_axis():
    """On [4, 3, A] inputs the tanh correction is summed over the last (action) axis."""
    torch.manual_seed(1)
    mean, std = torch.randn(4, 3, ACT), torch.rand(4, 3, ACT) + 0.2
    u = mean + std * torch.randn(4, 3, ACT)
    want = TransformedDistribution(Normal(mean, std), [TanhTransform()]).log_prob(
        torch.tanh(u)).sum(-1)
    got = squashed_log_prob(u, mean, std)
    assert got.shape == (4, 3)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_log_std_is_clipped_to_its_range_in_torch_and_numpy():
    """log-std outputs -30 and +5 give sigma exp(-20) and exp(2), in torch and in numpy."""
    actor = make_sac().actor
    last = actor.body.trunk[-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.copy_(torch.tensor([0.3, -0.2, -30.0, 5.0]))
    obs = np.random.default_rng(0).standard_normal((3, OBS)).astype(np.float32)
    want = torch.tensor([math.exp(-20.0), math.exp(2.0)]).expand(3, ACT)
    with torch.no_grad():
        mean, std = actor(torch.from_numpy(obs))
    torch.testing.assert_close(mean, torch.tensor([0.3, -0.2]).expand(3, ACT))
    torch.testing.assert_close(std, want, rtol=1e-5, atol=0.0)
    np_mean, np_std = actor.numpy_policy()(obs[0])
    np.testing.assert_allclose(np_mean, [0.3, -0.2], rtol=1e-6)
    np.testing.assert_allclose(np_std, want[0].numpy(), rtol=1e-5, atol=0.0)


def test_the_critics_minimum_is_of_both_critics_with_a_gradient_to_the_action_only():
    """Elementwise min of two differing critics, with a gradient to the action only."""
    algo = make_sac()
    with torch.no_grad():
        algo.critics.q[1].trunk[-1].weight.mul_(-3.0)
    obs = torch.randn(16, OBS, generator=torch.Generator().manual_seed(2))
    act = torch.tanh(torch.randn(16, ACT, generator=torch.Generator().manual_seed(3)))
    act.requires_grad_()
    with torch.no_grad():
        q1, q2 = algo.critics.q[0](obs, act), algo.critics.q[1](obs, act)
    assert (q1 < q2).any() and (q2 < q1).any()
    q = algo.critics.min_detached(obs, act)
    torch.testing.assert_close(q.detach(), torch.minimum(q1, q2))
    q.sum().backward()
    assert act.grad is not None and act.grad.abs().max() > 0
    assert all(p.grad is None for c in algo.critics.q for p in c.parameters())


def test_loss_terms_compose_the_weighted_critic_actor_and_temperature_losses(monkeypatch):
    """With eps = 0, loss, stats, TD error and per-module gradients match the terms by hand."""
    algo = make_sac(alpha_init=0.4)
    with torch.no_grad():
        algo.critics.q[1].trunk[-1].bias.fill_(0.7)  # the critics differ
    batch = make_batch(algo, n=8, far=(2, 5))
    weight = np.linspace(0.2, 1.6, 8).astype(np.float32)
    batch = batch._replace(weight=weight)
    beta, c_max = 0.4, 2.0
    # eps = 0: u~ = m_w(s), u' = m_w(s'), so the sign of the noise is moot (either is SAC)
    monkeypatch.setattr(torch, "randn_like", torch.zeros_like)
    out = algo.losses(batch, ReferTerms(beta, c_max, 1.0))

    t = TensorBatch.of(batch)
    w = torch.from_numpy(weight)
    log_alpha = algo.temperature.log_alpha
    alpha = log_alpha.detach().exp()
    mean, std = algo.actor(t.obs)
    rho = torch.exp(gaussian_log_prob(t.act, mean, std) - t.log_mu).detach()
    keep = ((rho > 1.0 / c_max) & (rho < c_max)).float()
    assert 0 < keep.sum() < 8, "near and far rows"
    with torch.no_grad():
        m2, s2 = algo.actor(t.next_obs)
        a2 = torch.tanh(m2)
        t1, t2 = algo.critics.targets
        q_next = torch.minimum(t1(t.next_obs, a2), t2(t.next_obs, a2))
        y = t.rew + 0.99 * (1.0 - t.done) * (q_next - alpha * squashed_log_prob(m2, m2, s2))
    act = torch.tanh(t.act)
    q1, q2 = algo.critics.q[0](t.obs, act), algo.critics.q[1](t.obs, act)
    log_pi = squashed_log_prob(mean, mean, std)
    l_pi = alpha * log_pi - torch.minimum(algo.critics.q[0](t.obs, torch.tanh(mean)),
                                          algo.critics.q[1](t.obs, torch.tanh(mean)))
    kl = (torch.log(std / t.mu_std) + (t.mu_std**2 + (t.mu_mean - mean) ** 2) / (2 * std**2)
          - 0.5).sum(-1)
    terms = {"actor": (w * (beta * keep * l_pi + (1 - beta) * kl)).mean(),
             "critic1": (keep * w * 0.5 * (y - q1) ** 2).mean(),
             "critic2": (keep * w * 0.5 * (y - q2) ** 2).mean(),
             "temperature": (-log_alpha * (log_pi.detach() - ACT)).mean()}
    close = dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.loss, sum(terms.values()), **close)
    torch.testing.assert_close(out.error, (y - q1).detach(), **close)
    want = {"loss_q": 0.5 * ((y - q1) ** 2 + (y - q2) ** 2), "loss_pi": l_pi, "kl": kl,
            "entropy": -log_pi, "alpha": alpha.expand(8), "q": q1}
    assert set(out.stats) == {*want, "near_fraction"}
    for k, v in want.items():
        torch.testing.assert_close(out.stats[k].detach(), v.detach(), **close, msg=k)
    assert torch.equal(out.stats["near_fraction"].float(), keep)
    for name, term in terms.items():
        params = list(algo.modules[name].parameters())
        got = torch.autograd.grad(out.loss, params, retain_graph=True)
        for g, h in zip(got, torch.autograd.grad(term, params, retain_graph=True),
                        strict=True):
            torch.testing.assert_close(g, h, rtol=1e-4, atol=1e-6, msg=name)


def test_relu_networks_in_torch_numpy_the_policy_file_and_the_config(tmp_path):
    """sac.activation relu builds ReLU actor and critics; the actors' numpy forward follows
    it (a softsign forward would differ by far more than round-off on these inputs); a
    policy file rebuilds the ReLU actor; any other name is refused naming the allowed."""
    from torch import nn

    from hpc_refer.config.modes import Activation, ConfigError
    from hpc_refer.loop.policy_file import load_policy, save_policy

    algo = make_sac(activation="relu")
    for module in (algo.actor.body, algo.critics.q[0], algo.critics.targets[1]):
        kinds = {type(m) for m in module.trunk}
        assert nn.ReLU in kinds and not any("Softsign" in k.__name__ for k in kinds)
    with torch.no_grad():  # outputs of order one, where softsign and relu part clearly
        algo.actor.body.trunk[-1].weight.mul_(30.0)
    obs = 3.0 * np.random.default_rng(1).standard_normal((5, OBS)).astype(np.float32)
    with torch.no_grad():
        mean, std = (x.numpy() for x in algo.actor(torch.from_numpy(obs)))
    forward = algo.actor.numpy_policy()
    for k in range(5):
        np_mean, np_std = forward(obs[k])
        np.testing.assert_allclose(np_mean, mean[k], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np_std, std[k], rtol=1e-4, atol=1e-6)
    assert make_sac().config.activation is Activation.SOFTSIGN
    cfg = build_config({"run": {"algorithm": SAC.name},
                        SAC.name: {"hidden": [16, 16], "activation": "relu"}})
    path = tmp_path / "policy.h5"
    save_policy(path, algo, cfg.to_dict(), 10, 5)
    saved = load_policy(path).policy
    assert any(isinstance(m, nn.ReLU) for m in saved.body.trunk)
    with torch.no_grad():
        torch.testing.assert_close(saved(torch.from_numpy(obs))[0], torch.from_numpy(mean))
    with pytest.raises(ConfigError) as err:
        SACConfig(activation="tanh")
    assert str(err.value).startswith("sac.activation = 'tanh' is invalid: allowed")
    assert "softsign" in str(err.value) and "relu" in str(err.value)


def test_a_padding_row_adds_nothing_to_the_temperatures_step():
    """Rows of weight 0 (the padding of a recurrent minibatch) take no part in L_alpha: the
    temperature's gradient is the same whatever such a row holds."""
    algo = make_sac()
    batch = make_batch(algo, n=4)._replace(weight=np.array([1, 1, 1, 0], np.float32))
    other = batch._replace(obs=batch.obs.copy())
    other.obs[3] += 5.0

    def alpha_grad(b: Batch) -> torch.Tensor:
        torch.manual_seed(7)
        loss = algo.losses(b, ReferTerms(beta=1.0, c_max=4.0, lr_factor=1.0)).loss
        (g,) = torch.autograd.grad(loss, [algo.temperature.log_alpha])
        return g

    g, g_other = alpha_grad(batch), alpha_grad(other)
    assert g.abs() > 0
    torch.testing.assert_close(g, g_other)


@pytest.mark.parametrize("layer_norm", [False, True])
def test_layer_normalised_critics_normalise_every_hidden_layer(layer_norm):
    """``sac.critic_layer_norm``: each hidden pre-activation of every critic (and target) has
    zero mean and unit variance over its units, per sample, at the start (LayerNorm's
    affine map starts at 1 and 0); without it, no LayerNorm."""
    algo = make_sac(critic_layer_norm=layer_norm)
    obs, act = torch.randn(5, OBS), torch.randn(5, ACT)
    for q in (*algo.critics.q, *algo.critics.targets):
        x, seen = torch.cat([q.normalizer(obs), act], dim=-1), []
        for layer in q.trunk:
            x = layer(x)
            if isinstance(layer, torch.nn.LayerNorm):
                seen.append(x)
        assert len(seen) == (2 if layer_norm else 0)
        for out in seen:
            torch.testing.assert_close(out.mean(-1), torch.zeros(5), atol=1e-5, rtol=0)
            torch.testing.assert_close(out.var(-1, unbiased=False), torch.ones(5), atol=1e-3,
                                       rtol=0)
