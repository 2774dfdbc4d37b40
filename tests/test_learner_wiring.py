"""The wiring of a real training step, for every algorithm: what the learner computes and
stores must reach the optimizer, the replay and the actors.

Each test names the break it catches: the annealed learning rate never reaching the optimizer,
beta updated from wrong counts, sampled rows not refreshed, the reward scale dropped from
V-tbc or Q-ret, the normaliser not set, the default KL direction swapped, a far count that
double-counts repeated rows.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from learners import ACT, OBS, small_learner

from hpc_refer.algorithms.ddpg import DDPG
from hpc_refer.algorithms.kit.base import ReferTerms
from hpc_refer.algorithms.kit.collectives import SerialReducer
from hpc_refer.algorithms.kit.networks import Normalizer, gaussian_kl, gaussian_log_prob
from hpc_refer.algorithms.kit.refer import beta_update, importance_ratio, kl_penalty
from hpc_refer.algorithms.kit.renorm import BatchRenorm
from hpc_refer.algorithms.kit.step import EagerStep, due
from hpc_refer.algorithms.registry import ALGORITHMS
from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.config.modes import ActionBounds, ConfigError, KLDirection, ReferMode
from hpc_refer.config.resolve import build_config
from hpc_refer.config.tables import ReferConfig
from hpc_refer.envs.diffusion import Diffusion1D
from hpc_refer.envs.driver import TeamDriver
from hpc_refer.loop.actor import Actor
from hpc_refer.loop.learner import Learner, reset_seed
from hpc_refer.replay.near import NearBounds, is_far
from hpc_refer.replay.shard import HAS_ACTION, TERMINAL, Batch
from hpc_refer.report.records import TERMINATED, TRUNCATED, Chunk
from hpc_refer.run.learning import make_learner

ALGOS = sorted(ALGORITHMS)
make = small_learner


def fill(learner: Learner, episodes: int = 6, seed: int = 0, reward_std: float = 2.0) -> None:
    """Episodes of 30 steps, alternately terminated and truncated; mu near and far from the
    initial policy so that both kinds of rows exist."""
    rng = np.random.default_rng(seed)
    for e in range(episodes):
        n = 30
        end = TERMINATED if e % 2 else TRUNCATED
        learner.store(Chunk(
            rng.standard_normal((n + (end == TRUNCATED), OBS)).astype(np.float32),
            (0.3 * rng.standard_normal((n, ACT))).astype(np.float32),
            (reward_std * rng.standard_normal(n) + 1.0).astype(np.float32),
            (rng.choice([0.0, 1.5], size=(n, 1)) * np.ones((1, ACT))).astype(np.float32),
            np.full((n, ACT), 0.3, np.float32), end, e))
    learner.update_start(learner.replay.size, 0)


def recount_far(learner: Learner, c_max: float) -> int:
    """Far-policy transitions of the shard, counted here from its columns (the rule of
    hpc_refer.replay.near)."""
    replay = learner.replay
    used = np.arange(replay.size)
    acts = (replay.flags[used] & HAS_ACTION) != 0
    return int(np.count_nonzero(acts & is_far(replay.rho[used], NearBounds.of(c_max))))


def record_rows(learner: Learner, monkeypatch, rows: np.ndarray | None = None) -> list:
    """Record (or force) the rows that the learner samples."""
    seen: list[np.ndarray] = []
    original = learner.replay.sample_rows

    def sample(batch, rng):
        out = original(batch, rng) if rows is None else rows
        seen.append(out.copy())
        return out

    monkeypatch.setattr(learner.replay, "sample_rows", sample)
    return seen


@pytest.mark.parametrize("algorithm", ALGOS)
def test_beta_follows_eq_12_from_the_recounted_far_fraction(algorithm):
    """beta_{k+1} = (1 - eta) beta_k + eta 1[n_far / N <= D], with n_far recounted from the
    replay's stored rho after each step (A = 0: c_max stays 1 + C)."""
    learner = make(algorithm, refer={"A": 0.0, "beta_rate": 0.05, "D": 0.3, "beta_init": 0.5})
    fill(learner)
    counts: list[tuple[int, int]] = []
    original = learner.refer.update

    def update(n_far: int, n_stored: int) -> None:
        counts.append((n_far, n_stored))
        original(n_far, n_stored)

    learner.refer.update = update  # type: ignore[method-assign]
    for step in range(12):
        beta = learner.refer.beta
        learner.train_step()
        far = recount_far(learner, learner.refer.c_max)
        assert counts[step] == (far, learner.replay.n_transitions)
        fraction = far / learner.replay.n_transitions
        assert learner.refer.beta == pytest.approx(beta_update(beta, fraction, 0.3, 0.05),
                                                   abs=1e-12)
    assert min(far for far, _ in counts) > 0, "the test has far-policy rows"


