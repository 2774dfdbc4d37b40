"""Networks (torch): input normalisation, MLP trunks (and their numpy forward), the critic
Q(s, a), the interface of the behaviour modules actors sample from and their flat parameter
vector. The bodies that heads are written over are :mod:`hpc_refer.algorithms.kit.bodies`.

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

from hpc_refer.algorithms.kit.mean_ops import Op, copied
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


UNIFORM_STD = 0.0
"""The ``mu_std`` an actor stores for a step of the uniform warm-up (``replay.warmup =
uniform``): a Gaussian's std is never 0 (the policies floor it at exp(-20)), so the value
marks the rows whose behaviour is :func:`uniform_behaviour`'s, not a Gaussian."""
UNIFORM_U_BOUND = 1.0 - 1e-6
"""The largest |a| a squashed uniform warm-up step takes (its u = atanh(a) stays finite)."""


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

    def op(self) -> Op:
        """This scaling as an export op (:mod:`~hpc_refer.algorithms.kit.mean_ops`)."""
        return Op("normalize", copied(self.mean, self.inv_std))


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


def mlp_ops(trunk: nn.Sequential) -> list[Op]:
    """The layers of an :func:`mlp` without layer normalisation (a policy's trunk) as export
    ops: linear, softsign, relu (:mod:`~hpc_refer.algorithms.kit.mean_ops`)."""
    ops = []
    for layer in trunk:
        if isinstance(layer, nn.Linear):
            ops.append(Op("linear", copied(layer.weight.T, layer.bias)))
        elif isinstance(layer, Softsign | nn.ReLU):
            ops.append(Op("softsign" if isinstance(layer, Softsign) else "relu"))
        else:
            raise ValueError(f"a {type(layer).__name__} layer has no export op (a policy's "
                             f"trunk holds Linear, Softsign and ReLU layers)")
    return ops


class NumpyMLP:
    """The forward pass of a normalised :func:`mlp` in numpy, for one state at a time.

    Actors evaluate the policy once per environment step on a single state, where torch's
    per-call overhead (dispatch, autograd bookkeeping, tensor wrapping: tens of microseconds)
    exceeds the arithmetic of a 2 x 128 network several times over. The weights are numpy
    *views* of the module's parameters and buffers, so they follow every in-place update
    (:func:`load_flat_state`, :meth:`Normalizer.set_stats`) without being rebuilt. Computes
    x_0 = (s - mean) inv_std, x_{k+1} = f(W_k x_k + b_k) with the trunk's activation f
    (softsign or relu, read from its modules), the last layer linear: the module's values to
    float32 round-off.
    """

    def __init__(self, trunk: nn.Sequential, normalizer: Normalizer | None) -> None:
        """``normalizer`` None: the inputs are taken as they come (already scaled)."""
        linears = [m for m in trunk if isinstance(m, nn.Linear)]
        self.relu = any(isinstance(m, nn.ReLU) for m in trunk)
        self.weights = [lin.weight.detach().numpy().T for lin in linears]
        self.biases = [lin.bias.detach().numpy() for lin in linears]
        self.scaling = None if normalizer is None else (normalizer.mean.numpy(),
                                                        normalizer.inv_std.numpy())

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        x = obs if self.scaling is None else (obs - self.scaling[0]) * self.scaling[1]
        last = len(self.weights) - 1
        for k, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            x = x @ w  # a new array: the updates below are in place (the same numbers, with
            x += b     # fewer temporaries: an actor's step calls this once per solver step)
            if k < last:
                if self.relu:
                    np.maximum(x, 0.0, out=x)
                else:
                    denominator = np.abs(x)
                    denominator += 1.0
                    x /= denominator
        return x


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
    Gaussian behaviour mu(.|s), and the same for one state in numpy
    (:meth:`numpy_policy`, what actors call). Its parameters and buffers travel to the actors
    as one flat vector (:func:`flat_state`)."""

    carry_dim: int = 0
    """Values of the recurrent state stored after the state in each row (0: feed-forward;
    :mod:`hpc_refer.algorithms.kit.recurrent`)."""

    def policy(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def numpy_step(self) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """A function row -> (mean, std, carry'): :meth:`numpy_policy` that also returns the
        carry after the step, what actors of a recurrent policy call (the heads over a body,
        :class:`~hpc_refer.algorithms.kit.bodies.BodyPolicy`, have one either way)."""
        raise NotImplementedError(f"{type(self).__name__} is not recurrent")

    def numpy_policy(self) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """A function state [obs_dim] -> (mean [A], std [A]) equal to :meth:`policy` to
        float32 round-off, on numpy views of the parameters (see :class:`NumpyMLP`); built
        once, it follows every later load of parameters. A batch of states [n, obs_dim]
        (the agents of one simulation) gives means [n, A] in one call (std [A] or [n, A]).
        A recurrent policy's is its :meth:`numpy_step` without the carry."""
        step = self.numpy_step()
        return lambda obs: step(obs)[:2]

    def mean_ops(self) -> list[Op]:
        """The mean of :meth:`numpy_policy` as export ops over a row's state part and the
        carry (:mod:`~hpc_refer.algorithms.kit.mean_ops`): what ``python -m hpc_refer.export``
        writes. A plug-in's policy that does not describe its mean cannot be exported."""
        raise NotImplementedError(f"{type(self).__name__} does not describe its mean as "
                                  f"export ops (BehaviourPolicy.mean_ops)")


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
