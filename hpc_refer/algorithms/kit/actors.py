"""The actors of the actor-critic algorithms, each a head written once over a network body
(feed-forward or recurrent, :mod:`hpc_refer.algorithms.kit.bodies`), and what each gives the
losses of a minibatch: the kit that DDPG, TD3 and SAC are built from; and CrossQ's
squashed Gaussian over batch renormalisation, feed-forward only.

Deterministic (DDPG, TD3; Lillicrap et al. 2016, Fujimoto et al. 2018): m_w(s) =
tanh(outputs) in the normalised action box [-1, 1]^A, with the behaviour policy
N(m_w(s), sigma^2 I) of a fixed sigma (a buffer, travelling to the actors with the weights),
which defines rho and the KL of ReF-ER. Squashed Gaussian (SAC; Haarnoja et al. 2018): a
Gaussian N(m_w(s), sigma_w(s)^2 I) over u, log sigma clipped to [-20, 2], the action tanh(u).

Each actor answers :meth:`inputs` for a minibatch through its body: the body's sequences at
s_k (a feed-forward body's rows; a recurrent one unrolls sequences of W steps from their
stored carries) and its step at s_{k+1} from the carry after step k, with what the critics
read at both (s, or [s, h_t]: h_t with its gradient, so that the critics' regression trains
the cell too; the actor's loss reads it detached).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from hpc_refer.algorithms.kit.base import TensorBatch
from hpc_refer.algorithms.kit.bodies import BodyPolicy, make_body
from hpc_refer.algorithms.kit.networks import BehaviourPolicy, Normalizer, small_output_
from hpc_refer.algorithms.kit.ops import Arrays, Op, copied
from hpc_refer.algorithms.kit.program import NumpyBehaviour
from hpc_refer.algorithms.kit.renorm import RenormMLP, RenormShape, Updates
from hpc_refer.config.tables import NetworkShape

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


class DeterministicActor(BodyPolicy):
    """m_w = tanh(outputs) of its body (:mod:`~hpc_refer.algorithms.kit.bodies`) in
    [-1, 1]^A, and the behaviour N(m_w, sigma^2 I).

    sigma is a buffer (fixed, travels to the actors with the weights). The body's output
    layer starts small so that m_w ~ 0.
    """

    sigma: torch.Tensor

    def __init__(self, obs_dim: int, act_dim: int, network: NetworkShape, sigma: float) -> None:
        super().__init__(make_body(obs_dim, act_dim, network))
        self.register_buffer("sigma", torch.full((act_dim,), float(sigma)))

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        """The mean m_w [B, A] at rows, each from its stored carry."""
        return torch.tanh(self.body.rows(rows).out)

    def read(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Behaviour mean tanh(outputs) [B, A] and std sigma [A]."""
        return torch.tanh(out), self.sigma

    def read_ops(self, arrays: Arrays) -> tuple[list[Op], list[Op]]:
        return [Op("tanh")], [Op("const", arrays(self.sigma))]

    def inputs(self, batch: TensorBatch, target: DeterministicActor,
               length: int) -> DeterministicInputs:
        """Sequences of ``length`` steps (single rows without a cell): m_w(s_k) and the
        critics' inputs at s_k; ``target``'s action at s_{k+1} and the critics' inputs there,
        its body one step from the carry after step k."""
        now = self.body.sequences(batch.obs, length)
        with torch.no_grad():
            succ = target.body.after(batch.next_obs, now.carry)
        return DeterministicInputs(torch.tanh(now.out), now.seen, torch.tanh(succ.out),
                                   succ.seen)


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


def squashed_gaussian_ops(act_dim: int) -> tuple[list[Op], list[Op]]:
    """:func:`squashed_gaussian` as ops on the outputs: (the mean's, the std's)."""
    return ([Op("take", attrs={"start": 0, "count": act_dim})],
            [Op("take", attrs={"start": act_dim, "count": act_dim}),
             Op("clip", attrs={"low": LOG_STD_MIN, "high": LOG_STD_MAX}), Op("exp")])


class SquashedGaussianActor(BodyPolicy):
    """rows -> (m_w, sigma_w) of the Gaussian over u (the action is tanh u): a body with 2 A
    outputs (:func:`squashed_gaussian`), its last layer started small (m ~ 0, sigma ~ 1)."""

    def __init__(self, obs_dim: int, act_dim: int, network: NetworkShape) -> None:
        super().__init__(make_body(obs_dim, 2 * act_dim, network))
        self.act_dim = act_dim

    def forward(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean [B, A] and std [B, A] of u at rows, each from its stored carry."""
        return self.read(self.body.rows(rows).out)

    def read(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return squashed_gaussian(out, self.act_dim)

    def read_ops(self, arrays: Arrays) -> tuple[list[Op], list[Op]]:
        """m_w, the first A outputs (the action is tanh of it, by the action map), and
        exp(clip(log sigma)) of the last A."""
        return squashed_gaussian_ops(self.act_dim)

    def inputs(self, batch: TensorBatch, length: int) -> SquashedInputs:
        """Sequences of ``length`` steps (single rows without a cell): the Gaussians at s_k
        and (its body one step from the carry after step k) at s_{k+1}, and the critics'
        inputs at both."""
        now = self.body.sequences(batch.obs, length)
        with torch.no_grad():
            succ = self.body.after(batch.next_obs, now.carry)
        return SquashedInputs(*squashed_gaussian(now.out, self.act_dim), now.seen,
                              *squashed_gaussian(succ.out, self.act_dim), succ.seen)


# --- squashed Gaussian over batch renormalisation (CrossQ) -----------------------------------


class RenormSquashedActor(BehaviourPolicy):
    """CrossQ's actor (Bhatt et al. 2024): the squashed Gaussian of
    :func:`squashed_gaussian` over a :class:`~hpc_refer.algorithms.kit.renorm.RenormMLP` of 2 A
    outputs (feed-forward only), its last layer started small as every head's (m ~ 0,
    sigma ~ 1). Its behaviour (:meth:`policy`, what the actors sample from
    and ReF-ER's rho and KL read) is the evaluation with the running statistics;
    :meth:`train_gaussian` is the training forward of the actor's loss."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...],
                 shape: RenormShape) -> None:
        super().__init__()
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self.normalizer = Normalizer(obs_dim)
        self.trunk = RenormMLP([obs_dim, *hidden, 2 * act_dim], shape)
        small_output_(self.trunk.layers)

    def policy(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean [B, A] and std [B, A] of u, in evaluation."""
        return squashed_gaussian(self.trunk(self.normalizer(obs)), self.act_dim)

    def train_gaussian(self, obs: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor, Updates]:
        """Mean and std of u on a training batch, and the new buffers (``trunk.*``)."""
        out, new = self.trunk.train_forward(self.normalizer(obs))
        return (*squashed_gaussian(out, self.act_dim), {f"trunk.{k}": v for k, v in new.items()})

    def behaviour_ops(self, arrays: Arrays = copied) -> NumpyBehaviour:
        """normalize and the trunk's evaluation, read as :func:`squashed_gaussian`; no
        carry."""
        mean, std = squashed_gaussian_ops(self.act_dim)
        return NumpyBehaviour(self.obs_dim, 0,
                              (self.normalizer.op(arrays), *self.trunk.ops(arrays)),
                              tuple(mean), tuple(std))
