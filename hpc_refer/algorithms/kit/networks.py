"""Networks (torch): input normalisation, MLP trunks, the critic Q(s, a), the interface of the
behaviour modules actors sample from (their numpy forward and the program an actor rank
runs, :mod:`hpc_refer.algorithms.kit.program`) and their flat parameter vector. The bodies
that heads are written over are :mod:`hpc_refer.algorithms.kit.bodies`.

Also the diagonal-Gaussian formulas every algorithm with a parameterised policy needs:
log-probabilities and the Kullback-Leibler divergence.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from hpc_refer.algorithms.kit.ops import Arrays, Op, copied, viewed
from hpc_refer.algorithms.kit.program import NumpyBehaviour, Program
from hpc_refer.config.modes import Activation

LOG_2PI = math.log(2.0 * math.pi)


def gaussian_log_prob(a: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """log N(a | mean, diag(std^2)), summed over the last (action) axis.

    log pi(a|s) = - sum_i [ (a_i - m_i)^2 / (2 sigma_i^2) + log sigma_i + log(2 pi) / 2 ]
    """
    z = (a - mean) / std
    return -(0.5 * z.pow(2) + torch.log(std) + 0.5 * LOG_2PI).sum(-1)


def gaussian_kl(
    mean_p: torch.Tensor, std_p: torch.Tensor, mean_q: torch.Tensor, std_q: torch.Tensor
) -> torch.Tensor:
    """KL(p || q) of two diagonal Gaussians, summed over the last axis.

    KL(p || q) = sum_i [ log(sigma_q,i / sigma_p,i)
                         + (sigma_p,i^2 + (m_p,i - m_q,i)^2) / (2 sigma_q,i^2) - 1/2 ]
    """
    var_q = std_q.pow(2)
    return (
        torch.log(std_q / std_p) + (std_p.pow(2) + (mean_p - mean_q).pow(2)) / (2.0 * var_q) - 0.5
    ).sum(-1)


def log_tanh_jacobian(u: torch.Tensor) -> torch.Tensor:
    """log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2 u)) elementwise (the stable form):
    the log-Jacobian of a = tanh(u)."""
    return 2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u))


def uniform_behaviour(u: torch.Tensor, squashed: bool
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The uniform warm-up's behaviour mu at stored actions u [..., A]: a ~ U(-1, 1)^A in
    the normalised box, u = a (``clip``) or u = atanh(a) (``tanh``). Returns

        log mu(u) = -A log 2                                        (clip)
                  = sum_i [ log 1/2 + log(1 - tanh(u_i)^2) ]         (tanh: the density of a
                                                                      times da/du)

    and the mean and std of the Gaussian with mu's first two moments, N(0, v I): E[u_i] = 0,
    v = E[u_i^2] = 1/3 (clip) or pi^2 / 12 (tanh: the integral of atanh(a)^2 over a). rho
    uses the exact log mu; Rule 2 uses the Gaussian: E_mu[log N(u; m, s)] depends on mu only
    through those moments, so KL(mu || pi) - KL(N(0, v) || pi) = H(N(0, v)) - H(mu) is a
    constant and eq. 11's gradient in the paper's direction (``mu_pi``) is exact; in the
    reference code's direction (``pi_mu``) the penalty is KL(pi || N(0, v)), since
    KL(pi || mu) is infinite (clip: pi leaves the box) or has no closed form (tanh)."""
    if squashed:
        log_mu = (log_tanh_jacobian(u) - math.log(2.0)).sum(-1)
        v = math.pi**2 / 12.0
    else:
        log_mu = torch.full(u.shape[:-1], -u.shape[-1] * math.log(2.0), dtype=u.dtype)
        v = 1.0 / 3.0
    return log_mu, torch.zeros_like(u), torch.full_like(u, math.sqrt(v))


class Normalizer(nn.Module):
    """Affine input scaling x -> (x - mean) / std with statistics set from the replay memory."""

    mean: torch.Tensor
    inv_std: torch.Tensor

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("inv_std", torch.ones(dim))

    def set_stats(self, mean: np.ndarray, std: np.ndarray) -> None:
        """Use these statistics from now on (std floored at 1e-6). Statistics of a wider row
        are cut to this normaliser's leading columns (a recurrent network's rows carry the
        cell's state after the state, :mod:`hpc_refer.algorithms.kit.recurrent`, which is not
        normalised)."""
        d = self.mean.numel()
        self.mean.copy_(torch.as_tensor(mean[:d], dtype=torch.float32))
        self.inv_std.copy_(1.0 / torch.as_tensor(np.maximum(std[:d], 1e-6),
                                                 dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) * self.inv_std

    def op(self, arrays: Arrays = copied) -> Op:
        """This scaling as an op (:mod:`~hpc_refer.algorithms.kit.ops`)."""
        return Op("normalize", arrays(self.mean, self.inv_std))


class _SoftsignFunction(torch.autograd.Function):
    """softsign(x) = x / (1 + |x|), d softsign / dx = 1 / (1 + |x|)^2.

    Same values as ``nn.Softsign`` with a short backward (autograd through abs, add and div
    takes about six passes over the activations, a third of an eager V-RACER step on one
    core). Written with ``setup_context`` so that ``torch.func`` transforms and
    ``torch.compile`` trace it (the compiled learner step).
    """

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x / (x.abs() + 1.0)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[torch.Tensor], output: torch.Tensor) -> None:
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        d = x.abs() + 1.0
        return grad / (d * d)


