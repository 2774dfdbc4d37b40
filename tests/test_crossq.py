"""CrossQ with ReF-ER (``hpc_refer/algorithms/crossq.py``, Bhatt et al. 2024): batch
renormalisation by hand (training and evaluation, before and after its warm-up) and against
sb3-contrib's ``BatchRenorm1d``; the losses, gradients and running statistics of one minibatch
against ``sb3_contrib.CrossQ``'s own ``train``, same weights and batch; the statistics that move
with their optimizer's schedule; ReF-ER's rules on it; the numpy policy of the actors. The
checkpoint round trip, compiled = eager, PER and the MPI runs are the generic tests' (every
registered algorithm)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from deterministic_batches import gaussian_policy_batch

from hpc_refer.algorithms.crossq import CrossQ
from hpc_refer.algorithms.kit.base import ReferTerms, TensorBatch
from hpc_refer.algorithms.kit.networks import gaussian_log_prob
from hpc_refer.algorithms.kit.ops import viewed
from hpc_refer.algorithms.kit.program import run_ops
from hpc_refer.algorithms.kit.renorm import (
    BatchRenorm,
    RenormMLP,
    RenormShape,
)
from hpc_refer.algorithms.kit.step import BufferWrites, EagerStep
from hpc_refer.algorithms.registry import ALGORITHMS
from hpc_refer.algorithms.tables.crossq import CrossQConfig
from hpc_refer.config.modes import ActionBounds
from hpc_refer.config.resolve import build_config
from hpc_refer.config.tables import ReferConfig
from hpc_refer.replay.shard import Batch

OBS, ACT = 3, 1
EPS, MOMENTUM = 1e-3, 0.01


def renorm_by_hand(x: np.ndarray, ra_mean: np.ndarray, ra_var: np.ndarray, renorming: bool,
                   scale: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, ...]:
    """Ioffe (2017) eq. 2-3 in sb3-contrib's form, in float64 numpy: the output and the new
    running mean and variance."""
    mu_b, var_b = x.mean(0), x.var(0, ddof=1)
    if renorming:
        running_std = np.sqrt(ra_var + EPS)
        r = np.clip(np.sqrt(var_b + EPS) / running_std, 1 / 3, 3)
        d = np.clip((mu_b - ra_mean) / running_std, -5, 5)
        mean, var = mu_b - d * np.sqrt(var_b) / r, var_b / r**2
    else:
        mean, var = mu_b, var_b
    y = scale * (x - mean) / np.sqrt(var + EPS) + bias
    return y, ra_mean + MOMENTUM * (mu_b - ra_mean), ra_var + MOMENTUM * (var_b - ra_var)


def a_layer(features: int, steps: int, warmup: int = 10, seed: int = 0) -> BatchRenorm:
    rng = np.random.default_rng(seed)
    layer = BatchRenorm(features, RenormShape(MOMENTUM, EPS, warmup))
    with torch.no_grad():
        layer.ra_mean.copy_(torch.from_numpy(rng.normal(0, 2, features).astype(np.float32)))
        layer.ra_var.copy_(torch.from_numpy(rng.uniform(0.01, 9, features).astype(np.float32)))
        layer.scale.copy_(torch.from_numpy(rng.uniform(0.5, 2, features).astype(np.float32)))
        layer.bias.copy_(torch.from_numpy(rng.normal(0, 1, features).astype(np.float32)))
        layer.steps.fill_(steps)
    return layer


@pytest.mark.parametrize(("steps", "renorming"), [(0, False), (10, False), (11, True)])
def test_a_training_batch_by_hand(steps, renorming):
    """Plain batch normalisation through the warm-up (n <= n_warm), then r and d; the
    running statistics move by m toward the batch's, the count by one."""
    layer = a_layer(5, steps)
    x = np.random.default_rng(1).normal(1.0, 3.0, (16, 5)).astype(np.float32)
    x[:, 0] *= 40.0  # a feature far from its running statistics: r and d are clipped there
    want = renorm_by_hand(x.astype(np.float64), *(layer.ra_mean.double().numpy(),
                                                  layer.ra_var.double().numpy()), renorming,
                          layer.scale.detach().double().numpy(),
                          layer.bias.detach().double().numpy())
    y, new = layer.train_forward(torch.from_numpy(x))
    np.testing.assert_allclose(y.detach().numpy(), want[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(new["ra_mean"].numpy(), want[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(new["ra_var"].numpy(), want[2], rtol=1e-5, atol=1e-6)
    assert new["steps"].item() == steps + 1 and layer.steps.item() == steps, (
        "a training forward returns the new buffers and writes none")


def test_the_evaluation_uses_the_running_statistics_and_numpy_agrees():
    layer = a_layer(4, steps=3)
    x = np.random.default_rng(2).normal(size=(7, 4)).astype(np.float32)
    want = (layer.scale.detach().numpy() * (x - layer.ra_mean.numpy())
            / np.sqrt(layer.ra_var.numpy() + EPS) + layer.bias.detach().numpy())
    np.testing.assert_allclose(layer(torch.from_numpy(x)).detach().numpy(), want, rtol=1e-5,
                               atol=1e-6)
    net = RenormMLP([4, 8, 2], RenormShape(MOMENTUM, EPS, 10))
    net.layers[0] = layer
    from hpc_refer.algorithms.kit.networks import Normalizer

    norm = Normalizer(4)
    norm.set_stats(np.full(4, 0.5), np.full(4, 2.0))
    ops = [norm.op(viewed), *net.ops(viewed)]

    def forward(rows: np.ndarray) -> np.ndarray:
        return run_ops(ops, rows)[0]

    with torch.no_grad():
        torch_out = net(norm(torch.from_numpy(x))).numpy()
        net.layers[3].ra_mean.add_(1.0)  # the numpy forward reads views: it follows a load
        after = net(norm(torch.from_numpy(x))).numpy()
    np.testing.assert_allclose(forward(x), after, rtol=1e-5, atol=1e-5)
    assert not np.allclose(torch_out, after)


def test_a_feature_constant_over_the_batch_gives_a_finite_gradient():
    """A dead ReLU unit feeds a zero-variance feature: in the warm-up the unselected
    branch's sqrt(var_B) must not turn the gradient into NaN."""
    for steps in (0, 11):
        layer = a_layer(3, steps)
        x = torch.randn(8, 3)
        x[:, 1] = 0.0
        x.requires_grad_(True)
        y, _ = layer.train_forward(x)
        (y * torch.arange(1.0, 4.0)).sum().backward()
        assert torch.isfinite(x.grad).all() and all(
            torch.isfinite(p.grad).all() for p in layer.parameters())


@pytest.mark.parametrize("steps", [0, 11])
def test_the_layer_matches_sb3_contribs_batch_renorm(steps):
    """Same buffers and parameters, same batch: outputs, gradients (of x, gamma, b) and the
    running statistics after, to float32 round-off."""
    sb3_layers = pytest.importorskip("sb3_contrib.common.torch_layers")
    ours = a_layer(6, steps)
    theirs = sb3_layers.BatchRenorm1d(6, eps=EPS, momentum=MOMENTUM, warmup_steps=10)
    theirs.load_state_dict({"ra_mean": ours.ra_mean, "ra_var": ours.ra_var,
                            "steps": ours.steps, "scale": ours.scale.detach(),
                            "bias": ours.bias.detach()})
    theirs.train()
    x = torch.randn(32, 6, generator=torch.Generator().manual_seed(3)) * 4 + 1
    weights = torch.randn(32, 6, generator=torch.Generator().manual_seed(4))
    got = []
    for layer, forward in ((ours, lambda v: ours.train_forward(v)[0]), (theirs, theirs)):
        v = x.clone().requires_grad_(True)
        y = forward(v)
        (y * weights).sum().backward()
        got.append((y.detach(), v.grad, layer.scale.grad, layer.bias.grad))
    for a, b in zip(*got, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    _, new = ours.train_forward(x)
    for name in ("ra_mean", "ra_var", "steps"):
        torch.testing.assert_close(new[name], getattr(theirs, name), rtol=1e-6, atol=1e-7)


# --- the algorithm ---------------------------------------------------------------------------


def make_crossq(mode: str = "er", **crossq) -> CrossQ:
    cfg = CrossQConfig(**{"hidden": (16, 16), "critic_hidden": (32, 32), **crossq})
    algo = CrossQ(OBS, ACT, cfg, ReferConfig(mode=mode), seed=0)
    algo.set_input_scaling(np.zeros(OBS), np.ones(OBS))
    return algo


def make_batch(algo: CrossQ, n: int = 8, far: tuple[int, ...] = (), seed: int = 0) -> Batch:
    return gaussian_policy_batch(algo, n, far, seed)


def test_registered_with_the_papers_settings():
    assert ALGORITHMS["crossq"] is CrossQ and CrossQ.Config is CrossQConfig
    cfg = build_config({"run": {"algorithm": "crossq"}})
    a = cfg.algorithm
    assert (a.hidden, a.critic_hidden, a.lr, a.adam_beta1, a.batch, a.gamma, a.policy_delay,
            a.renorm_momentum, a.renorm_eps, a.renorm_warmup) == (
        (256, 256), (1024, 1024), 1e-3, 0.5, 256, 0.99, 3, 0.01, 1e-3, 100_000)
    assert cfg.action_bounds is ActionBounds.TANH, "its actors always squash"
    algo = make_crossq()
    assert set(algo.modules) == {"actor", "critic1", "critic2", "temperature"}, "no targets"
    betas = {k: o.optimizer.param_groups[0]["betas"] for k, o in algo.optimizers.items()}
    assert betas == {"actor": (0.5, 0.999), "critics": (0.5, 0.999),
                     "temperature": (0.9, 0.999)}
    assert {k: o.every for k, o in algo.optimizers.items()} == {
        "actor": 3, "critics": 1, "temperature": 3}


def test_the_critics_see_the_current_and_next_pairs_as_one_batch():
    """The critics' new running mean is m times the mean over [s_k; s'] and [a_k; a'] of the
    first layer's inputs (not over s_k alone)."""
    algo = make_crossq()
    batch = make_batch(algo)
    torch.manual_seed(0)
    out = algo.losses(batch, ReferTerms(1.0, 5.0, 1.0))
    torch.manual_seed(0)
    with torch.no_grad():
        m, s = algo.actor.policy(torch.from_numpy(batch.next_obs))
        a_next = torch.tanh(m + s * torch.randn_like(m))
    inputs = torch.cat([torch.cat([torch.from_numpy(batch.obs),
                                   torch.tanh(torch.from_numpy(batch.act))], 1),
                        torch.cat([torch.from_numpy(batch.next_obs), a_next], 1)])
    torch.testing.assert_close(out.updates["critic1.trunk.layers.0.ra_mean"],
                               MOMENTUM * inputs.mean(0))
    assert out.updates["critic2.trunk.layers.0.steps"].item() == 1


@pytest.mark.parametrize("t", [0, 1, 3])
def test_a_network_keeps_its_statistics_while_its_optimizer_rests(t):
    """At t % 3 == 0 the actor and the critics step and both write their running statistics;
    at t = 1 only the critics do."""
    algo = make_crossq()
    actor0 = algo.actor.trunk.layers[0].ra_mean.clone()
    critic0 = algo.critics[0].trunk.layers[0].ra_mean.clone()
    EagerStep(algo)(make_batch(algo), ReferTerms(1.0, 5.0, 1.0), t)
    assert not torch.equal(algo.critics[0].trunk.layers[0].ra_mean, critic0)
    assert torch.equal(algo.actor.trunk.layers[0].ra_mean, actor0) == (t % 3 != 0)
    assert algo.actor.trunk.layers[0].steps.item() == int(t % 3 == 0)


class OtherLearnerOfZeros:
    """A reducer of two learners whose other learner holds zeros: the average halves."""

    size, rank = 2, 0

    def average_(self, flat: np.ndarray) -> None:
        flat *= np.float32(0.5)


def test_learners_keep_the_mean_of_their_running_statistics():
    """With L > 1 every running statistic a step writes is the learners' mean (one
    reduction); the counts are not averaged."""
    alone = make_crossq()
    twin = copy.deepcopy(alone)
    batch = make_batch(alone)
    torch.manual_seed(1)
    EagerStep(alone)(batch, ReferTerms(1.0, 5.0, 1.0), 0)
    torch.manual_seed(1)
    EagerStep(twin, OtherLearnerOfZeros())(batch, ReferTerms(1.0, 5.0, 1.0), 0)  # type: ignore[arg-type]
    layers = [(a, b) for name in alone.modules for a, b in zip(
        alone.modules[name].modules(), twin.modules[name].modules(), strict=True)
        if isinstance(a, BatchRenorm)]
    assert len(layers) == 3 + 3 + 3
    for a, b in layers:
        torch.testing.assert_close(b.ra_mean, a.ra_mean / 2)
        torch.testing.assert_close(b.ra_var, a.ra_var / 2)
        assert b.steps.item() == a.steps.item() == 1


def grads(module: torch.nn.Module, loss: torch.Tensor) -> list[torch.Tensor]:
    module.zero_grad(set_to_none=False)
    loss.backward(retain_graph=True)
    return [p.grad.clone() for p in module.parameters()]


def test_rule_1_no_actor_and_no_critic_gradient_from_a_far_sample():
    algo = make_crossq("refer")
    far = algo.losses(make_batch(algo, n=2, far=(0, 1)), ReferTerms(1.0, 1.5, 1.0))
    assert far.stats["near_fraction"].float().mean() == 0.0
    for module in (algo.actor, *algo.critics):
        assert max(g.abs().max().item() for g in grads(module, far.loss)) == 0.0
    near = algo.losses(make_batch(algo, n=2), ReferTerms(1.0, 1.5, 1.0))
    for module in (algo.actor, *algo.critics):
        assert max(g.abs().max().item() for g in grads(module, near.loss)) > 0.0


def test_rule_2_weights_the_actor_by_beta_and_adds_the_kl_of_the_evaluated_policy():
    algo = make_crossq("refer")
    batch = make_batch(algo, far=(2,))
    outs = {}
    for beta in (0.0, 1.0, 0.3):
        torch.manual_seed(5)
        outs[beta] = algo.losses(batch, ReferTerms(beta, 5.0, 1.0))
    g = {b: grads(algo.actor, o.loss) for b, o in outs.items()}
    for g0, g1, gb in zip(g[0.0], g[1.0], g[0.3], strict=True):
        torch.testing.assert_close(gb, 0.3 * g1 + 0.7 * g0, rtol=1e-4, atol=1e-6)
    with torch.no_grad():
        mean, std = algo.actor.policy(torch.from_numpy(batch.obs))
    rho = torch.exp(gaussian_log_prob(torch.from_numpy(batch.act), mean, std)
                    - torch.from_numpy(batch.log_mu))
    torch.testing.assert_close(outs[1.0].rho, rho, rtol=1e-5, atol=1e-6)


def test_the_actors_numpy_policy_is_the_evaluated_one():
    algo = make_crossq(renorm_warmup=0)
    EagerStep(algo)(make_batch(algo), ReferTerms(1.0, 5.0, 1.0), 0)
    policy = CrossQ.behaviour_policy(OBS, ACT, algo.config)
    from hpc_refer.algorithms.kit.networks import load_flat_state

    load_flat_state(policy, algo.policy_params())
    obs = np.random.default_rng(4).standard_normal((5, OBS)).astype(np.float32)
    mean, std = policy.numpy_policy()(obs)
    with torch.no_grad():
        want = algo.actor.policy(torch.from_numpy(obs))
    np.testing.assert_allclose(mean, want[0].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(std, want[1].numpy(), rtol=1e-5, atol=1e-6)


# --- against sb3_contrib.CrossQ --------------------------------------------------------------


def sb3_model(steps: int, warmup: int):
    """sb3-contrib's CrossQ on Pendulum (3 states, 1 action) with small networks, learning rate
    0 (its train() then moves no weight: its actor loss reads the critics as ours does, before
    their step), every renormalisation's count at ``steps``."""
    import gymnasium as gym
    from sb3_contrib import CrossQ as SB3CrossQ
    from sb3_contrib.common.torch_layers import BatchRenorm1d
    from stable_baselines3.common.logger import configure

    model = SB3CrossQ("MlpPolicy", gym.make("Pendulum-v1"), learning_rate=0.0, batch_size=8,
                      seed=0, policy_kwargs={"net_arch": {"pi": [16, 16], "qf": [32, 32]},
                                             "renorm_warmup_steps": warmup})
    model.set_logger(configure(None, []))
    model.actor.action_dist.epsilon = 0.0  # log(1 - tanh(u)^2 + eps): ours has no eps
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for module in model.policy.modules():
            if isinstance(module, BatchRenorm1d):
                module.steps.fill_(steps)
                module.ra_mean.copy_(torch.randn(module.ra_mean.shape, generator=gen))
                module.ra_var.copy_(torch.rand(module.ra_var.shape, generator=gen) + 0.5)
                module.scale.add_(0.1 * torch.randn(module.scale.shape, generator=gen))
                module.bias.add_(0.1 * torch.randn(module.bias.shape, generator=gen))
    return model


def copy_sb3_weights(model, algo: CrossQ) -> None:
    """sb3's actor (latent BRN-Linear-ReLU x 2, BRN, then the mean and log-std layers) into
    our one trunk of 2 A outputs; its critics qf0, qf1 into critic1, critic2."""
    actor = model.actor
    theirs = list(actor.latent_pi)
    ours = list(algo.actor.trunk.layers)
    with torch.no_grad():
        for a, b in zip(ours[:-1], theirs, strict=True):
            for name, tensor in b.state_dict().items():
                a.state_dict()[name].copy_(tensor)
        last = ours[-1]
        last.weight.copy_(torch.cat([actor.mu.weight, actor.log_std.weight]))
        last.bias.copy_(torch.cat([actor.mu.bias, actor.log_std.bias]))
        for q, qf in zip(algo.critics, (model.critic.qf0, model.critic.qf1), strict=True):
            q.trunk.layers.load_state_dict(qf.state_dict())
        algo.temperature.log_alpha.copy_(model.log_ent_coef[0])


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-4), (torch.float64, 1e-10)])
@pytest.mark.parametrize(("steps", "warmup"), [(0, 100_000), (20, 10)])
def test_losses_gradients_and_statistics_match_sb3_contrib(steps, warmup, dtype, tol):
    """One minibatch, the same weights and noise, plain CrossQ (``refer.mode = er``) against
    ``sb3_contrib.CrossQ.train`` on its delayed step (the actor and the temperature step
    too): the critics' and the actor's loss, every gradient and every running statistic after
    the step agree, in the warm-up and after it. In float64 to 1e-10; in float32 to round-off,
    1e-4 relative to each gradient's largest entry: batch normalisation's backward subtracts
    batch means, so the two sums' orders differ there by absolute, not relative, errors, and
    the two compute log(1 - tanh^2 u) by different formulas (ours 2 (log 2 - u -
    softplus(-2 u)))."""
    pytest.importorskip("sb3_contrib")
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    model = sb3_model(steps, warmup)
    algo = make_crossq(hidden=(16, 16), critic_hidden=(32, 32), renorm_warmup=warmup, batch=8)
    for module in algo.modules.values():
        for m in module.modules():
            if isinstance(m, BatchRenorm):
                m.steps.fill_(steps)
    copy_sb3_weights(model, algo)
    batch = make_batch(algo, n=8, seed=3)
    model.policy.to(dtype)
    model.log_ent_coef.data = model.log_ent_coef.data.to(dtype)
    for net in (model.actor, model.critic):  # (its preprocess_obs casts states to float32)
        net.extract_features = lambda obs, extractor: obs
    for module in algo.modules.values():
        module.to(dtype)
    t = TensorBatch(*(None if x is None else x.to(dtype) for x in TensorBatch.of(batch)))
    samples = ReplayBufferSamples(t.obs, torch.tanh(t.act), t.next_obs, t.done[:, None],
                                  t.rew[:, None])
    model.replay_buffer.sample = lambda *args, **kwargs: samples
    model._n_updates = 2  # its next update is a delayed one (3 % 3 == 0)
    critic_step, sb3_critics = model.critic.optimizer.step, []

    def step_critics(*args, **kwargs):  # its actor loss then adds to the critics' .grad
        sb3_critics.extend(p.grad.clone() for qf in (model.critic.qf0, model.critic.qf1)
                           for p in qf.parameters())
        return critic_step(*args, **kwargs)

    model.critic.optimizer.step = step_critics

    torch.manual_seed(11)
    out = algo.loss_terms(t, 1.0, ReferTerms(1.0, 5.0, 1.0).bounds)
    ours = {name: g for name, g in zip(
        ("actor", "critics", "temperature"),
        (grads(algo.actor, out.loss), [g for q in algo.critics for g in grads(q, out.loss)],
         grads(algo.temperature, out.loss)), strict=True)}
    torch.manual_seed(11)
    model.train(gradient_steps=1, batch_size=8)
    logged = model.logger.name_to_value
    np.testing.assert_allclose(out.stats["loss_q"].mean().item(), logged["train/critic_loss"],
                               rtol=tol)
    np.testing.assert_allclose(out.stats["loss_pi"].mean().item(), logged["train/actor_loss"],
                               rtol=tol)

    sb3_actor = [p.grad for m in model.actor.latent_pi for p in m.parameters()]
    sb3_actor += [torch.cat([model.actor.mu.weight.grad, model.actor.log_std.weight.grad]),
                  torch.cat([model.actor.mu.bias.grad, model.actor.log_std.bias.grad])]
    for got, want in ((ours["actor"], sb3_actor), (ours["critics"], sb3_critics),
                      (ours["temperature"], [model.log_ent_coef.grad[0]])):
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            scale = b.abs().max().item()
            torch.testing.assert_close(a, b.reshape(a.shape), rtol=tol, atol=tol * scale)

    BufferWrites(algo)(out.updates, (True, True, True))  # a step where all are due
    for ours_net, theirs in ((algo.actor.trunk.layers, model.actor.latent_pi),
                             (algo.critics[0].trunk.layers, model.critic.qf0),
                             (algo.critics[1].trunk.layers, model.critic.qf1)):
        for a, b in zip(ours_net, theirs, strict=False):
            if isinstance(a, BatchRenorm):
                for name in ("ra_mean", "ra_var", "steps"):
                    torch.testing.assert_close(getattr(a, name), getattr(b, name),
                                               rtol=tol, atol=tol)


def test_a_short_run_counts_the_statistics_of_every_step(tmp_path):
    """Through the run: CrossQ on Pendulum for 600 steps (learning from step 300, its
    renormalisation past the warm-up): every critic's layer counted every gradient step, the
    actor's every third, and the running statistics moved."""
    from hpc_refer.run.learning import train_local

    cfg = build_config({"run": {"algorithm": "crossq", "env": "Pendulum-v1", "steps": 600,
                                "run_dir": str(tmp_path / "r"), "compile": "off"},
                        "replay": {"learn_start": 300},
                        "crossq": {"hidden": [16, 16], "critic_hidden": [32, 32],
                                   "renorm_warmup": 100, "batch": 32}})
    learner = train_local(cfg, None).learner
    algo, t = learner.algo, learner.grad_steps
    assert isinstance(algo, CrossQ) and t > 100
    layer = algo.critics[0].trunk.layers[0]
    assert layer.steps.item() == t and not torch.equal(layer.ra_var, torch.ones_like(
        layer.ra_var))
    assert algo.actor.trunk.layers[0].steps.item() == len(range(0, t, 3))
