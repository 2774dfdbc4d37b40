"""The maximum-entropy terms of the squashed-Gaussian actor-critics (SAC, CrossQ), the kit's
piece for them (Haarnoja et al. 2018b, "Soft Actor-Critic Algorithms and Applications";
equation numbers of that paper unless marked).

The policy is a Gaussian over u, u ~ N(m_w(s), sigma_w(s)^2 I), and the action a = tanh(u);
alpha = exp(log alpha) is the temperature, tuned toward the target entropy H:

    log pi~(a|s) = log N(u; m, sigma^2) - sum_i log(1 - tanh(u_i)^2)   (2018a eq. 26: tanh)
    y_k     = r_{k+1} + gamma (1 - done_k) [Q_next - alpha log pi~(u'|s')]
    L_pi,k  = alpha log pi~(u~|s_k) - Q_pi                            (eq. 10, critics fixed)
    L_alpha = -log alpha (log pi~(u~|s_k) + H)                        (eq. 18)

where Q_next is the algorithms' bootstrap at (s', tanh u') (SAC: the minimum over the target
critics; CrossQ: over the critics themselves, Bhatt et al. 2024) and Q_pi the minimum over
the critics, their parameters detached, at (s_k, tanh u~).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from hpc_refer.algorithms.kit.networks import gaussian_log_prob, log_tanh_jacobian
from hpc_refer.algorithms.kit.shared import td_target


def squashed_log_prob(u: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """log pi~(tanh u | s) = log N(u; m, sigma^2) - sum_i log(1 - tanh(u_i)^2) (Haarnoja et
    al. 2018a, eq. 26), the correction in :func:`log_tanh_jacobian`'s stable form."""
    return gaussian_log_prob(u, mean, std) - log_tanh_jacobian(u).sum(-1)


def soft_target(rew: torch.Tensor, done: torch.Tensor, gamma: float, q_next: torch.Tensor,
                alpha: torch.Tensor, log_pi_next: torch.Tensor) -> torch.Tensor:
    """y_k = r_{k+1} + gamma (1 - done_k) [Q_next - alpha log pi~(a'|s')], fixed (``q_next``
    the algorithm's bootstrap, a minimum over critics)."""
    return td_target(rew, done, gamma, q_next - alpha * log_pi_next)


def soft_actor_loss(alpha: torch.Tensor, log_pi: torch.Tensor,
                    q_pi: torch.Tensor) -> torch.Tensor:
    """Per-sample L_pi,k = alpha log pi~(u~|s_k) - Q_pi (eq. 10), alpha held fixed; ``q_pi``
    from critics with detached parameters, so the gradient reaches the actor only (through
    the reparameterised u~)."""
    return alpha.detach() * log_pi - q_pi


def temperature_loss(log_alpha: torch.Tensor, log_pi: torch.Tensor,
                     target: float) -> torch.Tensor:
    """Per-sample L_alpha = -log alpha (log pi~(u~|s) + H), log pi~ held fixed (eq. 18, on
    log alpha): alpha grows while the entropy -log pi~ is below H."""
    return -log_alpha * (log_pi.detach() + target)


class Temperature(nn.Module):
    """log alpha, a parameter of its own (its own Adam), so that alpha > 0."""

    def __init__(self, alpha: float) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor(math.log(alpha)))
