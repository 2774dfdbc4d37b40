"""SAC (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications") with ReF-ER.

The policy is a tanh-squashed Gaussian: u ~ N(m_w(s), sigma_w(s)^2 I) (state-dependent std,
log sigma clipped to [-20, 2]) and the normalised action a = tanh(u). The actors store the
pre-squash sample u with its Gaussian (mu_k's mean and std), so that

    rho_k = pi_w(u_k|s_k) / mu_k(u_k|s_k)

is a ratio of two Gaussians over u (the tanh's Jacobian is the same factor in both and cancels)
and the KL penalty of eq. 11 is the closed form between the two Gaussians: both are exact. Two
critics Q_i(s, a) (i = 1, 2, on the normalised action) with Polyak targets Q'_i, and the
temperature alpha = exp(log alpha) tuned toward the target entropy H (Haarnoja et al. 2018b,
sec. 5). Per sample k, with fresh samples u' ~ pi(.|s_{k+1}), u~ = m_w + sigma_w eps ~ pi(.|s_k)
(reparameterised, eps ~ N(0, I)):

    log pi~(a|s) = log N(u; m, sigma^2) - sum_i log(1 - tanh(u_i)^2)   (2018a eq. 26: tanh)
    y_k     = r_{k+1} + gamma (1 - done_k) [min_i Q'_i(s', tanh u') - alpha log pi~(u'|s')]
    L_Q,k   = sum_i 1/2 (y_k - Q_i(s_k, tanh u_k))^2                  (eq. 5, y_k fixed)
    L_pi,k  = alpha log pi~(u~|s_k) - min_i Q_i(s_k, tanh u~)         (eq. 10, critics fixed)
    L_alpha = -log alpha (log pi~(u~|s_k) + H)                        (eq. 18)

(s' = s_{k+1}; equation numbers of Haarnoja et al. 2018b unless marked.)

ReF-ER: Rule 1 removes far-policy samples' gradient from the actor's and the critics' terms
(their mask keep_k), Rule 2 weights the actor's by beta and adds (1 - beta) KL_k
(:func:`hpc_refer.algorithms.kit.refer.refer_loss`); the critics' regression is not weighted by
beta (as DDPG's), nor is the temperature's dual step. ``refer.mode = er`` is plain SAC. The noise
eps comes from torch's generator inside the loss (checkpointed with the learner; the compiled step
draws it the eager way, so both steps see the same numbers).

With ``sac.cell = gru | lstm`` the actor carries a recurrent cell
(:mod:`hpc_refer.algorithms.kit.recurrent`): the minibatch is sequences of W = ``sac.bptt`` steps
unrolled from their stored carries, the critics read [s_k, h_k] (h_k the actor's cell output,
trained by the critics' regression, detached in L_pi) and s_{k+1}'s Gaussian and h_{k+1} are one
cell step from the carry after step k.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from hpc_refer.algorithms.kit.base import Algorithm, Losses, TensorBatch, adam
from hpc_refer.algorithms.kit.networks import (
    BehaviourPolicy,
    Normalizer,
    NumpyMLP,
    QNetwork,
    gaussian_log_prob,
    mlp,
    small_output_,
)
from hpc_refer.algorithms.kit.recurrent import RecurrentTrunk
from hpc_refer.algorithms.kit.refer import (
    importance_ratio,
    kl_penalty,
    near_policy,
    refer_loss,
    rule1_mask,
)
from hpc_refer.algorithms.kit.shared import detached_critic, polyak_, squared_td_loss, td_target
from hpc_refer.algorithms.registry import register
from hpc_refer.algorithms.tables.sac import SACConfig
from hpc_refer.config.modes import Activation
from hpc_refer.config.tables import AlgorithmConfig, ReferConfig
from hpc_refer.replay.near import NearBounds

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
"""The clip of log sigma_w(s) (as Haarnoja et al.'s code)."""


def squashed_log_prob(u: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """log pi~(tanh u | s) = log N(u; m, sigma^2) - sum_i log(1 - tanh(u_i)^2) (Haarnoja et
    al. 2018a, eq. 26), with log(1 - tanh(x)^2) = 2 (log 2 - x - softplus(-2 x)) for
    stability."""
    correction = 2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u))
    return gaussian_log_prob(u, mean, std) - correction.sum(-1)


def critic_target(rew: torch.Tensor, done: torch.Tensor, gamma: float, q_next: torch.Tensor,
                  alpha: torch.Tensor, log_pi_next: torch.Tensor) -> torch.Tensor:
    """y_k = r_{k+1} + gamma (1 - done_k) [min_i Q'_i(s', a') - alpha log pi~(a'|s')], fixed
    (``q_next`` is the minimum over the target critics)."""
    return td_target(rew, done, gamma, q_next - alpha * log_pi_next)


def actor_loss(alpha: torch.Tensor, log_pi: torch.Tensor, q_pi: torch.Tensor) -> torch.Tensor:
    """Per-sample L_pi,k = alpha log pi~(u~|s_k) - min_i Q_i(s_k, tanh u~) (eq. 10 of
    Haarnoja et al. 2018b), alpha held fixed; ``q_pi`` from critics with detached parameters,
    so the gradient reaches the actor only (through the reparameterised u~)."""
    return alpha.detach() * log_pi - q_pi