class Softsign(nn.Module):
    """The softsign activation of the paper's networks (see :class:`_SoftsignFunction`)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _SoftsignFunction.apply(x)


def mlp(sizes: list[int], activation: Activation = Activation.SOFTSIGN,
        layer_norm: bool = False) -> nn.Sequential:
    """Fully connected layers with ``activation`` between them (none after the last); with
    ``layer_norm`` a layer normalisation (Ba et al. 2016, with its affine map) after each
    hidden linear layer, before the activation (BRO's and SimbaV2's critics)."""
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(n_in, n_out))
        if i < len(sizes) - 2:
            if layer_norm:
                layers.append(nn.LayerNorm(n_out))
            layers.append(Softsign() if activation is Activation.SOFTSIGN else nn.ReLU())
    return nn.Sequential(*layers)


def mlp_ops(trunk: nn.Sequential, arrays: Arrays = copied) -> list[Op]:
    """The layers of an :func:`mlp` without layer normalisation (a policy's trunk) as ops:
    linear, softsign, relu (:mod:`~hpc_refer.algorithms.kit.ops`)."""
    ops = []
    for layer in trunk:
        if isinstance(layer, nn.Linear):
            ops.append(Op("linear", arrays(layer.weight.T, layer.bias)))
        elif isinstance(layer, Softsign | nn.ReLU):
            ops.append(Op("softsign" if isinstance(layer, Softsign) else "relu"))
        else:
            raise ValueError(f"a {type(layer).__name__} layer has no export op (a policy's "
                             f"trunk holds Linear, Softsign and ReLU layers)")
    return ops


class QNetwork(nn.Module):
    """Q_w(s, a) = mlp([normalise(s), a]) (one output): the critic of DDPG, SAC and TD3-like
    algorithms (``layer_norm``: layer-normalised hidden layers, :func:`mlp`)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...],
                 activation: Activation = Activation.SOFTSIGN, layer_norm: bool = False) -> None:
        super().__init__()
        self.normalizer = Normalizer(obs_dim)
        self.trunk = mlp([obs_dim + act_dim, *hidden, 1], activation, layer_norm)

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """Q [B]."""
        return self.trunk(torch.cat([self.normalizer(obs), act], dim=-1))[..., 0]


class BehaviourPolicy(nn.Module):
    """A module actors sample from: ``policy(s)`` -> (mean [B, A], std [A] or [B, A]) of the
    Gaussian behaviour mu(.|s), described as ops (:meth:`behaviour_ops`): the numpy forward
    the learner's side calls (:meth:`numpy_step`), the program an actor rank runs without
    torch (:meth:`program`) and the mean an export writes (:meth:`mean_ops`). Its parameters
    and buffers travel to the actors as one flat vector (:func:`flat_state`)."""

    carry_dim: int = 0
    """Values of the recurrent state stored after the state in each row (0: feed-forward;
    :mod:`hpc_refer.algorithms.kit.recurrent`)."""

    def policy(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def behaviour_ops(self, arrays: Arrays = copied) -> NumpyBehaviour:
        """:meth:`policy` as its three op lists (outputs, mean, std:
        :mod:`~hpc_refer.algorithms.kit.program`), holding copies of the tensors or views
        (``arrays``). A plug-in's policy that does not describe itself has no numpy forward,
        no program and no export."""
        raise NotImplementedError(f"{type(self).__name__} does not describe itself as ops "
                                  f"(BehaviourPolicy.behaviour_ops)")

    def numpy_step(self) -> NumpyBehaviour:
        """rows [..., obs_dim + carry_dim] -> (mean, std, carry after the step) equal to
        :meth:`policy` to float32 round-off, on numpy views of the parameters: built once,
        it follows every later load. A batch of rows (the agents of one simulation) gives
        means [n, A] in one call (std [A] or [n, A])."""
        return self.behaviour_ops(viewed)

    def numpy_policy(self) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """:meth:`numpy_step` without the carry."""
        return self.numpy_step().policy

    def program(self) -> Program:
        """What an actor rank runs (:class:`~hpc_refer.algorithms.kit.program.Program`): the
        ops' arrays as places in :func:`flat_state`'s vector, which it holds too."""
        tensors = list(self.state_dict().values())
        if not all(t.is_contiguous() for t in tensors):
            raise ValueError(f"{type(self).__name__} holds a non-contiguous tensor: a "
                             f"program locates arrays in contiguous tensors")
        return Program.of(self.behaviour_ops(viewed),
                          [(t.data_ptr(), t.numel(), t.element_size()) for t in tensors],
                          flat_state(self))

    def mean_ops(self) -> list[Op]:
        """The mean of :meth:`numpy_policy` as ops over a row's state part and the carry,
        holding copies: what ``python -m hpc_refer.export`` writes."""
        described = self.behaviour_ops(copied)
        return [*described.outputs, *described.mean]


def small_output_(trunk: nn.Sequential, scale: float = 0.1) -> None:
    """Start the last layer of ``trunk`` small: its weights times ``scale`` and a zero bias,
    so that every output (a policy mean, a value) starts near 0 (the reference code's
    start)."""
    last = trunk[-1]
    assert isinstance(last, nn.Linear)
    with torch.no_grad():
        last.weight.mul_(scale)
        last.bias.zero_()


def flat_state(net: nn.Module) -> np.ndarray:
    """All parameters and buffers of ``net`` in one float32 vector (state_dict order)."""
    return torch.cat([t.detach().reshape(-1) for t in net.state_dict().values()]).numpy()


def load_flat_state(net: nn.Module, flat: np.ndarray) -> None:
    """Inverse of :func:`flat_state`: copy ``flat`` into the parameters and buffers of ``net``."""
    src = torch.as_tensor(flat)
    offset = 0
    with torch.no_grad():
        for t in net.state_dict().values():
            t.copy_(src[offset : offset + t.numel()].view_as(t))
            offset += t.numel()
    if offset != src.numel():
        raise ValueError(f"parameter vector has {src.numel()} values, the network {offset}")
