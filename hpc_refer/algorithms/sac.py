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
(reparameterised, eps ~ N(0, I); the terms of :mod:`hpc_refer.algorithms.kit.soft`):

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

import torch

from hpc_refer.algorithms.kit.actors import SquashedGaussianActor
from hpc_refer.algorithms.kit.base import Algorithm, Losses, TensorBatch, adam
from hpc_refer.algorithms.kit.bodies import BODY_POLICY_FORMAT, heads_with_bodies
from hpc_refer.algorithms.kit.critics import Critics
from hpc_refer.algorithms.kit.networks import BehaviourPolicy, gaussian_log_prob
from hpc_refer.algorithms.kit.refer import (
    critic_mask,
    importance_ratio,
    kl_penalty,
    near_policy,
    refer_loss,
)
from hpc_refer.algorithms.kit.shared import squared_td_loss
from hpc_refer.algorithms.kit.soft import (
    Temperature,
    soft_actor_loss,
    soft_target,
    squashed_log_prob,
    temperature_loss,
)
from hpc_refer.algorithms.registry import register
from hpc_refer.algorithms.tables.sac import SACConfig
from hpc_refer.config.tables import AlgorithmConfig, ReferConfig
from hpc_refer.replay.near import NearBounds
from hpc_refer.report.formats import TreeFormat


@register
class SAC(Algorithm):
    """SAC with ReF-ER: the squashed-Gaussian actor, twin critics with Polyak targets, the
    tuned temperature; three Adam optimizers (actor, critics, temperature)."""

    name = "sac"
    Config = SACConfig
    state_format = TreeFormat("algorithm", (heads_with_bodies("actor"),))
    policy_format = BODY_POLICY_FORMAT

    def __init__(self, obs_dim: int, act_dim: int, config: SACConfig, refer: ReferConfig,
                 seed: int) -> None:
        super().__init__(obs_dim, act_dim, config, refer, seed)
        self.config: SACConfig = config
        self.actor = SquashedGaussianActor(obs_dim, act_dim, config.network)
        self.critics = Critics(self.actor.body.seen_dim, act_dim, config.hidden,
                               config.activation, layer_norm=config.critic_layer_norm)
        self.temperature = Temperature(config.alpha_init)
        self.target_entropy = config.target_entropy * act_dim
        self.modules = {"actor": self.actor, **self.critics.modules(),
                        "temperature": self.temperature}
        self.optimizers = {
            "actor": adam(self.actor.parameters(), config.lr),
            "critics": adam(self.critics.parameters(), config.lr),
            "temperature": adam(self.temperature.parameters(), config.lr)}

    @classmethod
    def behaviour_policy(cls, obs_dim: int, act_dim: int,
                         config: AlgorithmConfig) -> BehaviourPolicy:
        assert isinstance(config, SACConfig)
        return SquashedGaussianActor(obs_dim, act_dim, config.network)

    @property
    def behaviour(self) -> BehaviourPolicy:
        return self.actor

    def loss_terms(self, batch: TensorBatch, beta: float | torch.Tensor,
                   bounds: NearBounds, resting: frozenset[str] = frozenset()) -> Losses:
        """ReF-ER loss of a minibatch (module docstring), its diagnostics, rho_k and the TD
        error y_k - Q_1(s_k, a_k) (both detached, before the step)."""
        mode = self.refer_config.mode
        weight = batch.weight
        log_alpha = self.temperature.log_alpha
        alpha = torch.exp(log_alpha)
        mean, std, obs, m_next, s_next, next_obs = self.actor.inputs(
            batch, self.config.sequence_length)
        rho = importance_ratio(gaussian_log_prob(batch.act, mean, std), batch.log_mu).detach()
        near = near_policy(rho, bounds)
        with torch.no_grad():
            u_next = m_next + s_next * torch.randn_like(m_next)
            a_next = torch.tanh(u_next)
            q_next = self.critics.min_target(next_obs, a_next)
            y = soft_target(batch.rew, batch.done, self.config.gamma, q_next, alpha,
                              squashed_log_prob(u_next, m_next, s_next))
        act = torch.tanh(batch.act)
        q1, q2 = self.critics(obs, act)
        l_q = squared_td_loss(y, q1) + squared_td_loss(y, q2)
        u = mean + std * torch.randn_like(mean)
        log_pi = squashed_log_prob(u, mean, std)
        l_pi = soft_actor_loss(alpha, log_pi,
                               self.critics.min_detached(obs.detach(), torch.tanh(u)))
        kl = kl_penalty(batch.mu_mean, batch.mu_std, mean, std, self.refer_config.kl_direction)
        l_alpha = temperature_loss(log_alpha, log_pi, self.target_entropy)
        keep = critic_mask(near, self.refer_config, l_q)
        loss = (refer_loss(l_pi, kl, near, beta, mode, weight)
                + (keep * weight * l_q).mean() + ((weight > 0) * l_alpha).mean())
        stats = {"loss_q": l_q, "loss_pi": l_pi, "kl": kl, "near_fraction": near,
                 "entropy": -log_pi.detach(), "alpha": alpha.detach().expand_as(l_q), "q": q1}
        return Losses(loss, stats, rho, None, (y - q1).detach())

    def after_step(self, t: int) -> None:
        """The target critics follow: w' <- (1 - tau) w' + tau w."""
        self.critics.follow_(self.config.tau)
