"""DDPG (Lillicrap et al. 2016) with ReF-ER (Novati & Koumoutsakos 2019, Sec. 4 and App. A).

A deterministic actor m_w(s) (in the normalised action box, tanh on its output) and a critic
Q_w'(s, a), each with a target copy (m_target, Q_target) that follows it by Polyak averaging,
w_target <- (1 - tau) w_target + tau w after every step. The behaviour policy, which actors
sample from and which defines rho and the KL of ReF-ER, is the Gaussian
pi_w(a|s) = N(m_w(s), sigma^2 I) with a fixed sigma (0.2). From a minibatch of stored
transitions k it minimises, per sample,

    L_Q,k  = 1/2 (y_k - Q_w'(s_k, a_k))^2,                                   (eq. 2)
             y_k = r_{k+1} + gamma (1 - done_k) Q_target(s_{k+1}, m_target(s_{k+1})) fixed,
    L_mu,k = - Q_w'(s_k, m_w(s_k))   (gradient to the actor's w only: g_DPG, eq. 3),

and with ReF-ER (rho_k = pi_w(a_k|s_k) / mu_k(a_k|s_k), near iff 1/c_max < rho_k < c_max):

    Rule 1: far-policy samples give zero actor and zero critic gradient;
    Rule 2: the actor follows beta g_DPG - (1 - beta) g_D, g_D = grad_w E_k[KL_k] (eqs. 10-11);
            the critic's gradient is not scaled by beta.

So the minibatch loss is :func:`hpc_refer.algorithms.kit.refer.refer_loss` over (L_mu, KL) plus
1/B sum_k keep_k w_k L_Q,k, keep_k = 1[k near] under Rule 1 (else 1), w_k the PER weight.
Without ReF-ER (``refer.mode er``) it is plain DDPG with experience replay (whose actors may
then use Ornstein-Uhlenbeck noise, see :mod:`hpc_refer.loop.actor`).

With ``ddpg.cell = gru | lstm`` the actor carries a recurrent cell
(:mod:`hpc_refer.algorithms.kit.recurrent`): the minibatch is sequences of W = ``ddpg.bptt`` steps
unrolled from their stored carries, the critic reads [s_k, h_k] (h_k the actor's cell output,
trained by the critic's regression, detached in L_mu), and m_target(s_{k+1}) with h'_{k+1} is
one step of the target actor's cell from the carry after step k.
"""

from __future__ import annotations

import torch

from hpc_refer.algorithms.kit.actors import DeterministicActor, DeterministicInputs
from hpc_refer.algorithms.kit.base import Algorithm, Losses, TensorBatch, adam
from hpc_refer.algorithms.kit.bodies import BODY_POLICY_FORMAT, heads_with_bodies
from hpc_refer.algorithms.kit.networks import BehaviourPolicy, QNetwork, gaussian_log_prob
from hpc_refer.algorithms.kit.refer import (
    critic_mask,
    importance_ratio,
    kl_penalty,
    near_policy,
    refer_loss,
)
from hpc_refer.algorithms.kit.shared import (
    detached_critic,
    frozen_copy,
    polyak_,
    squared_td_loss,
    td_target,
)
from hpc_refer.algorithms.registry import register
from hpc_refer.algorithms.tables.ddpg import DDPGConfig
from hpc_refer.config.tables import AlgorithmConfig, ReferConfig
from hpc_refer.replay.near import NearBounds
from hpc_refer.report.formats import TreeFormat


def actor_loss(q_pi: torch.Tensor) -> torch.Tensor:
    """Per-sample L_mu,k = -Q_w'(s_k, m_w(s_k)) (eq. 3, deterministic policy gradient).

    ``q_pi`` must be computed with the critic's parameters detached (see
    :meth:`DDPG.q_of_policy`), so that grad L_mu,k = -dQ/da|_{a = m_w(s_k)} dm_w/dw reaches the
    actor's parameters only: this is -g_DPG,k.
    """
    return -q_pi


