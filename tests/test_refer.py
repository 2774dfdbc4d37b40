"""ReF-ER: near/far test, eq. 12 fixed points, eq. 13 annealing, Rules 1 and 2 on gradients."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hpc_refer.algorithms.kit.refer import (
    ReferState,
    beta_update,
    c_max_at,
    importance_ratio,
    learning_rate_at,
    near_policy,
    refer_loss,
)
from hpc_refer.config.modes import ReferMode
from hpc_refer.config.tables import ReferConfig
from hpc_refer.replay.near import NearBounds, is_far
from hpc_refer.replay.shard import ReplayShard
from hpc_refer.report.records import TRUNCATED, Chunk


def test_near_policy_is_strict_interval():
    rho = torch.tensor([0.2, 0.25, 0.2500001, 1.0, 3.9999, 4.0, 9.0])
    near = near_policy(rho, NearBounds.of(4.0))
    assert near.tolist() == [False, False, True, True, True, False, False]


@pytest.mark.parametrize("c_max", [3.0, 3.3, 4.999, 7.0])
def test_one_near_policy_rule_for_the_loss_the_replay_and_its_kernels(c_max):
    """rho exactly at the float32 thresholds (and one float32 step inside them): the loss's
    mask in torch, eager and with the bounds as 0-d tensors (compiled step), is the
    complement of the replay's far test in numpy, and the far-policy count the replay keeps
    incrementally (numba kernel at each refresh) equals its recount."""
    bounds = NearBounds.of(c_max)
    lo, hi = np.float32(bounds.low), np.float32(bounds.high)
    rho = np.array([lo, np.nextafter(lo, np.float32(1)), 1.0, np.nextafter(hi, np.float32(0)),
                    hi], np.float32)
    near = near_policy(torch.from_numpy(rho), bounds).numpy()
    tensor_bounds = NearBounds(torch.tensor(bounds.low), torch.tensor(bounds.high))
    near_0d = near_policy(torch.from_numpy(rho), tensor_bounds).numpy()  # type: ignore[arg-type]
    far = is_far(rho, bounds)
    assert near.tolist() == near_0d.tolist() == [False, True, True, True, False]
    assert (~far).tolist() == near.tolist()
    shard = ReplayShard(16, 1, 1, 0.9)
    n = rho.size
    chunk = Chunk(np.zeros((n + 1, 1), np.float32), np.zeros((n, 1), np.float32),
                  np.zeros(n, np.float32), np.zeros((n, 1), np.float32),
                  np.ones((n, 1), np.float32), TRUNCATED)
    rows = shard.add(chunk, c_max)
    shard.refresh(rows[:n], np.zeros(n, np.float32), rho, c_max)
    assert shard.n_far == int(far.sum()) == 2
    assert shard.recount_far(c_max) == 2


def test_importance_ratio_is_clipped_at_exp7():
    r = importance_ratio(torch.tensor([0.0, 10.0, -10.0]), torch.zeros(3))
    assert r.tolist() == pytest.approx([1.0, math.exp(7.0), math.exp(-7.0)])


def test_beta_fixed_points():
    eta = 1e-2
    beta = 0.5
    for _ in range(3000):
        beta = beta_update(beta, far_fraction=0.3, D=0.1, eta=eta)
    assert beta == pytest.approx(0.0, abs=1e-12)
    assert beta_update(0.0, 0.3, 0.1, eta) == 0.0
    for _ in range(3000):
        beta = beta_update(beta, far_fraction=0.05, D=0.1, eta=eta)
    assert beta == pytest.approx(1.0, abs=1e-12)
    assert beta_update(1.0, 0.05, 0.1, eta) == pytest.approx(1.0)
    # One step of eq. 12 by hand.
    assert beta_update(0.4, 0.2, 0.1, 0.1) == pytest.approx(0.36)
    assert beta_update(0.4, 0.1, 0.1, 0.1) == pytest.approx(0.46)


def test_annealing_values():
    assert c_max_at(0, 4.0, 5e-7) == 5.0
    assert c_max_at(2_000_000, 4.0, 5e-7) == pytest.approx(1.0 + 4.0 / 2.0)
    assert c_max_at(10**9, 4.0, 5e-7) == pytest.approx(1.0 + 4.0 / 501.0)
    assert learning_rate_at(0, 1e-4, 5e-7) == 1e-4
    assert learning_rate_at(6_000_000, 1e-4, 5e-7) == pytest.approx(1e-4 / 4.0)


def test_refer_state_update_and_modes():
    state = ReferState.create(ReferConfig(beta_rate=0.5), eta0=1e-4)
    assert state.beta == 0.0 and state.c_max == 5.0
    state.update(n_far=1, n_stored=100)  # 1% far < D: beta moves toward 1
    assert state.beta == pytest.approx(0.5) and state.t == 1
    state.update(n_far=50, n_stored=100)
    assert state.beta == pytest.approx(0.25)
    plain = ReferState.create(ReferConfig(mode="er"), eta0=1e-4)
    plain.update(n_far=100, n_stored=100)
    assert plain.beta == 1.0, "without Rule 2 beta stays 1"
    assert ReferState.create(ReferConfig(beta_rate=0.0), eta0=3e-4).beta_rate == 3e-4


def test_per_weights_scale_objective_and_penalty():
    """PER's w_k multiplies each sample's whole ReF-ER term (objective and penalty)."""
    w = torch.tensor([1.5, -0.7], requires_grad=True)
    objective = torch.stack([w[0] ** 2, w[1] ** 2])
    penalty = torch.stack([3 * w[0], 5 * w[1]])
    weight = torch.tensor([0.25, 0.0])
    refer_loss(objective, penalty, torch.tensor([True, True]), 0.3, ReferMode.REFER2,
               weight).backward()
    assert w.grad.tolist() == pytest.approx([0.5 * 0.25 * (0.3 * 2 * 1.5 + 0.7 * 3), 0.0])


@pytest.mark.parametrize("mode", list(ReferMode))
def test_learning_rate_is_annealed_only_under_refer(mode):
    """Eq. 13 anneals eta under ReF-ER's variants; plain ER keeps eta0 (and lr_factor 1)."""
    state = ReferState.create(ReferConfig(mode=mode, A=0.5), eta0=2e-4)
    for _ in range(4):
        state.update(n_far=0, n_stored=10)
    expected = 2e-4 / 3.0 if mode is not ReferMode.ER else 2e-4
    assert state.learning_rate == pytest.approx(expected)
    assert state.lr_factor == pytest.approx(expected / 2e-4)
    assert state.c_max == pytest.approx(1 + 4.0 / 3.0), "c_max is annealed in every mode"


