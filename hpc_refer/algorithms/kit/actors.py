"""The actors of the actor-critic algorithms, each feed-forward or recurrent, and what each
gives the losses of a minibatch: the kit that DDPG, TD3 and SAC are built from.

Deterministic (DDPG, TD3; Lillicrap et al. 2016, Fujimoto et al. 2018): m_w(s) =
tanh(mlp(normalise(s))) in the normalised action box [-1, 1]^A, with the behaviour policy
N(m_w(s), sigma^2 I) of a fixed sigma (a buffer, travelling to the actors with the weights),
which defines rho and the KL of ReF-ER. Squashed Gaussian (SAC; Haarnoja et al. 2018): a
Gaussian N(m_w(s), sigma_w(s)^2 I) over u, log sigma clipped to [-20, 2], the action tanh(u).

Each actor answers :meth:`inputs` for a minibatch, so an algorithm never asks which kind it
has: a feed-forward actor reads s_k and s_{k+1} themselves; a recurrent one
(:mod:`hpc_refer.algorithms.kit.recurrent`) unrolls sequences of W steps from their stored
carries, the critics reading [s, h_t] (h_t with its gradient, so that the critics' regression
trains the cell too; the actor's loss reads it detached), and the successor's output and
h_{t+1} are one cell step from the carry after step t. A recurrent actor's ``numpy_step``
gives the actors' per-row step from a stored carry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from hpc_refer.algorithms.kit.base import TensorBatch
from hpc_refer.algorithms.kit.networks import (
    BehaviourPolicy,
    Normalizer,
    NumpyMLP,
    mlp,
    small_output_,
)
from hpc_refer.algorithms.kit.recurrent import RecurrentTrunk
from hpc_refer.config.modes import Activation
from hpc_refer.config.tables import RecurrentConfig

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
"""The clip of log sigma_w(s) of the squashed Gaussian (as Haarnoja et al.'s code)."""


# --- deterministic ---------------------------------------------------------------------------


class DeterministicInputs(NamedTuple):
    """What one minibatch gives a deterministic actor's losses: m_w(s_k), the critics' input
    at s_k, the target actor's action at s_{k+1} and the critics' input there (both without
    gradient)."""

    mean: torch.Tensor
    critic_obs: torch.Tensor
    next_action: torch.Tensor
    next_critic_obs: torch.Tensor


class DeterministicActor(BehaviourPolicy):
    """m_w(s) = tanh(mlp(normalise(s))) in [-1, 1]^A, and the behaviour N(m_w(s), sigma^2 I).

    sigma is a buffer (fixed, travels to the actors with the weights). The output layer starts
    small so that m_w(s) ~ 0.
    """

    sigma: torch.Tensor

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...],
                 sigma: float, activation: Activation = Activation.SOFTSIGN) -> None:
        super().__init__()
        self.normalizer = Normalizer(obs_dim)
        self.trunk = mlp([obs_dim, *hidden, act_dim], activation)
        small_output_(self.trunk)
        self.register_buffer("sigma", torch.full((act_dim,), float(sigma)))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The mean m_w(s) [B, A]."""
        return torch.tanh(self.trunk(self.normalizer(obs)))

    def policy(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Behaviour mean m_w(s) [B, A] and std sigma [A]."""
        return self(obs), self.sigma

    def numpy_policy(self) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """(tanh(mlp(s)), sigma) in numpy (see :meth:`BehaviourPolicy.numpy_policy`)."""
        forward = NumpyMLP(self.trunk, self.normalizer)
        sigma = self.sigma.numpy()
        return lambda obs: (np.tanh(forward(obs)), sigma)

    def inputs(self, batch: TensorBatch, target: DeterministicActor | RecurrentDeterministicActor,
               bptt: int) -> DeterministicInputs:
        """m_w(s_k) and the critics' inputs s_k, s_{k+1}; ``target``'s action at s_{k+1}."""
        with torch.no_grad():
            a_next = target(batch.next_obs)
        return DeterministicInputs(self(batch.obs), batch.obs, a_next, batch.next_obs)


