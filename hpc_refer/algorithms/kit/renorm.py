"""Batch renormalisation (Ioffe 2017, "Batch Renormalization: Towards Reducing Minibatch
Dependence in Batch-Normalized Models"), the normalisation of CrossQ's networks (Bhatt et al.
2024), written so that the gradient step stays a pure function of the parameters.

A layer of F features keeps running statistics (mu_r, var_r), a count of training batches n,
and an affine map (gamma, b). On a training batch x [B, F], with the batch's mean mu_B and
unbiased variance var_B,

    sigma_B = sqrt(var_B + eps),   sigma_r = sqrt(var_r + eps)
    r = clip(sigma_B / sigma_r, 1/r_max, r_max),  d = clip((mu_B - mu_r) / sigma_r, -d_max, d_max)
                                                   (both without gradient; Ioffe eq. 2-3)
    r, d = 1, 0 while n <= n_warm                  (plain batch normalisation at first)
    mu~ = mu_B - d sqrt(var_B) / r,   var~ = var_B / r^2
    y = gamma (x - mu~) / sqrt(var~ + eps) + b     (= gamma ((x - mu_B) / sigma_B r + d) + b
                                                    up to where eps enters)
    mu_r <- mu_r + m (mu_B - mu_r),  var_r <- var_r + m (var_B - var_r),  n <- n + 1

and in evaluation y = gamma (x - mu_r) / sqrt(var_r + eps) + b. This is sb3-contrib's and
SBX's form of the layer (where eps enters, r_max = 3, d_max = 5, a warm-up instead of the
paper's linear relaxation of r_max and d_max), which CrossQ's authors use; the tests compare
with sb3-contrib's ``BatchRenorm1d``. The branch on n is a ``torch.where`` (no host
synchronisation in the compiled step), and sqrt(var_B) in mu~ is taken of var_B floored at
float32's smallest normal number, so that a feature constant over the batch (a dead ReLU
unit) gives a zero gradient where the unselected branch would give 0 x inf.

A training forward does not write the running statistics: it returns their new values
(:data:`Updates`, keyed by the buffers' state-dict names), which the algorithm passes on in
:class:`~hpc_refer.algorithms.kit.base.Losses` and the gradient step writes after the step
(:class:`~hpc_refer.algorithms.kit.step.BufferWrites`).
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from hpc_refer.algorithms.kit.networks import Normalizer
from hpc_refer.algorithms.kit.ops import Arrays, Op, copied

Updates = dict[str, torch.Tensor]
"""New values of buffers (running statistics, counts) by state-dict name, from a training
forward."""

R_MAX, D_MAX = 3.0, 5.0
"""The clips of r and d (sb3-contrib's and SBX's, as CrossQ's code)."""


class RenormShape(NamedTuple):
    """The settings of every batch-renormalisation layer of a network."""

    momentum: float = 0.01
    """m, the running statistics' rate."""
    eps: float = 1e-3
    """eps, added to every variance."""
    warmup: int = 100_000
    """n_warm: training batches normalised by their own statistics alone (r = 1, d = 0)."""


def renorm_statistics(batch_mean: torch.Tensor, batch_var: torch.Tensor,
                      running_mean: torch.Tensor, running_var: torch.Tensor,
                      steps: torch.Tensor, shape: RenormShape
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """(mu~, var~) that a training batch is normalised with (module docstring): the batch's
    own statistics while n <= n_warm, after it corrected by r and d toward the running
    ones."""
    running_std = torch.sqrt(running_var + shape.eps)
    r = torch.clamp(torch.sqrt(batch_var + shape.eps) / running_std, 1.0 / R_MAX, R_MAX)
    d = torch.clamp((batch_mean - running_mean) / running_std, -D_MAX, D_MAX)
    renorming = steps > shape.warmup
    r = torch.where(renorming, r.detach(), 1.0)
    d = torch.where(renorming, d.detach(), 0.0)
    floor = torch.finfo(batch_var.dtype).tiny
    return batch_mean - d * torch.sqrt(batch_var.clamp_min(floor)) / r, batch_var / r**2


class BatchRenorm(nn.Module):
    """One batch-renormalisation layer over F features (module docstring): parameters
    ``scale`` (gamma) and ``bias`` (b), buffers ``ra_mean``, ``ra_var`` (mu_r, var_r) and
    ``steps`` (n, int64); called, it evaluates; :meth:`train_forward` normalises a training
    batch and returns the new buffers."""

    ra_mean: torch.Tensor
    ra_var: torch.Tensor
    steps: torch.Tensor

    def __init__(self, features: int, shape: RenormShape) -> None:
        super().__init__()
        self.shape = shape
        self.register_buffer("ra_mean", torch.zeros(features))
        self.register_buffer("ra_var", torch.ones(features))
        self.register_buffer("steps", torch.tensor(0, dtype=torch.long))
        self.scale = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))

    def _affine(self, x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
        return self.scale * ((x - mean) / torch.sqrt(var + self.shape.eps)) + self.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Evaluation: y = gamma (x - mu_r) / sqrt(var_r + eps) + b."""
        return self._affine(x, self.ra_mean, self.ra_var)

    def train_forward(self, x: torch.Tensor) -> tuple[torch.Tensor, Updates]:
        """A training batch x [B, F]: y, and the new ``ra_mean``, ``ra_var`` and ``steps``."""
        m = self.shape.momentum
        batch_mean = x.mean(dim=0)
        centred = x - batch_mean  # the unbiased variance in two passes: torch's x.var(dim=0)
        batch_var = (centred * centred).sum(dim=0) / (x.shape[0] - 1)  # is 5x slower on CPU
        mean, var = renorm_statistics(batch_mean, batch_var, self.ra_mean, self.ra_var,
                                      self.steps, self.shape)
        new = {"ra_mean": self.ra_mean + m * (batch_mean.detach() - self.ra_mean),
               "ra_var": self.ra_var + m * (batch_var.detach() - self.ra_var),
               "steps": self.steps + 1}
        return self._affine(x, mean, var), new


class RenormMLP(nn.Module):
    """CrossQ's fully connected network: before every linear layer a batch-renormalisation
    layer, ReLU between the linear layers (none after the last):
    BRN, Linear, ReLU, ..., BRN, Linear."""

    def __init__(self, sizes: list[int], shape: RenormShape) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
            layers += [BatchRenorm(n_in, shape), nn.Linear(n_in, n_out)]
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Evaluation (the running statistics)."""
        out: torch.Tensor = self.layers(x)
        return out

    def ops(self, arrays: Arrays = copied) -> list[Op]:
        """The evaluation as ops: renorm, linear, relu, ... (:mod:`~hpc_refer.algorithms.kit.ops`),
        holding copies of the tensors (an export) or views (``arrays=viewed``: the actors'
        numpy forward)."""
        ops = []
        for layer in self.layers:
            if isinstance(layer, BatchRenorm):
                ops.append(Op("renorm", arrays(layer.ra_mean, layer.ra_var, layer.scale,
                                               layer.bias),
                              {"eps": float(np.float32(layer.shape.eps))}))
            elif isinstance(layer, nn.Linear):
                ops.append(Op("linear", arrays(layer.weight.T, layer.bias)))
            else:
                ops.append(Op("relu"))
        return ops

    def train_forward(self, x: torch.Tensor) -> tuple[torch.Tensor, Updates]:
        """A training batch: the outputs and every layer's new buffers (``layers.<i>.*``)."""
        updates: Updates = {}
        for i, layer in enumerate(self.layers):
            if isinstance(layer, BatchRenorm):
                x, new = layer.train_forward(x)
                updates.update({f"layers.{i}.{k}": v for k, v in new.items()})
            else:
                x = layer(x)
        return x, updates


class RenormQ(nn.Module):
    """CrossQ's critic Q_w(s, a) = RenormMLP([normalise(s), a]) (one output); no target
    copy."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...],
                 shape: RenormShape) -> None:
        super().__init__()
        self.normalizer = Normalizer(obs_dim)
        self.trunk = RenormMLP([obs_dim + act_dim, *hidden, 1], shape)

    def _inputs(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.normalizer(obs), act], dim=-1)

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """Q [B], evaluation (the running statistics)."""
        return self.trunk(self._inputs(obs, act))[..., 0]

    def train_forward(self, obs: torch.Tensor, act: torch.Tensor
                      ) -> tuple[torch.Tensor, Updates]:
        """Q [B] of a training batch and the new buffers (``trunk.layers.<i>.*``)."""
        q, new = self.trunk.train_forward(self._inputs(obs, act))
        return q[..., 0], {f"trunk.{k}": v for k, v in new.items()}

    def frozen(self, obs: torch.Tensor, act: torch.Tensor, updates: Updates) -> torch.Tensor:
        """Q [B] in evaluation with the parameters detached (the gradient reaches ``act``
        only) and the running statistics of ``updates`` (those of this step's training
        forward) in place of the buffers."""
        values = {k: v.detach() for k, v in self.named_parameters()}
        out: torch.Tensor = functional_call(self, {**values, **updates}, (obs, act))
        return out