def per_sample_grads(mode: str, beta: float):
    """Gradients of refer_loss w.r.t. a parameter per sample, one near and one far sample."""
    w = torch.tensor([1.5, -0.7], requires_grad=True)
    objective = torch.stack([w[0] ** 2, w[1] ** 2])  # per-sample L_k
    penalty = torch.stack([3 * w[0], 5 * w[1]])  # per-sample KL_k
    near = torch.tensor([True, False])
    refer_loss(objective, penalty, near, beta, ReferMode(mode)).backward()
    return w.grad


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        # d/dw of 1/2 sum_k [...]: sample 0 near (L = w0^2, KL = 3 w0), sample 1 far.
        ("refer", [0.5 * (0.3 * 2 * 1.5 + 0.7 * 3), 0.5 * (0.7 * 5)]),
        ("refer1", [0.5 * 2 * 1.5, 0.0]),
        ("refer2", [0.5 * (0.3 * 2 * 1.5 + 0.7 * 3), 0.5 * (0.3 * 2 * -0.7 + 0.7 * 5)]),
        ("er", [0.5 * 2 * 1.5, 0.5 * 2 * -0.7]),
    ],
)
def test_rules_on_gradients(mode, expected):
    grad = per_sample_grads(mode, beta=0.3)
    assert grad.tolist() == pytest.approx(expected)


def test_far_samples_give_zero_objective_gradient():
    """Rule 1: with beta = 1 (no penalty weight) a far sample contributes exactly nothing."""
    grad = per_sample_grads("refer", beta=1.0)
    assert grad[1].item() == 0.0
    assert grad[0].item() != 0.0
