"""Critics with Polyak target copies, the kit's piece for twin-critic algorithms (SAC, TD3):
K critics Q_i(s, a) (``QNetwork``), each with a target Q'_i that follows it by
w'_i <- (1 - tau) w'_i + tau w_i, and the two minima the losses read.

The clipped double-Q minimum (Fujimoto et al. 2018, eq. 10; Haarnoja et al. 2018b, sec. 5)
over the targets bootstraps the TD target, min_i Q'_i(s', a'), and the one over the online
critics with their parameters detached gives the actor's loss its gradient through the
action only (SAC's min_i Q_i(s, a~)). Module names, for checkpoints: ``critic1 .. criticK``
and ``target1 .. targetK``, the critics first.
"""

from __future__ import annotations

import torch

from hpc_refer.algorithms.kit.networks import QNetwork
from hpc_refer.algorithms.kit.shared import detached_critic, frozen_copy, polyak_
from hpc_refer.config.modes import Activation


class Critics:
    """``count`` critics Q_i over (s, a) of ``obs_dim`` + ``act_dim`` inputs (``layer_norm``:
    layer-normalised hidden layers), their targets (built in that order: the critics, then
    copies of them, so seeding is unchanged)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...],
                 activation: Activation = Activation.SOFTSIGN, count: int = 2,
                 layer_norm: bool = False) -> None:
        if count < 1:
            raise ValueError(f"Critics needs at least one critic, got count = {count}")
        self.q = tuple(QNetwork(obs_dim, act_dim, hidden, activation, layer_norm)
                       for _ in range(count))
        self.targets = tuple(frozen_copy(q) for q in self.q)

    def modules(self) -> dict[str, torch.nn.Module]:
        """``critic<i>`` and ``target<i>`` (i = 1 .. K), for the algorithm's ``modules``."""
        return {**{f"critic{i}": q for i, q in enumerate(self.q, 1)},
                **{f"target{i}": t for i, t in enumerate(self.targets, 1)}}

    def parameters(self) -> list[torch.nn.Parameter]:
        """Every critic's parameters (one optimizer for all of them)."""
        return [p for q in self.q for p in q.parameters()]

    def __call__(self, obs: torch.Tensor, act: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Q_i(s, a) of every critic, each [B]."""
        return tuple(q(obs, act) for q in self.q)

    def min_target(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """min_i Q'_i(s, a) over the targets (no gradient)."""
        with torch.no_grad():
            return minimum([t(obs, act) for t in self.targets])

    def min_detached(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """min_i Q_i(s, a) with the critics' parameters detached: gradient to ``act`` only."""
        return minimum([detached_critic(q, obs, act) for q in self.q])

    def follow_(self, tau: float) -> None:
        """Every target follows its critic: w'_i <- (1 - tau) w'_i + tau w_i."""
        for target, q in zip(self.targets, self.q, strict=True):
            polyak_(target, q, tau)


def minimum(values: list[torch.Tensor]) -> torch.Tensor:
    """The elementwise minimum of one or more tensors of one shape (the critics' minimum;
    also CrossQ's, whose critics have no targets)."""
    out = values[0]
    for v in values[1:]:
        out = torch.minimum(out, v)
    return out
