"""V-RACER (Novati & Koumoutsakos 2019, Sec. 2 and App. A) with ReF-ER.

One network maps s to V_w(s), the mean m_w(s) and the std sigma_w of a Gaussian policy
pi_w(a|s). From a minibatch of stored transitions k (behaviour mu_k, stored V-tbc of the
successor) it minimises, per sample,

    L_pi,k = - rho_k (Q-ret_k - V_w(s_k)) log pi_w(a_k|s_k)     (off-policy PG, eq. 5;
                                                                 rho and the advantage fixed)
    L_V,k  = 1/2 (V-tbc_k - V_w(s_k))^2                         (eq. 9, V-tbc_k fixed),

where Q-ret_k = r_{k+1} + gamma V-tbc_{k+1} and V-tbc_k = V_w(s_k) + min(1, rho_k)
(Q-ret_k - V_w(s_k)) (eqs. 7-8), so grad L_V,k = - min(1, rho_k)(Q-ret_k - V_w) grad V_w.
ReF-ER combines L_k = L_pi,k + L_V,k with the penalty KL_k (eq. 11) through
:func:`hpc_refer.refer.refer_loss`. After each step the sampled rows get the network's V_w and
rho and their episodes' V-tbc are recomputed backward (eq. 8), see :mod:`hpc_refer.replay`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hpc_refer.config import ReferConfig, VRacerConfig
from hpc_refer.networks import GaussianPolicyValueNet, gaussian_kl, gaussian_log_prob
from hpc_refer.parallel import Reducer, SerialReducer
from hpc_refer.refer import ReferState, importance_ratio, near_policy, refer_loss
from hpc_refer.replay import HAS_ACTION, Batch, ReplayShard


def policy_loss(
    rho: torch.Tensor, q_ret: torch.Tensor, value: torch.Tensor, log_pi: torch.Tensor
) -> torch.Tensor:
    """Per-sample L_pi,k = -rho_k (Q-ret_k - V_w(s_k)) log pi_w(a_k|s_k) (eq. 5).

    rho_k and the advantage are constants, so grad L_pi,k = -rho_k A_k grad log pi_w.
    """
    return -(rho.detach() * (q_ret - value.detach())) * log_pi


def value_loss(rho: torch.Tensor, q_ret: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """Per-sample L_V,k = 1/2 (V-tbc_k - V_w(s_k))^2 with V-tbc_k from eq. 8 held fixed.

    V-tbc_k = V_w(s_k) + rho-bar_k (Q-ret_k - V_w(s_k)), rho-bar_k = min(1, rho_k) (eq. 9).
    """
    v = value.detach()
    v_tbc = v + torch.clamp(rho.detach(), max=1.0) * (q_ret - v)
    return 0.5 * (v_tbc - value).pow(2)


def kl_penalty(
    mu_mean: torch.Tensor, mu_std: torch.Tensor, mean: torch.Tensor, std: torch.Tensor,
    direction: str,
) -> torch.Tensor:
    """Per-sample KL_k of eq. 11: KL(mu_k || pi_w(.|s_k)) (``mu_pi``, the paper's direction)
    or KL(pi_w || mu_k) (``pi_mu``, the reference code's)."""
    if direction == "mu_pi":
        return gaussian_kl(mu_mean, mu_std, mean, std)
    return gaussian_kl(mean, std, mu_mean, mu_std)


@dataclass
class StepStats:
    """Diagnostics of one gradient step (means over the local minibatch)."""

    loss_pi: float
    loss_v: float
    kl: float
    near_fraction: float


class VRacer:
    """The V-RACER learner state: network, Adam, ReF-ER state, and its gradient step.

    Notes
    -----
    With L learners, each samples ``batch / L`` rows from its own shard; gradients are
    averaged through ``reducer`` (one allreduce of one flat vector per step) and the far-policy
    and stored counts are summed through it, so all learners take identical steps.
    """

    def __init__(
        self, obs_dim: int, act_dim: int, config: VRacerConfig, refer: ReferConfig,
        seed: int, reducer: Reducer | None = None,
    ) -> None:
        self.config = config
        self.refer_config = refer
        self.reducer: Reducer = reducer or SerialReducer()
        torch.manual_seed(seed)
        self.net = GaussianPolicyValueNet(obs_dim, act_dim, config.hidden, config.sigma_init)
        self.params = list(self.net.parameters())
        self.optimizer = torch.optim.Adam(self.params, lr=config.lr, foreach=False, fused=True)
        self.refer = ReferState.create(refer, config.lr)
        self.local_batch = max(1, config.batch // self.reducer.size)
        self._flat_grad = np.zeros(sum(p.numel() for p in self.params), np.float32)

    def losses(self, batch: Batch) -> tuple[torch.Tensor, StepStats, torch.Tensor, torch.Tensor]:
        """ReF-ER loss of a minibatch; also returns stats, V_w(s_k) and rho_k (detached)."""
        obs, act, mu_mean, mu_std, log_mu, q_ret = (
            torch.from_numpy(x) for x in (batch.obs, batch.act, batch.mu_mean, batch.mu_std,
                                          batch.log_mu, batch.q_ret)
        )
        value, mean, std = self.net(obs)
        log_pi = gaussian_log_prob(act, mean, std)
        rho = importance_ratio(log_pi, log_mu)
        near = near_policy(rho, self.refer.c_max)
        l_pi = policy_loss(rho, q_ret, value, log_pi)
        l_v = value_loss(rho, q_ret, value)
        kl = kl_penalty(mu_mean, mu_std, mean, std, self.refer_config.kl_direction)
        loss = refer_loss(l_pi + l_v, kl, near, self.refer.beta, self.refer_config.mode)
        with torch.no_grad():
            means = torch.stack([l_pi.mean(), l_v.mean(), kl.mean(), near.float().mean()])
        stats = StepStats(*means.tolist())
        return loss, stats, value.detach(), rho.detach()

    def train_step(self, replay: ReplayShard, rng: np.random.Generator) -> StepStats:
        """One gradient step on a minibatch of ``replay``, then the refresh of sampled rows."""
        rows = replay.sample_rows(self.local_batch, rng)
        loss, stats, value, rho = self.losses(replay.batch(rows))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.reducer.size > 1:
            self._average_gradients()
        for group in self.optimizer.param_groups:
            group["lr"] = self.refer.learning_rate
        self.optimizer.step()
        c_max = self.refer.c_max
        replay.refresh(rows, value.numpy(), rho.numpy(), c_max)
        self.refresh_values(replay, replay.bootstrap_rows(rows), with_rho=False)
        n_far, n_stored = self.reducer.sum(np.array([replay.n_far, replay.n_transitions]))
        self.refer.update(int(n_far), int(n_stored))
        return stats

    def _average_gradients(self) -> None:
        """Average the gradients of all learners with one reduction of one flat vector."""
        grads = [p.grad for p in self.params if p.grad is not None]
        flat = torch.from_numpy(self._flat_grad)
        torch.cat([g.reshape(-1) for g in grads], out=flat)
        self.reducer.average_(self._flat_grad)
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()

    @torch.no_grad()
    def ingest(self, replay: ReplayShard, rows: np.ndarray) -> None:
        """For newly stored ``rows``: log mu_k(a_k|s_k), then V_w, rho and V-tbc (eq. 8)."""
        acts = rows[(replay.flags[rows] & HAS_ACTION) != 0]
        replay.log_mu[acts] = gaussian_log_prob(
            *(torch.from_numpy(x[acts]) for x in (replay.act, replay.mu_mean, replay.mu_std))
        ).numpy()
        self.refresh_values(replay, rows, with_rho=True)

    @torch.no_grad()
    def refresh_values(self, replay: ReplayShard, rows: np.ndarray, with_rho: bool) -> None:
        """Store the current V_w(s) (and rho for rows with actions) of ``rows``; redo eq. 8."""
        if rows.size == 0:
            return
        value, mean, std = self.net(torch.from_numpy(replay.obs[rows]))
        rho = None
        if with_rho:
            log_pi = gaussian_log_prob(torch.from_numpy(replay.act[rows]), mean, std)
            rho = importance_ratio(log_pi, torch.from_numpy(replay.log_mu[rows])).numpy()
        replay.refresh(rows, value.numpy(), rho, self.refer.c_max)

    def refresh_scaling(self, replay: ReplayShard) -> None:
        """Set the input normalisation and the reward scale 1/std(r) from the whole RM.

        The moments are combined over learners from their shards' sums, so every learner
        gets the same scaling. V-tbc of the whole shard is recomputed with the new reward
        scale, and the far-policy count is recounted with the current c_max.
        """
        sums = self.reducer.sum(replay.scaling_sums())
        d = replay.obs.shape[1]
        n, m = max(sums[0], 1.0), max(sums[1], 1.0)
        mean = sums[2 : 2 + d] / n
        std = np.sqrt(np.maximum(sums[2 + d : 2 + 2 * d] / n - mean**2, 0.0))
        r_mean = sums[-2] / m
        r_std = float(np.sqrt(max(sums[-1] / m - r_mean**2, 0.0)))
        self.net.normalizer.set_stats(mean, std)
        replay.reward_scale = 1.0 / r_std if r_std > 1e-8 else 1.0
        replay.recompute_all_vtbc()
        replay.recount_far(self.refer.c_max)
