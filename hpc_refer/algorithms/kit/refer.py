"""Remember-and-Forget Experience Replay (Novati & Koumoutsakos, ICML 2019), algorithm-agnostic.

Pure functions of the quantities the paper names (rho, c_max, beta, D, eta, A, C) plus the
small state object that carries beta across gradient steps. Any off-policy algorithm with a
parameterised policy uses it the same way:

1. compute the importance weights rho_k = pi_w(a_k|s_k) / mu_k(a_k|s_k) of its minibatch
   (:func:`importance_ratio`), and the near/far mask (:func:`near_policy`, the rule of
   :mod:`hpc_refer.replay.near`);
2. form its per-sample objective L_k (whose gradient is the algorithm's g_k) and the per-sample
   penalty KL_k (:func:`kl_penalty`, eq. 11), and minimise :func:`refer_loss`, which is eq.
   10 in loss form together with Rule 1 (:func:`rule1_mask`: algorithms with several terms
   mask each the same way; a critic's regression through :func:`critic_mask`, which
   ``refer.rule1_critics = false`` leaves unmasked);
3. after the step, feed the replay memory's far-policy count to :meth:`ReferState.update`
   (eq. 12) and read the annealed c_max and learning rate (eq. 13).

Variants (``mode``, a :class:`~hpc_refer.config.modes.ReferMode`): ``refer`` (Rules 1 and 2),
``refer1`` (Rule 1 only), ``refer2`` (Rule 2 only), ``er`` (neither: plain experience replay,
and no annealing of the learning rate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from hpc_refer.algorithms.kit.networks import gaussian_kl
from hpc_refer.config.modes import KLDirection, ReferMode
from hpc_refer.config.tables import ReferConfig
from hpc_refer.replay.near import NearBounds

if TYPE_CHECKING:
    from hpc_refer.report.records import StateTree

LOG_RHO_CLIP = 7.0


def importance_ratio(log_pi: torch.Tensor, log_mu: torch.Tensor) -> torch.Tensor:
    """rho = pi / mu = exp(clip(log pi - log mu, -7, 7)) (clipped as the reference code)."""
    return torch.exp(torch.clamp(log_pi - log_mu, -LOG_RHO_CLIP, LOG_RHO_CLIP))


def near_policy(rho: torch.Tensor, bounds: NearBounds) -> torch.Tensor:
    """Near-policy test of Sec. 3: 1/c_max < rho < c_max (boolean mask, no gradient), with
    the float32 thresholds of :class:`~hpc_refer.replay.near.NearBounds` (floats, or 0-d tensors in
    the compiled step)."""
    rho = rho.detach()
    return (rho > bounds.low) & (rho < bounds.high)


def rule1_mask(near: torch.Tensor, mode: ReferMode, like: torch.Tensor) -> torch.Tensor:
    """Rule 1 as a per-sample factor: 1[k near] when the mode applies it, else 1 (in the
    dtype and shape of ``like``): far-policy samples then give no gradient of the term it
    multiplies."""
    return near.to(like.dtype) if mode.rule1 else torch.ones_like(like)


def critic_mask(near: torch.Tensor, refer: ReferConfig, like: torch.Tensor) -> torch.Tensor:
    """Rule 1 for a critic's regression (DDPG, TD3, SAC, CrossQ): :func:`rule1_mask` where
    ``refer.rule1_critics`` (the paper's rule: a far-policy sample gives no gradient at all),
    else 1 (Rule 1 on the actor's loss only: the critics' TD targets use no rho, so every
    stored transition is a valid regression sample)."""
    if refer.rule1_critics:
        return rule1_mask(near, refer.mode, like)
    return torch.ones_like(like)


def kl_penalty(mu_mean: torch.Tensor, mu_std: torch.Tensor, mean: torch.Tensor,
               std: torch.Tensor, direction: KLDirection) -> torch.Tensor:
    """Per-sample KL_k of eq. 11: KL(mu_k || pi_w(.|s_k)) (``mu_pi``, the paper's direction)
    or KL(pi_w || mu_k) (``pi_mu``, the reference code's)."""
    if direction is KLDirection.MU_PI:
        return gaussian_kl(mu_mean, mu_std, mean, std)
    return gaussian_kl(mean, std, mu_mean, mu_std)


def c_max_at(t: int, C: float, A: float) -> float:
    """Eq. 13: c_max(t) = 1 + C / (1 + A t), t the number of gradient steps."""
    return 1.0 + C / (1.0 + A * t)


def learning_rate_at(t: int, eta0: float, A: float) -> float:
    """Eq. 13: eta(t) = eta0 / (1 + A t)."""
    return eta0 / (1.0 + A * t)


def beta_update(beta: float, far_fraction: float, D: float, eta: float) -> float:
    """Eq. 12: beta <- (1 - eta) beta if n_far / N > D, else (1 - eta) beta + eta.

    Fixed points: beta = 0 while the far-policy fraction stays above D, beta = 1 otherwise.
    """
    return (1.0 - eta) * beta + (0.0 if far_fraction > D else eta)


def refer_loss(
    objective: torch.Tensor, penalty: torch.Tensor, near: torch.Tensor,
    beta: float | torch.Tensor,
    mode: ReferMode, weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """Minibatch loss whose gradient is eq. 10 with Rule 1.

    ``objective`` holds the per-sample losses L_k of the algorithm (grad L_k = -g_k),
    ``penalty`` the per-sample KL_k of eq. 11, ``near`` the near-policy mask. Returns

        1/B sum_k [ beta * 1[k near] * L_k + (1 - beta) * KL_k ]     (refer)
        1/B sum_k [ 1[k near] * L_k ]                                (refer1)
        1/B sum_k [ beta * L_k + (1 - beta) * KL_k ]                 (refer2)
        1/B sum_k L_k                                                (er)

    so that minimising it follows g^ReF-ER = beta g - (1 - beta) g^D on near-policy samples and
    -(1 - beta) g^D on far-policy ones. ``weight`` (prioritized replay's importance weights
    w_k) multiplies each sample's objective and penalty.
    """
    keep = rule1_mask(near, mode, objective)
    if mode.rule2:
        per_sample = beta * keep * objective + (1.0 - beta) * penalty
    else:
        per_sample = keep * objective
    return (per_sample if weight is None else weight * per_sample).mean()


@dataclass
class ReferState:
    """beta and the annealed c_max / learning rate, advanced once per gradient step.

    Notes
    -----
    With several learners, ``n_far`` and ``n_stored`` passed to :meth:`update` are global
    (allreduced) counts, so every learner computes the same beta.
    """

    config: ReferConfig
    eta0: float
    beta: float
    t: int = 0

    @classmethod
    def create(cls, config: ReferConfig, eta0: float) -> ReferState:
        beta = config.beta_init if config.mode.rule2 else 1.0
        return cls(config=config, eta0=eta0, beta=beta)

    @property
    def c_max(self) -> float:
        return c_max_at(self.t, self.config.C, self.config.A)

    @property
    def learning_rate(self) -> float:
        """eta(t) of eq. 13 under ReF-ER's variants; eta0 throughout with plain ER."""
        if not self.config.mode.anneals:
            return self.eta0
        return learning_rate_at(self.t, self.eta0, self.config.A)

    @property
    def lr_factor(self) -> float:
        """eta(t) / eta0: the factor every optimizer's initial learning rate is scaled by."""
        return self.learning_rate / self.eta0

    @property
    def beta_rate(self) -> float:
        """eta of eq. 12: the configured rate, or the network's initial learning rate."""
        return self.config.beta_rate or self.eta0

    def checkpoint_state(self) -> StateTree:
        """beta and t (c_max and the learning rate follow from t and the config)."""
        return {"beta": float(self.beta), "t": int(self.t)}

    def restore_state(self, tree: StateTree) -> None:
        """Inverse of :meth:`checkpoint_state`."""
        self.beta, self.t = float(tree["beta"]), int(tree["t"])

    def update(self, n_far: int, n_stored: int) -> None:
        """Advance t by one gradient step and beta by eq. 12 (beta stays 1 without Rule 2)."""
        self.t += 1
        if self.config.mode.rule2 and n_stored > 0:
            self.beta = beta_update(self.beta, n_far / n_stored, self.config.D, self.beta_rate)
