"""V-RACER: Gaussian maths against references and finite differences, the losses' gradients,
Rule 1 on the real network, and seeded determinism of training."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from hpc_refer.algorithms.kit.base import ReferTerms
from hpc_refer.algorithms.kit.networks import Softsign, gaussian_kl, gaussian_log_prob
from hpc_refer.algorithms.kit.refer import importance_ratio, kl_penalty
from hpc_refer.algorithms.tables.vracer import VRacerConfig
from hpc_refer.algorithms.vracer import VRacer, policy_loss, value_loss
from hpc_refer.config.modes import KLDirection
from hpc_refer.config.resolve import build_config
from hpc_refer.config.tables import ReferConfig, ReplayConfig
from hpc_refer.loop.learner import Learner
from hpc_refer.replay.shard import Batch
from hpc_refer.report.records import TERMINATED, TRUNCATED, Chunk

torch.set_default_dtype(torch.float32)


def test_softsign_value_and_gradient():
    x = torch.linspace(-4, 4, 9, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(Softsign()(x), torch.nn.functional.softsign(x))
    assert torch.autograd.gradcheck(Softsign(), (x,))


def test_log_prob_matches_torch_distributions():
    g = torch.Generator().manual_seed(0)
    a, m = torch.randn(5, 3, generator=g), torch.randn(5, 3, generator=g)
    s = torch.rand(3, generator=g) + 0.2
    ref = torch.distributions.Normal(m, s).log_prob(a).sum(-1)
    torch.testing.assert_close(gaussian_log_prob(a, m, s), ref)


def test_rho_is_the_density_ratio():
    g = torch.Generator().manual_seed(1)
    a, m1, noise = (torch.randn(4, 2, dtype=torch.float64, generator=g) for _ in range(3))
    m2 = m1 + 0.3 * noise
    s1, s2 = torch.tensor([0.5, 0.9], dtype=torch.float64), torch.tensor([0.7, 0.4],
                                                                          dtype=torch.float64)
    dens = lambda m, s: torch.exp(torch.distributions.Normal(m, s).log_prob(a).sum(-1))  # noqa: E731
    rho = importance_ratio(gaussian_log_prob(a, m1, s1), gaussian_log_prob(a, m2, s2))
    assert (rho.log().abs() < 7).all(), "inside the clipping range"
    torch.testing.assert_close(rho, dens(m1, s1) / dens(m2, s2))


def test_kl_value_and_gradient():
    g = torch.Generator().manual_seed(2)
    mp, mq = (torch.randn(3, 4, dtype=torch.float64, generator=g) for _ in range(2))
    sp = (torch.rand(3, 4, dtype=torch.float64, generator=g) + 0.3)
    sq = (torch.rand(4, dtype=torch.float64, generator=g) + 0.3)
    ref = torch.distributions.kl_divergence(torch.distributions.Normal(mp, sp),
                                            torch.distributions.Normal(mq, sq)).sum(-1)
    torch.testing.assert_close(gaussian_kl(mp, sp, mq, sq), ref)
    mq.requires_grad_(True)
    sq.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda m, s: gaussian_kl(mp, sp, m, s), (mq, sq))
    # Penalty direction switch.
    torch.testing.assert_close(kl_penalty(mp, sp, mq, sq, KLDirection.PI_MU),
                               gaussian_kl(mq, sq, mp, sp))


def test_loss_gradients_are_eqs_5_and_9():
    value = torch.tensor([0.3, -1.0], dtype=torch.float64, requires_grad=True)
    log_pi = torch.tensor([-1.2, -0.4], dtype=torch.float64, requires_grad=True)
    rho = torch.tensor([2.0, 0.5], dtype=torch.float64)
    q_ret = torch.tensor([1.0, 1.0], dtype=torch.float64)
    (policy_loss(rho, q_ret, value, log_pi).sum() + value_loss(rho, q_ret, value).sum()).backward()
    adv = q_ret - value.detach()
    torch.testing.assert_close(log_pi.grad, -rho * adv)
    torch.testing.assert_close(value.grad, -torch.clamp(rho, max=1.0) * adv)


def far_and_near_batch(algo: VRacer):
    """Batch of two samples: actions drawn at pi's mean (near) and 6 std away (far)."""
    obs = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    with torch.no_grad():
        _, mean, std = algo.net(torch.from_numpy(obs))
    act = mean.numpy().copy()
    act[1] += 6 * std.numpy()
    mu_std = np.broadcast_to(std.numpy(), act.shape).astype(np.float32)
    log_mu = gaussian_log_prob(torch.from_numpy(act), torch.from_numpy(act),
                               torch.from_numpy(mu_std)).numpy()
    ones = np.ones(2, np.float32)
    return Batch(np.arange(2), obs, act, act.copy(), mu_std, log_mu, ones, obs, 0 * ones, ones,
                 ones)


