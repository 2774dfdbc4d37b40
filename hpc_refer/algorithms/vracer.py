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
:func:`hpc_refer.algorithms.kit.refer.refer_loss`. After each step the sampled rows get the
network's V_w and rho and their episodes' V-tbc are recomputed backward (eq. 8), see
:mod:`hpc_refer.replay.shard`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from hpc_refer.algorithms.kit.base import Algorithm, Losses, TensorBatch, adam
from hpc_refer.algorithms.kit.bodies import (
    BODY_POLICY_FORMAT,
    BodyPolicy,
    heads_with_bodies,
    make_body,
)
from hpc_refer.algorithms.kit.networks import BehaviourPolicy, gaussian_log_prob
from hpc_refer.algorithms.kit.ops import Arrays, Op
from hpc_refer.algorithms.kit.refer import importance_ratio, kl_penalty, near_policy, refer_loss
from hpc_refer.algorithms.registry import register
from hpc_refer.algorithms.tables.vracer import VRacerConfig
from hpc_refer.config.tables import AlgorithmConfig, NetworkShape, ReferConfig
from hpc_refer.replay.near import NearBounds
from hpc_refer.report.formats import TreeFormat


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


def inverse_softplus(y: float) -> float:
    """x with softplus(x) = log(1 + e^x) = y (y > 0): x = y + log(1 - e^-y)."""
    return y + math.log(-math.expm1(-y))


class GaussianPolicyValueNet(BodyPolicy):
    """V-RACER's single network: rows -> (V_w(s), m_w(s), sigma_w), over a body of 1 + A
    outputs (:mod:`~hpc_refer.algorithms.kit.bodies`: feed-forward, or recurrent with each
    row's stored carry).

    The body's outputs are the state value and the policy mean; the standard deviation is a
    state-independent learned vector sigma = softplus(p), initialised to ``sigma_init`` (as in
    the reference code). The output layer starts small so that m_w(s) ~ 0 and V_w(s) ~ 0.
    """

    def __init__(self, obs_dim: int, act_dim: int, network: NetworkShape,
                 sigma_init: float) -> None:
        super().__init__(make_body(obs_dim, 1 + act_dim, network))
        self.act_dim = act_dim
        self.sigma_param = nn.Parameter(torch.full((act_dim,), inverse_softplus(sigma_init)))

    def split(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """V [B], mean [B, A] and std [A] from the body's outputs [V, m]."""
        return out[..., 0], out[..., 1:], nn.functional.softplus(self.sigma_param)

    def forward(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """V, mean and std at rows, each from its stored carry."""
        return self.split(self.body.rows(rows).out)

    def sequences(self, rows: torch.Tensor, length: int
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """V, mean and std of a minibatch of sequences of ``length`` rows
        (:meth:`~hpc_refer.algorithms.kit.bodies.Body.sequences`)."""
        return self.split(self.body.sequences(rows, length).out)

    def read(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The behaviour an actor samples from: mean [B, A] and std [A]."""
        _, mean, std = self.split(out)
        return mean, std

    def read_ops(self, arrays: Arrays) -> tuple[list[Op], list[Op]]:
        """m_w, the outputs after V_w, and softplus(p)."""
        return ([Op("take", attrs={"start": 1, "count": self.act_dim})],
                [Op("const", arrays(self.sigma_param)), Op("softplus")])

    def numpy_values(self) -> Callable[[np.ndarray], np.ndarray]:
        """rows -> V_w in numpy, by the body's evaluator (on views of the parameters: valid
        while they stay in the same storage)."""
        outputs = self.body.evaluator()
        return lambda rows: outputs(rows)[..., 0]


@register
class VRacer(Algorithm):
    """V-RACER: one network for V_w, m_w and sigma_w, Adam, and its ReF-ER gradient step.

    Notes
    -----
    With L learners, each takes ``batch / L`` rows of its own shard; the learner's step
    averages the gradients (one allreduce of one flat vector per step), so all learners take
    identical steps.
    """

    name = "vracer"
    Config = VRacerConfig
    state_format = TreeFormat("algorithm", (heads_with_bodies("net"),))
    policy_format = BODY_POLICY_FORMAT

    def __init__(self, obs_dim: int, act_dim: int, config: VRacerConfig, refer: ReferConfig,
                 seed: int) -> None:
        super().__init__(obs_dim, act_dim, config, refer, seed)
        self.net = GaussianPolicyValueNet(obs_dim, act_dim, config.network, config.sigma_init)
        self.modules = {"net": self.net}
        self.optimizers = {"adam": adam(self.net.parameters(), config.lr)}
        self._numpy_net: tuple[int, Callable[[np.ndarray], np.ndarray]] | None = None

    @classmethod
    def behaviour_policy(cls, obs_dim: int, act_dim: int,
                         config: AlgorithmConfig) -> BehaviourPolicy:
        assert isinstance(config, VRacerConfig)
        return GaussianPolicyValueNet(obs_dim, act_dim, config.network, config.sigma_init)

    @property
    def behaviour(self) -> BehaviourPolicy:
        return self.net

    def loss_terms(self, batch: TensorBatch, beta: float | torch.Tensor,
                   bounds: NearBounds, resting: frozenset[str] = frozenset()) -> Losses:
        """ReF-ER loss of a minibatch (eq. 10 over eqs. 5 and 9), its diagnostics, V_w(s_k),
        rho_k and the error Q-ret_k - V_w(s_k) (detached)."""
        assert batch.q_ret is not None, "V-RACER needs Q-ret: a replay with retrace"
        q_ret = batch.q_ret
        value, mean, std = self.net.sequences(batch.obs, self.config.sequence_length)
        log_pi = gaussian_log_prob(batch.act, mean, std)
        rho = importance_ratio(log_pi, batch.log_mu)
        near = near_policy(rho, bounds)
        l_pi = policy_loss(rho, q_ret, value, log_pi)
        l_v = value_loss(rho, q_ret, value)
        kl = kl_penalty(batch.mu_mean, batch.mu_std, mean, std, self.refer_config.kl_direction)
        loss = refer_loss(l_pi + l_v, kl, near, beta, self.refer_config.mode, batch.weight)
        stats = {"loss_pi": l_pi, "loss_v": l_v, "kl": kl, "near_fraction": near}
        value = value.detach()
        return Losses(loss, stats, rho.detach(), value, q_ret - value)

    @torch.no_grad()
    def evaluate(self, obs: np.ndarray, act: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        value, mean, std = self.net(torch.from_numpy(obs))
        return value.numpy(), gaussian_log_prob(torch.from_numpy(act), mean, std).numpy()

    def values(self, obs: np.ndarray) -> np.ndarray:
        """V_w(s) in numpy (:meth:`GaussianPolicyValueNet.numpy_values`: a feed-forward body's
        numpy forward on views of the parameters, since a step refreshes a few bootstrap
        states, where a torch call's overhead, about 50 us, is several times the arithmetic; a
        recurrent body's torch step from each row's stored carry). The views are rebuilt if
        the parameters moved to new storage (a deep copy of the algorithm)."""
        key = next(self.net.parameters()).data_ptr()
        if self._numpy_net is None or self._numpy_net[0] != key:
            self._numpy_net = key, self.net.numpy_values()
        return self._numpy_net[1](obs)
