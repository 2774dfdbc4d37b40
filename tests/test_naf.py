"""NAF with ReF-ER: eq. 4 against hand computations, the Q-learning loss and its target
network, Rules 1 and 2 on the network's gradients, the Polyak update, PER weights, the learner
wiring, and a short learning run."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from hpc_refer.algorithms.kit.base import ReferTerms
from hpc_refer.algorithms.kit.networks import gaussian_log_prob, load_flat_state
from hpc_refer.algorithms.kit.refer import importance_ratio, kl_penalty
from hpc_refer.algorithms.kit.step import EagerStep
from hpc_refer.algorithms.naf import NAF, NAFNet, lower_triangular, naf_q
from hpc_refer.algorithms.registry import ALGORITHMS
from hpc_refer.algorithms.tables.naf import NAFConfig
from hpc_refer.config.resolve import build_config
from hpc_refer.config.tables import NetworkShape, ReferConfig
from hpc_refer.loop.learner import Learner
from hpc_refer.replay.shard import Batch
from hpc_refer.report.records import TERMINATED, TRUNCATED, Chunk
from hpc_refer.run.learning import train_local

OBS, ACT = 3, 2
GAMMA = 0.9


def make_naf(mode: str = "refer", **naf) -> NAF:
    cfg = NAFConfig(**{"hidden": (8,), "gamma": GAMMA, **naf})
    return NAF(OBS, ACT, cfg, ReferConfig(mode=mode), seed=0)


def perturb(module: torch.nn.Module, seed: int = 7, scale: float = 0.3) -> None:
    """Add noise to every parameter (online and target networks then differ)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))


def make_batch(algo: NAF, far: list[bool], seed: int = 0) -> Batch:
    """Rows drawn by a behaviour mu_k = N(mu_mean, sigma^2): the action is mu's mean, which is
    m_w(s_k) itself (rho = 1, near) or 6 sigma away from it in every dimension (far)."""
    rng = np.random.default_rng(seed)
    n = len(far)
    obs = rng.standard_normal((n, OBS)).astype(np.float32)
    with torch.no_grad():
        mean, sigma = algo.net.policy(torch.from_numpy(obs))
    shift = np.where(np.array(far)[:, None], 6.0, 0.0) * sigma.numpy()
    act = (mean.numpy() + shift).astype(np.float32)
    mu_std = np.broadcast_to(sigma.numpy(), act.shape).astype(np.float32)
    log_mu = gaussian_log_prob(torch.from_numpy(act), torch.from_numpy(act),
                               torch.from_numpy(mu_std)).numpy()
    return Batch(np.arange(n), obs, act, act.copy(), mu_std, log_mu,
                 rng.standard_normal(n).astype(np.float32),
                 rng.standard_normal((n, OBS)).astype(np.float32),
                 (np.arange(n) % 3 == 2).astype(np.float32), None, np.ones(n, np.float32))