@pytest.mark.parametrize("mode", ["refer", "refer1"])
def test_far_sample_gives_no_gradient_through_the_network(mode):
    algo = VRacer(4, 2, VRacerConfig(hidden=(8,)), ReferConfig(mode=mode, beta_init=1.0), 0)
    batch = far_and_near_batch(algo)
    terms = ReferTerms(beta=1.0, c_max=5.0, lr_factor=1.0)
    loss, stats, rho, *_ = algo.losses(batch._replace(**{
        k: getattr(batch, k)[1:] for k in Batch._fields}), terms)
    assert rho[0] < 1.0 / terms.c_max, "the sample is far-policy"
    algo.net.zero_grad()
    loss.backward()
    grads = [p.grad.abs().max().item() for p in algo.net.parameters()]
    if mode == "refer1":
        assert max(grads) == 0.0
    else:  # beta = 1: the KL term has weight 0 as well
        assert max(grads) == 0.0 and stats["near_fraction"].float().mean() == 0.0
    algo.net.zero_grad()
    near_loss, *_ = algo.losses(batch._replace(**{k: getattr(batch, k)[:1]
                                                 for k in Batch._fields}), terms)
    near_loss.backward()
    assert max(p.grad.abs().max().item() for p in algo.net.parameters()) > 0.0


def train_losses(seed: int, steps: int = 30) -> list[float]:
    cfg = build_config({VRacer.name: {"hidden": [16, 16], "batch": 16},
                        "replay": {"size": 256, "learn_start": 64}})
    learner = Learner(VRacer(3, 2, cfg.algorithm, cfg.refer, seed), cfg, seed + 1)
    rng = np.random.default_rng(seed)
    for e in range(6):
        n = 20
        end = TERMINATED if e % 2 else TRUNCATED
        learner.store(Chunk(rng.standard_normal((n + (end == TRUNCATED), 3)).astype(np.float32),
                            rng.standard_normal((n, 2)).astype(np.float32),
                            rng.standard_normal(n).astype(np.float32),
                            (0.1 * rng.standard_normal((n, 2))).astype(np.float32),
                            np.full((n, 2), 0.4, np.float32), end, 0))
    learner.update_start(learner.replay.size, 0)
    out = []
    for _ in range(steps):
        s = learner.train_step().stats
        out.append(s["loss_pi"] + s["loss_v"] + s["kl"])
    return out


def test_same_seed_same_losses():
    a, b, c = train_losses(3), train_losses(3), train_losses(4)
    assert a == b
    assert a != c


def test_config_defaults_are_the_papers():
    cfg = build_config({})
    assert cfg.run.algorithm == VRacer.name and isinstance(cfg.algorithm, VRacerConfig)
    assert cfg.algorithm.hidden == (128, 128) and cfg.algorithm.lr == 1e-4
    assert cfg.algorithm.batch == 256 and cfg.algorithm.gamma == 0.995
    assert cfg.replay.size == 2**18 and cfg.replay.start == 2**17
    assert (cfg.refer.C, cfg.refer.D, cfg.refer.A) == (4.0, 0.1, 5e-7)
    assert ReplayConfig(size=100, learn_start=10).start == 10


def test_numpy_values_follow_the_network_through_updates_and_copies():
    """``values`` (numpy views of the parameters) equals the network's V_w(s) to float32
    round-off after an in-place update, after new input scaling, and in a deep copy whose
    parameters then diverge from the original's."""
    algo = VRacer(5, 2, VRacerConfig(hidden=(16, 16)), ReferConfig(), 0)
    obs = np.random.default_rng(1).standard_normal((7, 5)).astype(np.float32)

    def torch_values(a: VRacer) -> np.ndarray:
        with torch.no_grad():
            return a.net(torch.from_numpy(obs))[0].numpy()

    np.testing.assert_allclose(algo.values(obs), torch_values(algo), rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        for p in algo.net.parameters():
            p.add_(0.3)
    algo.set_input_scaling(np.full(5, 0.5), np.full(5, 2.0))
    np.testing.assert_allclose(algo.values(obs), torch_values(algo), rtol=1e-5, atol=1e-6)
    twin = copy.deepcopy(algo)
    with torch.no_grad():
        for p in twin.net.parameters():
            p.mul_(-1.5)
    np.testing.assert_allclose(twin.values(obs), torch_values(twin), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(algo.values(obs), torch_values(algo), rtol=1e-5, atol=1e-6)
    assert not np.allclose(twin.values(obs), algo.values(obs))
