"""TD3 (Fujimoto, van Hoof & Meger 2018, "Addressing Function Approximation Error in
Actor-Critic Methods") with ReF-ER (Novati & Koumoutsakos 2019).

Built from the kit: the deterministic actor m_w(s) of :mod:`hpc_refer.algorithms.kit.actors`
with its target copy, and twin critics Q_1, Q_2 with Polyak targets
(:class:`~hpc_refer.algorithms.kit.critics.Critics`). Its three changes to DDPG, per sample k
(equation numbers of Fujimoto et al. 2018):

- **Clipped double Q** (eq. 10): y_k = r_{k+1} + gamma (1 - done_k) min_{i=1,2} Q'_i(s', a'),
  both critics regress on the same y_k: L_Q,k = sum_i 1/2 (y_k - Q_i(s_k, a_k))^2.
- **Target policy smoothing** (eq. 14): a' = clip(m_target(s') + clip(eps, -c, c), -1, 1),
  eps ~ N(0, sigma~^2) (``target_noise``, ``noise_clip``; the action box is the normalised
  [-1, 1]^A), drawn from torch's generator inside the loss as SAC's noise.
- **Delayed policy updates** (sec. 5.2): the actor's optimizer steps, and the targets follow
  (w' <- (1 - tau) w' + tau w), only at the gradient steps t with t % d == 0 (``policy_delay``
  d = 2); the critics step every time.

The actor's loss is L_mu,k = -Q_1(s_k, m_w(s_k)) with the critic's parameters detached (the
deterministic policy gradient, Q_1 only, as TD3). ReF-ER as DDPG's: the behaviour policy is
N(m_w(s), sigma^2 I) (``sigma`` 0.1, TD3's exploration noise), rho_k = pi_w(a_k|s_k) /
mu_k(a_k|s_k); Rule 1 removes far-policy samples' gradient from the actor's and the critics'
terms, Rule 2 weights the actor's by beta and adds (1 - beta) KL_k
(:func:`hpc_refer.algorithms.kit.refer.refer_loss`); the critics' regression is not weighted
by beta. ``refer.mode = er`` is plain TD3. With ``td3.cell`` the actor is recurrent as
DDPG's (the critics read [s, h]).
"""

from __future__ import annotations

import torch

from hpc_refer.algorithms.kit.actors import DeterministicActor
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
from hpc_refer.algorithms.kit.shared import (
    detached_critic,
    frozen_copy,
    polyak_,
    squared_td_loss,
    td_target,
)
from hpc_refer.algorithms.registry import register
from hpc_refer.algorithms.tables.td3 import TD3Config
from hpc_refer.config.tables import AlgorithmConfig, ReferConfig
from hpc_refer.replay.near import NearBounds
from hpc_refer.report.formats import TreeFormat


def smoothed_target_action(target_action: torch.Tensor, eps: torch.Tensor,
                           noise_clip: float) -> torch.Tensor:
    """a' = clip(m_target(s') + clip(eps, -c, c), -1, 1) (eq. 14), ``eps`` the smoothing noise
    drawn with std sigma~, c = ``noise_clip``, in the normalised action box."""
    return torch.clamp(target_action + torch.clamp(eps, -noise_clip, noise_clip), -1.0, 1.0)


def clipped_double_q_target(rew: torch.Tensor, done: torch.Tensor, gamma: float,
                            q1_next: torch.Tensor, q2_next: torch.Tensor) -> torch.Tensor:
    """y_k = r_{k+1} + gamma (1 - done_k) min(Q'_1(s', a'), Q'_2(s', a')), fixed (eq. 10)."""
    return td_target(rew, done, gamma, torch.minimum(q1_next, q2_next))


def actor_loss(q1_pi: torch.Tensor) -> torch.Tensor:
    """Per-sample L_mu,k = -Q_1(s_k, m_w(s_k)) (the deterministic policy gradient through the
    first critic, its parameters detached: the gradient reaches the actor only)."""
    return -q1_pi


def policy_step_due(t: int, delay: int) -> bool:
    """Whether gradient step ``t`` (the count of steps before it) updates the actor and the
    targets: t % d == 0, so the first step does, then every d-th."""
    return t % delay == 0


