"""An algorithm from outside the package, registered as a plug-in (``--plugins
plugin_algorithm --algorithm delayed_ac``): tests/test_plugins.py trains it in one process
and under mpirun, checkpoints and restarts it, without any package file knowing it.

DelayedAC is a small deterministic actor-critic with ReF-ER: the critic regresses on
y_k = r_{k+1} + gamma (1 - done_k) Q_w'(s_{k+1}, m_w(s_{k+1})) (no target networks), the
actor follows the deterministic policy gradient of Q with Rule 1 and Rule 2 as DDPG's, and
the actor's optimizer steps only every ``actor_every`` gradient steps (TD3's delayed policy
update, Fujimoto et al. 2018), through ``OptimizerSpec.every``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from hpc_refer.algorithms.kit.actors import DeterministicActor
from hpc_refer.algorithms.kit.base import Algorithm, Losses, OptimizerSpec, TensorBatch
from hpc_refer.algorithms.kit.bodies import BODY_POLICY_FORMAT, heads_with_bodies
from hpc_refer.algorithms.kit.networks import BehaviourPolicy, QNetwork, gaussian_log_prob
from hpc_refer.algorithms.kit.refer import (
    importance_ratio,
    kl_penalty,
    near_policy,
    refer_loss,
    rule1_mask,
)
from hpc_refer.algorithms.kit.shared import squared_td_loss, td_target
from hpc_refer.algorithms.registry import register
from hpc_refer.config.modes import require
from hpc_refer.config.tables import AlgorithmConfig, ReferConfig
from hpc_refer.config.values import option
from hpc_refer.replay.near import NearBounds
from hpc_refer.report.formats import TreeFormat


@dataclass(frozen=True)
class DelayedACConfig(AlgorithmConfig):
    """A deterministic actor-critic whose actor steps every ``actor_every`` steps."""

    section: ClassVar[str] = "delayed_ac"
    hidden: tuple[int, ...] = option((16, 16), "hidden layer widths")
    batch: int = option(32, "minibatch size B (global over all learners)")
    lr: float = option(1e-3, "Adam learning rate of actor and critic")
    replay_size: int = option(4096, "the algorithm's replay capacity N")
    actor_every: int = option(2, "the actor's optimizer steps every this many gradient steps")
    sigma: float = option(0.3, "std of the Gaussian behaviour N(m(s), sigma^2)")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.actor_every >= 1, "delayed_ac.actor_every", self.actor_every,
                "integers >= 1")
        require(self.sigma > 0, "delayed_ac.sigma", self.sigma, "values > 0")


@register
class DelayedAC(Algorithm):
    """Actor m_w, critic Q_w', Adam each; the actor's every ``actor_every`` steps."""

    name = "delayed_ac"
    Config = DelayedACConfig
    # The kit's actor holds a body (hpc_refer.algorithms.kit.bodies): checkpoints and policy
    # files written before it named the actor's tensors without ``body.``; these upgrades
    # read them (a plug-in with modules of its own keeps the base's formats).
    state_format = TreeFormat("algorithm", (heads_with_bodies("actor"),))
    policy_format = BODY_POLICY_FORMAT

    def __init__(self, obs_dim: int, act_dim: int, config: DelayedACConfig,
                 refer: ReferConfig, seed: int) -> None:
        super().__init__(obs_dim, act_dim, config, refer, seed)
        self.config: DelayedACConfig = config
        self.actor = DeterministicActor(obs_dim, act_dim, config.network, config.sigma)
        self.critic = QNetwork(obs_dim, act_dim, config.hidden)
        self.modules = {"actor": self.actor, "critic": self.critic}
        actor_opt = torch.optim.Adam(self.actor.parameters(), lr=config.lr, fused=True)
        critic_opt = torch.optim.Adam(self.critic.parameters(), lr=config.lr, fused=True)
        self.optimizers = {"actor": OptimizerSpec(actor_opt, config.lr, config.actor_every),
                           "critic": OptimizerSpec(critic_opt, config.lr)}

    @classmethod
    def behaviour_policy(cls, obs_dim: int, act_dim: int,
                         config: AlgorithmConfig) -> BehaviourPolicy:
        assert isinstance(config, DelayedACConfig)
        return DeterministicActor(obs_dim, act_dim, config.network, config.sigma)

    @property
    def behaviour(self) -> BehaviourPolicy:
        return self.actor

    def loss_terms(self, batch: TensorBatch, beta: float | torch.Tensor,
                   bounds: NearBounds) -> Losses:
        mode = self.refer_config.mode
        with torch.no_grad():
            q_next = self.critic(batch.next_obs, self.actor(batch.next_obs))
            y = td_target(batch.rew, batch.done, self.config.gamma, q_next)
        q = self.critic(batch.obs, batch.act)
        mean = self.actor(batch.obs)
        sigma = self.actor.sigma
        rho = importance_ratio(gaussian_log_prob(batch.act, mean, sigma), batch.log_mu).detach()
        near = near_policy(rho, bounds)
        frozen = {k: v.detach() for k, v in self.critic.named_parameters()}
        l_mu = -torch.func.functional_call(self.critic, frozen, (batch.obs, mean))
        l_q = squared_td_loss(y, q)
        kl = kl_penalty(batch.mu_mean, batch.mu_std, mean, sigma,
                        self.refer_config.kl_direction)
        keep = rule1_mask(near, mode, l_q)
        loss = refer_loss(l_mu, kl, near, beta, mode, batch.weight) + (
            keep * batch.weight * l_q).mean()
        stats = {"loss_q": l_q, "loss_mu": l_mu, "kl": kl, "near_fraction": near}
        return Losses(loss, stats, rho, None, (y - q).detach())
