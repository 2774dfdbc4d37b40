"""Minibatches for the actor-critic algorithms' tests: near- and far-policy rows around the
actor's own mean, for the deterministic actors (DDPG, TD3: their behaviour std
``config.sigma``) and for the Gaussian ones (SAC, CrossQ: the behaviour's own std)."""

from __future__ import annotations

import numpy as np
import torch

from hpc_refer.algorithms.kit.base import Algorithm
from hpc_refer.algorithms.kit.networks import gaussian_log_prob
from hpc_refer.replay.shard import Batch


def near_far_batch(algo: Algorithm, n: int = 4, far: tuple[int, ...] = (), seed: int = 0,
                   offset: float = 0.05) -> Batch:
    """``n`` transitions whose behaviour mean is m_w(s) shifted by ``offset`` sigma (near:
    rho ~ 1); the actions of rows ``far`` lie 6 sigma from m_w(s) with mu centred on them
    (rho = e^-7, far). The last transition is terminal."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    obs_dim, act_dim = algo.obs_dim, algo.act_dim
    obs = rng.standard_normal((n, obs_dim)).astype(f32)
    sigma = algo.config.sigma  # type: ignore[attr-defined]
    with torch.no_grad():
        mean = algo.behaviour(torch.from_numpy(obs)).numpy()
    mu_mean = (mean + offset * sigma * rng.standard_normal((n, act_dim))).astype(f32)
    act = (mu_mean + 0.1 * sigma * rng.standard_normal((n, act_dim))).astype(f32)
    for k in far:
        act[k] = mean[k] + 6 * sigma
        mu_mean[k] = act[k]
    mu_std = np.full((n, act_dim), sigma, f32)
    log_mu = gaussian_log_prob(*map(torch.from_numpy, (act, mu_mean, mu_std))).numpy()
    done = np.zeros(n, f32)
    done[-1] = 1.0
    return Batch(np.arange(n), obs, act, mu_mean, mu_std, log_mu,
                 rng.standard_normal(n).astype(f32),
                 rng.standard_normal((n, obs_dim)).astype(f32), done, None, np.ones(n, f32))


def rows(batch: Batch, idx: list[int]) -> Batch:
    """The minibatch of ``batch``'s rows ``idx``."""
    return Batch(*(None if x is None else x[idx] for x in batch))


def gaussian_policy_batch(algo: Algorithm, n: int, far: tuple[int, ...] = (),
                          seed: int = 0) -> Batch:
    """Rows whose behaviour is the current policy (``algo.behaviour.policy``: rho = 1), but
    for the rows ``far``, whose stored mu is shifted by 3 sigma (rho far from 1); the last
    row is terminal."""
    rng = np.random.default_rng(seed)
    obs_dim, act_dim = algo.obs_dim, algo.act_dim
    obs = rng.standard_normal((n, obs_dim)).astype(np.float32)
    with torch.no_grad():
        mean, std = (x.numpy() for x in algo.behaviour.policy(torch.from_numpy(obs)))
    std = np.broadcast_to(std, mean.shape)
    mu_mean = mean.copy()
    mu_mean[list(far)] += 3.0 * std[list(far)]
    act = (mu_mean + std * rng.standard_normal((n, act_dim))).astype(np.float32)
    log_mu = gaussian_log_prob(*(torch.from_numpy(np.ascontiguousarray(x))
                                 for x in (act, mu_mean, std))).numpy()
    done = np.zeros(n, np.float32)
    done[-1] = 1.0
    return Batch(np.arange(n), obs, act, mu_mean.astype(np.float32),
                 np.ascontiguousarray(std, np.float32), log_mu,
                 rng.standard_normal(n).astype(np.float32),
                 rng.standard_normal((n, obs_dim)).astype(np.float32), done, None,
                 np.ones(n, np.float32))
