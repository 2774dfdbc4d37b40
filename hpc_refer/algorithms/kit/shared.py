"""Formulas more than one algorithm uses, once: the one-step TD target, its squared loss,
a critic read with its parameters detached, target networks and their Polyak update.
(ReF-ER's own terms -- rho, the near-policy mask, Rule 1, the KL penalty of eq. 11 and
eq. 10 -- are in :mod:`hpc_refer.algorithms.kit.refer`.)"""

from __future__ import annotations

import copy
from typing import TypeVar

import torch
from torch import nn
from torch.func import functional_call


def td_target(rew: torch.Tensor, done: torch.Tensor, gamma: float,
              next_value: torch.Tensor) -> torch.Tensor:
    """y_k = r_{k+1} + gamma (1 - done_k) v'_{k+1}, held fixed (no gradient).

    ``next_value`` is the bootstrap of s_{k+1} (DDPG: the target critic at the target
    actor's action, Lillicrap et al. 2016; NAF: the target network's V, Gu et al. 2016);
    ``rew`` is already reward-scaled and ``done`` marks terminal transitions.
    """
    return (rew + gamma * (1.0 - done) * next_value).detach()


def squared_td_loss(y: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Per-sample L_Q,k = 1/2 (y_k - Q_w(s_k, a_k))^2 with y_k held fixed, so
    grad L_Q,k = -(y_k - Q_w(s_k, a_k)) grad Q_w."""
    return 0.5 * (y.detach() - q).pow(2)


def detached_critic(critic: nn.Module, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
    """Q_w(s, a) with the critic's parameters w detached, so the gradient reaches ``act``
    only: the actor's loss -Q_w(s, pi(s)) moves the actor, never the critic (DDPG, SAC)."""
    frozen = {k: v.detach() for k, v in critic.named_parameters()}
    out: torch.Tensor = functional_call(critic, frozen, (obs, act))
    return out


M = TypeVar("M", bound=nn.Module)


def frozen_copy(module: M) -> M:
    """A target network: a copy of ``module`` (same weights) without gradient, which then
    follows it by :func:`polyak_`."""
    return copy.deepcopy(module).requires_grad_(False)


def polyak_(target: nn.Module, source: nn.Module, tau: float) -> None:
    """Target network update w' <- (1 - tau) w' + tau w (parameters; buffers are copied)."""
    with torch.no_grad():
        for p_target, p_source in zip(target.parameters(), source.parameters(), strict=True):
            p_target.lerp_(p_source, tau)
        for b_target, b_source in zip(target.buffers(), source.buffers(), strict=True):
            b_target.copy_(b_source)