@pytest.mark.parametrize("algorithm", ALGOS)
@pytest.mark.parametrize("mode", [ReferMode.REFER, ReferMode.ER])
def test_annealed_learning_rate_reaches_every_optimizer(algorithm, mode):
    """Eq. 13: the step t (t = 0, 1, ...) uses eta0_i / (1 + A t) in every optimizer i due at
    t (a delayed one, as TD3's actor, keeps the rate of its last step) under ReF-ER; plain ER
    keeps eta0_i. c_max = 1 + C / (1 + A t) in both."""
    learner = make(algorithm, refer={"A": 0.25, "mode": mode.value})
    fill(learner)
    initial = {k: spec.lr0 for k, spec in learner.algo.optimizers.items()}
    checked = set()
    for t in range(5):
        assert learner.refer.c_max == pytest.approx(1 + 4.0 / (1 + 0.25 * t))
        learner.train_step()
        factor = 1 / (1 + 0.25 * t) if mode is ReferMode.REFER else 1.0
        for (k, spec), now in zip(learner.algo.optimizers.items(), due(learner.algo, t),
                                  strict=True):
            if now:
                checked.add(k)
                for group in spec.optimizer.param_groups:
                    assert group["lr"] == pytest.approx(initial[k] * factor), k
    assert checked == set(initial)


@pytest.mark.parametrize("algorithm", ALGOS)
def test_sampled_rows_get_the_pre_step_rho_and_far_count_is_exact(algorithm, monkeypatch):
    """After a step the sampled rows hold rho under the policy *before* the step, and n_far
    equals a full recount, also when the minibatch repeats rows."""
    learner = make(algorithm)
    fill(learner)
    replay = learner.replay
    candidates = np.flatnonzero(replay.sampleable(np.arange(replay.size)))
    rows = np.repeat(candidates[:16], 2)  # every row twice
    record_rows(learner, monkeypatch, rows)
    before = copy.deepcopy(learner.algo)
    _, log_pi = before.evaluate(replay.obs[rows], replay.act[rows])
    want = importance_ratio(torch.from_numpy(log_pi), torch.from_numpy(replay.log_mu[rows]))
    replay.rho[rows] = 1.0  # make a missing refresh visible
    replay.recount_far(learner.refer.c_max)
    learner.train_step()
    np.testing.assert_allclose(replay.rho[rows], want.numpy(), rtol=1e-5)
    assert replay.n_far == recount_far(learner, learner.refer.c_max)
    assert replay.n_far > 0


def test_vracer_sampled_rows_get_v_and_their_episodes_v_tbc(monkeypatch):
    """V-RACER: sampled rows store the pre-step V_w(s_k); the bootstrap state after them the
    post-step V; V-tbc of their episodes follows eq. 8 from the stored V and rho (with the
    reward scale)."""
    learner = make(VRacer.name)
    fill(learner)
    replay = learner.replay
    candidates = np.flatnonzero(replay.sampleable(np.arange(replay.size)))
    succ = replay.next[candidates]
    before_final = candidates[(succ >= 0) & ((replay.flags[succ] & HAS_ACTION) == 0)]
    forced = np.concatenate([before_final, candidates[::7]])
    seen = record_rows(learner, monkeypatch, forced)
    before = copy.deepcopy(learner.algo)
    scale = replay.reward_scale
    assert scale == pytest.approx(0.5, rel=0.15), "rewards have std 2"
    learner.train_step()
    rows = seen[0]
    np.testing.assert_allclose(replay.value[rows], before.values(replay.obs[rows]), rtol=1e-5,
                               atol=1e-6)
    boot = replay.bootstrap_rows(rows)
    assert boot.size > 0
    with torch.no_grad():
        v_boot = learner.algo.net(torch.from_numpy(replay.obs[boot]))[0].numpy()
    np.testing.assert_allclose(replay.value[boot], v_boot, rtol=1e-5, atol=1e-6)
    # V-tbc of every stored row against a reference loop with the same V, rho and scale.
    vtbc = np.zeros(replay.size)
    for k in sorted(range(replay.size), key=lambda k: -((k - replay.head) % replay.capacity)):
        f = replay.flags[k]
        if f & HAS_ACTION and (f & TERMINAL or replay.next[k] >= 0):
            nxt = 0.0 if f & TERMINAL else vtbc[replay.next[k]]
            q = scale * replay.rew[k] + learner.config.algorithm.gamma * nxt
            vtbc[k] = replay.value[k] + min(1.0, replay.rho[k]) * (q - replay.value[k])
        else:
            vtbc[k] = replay.value[k]
    episode_rows = np.flatnonzero(replay.flags[: replay.size])
    np.testing.assert_allclose(replay.vtbc[episode_rows], vtbc[episode_rows], rtol=2e-4,
                               atol=2e-4)
    q_ret = replay.batch(rows).q_ret
    succ = replay.next[rows]
    term = (replay.flags[rows] & TERMINAL) != 0
    want = scale * replay.rew[rows] + learner.config.algorithm.gamma * np.where(
        term, 0.0, replay.vtbc[np.maximum(succ, 0)])
    np.testing.assert_allclose(q_ret, want, rtol=1e-6)
    batch = replay.batch(rows)
    np.testing.assert_allclose(batch.rew, scale * replay.rew[rows], rtol=1e-6)