@register
class TD3(Algorithm):
    """TD3 with ReF-ER: the deterministic actor and its target, twin critics with their
    targets, two Adam optimizers (the actor's every ``policy_delay`` steps)."""

    name = "td3"
    Config = TD3Config
    state_format = TreeFormat("algorithm", (heads_with_bodies("actor", "target_actor"),))
    policy_format = BODY_POLICY_FORMAT

    def __init__(self, obs_dim: int, act_dim: int, config: TD3Config, refer: ReferConfig,
                 seed: int) -> None:
        super().__init__(obs_dim, act_dim, config, refer, seed)
        self.config: TD3Config = config
        self.actor = DeterministicActor(obs_dim, act_dim, config.network, config.sigma)
        self.critics = Critics(self.actor.body.seen_dim, act_dim, config.hidden,
                               config.activation, layer_norm=config.critic_layer_norm)
        self.target_actor = frozen_copy(self.actor)
        self.modules = {"actor": self.actor, "target_actor": self.target_actor,
                        **self.critics.modules()}
        self.optimizers = {"actor": adam(self.actor.parameters(), config.lr,
                                         every=config.policy_delay),
                           "critics": adam(self.critics.parameters(), config.lr)}

    @classmethod
    def behaviour_policy(cls, obs_dim: int, act_dim: int,
                         config: AlgorithmConfig) -> BehaviourPolicy:
        assert isinstance(config, TD3Config)
        return DeterministicActor(obs_dim, act_dim, config.network, config.sigma)

    @property
    def behaviour(self) -> BehaviourPolicy:
        return self.actor

    def loss_terms(self, batch: TensorBatch, beta: float | torch.Tensor,
                   bounds: NearBounds, resting: frozenset[str] = frozenset()) -> Losses:
        """ReF-ER loss of a minibatch (module docstring), its diagnostics, rho_k and the TD
        error y_k - Q_1(s_k, a_k) (both detached, before the step). Where the actor's
        optimizer rests (``resting``, every other step) L_mu and the KL penalty, whose
        gradients reach only the actor, are left out (the critic's forward at the actor's
        action and its backward)."""
        cfg, mode = self.config, self.refer_config.mode
        act, weight = batch.act, batch.weight
        inputs = self.actor.inputs(batch, self.target_actor, cfg.sequence_length)
        mean, obs = inputs.mean, inputs.critic_obs
        with torch.no_grad():
            eps = cfg.target_noise * torch.randn_like(inputs.next_action)
            a_next = smoothed_target_action(inputs.next_action, eps, cfg.noise_clip)
            t1, t2 = self.critics.targets
            y = clipped_double_q_target(batch.rew, batch.done, cfg.gamma,
                                        t1(inputs.next_critic_obs, a_next),
                                        t2(inputs.next_critic_obs, a_next))
        q1, q2 = self.critics(obs, act)
        l_q = squared_td_loss(y, q1) + squared_td_loss(y, q2)
        sigma = self.actor.sigma
        rho = importance_ratio(gaussian_log_prob(act, mean, sigma), batch.log_mu).detach()
        near = near_policy(rho, bounds)
        kl = kl_penalty(batch.mu_mean, batch.mu_std, mean, sigma, self.refer_config.kl_direction)
        keep = critic_mask(near, self.refer_config, l_q)
        loss = (keep * weight * l_q).mean()
        stats = {"loss_q": l_q, "kl": kl, "near_fraction": near, "q": q1}
        if "actor" not in resting:
            l_mu = actor_loss(detached_critic(self.critics.q[0], obs.detach(), mean))
            loss = loss + refer_loss(l_mu, kl, near, beta, mode, weight)
            stats["loss_mu"] = l_mu
        return Losses(loss, stats, rho, None, (y - q1).detach())

    def after_step(self, t: int) -> None:
        """On the delayed steps (:func:`policy_step_due`) the targets follow their networks:
        w' <- (1 - tau) w' + tau w for the actor and both critics."""
        if policy_step_due(t, self.config.policy_delay):
            polyak_(self.target_actor, self.actor, self.config.tau)
            self.critics.follow_(self.config.tau)
