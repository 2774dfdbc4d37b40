"""CrossQ (Bhatt, Palenicek, Belousov, Argus, Amiranashvili, Brox & Peters 2024, "CrossQ: Batch
Normalization in Deep Reinforcement Learning for Greater Sample Efficiency and Simplicity")
with ReF-ER (Novati & Koumoutsakos 2019).

SAC's maximum-entropy actor-critic (:mod:`hpc_refer.algorithms.kit.soft`) with three changes:
batch renormalisation in the actor and the critics (:mod:`hpc_refer.algorithms.kit.renorm`),
no target networks, and the current and next state-action pairs through each critic in one
joint training batch, so that the renormalisation's statistics come from their mixture
(Bhatt et al. sec. 4). Per sample k, with u' ~ pi(.|s_{k+1}) from the actor in evaluation
and u~ = m_w + sigma_w eps from the actor's training forward at s_k:

    [Q_i(s_k, a_k); Q_i(s', tanh u')] = Q_i([s_k; s'], [a_k; tanh u'])   (one batch of 2 B)
    y_k     = r_{k+1} + gamma (1 - done_k) [min_i Q_i(s', tanh u') - alpha log pi~(u'|s')]
    L_Q,k   = sum_i 1/2 (y_k - Q_i(s_k, a_k))^2                            (y_k fixed)
    L_pi,k  = alpha log pi~(u~|s_k) - min_i Q_i(s_k, tanh u~)      (critics fixed, evaluated)
    L_alpha = -log alpha (log pi~(u~|s_k) + H)

(a_k = tanh u_k, the stored action). Adam with beta1 = 0.5 for the actor and the critics; the
actor and the temperature step every ``policy_delay`` = 3 gradient steps (at t % 3 == 0;
sb3-contrib at its count of updates % 3 == 0, one step later), the critics every step. As in
sb3-contrib, Q_i(s_k, tanh u~) in L_pi reads the critics' running statistics as the joint
batch left them, and a network's running statistics move when its optimizer steps (the
actor's on its delayed steps). One difference from sb3-contrib, as this project's SAC: the
losses are one function of the parameters before the step, so L_pi's gradient reads the
critics before their step of this minibatch, not after it.

ReF-ER: the behaviour policy is the actor in evaluation (the running statistics, what the
actors sample from), so rho_k = pi_w(u_k|s_k) / mu_k(u_k|s_k) and the KL penalty of eq. 11 are
those of the evaluated Gaussians over u; Rule 1 removes far-policy samples' gradient from the
actor's and the critics' terms, Rule 2 weights the actor's by beta and adds (1 - beta) KL_k
(:func:`hpc_refer.algorithms.kit.refer.refer_loss`); the critics' regression is not weighted by
beta, nor is the temperature's step. ``refer.mode = er`` is plain CrossQ.
"""

from __future__ import annotations

import torch

from hpc_refer.algorithms.kit.actors import RenormSquashedActor
from hpc_refer.algorithms.kit.base import Algorithm, Losses, TensorBatch, adam
from hpc_refer.algorithms.kit.critics import minimum
from hpc_refer.algorithms.kit.networks import BehaviourPolicy, gaussian_log_prob
from hpc_refer.algorithms.kit.refer import (
    critic_mask,
    importance_ratio,
    kl_penalty,
    near_policy,
    refer_loss,
)
from hpc_refer.algorithms.kit.renorm import RenormQ, RenormShape, Updates
from hpc_refer.algorithms.kit.shared import squared_td_loss
from hpc_refer.algorithms.kit.soft import (
    Temperature,
    soft_actor_loss,
    soft_target,
    squashed_log_prob,
    temperature_loss,
)
from hpc_refer.algorithms.registry import register
from hpc_refer.algorithms.tables.crossq import CrossQConfig
from hpc_refer.config.tables import AlgorithmConfig, ReferConfig
from hpc_refer.replay.near import NearBounds

CRITICS = 2
"""The number of critics (twin, as SAC's and sb3-contrib's)."""


def renorm_shape(config: CrossQConfig) -> RenormShape:
    """The batch-renormalisation settings of the table."""
    return RenormShape(config.renorm_momentum, config.renorm_eps, config.renorm_warmup)


def joint_critic_batch(critics: tuple[RenormQ, ...], obs: torch.Tensor, act: torch.Tensor,
                       next_obs: torch.Tensor, next_act: torch.Tensor
                       ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[Updates]]:
    """Each critic's training forward of [s_k; s'] x [a_k; a'] as one batch of 2 B (Bhatt et
    al. sec. 4): Q_i(s_k, a_k) and Q_i(s', a') (both [B]), and each critic's new running
    statistics (by its own buffer names)."""
    both_obs, both_act = torch.cat([obs, next_obs]), torch.cat([act, next_act])
    now, succ, updates = [], [], []
    for q in critics:
        values, new = q.train_forward(both_obs, both_act)
        first, second = values.split(obs.shape[0])
        now.append(first)
        succ.append(second)
        updates.append(new)
    return now, succ, updates