def reference_td(algo: NAF, batch: Batch, keep: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The online outputs V, m, L and 1/B sum_k keep_k 1/2 (y_k - Q(s_k, a_k))^2, written
    out from eq. 4 and the target network's y_k."""
    value, mean, tril = algo.net(torch.from_numpy(batch.obs))
    with torch.no_grad():
        v_next = algo.target(torch.from_numpy(batch.next_obs))[0]
        y = torch.from_numpy(batch.rew) + GAMMA * (1 - torch.from_numpy(batch.done)) * v_next
    q = naf_q(value, mean, tril, torch.from_numpy(batch.act))
    return value, mean, tril, (keep * 0.5 * (y - q).pow(2)).mean()


def grads(algo: NAF, loss: torch.Tensor) -> list[torch.Tensor]:
    algo.net.zero_grad(set_to_none=False)
    loss.backward()
    return [p.grad.clone() for p in algo.net.parameters()]


def test_config_defaults_are_the_paper_eras():
    cfg = build_config({"run": {"algorithm": NAF.name}})
    assert isinstance(cfg.algorithm, NAFConfig)
    assert cfg.replay.size == 2**19 and cfg.replay.start == 2**18
    assert (cfg.algorithm.batch, cfg.algorithm.lr, cfg.algorithm.tau) == (256, 1e-4, 0.01)


def test_registry_behaviour_and_evaluate():
    assert ALGORITHMS[NAF.name] is NAF and NAF.Config.retrace is False
    algo = make_naf()
    perturb(algo.net)
    assert algo.behaviour is algo.net and algo.modules["target"] is not algo.net
    fresh = NAF.behaviour_policy(OBS, ACT, algo.config)
    load_flat_state(fresh, algo.policy_params())
    obs = torch.randn(5, OBS)
    mean, std = fresh.policy(obs)
    torch.testing.assert_close(mean, algo.net(obs)[1])
    torch.testing.assert_close(std, torch.full((ACT,), 0.2))
    assert mean.abs().max() < 1.0, "tanh keeps the mean in the action box"
    act = torch.randn(5, ACT)
    value, log_pi = algo.evaluate(obs.numpy(), act.numpy())
    assert value is None
    ref = torch.distributions.Normal(mean, 0.2).log_prob(act).sum(-1)
    np.testing.assert_allclose(log_pi, ref.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_q_of_eq_4_by_hand_and_positive_definite_p():
    x = torch.tensor([[0.3, -0.7, -0.2]], dtype=torch.float64)  # L00, L10, L11 (pre-exp diag)
    tril = lower_triangular(x, 2)
    l00, l10, l11 = np.exp(0.3), -0.7, np.exp(-0.2)
    np.testing.assert_allclose(tril[0].numpy(), [[l00, 0.0], [l10, l11]])
    v, m, a = 1.5, np.array([0.2, -0.4]), np.array([-0.1, 0.5])
    d = a - m
    p00, p01, p11 = l00**2, l00 * l10, l10**2 + l11**2  # P = L L^T
    q_hand = v - 0.5 * (p00 * d[0] ** 2 + 2 * p01 * d[0] * d[1] + p11 * d[1] ** 2)
    q = naf_q(torch.tensor([v], dtype=torch.float64), torch.from_numpy(m[None]), tril,
              torch.from_numpy(a[None]))
    np.testing.assert_allclose(q.numpy(), [q_hand])

    # Random outputs: P = L L^T is positive definite and L is its Cholesky factor.
    tril = lower_triangular(torch.randn(100, 10, dtype=torch.float64), 4)
    chol = torch.linalg.cholesky(tril @ tril.transpose(-1, -2))  # raises unless P is PD
    torch.testing.assert_close(chol, tril)
    net = NAFNet(OBS, 4, NetworkShape((16,)), 0.2)
    perturb(net, scale=0.5)
    obs = 3.0 * torch.randn(64, OBS)
    with torch.no_grad():
        value, mean, tril = net(obs)
        assert (torch.diagonal(tril, dim1=-2, dim2=-1) > 0).all()
        assert (torch.triu(tril, diagonal=1) == 0).all()
        torch.linalg.cholesky((tril @ tril.transpose(-1, -2)).double())
        torch.testing.assert_close(naf_q(value, mean, tril, mean), value)  # Q(s, m) = V(s)
        a = mean + torch.randn(64, 4)
        q = naf_q(value, mean, tril, a)
        assert (q <= value).all() and (q < value - 1e-3).any()


def test_td_loss_by_hand_uses_the_target_network():
    algo = make_naf("er")
    perturb(algo.net, seed=1)
    assert algo.net(torch.ones(1, OBS))[0] != algo.target(torch.ones(1, OBS))[0]
    batch = make_batch(algo, [False, True, False, False, True, False])
    assert batch.done.sum() == 2
    loss, stats, _, _, error, _ = algo.losses(batch, ReferTerms(1.0, 2.0, 1.0))
    with torch.no_grad():
        v, m, tril = (t.double().numpy() for t in algo.net(torch.from_numpy(batch.obs)))
        v_next = algo.target(torch.from_numpy(batch.next_obs))[0].double().numpy()
        v_online = algo.net(torch.from_numpy(batch.next_obs))[0].double().numpy()
    assert np.abs(v_next - v_online).max() > 0.1, "the two networks differ"
    y = batch.rew + GAMMA * (1.0 - batch.done) * v_next
    q = np.array([v[k] - 0.5 * (batch.act[k] - m[k]) @ tril[k] @ tril[k].T @ (batch.act[k] - m[k])
                  for k in range(len(v))])
    np.testing.assert_allclose(error.numpy(), y - q, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(loss.item(), np.mean(0.5 * (y - q) ** 2), rtol=1e-5)
    np.testing.assert_allclose(stats["loss_q"].mean().item(), loss.item(), rtol=1e-6)
    result = EagerStep(algo)(batch, ReferTerms(1.0, 2.0, 1.0), 0)
    assert result.value is None
    np.testing.assert_allclose(result.error, y - q, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(result.stats["loss_q"], loss.item(), rtol=1e-5)


@pytest.mark.parametrize("mode", ["refer", "refer1", "er", "refer2"])
def test_rule_1_far_sample_gives_no_td_gradient(mode):
    algo = make_naf(mode)
    perturb(algo.net, seed=2)
    batch = make_batch(algo, [True])
    terms = ReferTerms(1.0, 2.0, 1.0)  # beta = 1: the KL term has weight 0 in every mode
    loss, stats, rho, *_ = algo.losses(batch, terms)
    assert rho[0] < 1.0 / terms.c_max and stats["near_fraction"].item() == 0.0
    largest = max(g.abs().max().item() for g in grads(algo, loss))
    if mode in ("refer", "refer1"):
        assert largest == 0.0
    else:
        assert largest > 1e-3
    near_loss = algo.losses(make_batch(algo, [False]), terms)[0]
    assert max(g.abs().max().item() for g in grads(algo, near_loss)) > 1e-3


def test_rule_1_far_sample_keeps_the_penalty_under_refer():
    algo = make_naf("refer")
    perturb(algo.net, seed=3)
    batch = make_batch(algo, [True])
    beta = 0.4
    loss = algo.losses(batch, ReferTerms(beta, 2.0, 1.0))[0]
    _, mean, _ = algo.net(torch.from_numpy(batch.obs))
    kl = kl_penalty(torch.from_numpy(batch.mu_mean), torch.from_numpy(batch.mu_std), mean,
                    algo.net.sigma, algo.refer_config.kl_direction)
    for got, want in zip(grads(algo, loss), grads(algo, (1 - beta) * kl.mean()), strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("mode", ["refer", "refer2"])
def test_rule_2_scales_only_the_mean_path_by_beta(mode):
    """The whole gradient is the backward of output gradients (dV, beta dm_TD - ... , dL):
    V's and L's TD gradients unscaled, the mean's beta * TD + (1 - beta) * KL gradient."""
    algo = make_naf(mode)
    perturb(algo.net, seed=4)
    far = [False, True, False, False, False, False]
    batch = make_batch(algo, far)
    batch = batch._replace(act=batch.act + 0.05)  # a TD gradient through m as well
    beta = 0.3
    loss = algo.losses(batch, ReferTerms(beta, 2.0, 1.0))[0]
    got = grads(algo, loss)

    keep = torch.tensor([0.0 if f and mode == "refer" else 1.0 for f in far])
    value, mean, tril, td = reference_td(algo, batch, keep)
    kl = kl_penalty(torch.from_numpy(batch.mu_mean), torch.from_numpy(batch.mu_std), mean,
                    algo.net.sigma, algo.refer_config.kl_direction).mean()
    g_v, g_m_td, g_l = torch.autograd.grad(td, (value, mean, tril), retain_graph=True)
    (g_m_kl,) = torch.autograd.grad(kl, mean, retain_graph=True)
    assert g_m_td.abs().max() > 1e-3 and g_m_kl.abs().max() > 1e-3 and g_v.abs().max() > 1e-3
    g_m = beta * g_m_td + (1 - beta) * g_m_kl
    want = grads(algo, (value * g_v).sum() + (mean * g_m).sum() + (tril * g_l).sum())
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    # The same thing on the output layer's rows: V (row 0) and L (rows 1 + A ...) get the TD
    # gradient alone, the mean rows beta * TD + (1 - beta) * KL.
    td_only = grads(algo, algo.losses(batch, ReferTerms(1.0, 2.0, 1.0))[0])[-2:]
    kl_only = grads(algo, kl_penalty(
        torch.from_numpy(batch.mu_mean), torch.from_numpy(batch.mu_std),
        algo.net(torch.from_numpy(batch.obs))[1], algo.net.sigma,
        algo.refer_config.kl_direction).mean())[-2:]
    for g, g_td, g_kl in zip(got[-2:], td_only, kl_only, strict=True):
        torch.testing.assert_close(g[0], g_td[0])
        torch.testing.assert_close(g[1 + ACT :], g_td[1 + ACT :])
        torch.testing.assert_close(g[1 : 1 + ACT], beta * g_td[1 : 1 + ACT]
                                   + (1 - beta) * g_kl[1 : 1 + ACT], rtol=1e-5, atol=1e-7)
        assert (g[0] - beta * g_td[0]).abs().max() > 1e-4, "V's gradient is not scaled"


def test_polyak_update_after_a_step():
    algo = make_naf("refer", tau=0.1)
    perturb(algo.target, seed=5)
    old_target = [p.detach().clone() for p in algo.target.parameters()]
    old_online = [p.detach().clone() for p in algo.net.parameters()]
    EagerStep(algo)(make_batch(algo, [False] * 4), ReferTerms(0.5, 2.0, 1.0), 0)
    for t_old, o_old, t_new, o_new in zip(old_target, old_online, algo.target.parameters(),
                                          algo.net.parameters(), strict=True):
        assert not torch.equal(o_old, o_new), "the online network took a step"
        torch.testing.assert_close(t_new, 0.9 * t_old + 0.1 * o_new)


@pytest.mark.parametrize("mode", ["er", "refer"])
def test_per_weight_multiplies_each_sample_loss(mode):
    algo = make_naf(mode)
    perturb(algo.net, seed=6)
    terms = ReferTerms(0.5, 2.0, 1.0)
    batch = make_batch(algo, [False, True])
    batch = batch._replace(act=batch.act + 0.05)
    first = batch._replace(**{k: getattr(batch, k)[:1] for k in Batch._fields
                              if getattr(batch, k) is not None})
    loss = lambda b: algo.losses(b, terms)[0]  # noqa: E731
    g0 = grads(algo, loss(first))  # the first row's gradient alone
    full = grads(algo, loss(batch))  # weights 1, 1: (g0 + g1) / 2
    g1 = [2 * f - a for f, a in zip(full, g0, strict=True)]
    assert max(g.abs().max().item() for g in g1) > 1e-4
    removed = grads(algo, loss(batch._replace(weight=np.array([1.0, 0.0], np.float32))))
    doubled = grads(algo, loss(batch._replace(weight=np.array([1.0, 2.0], np.float32))))
    for a, b, r, d in zip(g0, g1, removed, doubled, strict=True):
        torch.testing.assert_close(r, 0.5 * a)
        torch.testing.assert_close(d, 0.5 * a + b, rtol=1e-4, atol=1e-6)


def test_learner_stores_steps_and_keeps_pre_step_rho():
    cfg = build_config({"run": {"algorithm": NAF.name},
                        NAF.name: {"hidden": [16, 16], "batch": 16, "lr": 1e-2},
                        "replay": {"size": 256, "learn_start": 64}})
    learner = Learner(NAF(OBS, ACT, cfg.algorithm, cfg.refer, 0), cfg, 1)
    algo = learner.algo
    assert isinstance(algo, NAF)
    rng = np.random.default_rng(0)
    for e in range(6):
        n = 20
        end = TERMINATED if e % 2 else TRUNCATED
        learner.store(Chunk(rng.standard_normal((n + (end == TRUNCATED), OBS)).astype(np.float32),
                            rng.standard_normal((n, ACT)).astype(np.float32),
                            rng.standard_normal(n).astype(np.float32),
                            (0.1 * rng.standard_normal((n, ACT))).astype(np.float32),
                            np.full((n, ACT), 0.4, np.float32), end, 0))
    assert learner.replay.n_transitions == 120
    learner.update_start(learner.replay.size, 0)
    seen: dict[str, object] = {}
    step = learner.step

    def spy(batch, terms, t):
        seen["rows"], seen["net"] = batch.rows.copy(), copy.deepcopy(algo.net)
        return step(batch, terms, t)

    learner.step = spy  # type: ignore[assignment]
    replay = learner.replay

    def rho_of(net, rows):
        with torch.no_grad():
            mean, std = net.policy(torch.from_numpy(replay.obs[rows]))
            log_pi = gaussian_log_prob(torch.from_numpy(replay.act[rows]), mean, std)
        return importance_ratio(log_pi, torch.from_numpy(replay.log_mu[rows])).numpy()

    for _ in range(3):
        result = learner.train_step()
        rows = seen["rows"]
        assert isinstance(rows, np.ndarray)
        pre = rho_of(seen["net"], rows)
        np.testing.assert_allclose(replay.rho[rows], pre, rtol=1e-5)
        np.testing.assert_allclose(result.rho, pre, rtol=1e-5)
        assert np.abs(rho_of(algo.net, rows) - pre).max() > 1e-4, "the step moved the mean"
        assert all(np.isfinite(v) for v in result.stats.values())
    assert learner.grad_steps == 3


@pytest.mark.slow
def test_naf_refer_learns_inverted_pendulum(in_tmp):
    """NAF + ReF-ER on InvertedPendulum-v5, 6,000 steps (5,000 gradient steps), one process.

    Settings changed from the paper-era defaults for this short run: lr 1e-3 (also the rate
    of beta, eq. 12), beta_init 1 (with beta = 0 the mean gets no TD gradient until beta has
    grown), replay 8192 with learning from 1000 states (as the V-RACER test).
    Measured (mean of the first 20 episodes -> of the last 10): seed 0: 7.3 -> 376,
    seed 1: 7.7 -> 238, seed 2: 12.2 -> 181, seed 3: 9.2 -> 325, 51-56 s each (two runs
    sharing 2 busy CPU cores). 5,000 steps gave 229, 211, 77, 231; the defaults lr 1e-4 and
    beta_init 0 reached only ~40 after 10,000 steps.
    """
    cfg = build_config({"run": {"env": "InvertedPendulum-v5", "algorithm": NAF.name,
                                "steps": 6000, "seed": 0, "log_every": 1000},
                        NAF.name: {"lr": 1e-3}, "refer": {"mode": "refer", "beta_init": 1.0},
                        "replay": {"size": 8192, "learn_start": 1000}})
    result = train_local(cfg, None)
    rets = np.array([e.ret for e in result.episodes])
    first, last = rets[:20].mean(), rets[-10:].mean()
    assert first < 15.0, "the untrained policy is near random"
    assert last > 3.0 * first and last > 25.0, (first, last)


@pytest.mark.parametrize("mode", ["er", "refer1"])
def test_without_rule_2_the_gradient_is_plain_q_learning(mode):
    """No Rule 2: the mean's path is not scaled (beta = 1 whatever the learner's beta) and
    there is no KL term: the gradient is that of 1/B sum_k keep_k L_Q,k."""
    algo = make_naf(mode)
    perturb(algo.net, seed=5)
    far = [False, True, False, False]
    batch = make_batch(algo, far)
    batch = batch._replace(act=batch.act + 0.05)
    got = grads(algo, algo.losses(batch, ReferTerms(0.3, 2.0, 1.0))[0])
    keep = torch.tensor([0.0 if f and mode == "refer1" else 1.0 for f in far])
    want = grads(algo, reference_td(algo, batch, keep)[3])
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_default_kl_is_kl_of_mu_to_pi():
    """Eq. 11's direction by default: the KL statistic is KL(mu_k || pi_w(.|s_k))."""
    from hpc_refer.algorithms.kit.networks import gaussian_kl

    algo = make_naf("refer")
    perturb(algo.net, seed=6)
    batch = make_batch(algo, [False, True, False])
    batch = batch._replace(mu_std=batch.mu_std * 1.5)
    stats = algo.losses(batch, ReferTerms(0.5, 2.0, 1.0))[1]
    with torch.no_grad():
        mean = algo.net(torch.from_numpy(batch.obs))[1]
        want = gaussian_kl(torch.from_numpy(batch.mu_mean), torch.from_numpy(batch.mu_std),
                           mean, algo.net.sigma)
    torch.testing.assert_close(stats["kl"].detach(), want)