@pytest.mark.parametrize("algorithm", ALGOS)
def test_the_normaliser_is_set_everywhere_and_reaches_the_actors(algorithm):
    """After training starts every Normalizer of the algorithm (target networks included)
    holds the replay's state moments, and the actors' parameter vector carries them."""
    learner = make(algorithm)
    fill(learner)
    replay = learner.replay
    obs = replay.obs[: replay.size].astype(np.float64)
    mean, std = obs.mean(0), obs.std(0)
    normalizers = [m for module in learner.algo.modules.values() for m in module.modules()
                   if isinstance(m, Normalizer)]
    assert len(normalizers) >= 1
    for n in normalizers:
        np.testing.assert_allclose(n.mean.numpy(), mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(n.inv_std.numpy(), 1 / std, rtol=1e-4)
    actor_net = ALGORITHMS[algorithm].behaviour_policy(OBS, ACT, learner.config.algorithm)
    from hpc_refer.algorithms.kit.networks import load_flat_state

    load_flat_state(actor_net, learner.policy())
    actor_norm = next(m for m in actor_net.modules() if isinstance(m, Normalizer))
    np.testing.assert_allclose(actor_norm.mean.numpy(), mean, rtol=1e-5, atol=1e-6)
    x = torch.from_numpy(replay.obs[:5])
    for a, b in zip(actor_net.policy(x), learner.algo.behaviour.policy(x), strict=True):
        torch.testing.assert_close(a, b)


def test_default_kl_direction_is_the_papers():
    """Eq. 11: KL(mu_k || pi_w(.|s_k)) by default; pi_mu is the reference code's."""
    assert ReferConfig().kl_direction is KLDirection.MU_PI
    g = torch.Generator().manual_seed(0)
    mu_m, pi_m = torch.randn(4, 2, generator=g), torch.randn(4, 2, generator=g)
    mu_s, pi_s = torch.rand(4, 2, generator=g) + 0.2, torch.rand(2, generator=g) + 0.2
    torch.testing.assert_close(kl_penalty(mu_m, mu_s, pi_m, pi_s, ReferConfig().kl_direction),
                               gaussian_kl(mu_m, mu_s, pi_m, pi_s))
    assert not torch.allclose(gaussian_kl(mu_m, mu_s, pi_m, pi_s),
                              gaussian_kl(pi_m, pi_s, mu_m, mu_s))


@pytest.mark.parametrize("algorithm", ALGOS)
def test_actor_stores_the_raw_gaussian_sample_and_its_mu(algorithm):
    """The stored action is u = m + sigma z (before clipping into the box), and mu is the
    (m, sigma) that drew it; log mu at ingest is log N(u | m, sigma)."""
    learner = make(algorithm)
    env = TeamDriver(Diffusion1D(None), None)
    net = ALGORITHMS[algorithm].behaviour_policy(env.obs_dim, env.act_dim,
                                                 learner.config.algorithm)
    with torch.no_grad():  # a mean far outside [-1, 1] so that clipping changes the action
        for p in net.parameters():
            p.add_(3.0)
    actor = Actor(env, net.program(), ActionBounds.CLIP, seed=5, chunk_len=8)
    sent = []
    original = env.step
    env.step = lambda a: (sent.append(np.array(a)), original(a))[1]  # type: ignore[method-assign]
    chunk = None
    while chunk is None:
        chunk, _ = actor.step()
    rng = np.random.default_rng(5)
    z = rng.standard_normal(chunk.act.shape)
    np.testing.assert_allclose(chunk.act, chunk.mu_mean + chunk.mu_std * z, rtol=1e-5,
                               atol=1e-6)
    assert np.abs(chunk.act).max() > 1.0, "some samples lie outside the box"
    np.testing.assert_allclose(np.array(sent), np.clip(chunk.act, -1, 1), atol=1e-6)
    with torch.no_grad():
        mean, std = net.policy(torch.from_numpy(chunk.obs[: len(chunk.act)]))
    np.testing.assert_allclose(chunk.mu_std, std.expand_as(mean).numpy(), rtol=1e-5)
    np.testing.assert_allclose(chunk.mu_mean, mean.numpy(), rtol=1e-5)
    ingest = make_learner(learner.config, env.obs_dim, env.act_dim, SerialReducer())
    ingest.store(chunk)
    replay = ingest.replay
    stored = np.flatnonzero(replay.flags & HAS_ACTION)
    want = gaussian_log_prob(*(torch.from_numpy(x) for x in (chunk.act, chunk.mu_mean,
                                                             chunk.mu_std)))
    np.testing.assert_allclose(replay.log_mu[stored], want.numpy(), rtol=1e-5)


class HalfOfTwoLearners:
    """A reducer of two learners whose other learner holds ``other`` (a flat gradient):
    ``average_`` gives (mine + other) / 2, as MpiReducer's Allreduce would; a vector of
    another size (CrossQ's running statistics) is taken as the other learner's too."""

    size = 2
    rank = 0

    def __init__(self) -> None:
        self.other: np.ndarray | None = None

    def average_(self, flat: np.ndarray) -> None:
        assert self.other is not None
        if flat.size == self.other.size:
            flat += self.other
            flat /= 2

    def sum(self, values: np.ndarray) -> np.ndarray:
        return values

    def gather(self, obj):
        return [obj]

    def checksums_agree(self, checksum: float) -> bool:
        return True


def _flat_grads(algo) -> np.ndarray:
    return np.concatenate([p.grad.reshape(-1).numpy() for spec in algo.optimizers.values()
                           for g in spec.optimizer.param_groups for p in g["params"]])


@pytest.mark.parametrize("algorithm", ALGOS)
def test_gradients_are_averaged_over_learners_in_one_flat_vector(algorithm, monkeypatch):
    """Two learners with halves of a minibatch end with the mean of the halves' gradients in
    every parameter (the order of the flat vector matches the parameters'): the full
    minibatch's gradient, but where the samples meet in batch statistics (CrossQ's batch
    renormalisation: each learner normalises its own rows). A loss's noise (SAC's
    reparameterised actions) is zero: halves would draw other noise than the whole."""
    monkeypatch.setattr(torch, "randn_like", torch.zeros_like)
    learner = make(algorithm)
    fill(learner)
    replay = learner.replay
    rows = replay.sample_rows(32, np.random.default_rng(0))
    # Learning rate 0: the optimizers' steps leave the weights as they are.
    learner.algo.optimizers = {k: spec._replace(lr0=0.0)
                               for k, spec in learner.algo.optimizers.items()}
    twin, other_half, alone = (copy.deepcopy(learner.algo) for _ in range(3))
    EagerStep(learner.algo)(replay.batch(rows), learner.terms, 0)
    full = _flat_grads(learner.algo)
    EagerStep(other_half)(replay.batch(rows[16:]), learner.terms, 0)
    other = _flat_grads(other_half)
    EagerStep(alone)(replay.batch(rows[:16]), learner.terms, 0)
    halves = (_flat_grads(alone) + other) / 2
    reducer = HalfOfTwoLearners()
    reducer.other = other
    EagerStep(twin, reducer)(replay.batch(rows[:16]), learner.terms, 0)  # type: ignore[arg-type]
    np.testing.assert_allclose(_flat_grads(twin), halves, rtol=1e-5, atol=1e-7)
    batch_statistics = any(isinstance(m, BatchRenorm) for module in twin.modules.values()
                           for m in module.modules())
    if not batch_statistics:
        np.testing.assert_allclose(_flat_grads(twin), full, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("algorithm", ALGOS)
def test_checkpoint_state_round_trip_and_checksum(algorithm):
    """An algorithm's state (networks, targets, optimizers) restores another instance so that
    both take the same next step; the checksum tells different weights apart."""
    learner = make(algorithm)
    fill(learner)
    for _ in range(3):
        learner.train_step()
    other = make(algorithm).algo
    assert other.checksum() != learner.algo.checksum()
    tree = learner.algo.checkpoint_state()
    other.restore_state(copy.deepcopy(tree))
    assert other.checksum() == learner.algo.checksum()
    assert set(tree["modules"]) == set(learner.algo.modules)
    assert set(tree["optimizers"]) == set(learner.algo.optimizers)
    batch = learner.replay.batch(learner.replay.sample_rows(16, np.random.default_rng(1)))
    noise = torch.get_rng_state()  # the same noise for both steps (SAC's loss draws some)
    a = EagerStep(learner.algo)(batch, learner.terms, 3)
    torch.set_rng_state(noise)
    b = EagerStep(other)(batch, learner.terms, 3)
    assert a.stats == b.stats
    assert other.checksum() == learner.algo.checksum()


def test_vracer_minibatch_loss_is_eq_10_over_eqs_5_and_9_and_its_error_is_q_ret_minus_v():
    """The loss of a V-RACER step is refer_loss over L_pi + L_V (eqs. 5, 9, 10) of the
    network's outputs, and the error that PER ranks rows by is Q-ret_k - V_w(s_k)."""
    from hpc_refer.algorithms.kit.refer import near_policy, refer_loss
    from hpc_refer.algorithms.vracer import policy_loss, value_loss

    learner = make(VRacer.name, refer={"beta_init": 0.3})
    fill(learner)
    algo = learner.algo
    batch = learner.replay.batch(learner.replay.sample_rows(32, np.random.default_rng(2)))
    terms = learner.terms
    loss, *_ = algo.losses(batch, terms)  # type: ignore[attr-defined]
    t = {k: torch.from_numpy(getattr(batch, k)) for k in ("obs", "act", "mu_mean", "mu_std",
                                                          "log_mu", "q_ret", "weight")}
    with torch.no_grad():
        value, mean, std = algo.net(t["obs"])  # type: ignore[attr-defined]
        rho = importance_ratio(gaussian_log_prob(t["act"], mean, std), t["log_mu"])
        objective = (policy_loss(rho, t["q_ret"], value, gaussian_log_prob(t["act"], mean, std))
                     + value_loss(rho, t["q_ret"], value))
        kl = gaussian_kl(t["mu_mean"], t["mu_std"], mean, std)
        want = refer_loss(objective, kl, near_policy(rho, terms.bounds), terms.beta,
                          ReferMode.REFER, t["weight"])
    assert loss.item() == pytest.approx(want.item(), rel=1e-5)
    result = EagerStep(algo)(batch, terms, 0)
    assert batch.q_ret is not None
    np.testing.assert_allclose(result.error, batch.q_ret - value.numpy(), rtol=1e-5, atol=1e-6)


def test_steps_due_counts_from_the_start_of_training():
    """grad_ratio * (env steps - env steps when training started) - gradient steps done."""
    learner = make(VRacer.name, grad_ratio=0.5)
    fill(learner, episodes=1)
    assert learner.steps_due(10_000) == 0, "training has not started"
    learner.start_env_steps = None
    learner.update_start(learner.config.replay.start, 1_000)
    assert learner.start_env_steps == 1_000
    assert learner.steps_due(1_000) == 0
    assert learner.steps_due(1_301) == 150
    learner.refer.t = 100  # the gradient steps taken
    assert learner.steps_due(1_301) == 50
    assert learner.steps_due(900) == 0


@pytest.mark.parametrize("algorithm", ALGOS)
def test_networks_start_near_zero_mean_and_value(algorithm):
    """Output layers start scaled by 0.1: the behaviour mean m(s) starts near 0 (so early
    actions are the behaviour noise around the box's centre)."""
    learner = make(algorithm)
    obs = torch.from_numpy(np.random.default_rng(0).standard_normal((256, OBS)).astype(
        np.float32))
    with torch.no_grad():
        mean, _ = learner.algo.behaviour.policy(obs)
    assert mean.abs().max().item() < 0.1  # measured about 0.03 (0.33 without the scaling)


def test_reward_scale_and_state_moments_are_exact():
    """1 / std of the stored rewards (rows with an action only; final states carry none) and
    the mean / std of every stored state, from the replay's sums."""
    learner = make(VRacer.name)
    fill(learner, reward_std=0.5)  # variance below 1
    replay = learner.replay
    acts = (replay.flags[: replay.size] & HAS_ACTION) != 0
    assert not acts.all(), "truncated episodes store final states without reward"
    rewards = replay.rew[: replay.size][acts].astype(np.float64)
    assert replay.reward_scale == pytest.approx(1 / rewards.std(), rel=1e-6)
    mean, std, r_std = replay.scaling_sums().moments()
    obs = replay.obs[: replay.size].astype(np.float64)
    np.testing.assert_allclose(mean, obs.mean(0), rtol=1e-9)
    np.testing.assert_allclose(std, obs.std(0), rtol=1e-7)
    assert r_std == pytest.approx(rewards.std(), rel=1e-9)


def test_batch_successors_and_done_flags_across_the_ring():
    """Batch.next_obs is s_{k+1} (the linked row, also across the ring's end), done marks
    terminal transitions, and rew is scaled."""
    learner = make(DDPG.name, size=100)
    fill(learner, episodes=5)  # 150+ states in a ring of 100: rows wrap around
    replay = learner.replay
    rows = np.flatnonzero(replay.sampleable(np.arange(replay.size)))
    batch = replay.batch(rows)
    terminal = (replay.flags[rows] & TERMINAL) != 0
    assert terminal.any() and (~terminal).any()
    assert (replay.next[rows[~terminal]] == 0).any(), "a successor at row 0"
    np.testing.assert_array_equal(batch.done, terminal.astype(np.float32))
    np.testing.assert_array_equal(batch.next_obs[~terminal],
                                  replay.obs[replay.next[rows[~terminal]]])
    np.testing.assert_allclose(batch.rew, replay.reward_scale * replay.rew[rows], rtol=1e-6)


def test_scaling_is_refreshed_every_stats_every_steps(monkeypatch):
    """The state and reward scaling are recomputed after every ``stats_every`` gradient
    steps (and only then)."""
    learner = make(VRacer.name, stats_every=3)
    fill(learner)
    calls = []
    original = learner.refresh_scaling
    monkeypatch.setattr(learner, "refresh_scaling", lambda: (calls.append(
        learner.grad_steps), original())[1])
    for _ in range(7):
        learner.train_step()
    assert calls == [3, 6]


@pytest.mark.parametrize("algorithm", ALGOS)
def test_every_algorithm_penalises_kl_of_mu_to_pi_by_default(algorithm, monkeypatch):
    """The KL statistic of a step is KL(mu_k || pi_w(.|s_k)) under the pre-step policy."""
    learner = make(algorithm, refer={"beta_init": 0.5})
    fill(learner)
    seen = record_rows(learner, monkeypatch)
    before = copy.deepcopy(learner.algo)
    stats = learner.train_step().stats
    b = learner.replay.batch(seen[0])
    with torch.no_grad():
        mean, std = before.behaviour.policy(torch.from_numpy(b.obs))
        kl = gaussian_kl(torch.from_numpy(b.mu_mean), torch.from_numpy(b.mu_std), mean, std)
    assert stats["kl"] == pytest.approx(kl.mean().item(), rel=1e-5)


@pytest.mark.parametrize("algorithm", ALGOS)
def test_stored_rows_get_rho_of_the_current_policy(algorithm):
    """At ingest every new transition gets rho = pi_w(a|s) / mu(a|s) under the current policy
    (not 1), so far-policy data counts from the moment it is stored."""
    learner = make(algorithm)
    fill(learner, episodes=2)
    replay = learner.replay
    rows = np.flatnonzero(replay.flags[: replay.size] & HAS_ACTION)
    _, log_pi = learner.algo.evaluate(replay.obs[rows], replay.act[rows])
    want = importance_ratio(torch.from_numpy(log_pi), torch.from_numpy(replay.log_mu[rows]))
    np.testing.assert_allclose(replay.rho[rows], want.numpy(), rtol=1e-5)
    assert (np.abs(replay.rho[rows] - 1.0) > 1e-3).any()
    assert replay.n_far == recount_far(learner, learner.refer.c_max) > 0


def test_uniform_sampling_keeps_no_priorities_and_per_does():
    assert make(VRacer.name).replay.tree is None
    assert make(VRacer.name, sampling="per").replay.tree is not None


def test_constant_rewards_keep_a_unit_reward_scale():
    """std(r) = 0 (a task whose reward never varies): the scale stays 1, not 1/0."""
    learner = make(VRacer.name)
    fill(learner, reward_std=0.0)
    assert learner.replay.reward_scale == 1.0


@pytest.mark.parametrize(("scaling", "states", "rewards"), [
    ("both", True, True), ("states", True, False), ("rewards", False, True),
    ("none", False, False)])
def test_replay_scaling_normalises_only_what_it_names(scaling, states, rewards):
    """``replay.scaling``: the networks' normalisers get the replay's state moments and the
    replay its reward scale 1/std(r) where named; otherwise they stay the identity and 1."""
    learner = make(VRacer.name, scaling=scaling)
    fill(learner, reward_std=0.5)
    mean, std, r_std = learner.replay.scaling_sums().moments()
    assert learner.replay.reward_scale == (pytest.approx(1 / r_std) if rewards else 1.0)
    norms = [m for m in learner.algo.behaviour.modules() if isinstance(m, Normalizer)]
    assert norms
    for norm in norms:
        if states:
            np.testing.assert_allclose(norm.mean.numpy(), mean, rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(norm.inv_std.numpy(), 1 / std, rtol=1e-6)
        else:
            assert not norm.mean.numpy().any() and (norm.inv_std.numpy() == 1).all()


def test_replay_scaling_refuses_an_unknown_choice():
    with pytest.raises(ConfigError, match=r"^replay.scaling = 'obs' is invalid: allowed "
                                          r"values are both, states, rewards, none"):
        build_config({"replay": {"scaling": "obs"}})


@pytest.mark.parametrize(("scaling", "rows", "lr_scale"), [
    ("fixed", 16, 1.0), ("per-learner", 32, 2 ** 0.5)])
def test_batch_scaling_sets_the_rows_per_learner_and_the_learning_rate(scaling, rows,
                                                                       lr_scale):
    """Two learners, B = 32: ``fixed`` takes B / 2 rows on each (global batch 32, same
    learning rate), ``per-learner`` B rows on each (global 64) with eta * sqrt(2)."""
    cfg = build_config({"run": {"steps": 1000, "learners": 2}, VRacer.name: {"hidden": [16],
                        "batch": 32, "lr": 1e-3},
                        "replay": {"size": 512, "learn_start": 64, "batch_scaling": scaling}})
    reducer = HalfOfTwoLearners()
    learner = make_learner(cfg, OBS, ACT, reducer)
    fill(learner)
    learner.start_env_steps = 0
    seen = []
    sample = learner.replay.sample_rows
    learner.replay.sample_rows = lambda n, rng: seen.append(n) or sample(n, rng)
    reducer.other = np.zeros(sum(p.numel() for p in learner.algo.net.parameters()), np.float32)
    learner.train_step()
    assert seen == [rows]
    assert learner.terms.lr_factor == pytest.approx(learner.refer.lr_factor * lr_scale)
    (group,) = learner.algo.optimizers["adam"][0].param_groups
    assert group["lr"] == pytest.approx(1e-3 * learner.refer.lr_factor * lr_scale, rel=1e-3)


def test_per_learner_batches_must_fit_the_states_at_the_start():
    with pytest.raises(ConfigError, match=r"over the 4 learners of replay\.batch_scaling"):
        build_config({"run": {"learners": 4}, VRacer.name: {"batch": 64},
                      "replay": {"size": 512, "learn_start": 200,
                                 "batch_scaling": "per-learner"}})


@pytest.mark.mpi(min_size=2)
def test_per_learner_batches_keep_the_learners_identical_under_mpi():
    """Under mpirun, per-learner scaling: each learner samples B rows of its own shard and
    every learner ends each step with the same weights (one averaged gradient)."""
    from mpi4py import MPI

    from hpc_refer.parallel.world import MpiReducer

    comm = MPI.COMM_WORLD
    size = comm.Get_size()
    cfg = build_config({"run": {"steps": 1000, "learners": size},
                        VRacer.name: {"hidden": [16], "batch": 32},
                        "replay": {"size": 512 * size, "learn_start": 64 * size,
                                   "batch_scaling": "per-learner"}})
    learner = make_learner(cfg, OBS, ACT, MpiReducer(comm))
    fill(learner, seed=comm.Get_rank())
    learner.start_env_steps = 0
    assert learner.local_batch == 32
    for _ in range(3):
        learner.train_step()
        assert len(set(comm.allgather(learner.algo.checksum()))) == 1
    assert learner.terms.lr_factor == pytest.approx(learner.refer.lr_factor * size ** 0.5)


# --- adopt: a resized restart stores another shard's episodes ---------------------------------


def _long_episode(n: int, seed: int) -> Chunk:
    """A terminated episode of ``n`` steps with distinct values in every column."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    return Chunk(rng.normal(size=(n, OBS)).astype(f32), rng.normal(size=(n, ACT)).astype(f32),
                 rng.normal(size=n).astype(f32), rng.normal(size=(n, ACT)).astype(f32),
                 rng.uniform(0.5, 1.5, size=(n, ACT)).astype(f32), TERMINATED)


@pytest.mark.parametrize("extra", [1, 88])
@pytest.mark.parametrize("sampling", ["uniform", "per"])
def test_adopt_keeps_the_last_capacity_rows_of_a_longer_episode_and_their_priorities(
        sampling, extra):
    """An episode longer than the shard keeps its last N rows in every column; under PER each
    sampleable row keeps its priority (rows of priority 0 keep the one ingest gave them) and
    the tree the old running maximum; a shard that holds states refuses to adopt."""
    from hpc_refer.replay.tree import StoredEpisode

    learner = small_learner(sampling=sampling)
    replay = learner.replay
    n = replay.capacity + extra
    chunk = _long_episode(n, seed=1)
    priorities = None
    if sampling == "per":
        priorities = np.random.default_rng(2).uniform(0.1, 2.0, n)
        priorities[n - 40:n - 30] = 0.0
    learner.adopt([StoredEpisode(chunk, priorities, 7.5 if priorities is not None else 0.0)])
    assert replay.size == replay.capacity
    rows = np.flatnonzero(replay.flags != 0)
    order = rows[np.argsort(rows)]
    for name in ("obs", "act", "rew", "mu_mean", "mu_std"):
        np.testing.assert_array_equal(getattr(replay, name)[order], getattr(chunk, name)[extra:],
                                      err_msg=name)
    if priorities is not None:
        kept = priorities[extra:]
        sampleable = replay.sampleable(order)
        got = replay.tree.get(order)
        positive = sampleable & (kept > 0)
        np.testing.assert_allclose(got[positive], kept[positive])
        assert np.all(got[sampleable & (kept == 0)] > 0)
        assert replay.tree.max_priority == 7.5
    with pytest.raises(ValueError, match=f"this one holds {replay.capacity} states"):
        learner.adopt([StoredEpisode(_long_episode(4, 3), None, 0.0)])


@pytest.mark.parametrize(("mode", "given", "want"), [
    ("on", None, "CompiledOrEagerStep"), ("off", None, "EagerStep"),
    ("on", False, "EagerStep"), ("off", True, "CompiledOrEagerStep")])
def test_the_learner_composes_the_step_run_compile_asks_for_unless_told(mode, given, want):
    """``run.compile`` chooses the eager or the compiled step; an explicit ``compiled``
    argument overrides it; the step averages gradients over the learner's reducer."""
    cfg = build_config({"run": {"steps": 1000, "compile": mode},
                        VRacer.name: {"hidden": [16], "batch": 32},
                        "replay": {"size": 512, "learn_start": 64}})
    reducer = SerialReducer()
    algo = ALGORITHMS[VRacer.name](OBS, ACT, cfg.algorithm, cfg.refer, 0)
    learner = Learner(algo, cfg, 0, reducer, compiled=given)
    assert type(learner.step).__name__ == want
    eager = learner.step if want == "EagerStep" else learner.step._eager
    assert eager.average.reducer is reducer


def test_a_step_stores_the_new_rho_of_its_rows_when_its_batch_needs_bootstrap_values():
    """Rows sampled with truncated episodes' final states (bootstrap rows, rho = 1) still get
    the rho and V the step computed for them."""
    learner = small_learner(learn_start=32)
    fill(learner)
    seed = next(k for k in range(100) if learner.replay.bootstrap_rows(
        learner.replay.sample_rows(learner.local_batch, np.random.default_rng(k))).size)
    seen = learner.replay.sample_rows(learner.local_batch, np.random.default_rng(seed))
    learner.rng = np.random.default_rng(seed)
    result = learner.train_step()
    np.testing.assert_array_equal(learner.replay.rho[seen], result.rho)
    np.testing.assert_array_equal(learner.replay.value[seen], result.value)


@pytest.mark.parametrize("algorithm", ALGOS)
def test_the_actors_numpy_policy_is_the_torch_policy_under_input_scaling(algorithm):
    """The numpy forward actors call (``numpy_policy``) normalises the state as the torch
    network does: equal outputs under a state scaling far from the identity."""
    learner = make(algorithm)
    rng = np.random.default_rng(4)
    learner.algo.set_input_scaling(rng.uniform(-2, 2, OBS), rng.uniform(0.2, 3.0, OBS))
    policy = learner.algo.behaviour
    obs = (3.0 * rng.standard_normal((6, OBS))).astype(np.float32)
    with torch.no_grad():
        mean, std = (x.numpy() for x in policy.policy(torch.from_numpy(obs)))
    forward = policy.numpy_policy()
    for k in range(6):
        np_mean, np_std = forward(obs[k])
        np.testing.assert_allclose(np_mean, mean[k], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.broadcast_to(np_std, mean[k].shape),
                                   np.broadcast_to(std[k] if std.ndim == 2 else std,
                                                   mean[k].shape), rtol=1e-4, atol=1e-6)


def _all_far_batch(algo, n: int = 4) -> Batch:
    """``n`` transitions whose stored actions lie 6 sigma from the current policy's mean,
    with mu centred on them: rho = e^-7 for every row (far at any c_max below e^7)."""
    rng = np.random.default_rng(5)
    obs = rng.standard_normal((n, OBS)).astype(np.float32)
    with torch.no_grad():
        mean, std = algo.behaviour.policy(torch.from_numpy(obs))
    std = std.expand_as(mean)
    mu_mean = (mean + 6 * std).numpy()
    std = std.numpy().copy()
    log_mu = gaussian_log_prob(*map(torch.from_numpy, (mu_mean, mu_mean, std))).numpy()
    done = np.zeros(n, np.float32)
    return Batch(np.arange(n), obs, mu_mean, mu_mean, std, log_mu,
                 rng.standard_normal(n).astype(np.float32),
                 rng.standard_normal((n, OBS)).astype(np.float32), done, None,
                 np.ones(n, np.float32))


@pytest.mark.parametrize("critics", [True, False])
@pytest.mark.parametrize("algorithm", ["crossq", "ddpg", "sac", "td3"])
def test_rule_1_on_the_critics_is_an_option(algorithm, critics):
    """``refer.rule1_critics``: with the paper's rule (true) a far-policy minibatch gives no
    gradient at all; with false the critics still regress on it while the actor gets none
    (beta = 1: no KL term)."""
    algo = make(algorithm, refer={"rule1_critics": critics}).algo
    out = algo.losses(_all_far_batch(algo), ReferTerms(1.0, 2.0, 1.0))
    assert out.stats["near_fraction"].float().mean() == 0.0
    for spec in algo.optimizers.values():
        spec.optimizer.zero_grad(set_to_none=False)
    out.loss.backward()
    biggest = {name: max(p.grad.abs().max().item() for g in spec.optimizer.param_groups
                         for p in g["params"]) for name, spec in algo.optimizers.items()}
    assert biggest["actor"] == 0.0
    critic = biggest["critics" if "critics" in biggest else "critic"]
    assert (critic > 0.0) == (not critics), biggest


@pytest.mark.parametrize("algorithm", ["sac", "crossq"])
def test_a_reset_starts_the_networks_afresh_and_keeps_the_replay_and_the_scaling(algorithm):
    """``replay.reset_every = 3``: after the third step every network holds the weights a new
    algorithm of the reset's seed starts with, the normalisers the replay's statistics,
    every optimizer an empty state; the replay and torch's generator are as without the
    reset, and training goes on."""
    runs = {}
    for every in (3, 0):
        learner = make(algorithm, reset_every=every)
        fill(learner)
        torch.manual_seed(0)
        for _ in range(3):
            learner.train_step()
        runs[every] = (learner, torch.get_rng_state())
    (learner, rng), (plain, plain_rng) = runs[3], runs[0]
    assert torch.equal(rng, plain_rng), "the reset leaves torch's generator alone"
    assert learner.replay.size == plain.replay.size
    algo = learner.algo
    fresh = type(algo)(algo.obs_dim, algo.act_dim, algo.config, algo.refer_config,
                       reset_seed(learner.seed, 1))
    for name, module in algo.modules.items():
        for (key, got), want, trained in zip(module.state_dict().items(),
                                             fresh.modules[name].state_dict().values(),
                                             plain.algo.modules[name].state_dict().values(),
                                             strict=True):
            if "normalizer" in key:
                assert torch.equal(got, trained), (name, key)
                assert not torch.equal(got, want), "the replay's statistics, not a fresh start"
            else:
                assert torch.equal(got, want), (name, key)
    assert all(not o.optimizer.state for o in algo.optimizers.values())
    learner.train_step()
    assert learner.grad_steps == 4 and all(o.optimizer.state for o in algo.optimizers.values())