class RecurrentDeterministicActor(BehaviourPolicy):
    """The deterministic actor with a recurrent cell: rows [s, c] -> m_w = tanh(outputs) of
    a :class:`~hpc_refer.algorithms.kit.recurrent.RecurrentTrunk`, behaviour N(m_w, sigma^2 I);
    the critics read the cell's output h_t beside s_t (:meth:`inputs`)."""

    sigma: torch.Tensor

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...],
                 config: RecurrentConfig, sigma: float,
                 activation: Activation = Activation.SOFTSIGN) -> None:
        super().__init__()
        self.body = RecurrentTrunk(obs_dim, act_dim, hidden, config.cell, config.cell_width,
                                   activation)
        self.carry_dim = self.body.carry_dim
        self.register_buffer("sigma", torch.full((act_dim,), float(sigma)))

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        """m_w at rows [B, obs_dim + carry_dim], each from its stored carry."""
        return torch.tanh(self.body.rows(rows)[0])

    def policy(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self(obs), self.sigma

    def numpy_step(self) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]:
        step = self.body.numpy_step()
        sigma = self.sigma.numpy()

        def policy(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            out, carry = step(rows)
            return np.tanh(out), sigma, carry

        return policy

    def inputs(self, batch: TensorBatch, target: DeterministicActor | RecurrentDeterministicActor,
               bptt: int) -> DeterministicInputs:
        """Sequences of ``bptt`` steps from their stored carries: m_w(s_k) and the critics'
        inputs [s_k, h_k]; ``target``'s cell one step from the carry after step k gives its
        action at s_{k+1} and h'_{k+1}."""
        assert isinstance(target, RecurrentDeterministicActor)
        d = self.body.obs_dim
        out, h, carry = self.body.sequences(batch.obs, bptt)
        with torch.no_grad():
            out_next, h_next = target.body.after(batch.next_obs, carry)
        return DeterministicInputs(torch.tanh(out), torch.cat([batch.obs[..., :d], h], dim=-1),
                                   torch.tanh(out_next),
                                   torch.cat([batch.next_obs[..., :d], h_next], dim=-1))


def deterministic_actor(obs_dim: int, act_dim: int, config: RecurrentConfig, sigma: float,
                        activation: Activation = Activation.SOFTSIGN
                        ) -> DeterministicActor | RecurrentDeterministicActor:
    """A deterministic actor of ``config.hidden`` with the behaviour std ``sigma``:
    feed-forward, or with the cell of ``config.cell``."""
    if config.carry_dim == 0:
        return DeterministicActor(obs_dim, act_dim, config.hidden, sigma, activation)
    return RecurrentDeterministicActor(obs_dim, act_dim, config.hidden, config, sigma,
                                       activation)


# --- squashed Gaussian -----------------------------------------------------------------------


class SquashedInputs(NamedTuple):
    """What one minibatch gives a squashed-Gaussian actor's losses: its Gaussian over u at
    s_k and at s_{k+1} (the latter without gradient), and the critics' inputs at both."""

    mean: torch.Tensor
    std: torch.Tensor
    critic_obs: torch.Tensor
    next_mean: torch.Tensor
    next_std: torch.Tensor
    next_critic_obs: torch.Tensor


def squashed_gaussian(out: torch.Tensor, act_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """An actor's outputs [..., 2 A] read as the mean and std = exp(clip(log sigma)) of u."""
    mean, log_std = out[..., :act_dim], out[..., act_dim:]
    return mean, torch.exp(torch.clamp(log_std, LOG_STD_MIN, LOG_STD_MAX))


def numpy_squashed_gaussian(out: np.ndarray, act_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`squashed_gaussian` in numpy."""
    return out[..., :act_dim], np.exp(np.clip(out[..., act_dim:], LOG_STD_MIN, LOG_STD_MAX))


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

    def inputs(self, batch: TensorBatch, bptt: int) -> SquashedInputs:
        """The Gaussians at s_k and s_{k+1}, the critics reading s_k and s_{k+1}."""
        mean, std = self(batch.obs)
        with torch.no_grad():
            m_next, s_next = self(batch.next_obs)
        return SquashedInputs(mean, std, batch.obs, m_next, s_next, batch.next_obs)


class RecurrentSquashedActor(BehaviourPolicy):
    """The squashed-Gaussian actor with a recurrent cell: rows [s, c] -> (m_w, sigma_w)
    through :class:`~hpc_refer.algorithms.kit.recurrent.RecurrentTrunk`; the critics read the
    cell's output h_t beside s_t (:meth:`inputs`)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...],
                 config: RecurrentConfig, activation: Activation) -> None:
        super().__init__()
        self.act_dim = act_dim
        self.body = RecurrentTrunk(obs_dim, 2 * act_dim, hidden, config.cell,
                                   config.cell_width, activation)
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

    def inputs(self, batch: TensorBatch, bptt: int) -> SquashedInputs:
        """Sequences of ``bptt`` steps from their stored carries: the Gaussians at s_k and
        (one cell step from the carry after step k) at s_{k+1}, the critics reading [s, h]."""
        body, d = self.body, self.body.obs_dim
        out, h, carry = body.sequences(batch.obs, bptt)
        with torch.no_grad():
            out_next, h_next = body.after(batch.next_obs, carry)
        return SquashedInputs(*squashed_gaussian(out, self.act_dim),
                              torch.cat([batch.obs[..., :d], h], dim=-1),
                              *squashed_gaussian(out_next, self.act_dim),
                              torch.cat([batch.next_obs[..., :d], h_next], dim=-1))


def squashed_actor(obs_dim: int, act_dim: int, config: RecurrentConfig,
                   activation: Activation) -> SquashedGaussianActor | RecurrentSquashedActor:
    """A squashed-Gaussian actor of ``config.hidden``: feed-forward, or with the cell of
    ``config.cell``."""
    if config.carry_dim == 0:
        return SquashedGaussianActor(obs_dim, act_dim, config.hidden, activation)
    return RecurrentSquashedActor(obs_dim, act_dim, config.hidden, config, activation)