def temperature_loss(log_alpha: torch.Tensor, log_pi: torch.Tensor,
                     target: float) -> torch.Tensor:
    """Per-sample L_alpha = -log alpha (log pi~(u~|s) + H), log pi~ held fixed (eq. 18 of
    Haarnoja et al. 2018b, on log alpha): alpha grows while the entropy -log pi~ is below H."""
    return -log_alpha * (log_pi.detach() + target)


class SquashedGaussianActor(BehaviourPolicy):
    """s -> (m_w(s), sigma_w(s)) of the Gaussian over u (the action is tanh u): one MLP
    trunk with 2 A outputs, the last layer started small (m ~ 0, sigma ~ 1)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...],
                 activation: Activation = Activation.SOFTSIGN) -> None:
        super().__init__()
        self.act_dim = act_dim
        self.normalizer = Normalizer(obs_dim)
        self.trunk = mlp([obs_dim, *hidden, 2 * act_dim], activation)
        small_output_(self.trunk)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean [B, A] and std [B, A] of u."""
        return squashed_gaussian(self.trunk(self.normalizer(obs)), self.act_dim)

    def policy(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self(obs)

    def numpy_policy(self) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
        forward = NumpyMLP(self.trunk, self.normalizer)
        return lambda obs: numpy_squashed_gaussian(forward(obs), self.act_dim)


def squashed_gaussian(out: torch.Tensor, act_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The actor's outputs [..., 2 A] read as the mean and std = exp(clip(log sigma)) of u."""
    mean, log_std = out[..., :act_dim], out[..., act_dim:]
    return mean, torch.exp(torch.clamp(log_std, LOG_STD_MIN, LOG_STD_MAX))


def numpy_squashed_gaussian(out: np.ndarray, act_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`squashed_gaussian` in numpy."""
    return out[..., :act_dim], np.exp(np.clip(out[..., act_dim:], LOG_STD_MIN, LOG_STD_MAX))


class RecurrentSquashedActor(BehaviourPolicy):
    """The squashed-Gaussian actor with a recurrent cell: rows [s, c] -> (m_w, sigma_w)
    through :class:`~hpc_refer.algorithms.kit.recurrent.RecurrentTrunk`; the critics read the
    cell's output h_t beside s_t (:meth:`SAC.inputs`)."""

    def __init__(self, obs_dim: int, act_dim: int, config: SACConfig) -> None:
        super().__init__()
        self.act_dim = act_dim
        self.body = RecurrentTrunk(obs_dim, 2 * act_dim, config.hidden, config.cell,
                                   config.cell_width, config.activation)
        self.carry_dim = self.body.carry_dim

    def forward(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std of u at rows [B, obs_dim + carry_dim], each from its stored carry."""
        return squashed_gaussian(self.body.rows(rows)[0], self.act_dim)

    def policy(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self(obs)

    def numpy_step(self) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]:
        step = self.body.numpy_step()

        def policy(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            out, carry = step(rows)
            return (*numpy_squashed_gaussian(out, self.act_dim), carry)

        return policy


class Inputs(NamedTuple):
    """What one minibatch gives the losses: the actor's Gaussian over u at s_k and at
    s_{k+1} (the latter without gradient), and the critics' inputs at both."""

    mean: torch.Tensor
    std: torch.Tensor
    critic_obs: torch.Tensor
    next_mean: torch.Tensor
    next_std: torch.Tensor
    next_critic_obs: torch.Tensor


class Temperature(nn.Module):
    """log alpha, a parameter of its own (its own Adam), so that alpha > 0."""

    def __init__(self, alpha: float) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor(math.log(alpha)))


def actor_of(obs_dim: int, act_dim: int, config: SACConfig
             ) -> SquashedGaussianActor | RecurrentSquashedActor:
    """SAC's actor: feed-forward, or with the cell of ``config.cell``."""
    if config.carry_dim == 0:
        return SquashedGaussianActor(obs_dim, act_dim, config.hidden, config.activation)
    return RecurrentSquashedActor(obs_dim, act_dim, config)


@register
class SAC(Algorithm):
    """SAC with ReF-ER: the squashed-Gaussian actor, twin critics with Polyak targets, the
    tuned temperature; three Adam optimizers (actor, critics, temperature)."""

    name = "sac"
    Config = SACConfig
    retrace = False

    def __init__(self, obs_dim: int, act_dim: int, config: SACConfig, refer: ReferConfig,
                 seed: int) -> None:
        super().__init__(obs_dim, act_dim, config, refer, seed)
        self.config: SACConfig = config
        self.actor = actor_of(obs_dim, act_dim, config)
        seen = obs_dim + config.memory_width  # the critics read [s, h] with a cell
        self.critic1 = QNetwork(seen, act_dim, config.hidden, config.activation)
        self.critic2 = QNetwork(seen, act_dim, config.hidden, config.activation)
        self.target1 = copy.deepcopy(self.critic1).requires_grad_(False)
        self.target2 = copy.deepcopy(self.critic2).requires_grad_(False)
        self.temperature = Temperature(config.alpha_init)
        self.target_entropy = config.target_entropy * act_dim
        self.modules = {"actor": self.actor, "critic1": self.critic1, "critic2": self.critic2,
                        "target1": self.target1, "target2": self.target2,
                        "temperature": self.temperature}
        self.optimizers = {
            "actor": adam(self.actor.parameters(), config.lr),
            "critics": adam([*self.critic1.parameters(), *self.critic2.parameters()], config.lr),
            "temperature": adam(self.temperature.parameters(), config.lr)}

    @classmethod
    def behaviour_policy(cls, obs_dim: int, act_dim: int,
                         config: AlgorithmConfig) -> BehaviourPolicy:
        assert isinstance(config, SACConfig)
        return actor_of(obs_dim, act_dim, config)

    @property
    def behaviour(self) -> BehaviourPolicy:
        return self.actor

    def q_of_policy(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """min_i Q_i(s, a) with the critics' parameters detached: gradient to ``act`` only."""
        return torch.minimum(detached_critic(self.critic1, obs, act),
                             detached_critic(self.critic2, obs, act))

    def loss_terms(self, batch: TensorBatch, beta: float | torch.Tensor,
                   bounds: NearBounds) -> Losses:
        """ReF-ER loss of a minibatch (module docstring), its diagnostics, rho_k and the TD
        error y_k - Q_1(s_k, a_k) (both detached, before the step)."""
        mode = self.refer_config.mode
        weight = batch.weight
        log_alpha = self.temperature.log_alpha
        alpha = torch.exp(log_alpha)
        mean, std, obs, m_next, s_next, next_obs = self.inputs(batch)
        rho = importance_ratio(gaussian_log_prob(batch.act, mean, std), batch.log_mu).detach()
        near = near_policy(rho, bounds)
        with torch.no_grad():
            u_next = m_next + s_next * torch.randn_like(m_next)
            a_next = torch.tanh(u_next)
            q_next = torch.minimum(self.target1(next_obs, a_next),
                                   self.target2(next_obs, a_next))
            y = critic_target(batch.rew, batch.done, self.config.gamma, q_next, alpha,
                              squashed_log_prob(u_next, m_next, s_next))
        act = torch.tanh(batch.act)
        q1, q2 = self.critic1(obs, act), self.critic2(obs, act)
        l_q = squared_td_loss(y, q1) + squared_td_loss(y, q2)
        u = mean + std * torch.randn_like(mean)
        log_pi = squashed_log_prob(u, mean, std)
        l_pi = actor_loss(alpha, log_pi, self.q_of_policy(obs.detach(), torch.tanh(u)))
        kl = kl_penalty(batch.mu_mean, batch.mu_std, mean, std, self.refer_config.kl_direction)
        l_alpha = temperature_loss(log_alpha, log_pi, self.target_entropy)
        keep = rule1_mask(near, mode, l_q)
        loss = (refer_loss(l_pi, kl, near, beta, mode, weight)
                + (keep * weight * l_q).mean() + ((weight > 0) * l_alpha).mean())
        stats = {"loss_q": l_q, "loss_pi": l_pi, "kl": kl, "near_fraction": near,
                 "entropy": -log_pi.detach(), "alpha": alpha.detach().expand_as(l_q), "q": q1}
        return Losses(loss, stats, rho, None, (y - q1).detach())

    def inputs(self, batch: TensorBatch) -> Inputs:
        """The actor's Gaussians and the critics' inputs of a minibatch: s_k and s_{k+1}
        themselves for a feed-forward actor; with a cell, sequences of W steps unrolled from
        their stored carries (:mod:`hpc_refer.algorithms.kit.recurrent`), the critics reading
        [s, h_t] (h_t with its gradient: the critics' regression trains the cell too; the
        actor's loss reads it detached) and the successor's Gaussian and h_{t+1} one cell
        step from the carry after step t."""
        if not isinstance(self.actor, RecurrentSquashedActor):
            mean, std = self.actor(batch.obs)
            with torch.no_grad():
                m_next, s_next = self.actor(batch.next_obs)
            return Inputs(mean, std, batch.obs, m_next, s_next, batch.next_obs)
        body, d = self.actor.body, self.obs_dim
        out, h, carry = body.sequences(batch.obs, self.config.bptt)
        with torch.no_grad():
            out_next, h_next = body.after(batch.next_obs, carry)
        return Inputs(*squashed_gaussian(out, self.act_dim),
                      torch.cat([batch.obs[..., :d], h], dim=-1),
                      *squashed_gaussian(out_next, self.act_dim),
                      torch.cat([batch.next_obs[..., :d], h_next], dim=-1))

    def after_step(self, t: int) -> None:
        """The target critics follow: w' <- (1 - tau) w' + tau w."""
        polyak_(self.target1, self.critic1, self.config.tau)
        polyak_(self.target2, self.critic2, self.config.tau)