@register
class DDPG(Algorithm):
    """DDPG with ReF-ER: actor, critic, their Polyak targets, and two Adam optimizers.

    Notes
    -----
    The actor's Adam has lr = ``ddpg.lr``, the critic's ``critic_lr_factor`` times it with L2
    weight decay ``critic_l2``; both are scaled by the learner's eta(t)/eta0 (eq. 13, 1 under
    plain ER). The target networks are in ``modules`` (checkpoints, checksums) but have no
    optimizer and no gradient.
    """

    name = "ddpg"
    Config = DDPGConfig
    state_format = TreeFormat("algorithm", (heads_with_bodies("actor", "target_actor"),))
    policy_format = BODY_POLICY_FORMAT

    def __init__(self, obs_dim: int, act_dim: int, config: DDPGConfig, refer: ReferConfig,
                 seed: int) -> None:
        super().__init__(obs_dim, act_dim, config, refer, seed)
        self.config: DDPGConfig = config
        self.actor = DeterministicActor(obs_dim, act_dim, config.network, config.sigma)
        self.critic = QNetwork(self.actor.body.seen_dim, act_dim, config.hidden)
        self.target_actor = frozen_copy(self.actor)
        self.target_critic = frozen_copy(self.critic)
        critic_lr = config.critic_lr_factor * config.lr
        self.modules = {"actor": self.actor, "critic": self.critic,
                        "target_actor": self.target_actor, "target_critic": self.target_critic}
        self.optimizers = {"actor": adam(self.actor.parameters(), config.lr),
                           "critic": adam(self.critic.parameters(), critic_lr,
                                          weight_decay=config.critic_l2)}

    @classmethod
    def behaviour_policy(cls, obs_dim: int, act_dim: int,
                         config: AlgorithmConfig) -> BehaviourPolicy:
        assert isinstance(config, DDPGConfig)
        return DeterministicActor(obs_dim, act_dim, config.network, config.sigma)

    @property
    def behaviour(self) -> BehaviourPolicy:
        return self.actor

    def q_of_policy(self, obs: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
        """Q_w'(s, m_w(s)) with the critic's parameters detached: gradient to ``mean`` only."""
        return detached_critic(self.critic, obs, mean)

    @torch.no_grad()
    def targets(self, batch: TensorBatch, inputs: DeterministicInputs) -> torch.Tensor:
        """y_k = r_{k+1} + gamma (1 - done_k) Q_target(s_{k+1}, m_target(s_{k+1})) (eq. 2,
        the target networks)."""
        q_next = self.target_critic(inputs.next_critic_obs, inputs.next_action)
        return td_target(batch.rew, batch.done, self.config.gamma, q_next)

    def loss_terms(self, batch: TensorBatch, beta: float | torch.Tensor,
                   bounds: NearBounds, resting: frozenset[str] = frozenset()) -> Losses:
        """ReF-ER loss of a minibatch, its diagnostics, rho_k and the TD errors y_k - Q (both
        detached, before the step)."""
        act, weight = batch.act, batch.weight
        mode = self.refer_config.mode
        inputs = self.actor.inputs(batch, self.target_actor, self.config.sequence_length)
        mean, obs = inputs.mean, inputs.critic_obs
        y = self.targets(batch, inputs)
        q = self.critic(obs, act)
        sigma = self.actor.sigma
        rho = importance_ratio(gaussian_log_prob(act, mean, sigma), batch.log_mu).detach()
        near = near_policy(rho, bounds)
        l_q = squared_td_loss(y, q)
        l_mu = actor_loss(self.q_of_policy(obs.detach(), mean))
        kl = kl_penalty(batch.mu_mean, batch.mu_std, mean, sigma, self.refer_config.kl_direction)
        keep = critic_mask(near, self.refer_config, l_q)
        loss = refer_loss(l_mu, kl, near, beta, mode, weight) + (keep * weight * l_q).mean()
        stats = {"loss_q": l_q, "loss_mu": l_mu, "kl": kl, "near_fraction": near,
                 "q": q}
        return Losses(loss, stats, rho, None, (y - q).detach())

    def after_step(self, t: int) -> None:
        """The targets follow: w' <- (1 - tau) w' + tau w for the actor and the critic."""
        polyak_(self.target_actor, self.actor, self.config.tau)
        polyak_(self.target_critic, self.critic, self.config.tau)