@register
class CrossQ(Algorithm):
    """CrossQ with ReF-ER: the batch-renormalised squashed-Gaussian actor, two batch-
    renormalised critics without targets, the tuned temperature; three Adam optimizers (the
    actor's and the temperature's every ``policy_delay`` steps)."""

    name = "crossq"
    Config = CrossQConfig

    def __init__(self, obs_dim: int, act_dim: int, config: CrossQConfig, refer: ReferConfig,
                 seed: int) -> None:
        super().__init__(obs_dim, act_dim, config, refer, seed)
        self.config: CrossQConfig = config
        shape = renorm_shape(config)
        self.actor = RenormSquashedActor(obs_dim, act_dim, config.hidden, shape)
        self.critics = tuple(RenormQ(obs_dim, act_dim, config.critic_hidden, shape)
                             for _ in range(CRITICS))
        self.temperature = Temperature(config.alpha_init)
        self.target_entropy = config.target_entropy * act_dim
        self.modules = {"actor": self.actor,
                        **{f"critic{i}": q for i, q in enumerate(self.critics, 1)},
                        "temperature": self.temperature}
        betas = (config.adam_beta1, 0.999)
        delay = config.policy_delay
        self.optimizers = {
            "actor": adam(self.actor.parameters(), config.lr, every=delay, betas=betas),
            "critics": adam([p for q in self.critics for p in q.parameters()], config.lr,
                            betas=betas),
            "temperature": adam(self.temperature.parameters(), config.lr, every=delay)}

    @classmethod
    def behaviour_policy(cls, obs_dim: int, act_dim: int,
                         config: AlgorithmConfig) -> BehaviourPolicy:
        assert isinstance(config, CrossQConfig)
        return RenormSquashedActor(obs_dim, act_dim, config.hidden, renorm_shape(config))

    @property
    def behaviour(self) -> BehaviourPolicy:
        return self.actor

    def loss_terms(self, batch: TensorBatch, beta: float | torch.Tensor,
                   bounds: NearBounds, resting: frozenset[str] = frozenset()) -> Losses:
        """ReF-ER loss of a minibatch (module docstring), its diagnostics, rho_k, the TD error
        y_k - Q_1(s_k, a_k) (both detached, before the step) and the networks' new running
        statistics. Where the actor's and the temperature's optimizers rest (``resting``, two
        steps in three), L_pi, the KL penalty and L_alpha are left out (their gradients reach
        only those two; as sb3-contrib, which computes the actor's loss on its delayed steps
        only): the actor's training forward, the critics' forward at its actions and both
        backward passes, about a third of the step's arithmetic."""
        mode, weight = self.refer_config.mode, batch.weight
        log_alpha = self.temperature.log_alpha
        alpha = torch.exp(log_alpha.detach())
        mean_mu, std_mu = self.actor.policy(batch.obs)
        rho = importance_ratio(gaussian_log_prob(batch.act, mean_mu, std_mu),
                               batch.log_mu).detach()
        near = near_policy(rho, bounds)
        kl = kl_penalty(batch.mu_mean, batch.mu_std, mean_mu, std_mu,
                        self.refer_config.kl_direction)
        with torch.no_grad():
            m_next, s_next = self.actor.policy(batch.next_obs)
            u_next = m_next + s_next * torch.randn_like(m_next)
            log_pi_next = squashed_log_prob(u_next, m_next, s_next)
        q_now, q_next, critic_updates = joint_critic_batch(
            self.critics, batch.obs, torch.tanh(batch.act), batch.next_obs, torch.tanh(u_next))
        y = soft_target(batch.rew, batch.done, self.config.gamma, minimum(q_next).detach(),
                        alpha, log_pi_next)
        l_q = sum((squared_td_loss(y, q) for q in q_now), torch.zeros_like(y))
        keep = critic_mask(near, self.refer_config, l_q)
        stats = {"loss_q": l_q, "kl": kl, "near_fraction": near, "alpha": alpha.expand_as(l_q),
                 "q": q_now[0]}
        updates: dict[str, torch.Tensor] = {}
        for i, new in enumerate(critic_updates, 1):
            updates.update({f"critic{i}.{k}": v for k, v in new.items()})
        loss = (keep * weight * l_q).mean()
        if {"actor", "temperature"} <= resting:
            return Losses(loss, stats, rho, None, (y - q_now[0]).detach(), updates)
        mean, std, actor_updates = self.actor.train_gaussian(batch.obs)
        u = mean + std * torch.randn_like(mean)
        log_pi = squashed_log_prob(u, mean, std)
        a_pi = torch.tanh(u)
        q_pi = minimum([q.frozen(batch.obs, a_pi, new)
                        for q, new in zip(self.critics, critic_updates, strict=True)])
        l_pi = soft_actor_loss(alpha, log_pi, q_pi)
        l_alpha = temperature_loss(log_alpha, log_pi, self.target_entropy)
        loss = (loss + refer_loss(l_pi, kl, near, beta, mode, weight)
                + ((weight > 0) * l_alpha).mean())
        stats.update({"loss_pi": l_pi, "entropy": -log_pi.detach()})
        updates.update({f"actor.{k}": v for k, v in actor_updates.items()})
        return Losses(loss, stats, rho, None, (y - q_now[0]).detach(), updates)

