"""A behaviour policy as short lists of operations: the form every export is written from
(:mod:`hpc_refer.export`: the ONNX graph, the weight file and the C routine that interpret a
policy's mean) and the form actor ranks run, in numpy without torch
(:mod:`hpc_refer.algorithms.kit.program`).

A behaviour policy describes its Gaussian mu(.|r) = N(m(r), sigma(r)^2) in three lists, each
applied in order to a vector x: the *outputs* of its network, starting from the input row's
state part (the stacked observation with ``env.history``) and the carry c of a recurrent
policy (0 at an episode's start); the *mean* m, starting from those outputs (the action an
evaluation takes before the map into the action box); the *std* sigma, starting from the
same outputs. The export writes the outputs' and the mean's ops (``mean_ops()``); the std
ops appear only in actors' programs. All arithmetic is float32; matrices are stored as
numpy's forwards multiply them, a row vector times [inputs, outputs]:

============ ====================================== ===========================================
op           arrays (float32, row-major)             x <- (and c <-)
============ ====================================== ===========================================
normalize    mean [D], inv_std [D]                   (x - mean) * inv_std
gru, lstm    w_ih [D, G H], b_ih [G H],              h' = cell(x, c), the equations of
             w_hh [H, G H], b_hh [G H]               :mod:`~hpc_refer.algorithms.kit.recurrent`
             (attribute ``width`` H)                 (G = 3 or 4, sigma(v) = (1 + tanh(v/2)) / 2);
                                                     x <- [x, h'], c <- h' (GRU) or [h', c'] (LSTM)
linear       w [N, M], b [M]                         x w + b  (N inputs, M outputs)
softsign     --                                      x / (1 + |x|)
relu         --                                      max(x, 0)
tanh         --                                      tanh(x)
renorm       mean [N], var [N], scale [N], bias [N]  scale (x - mean) / sqrt(var + eps) + bias
             (attribute ``eps``)                     (batch renormalisation in evaluation)
take         (attributes ``start``, ``count``)       x[start : start + count]
const        value [N]                               value (a state-independent output)
softplus     --                                      log(1 + exp(x))
clip         (attributes ``low``, ``high``)          min(max(x, low), high)
exp          --                                      exp(x)
============ ====================================== ===========================================

The export reads the first nine kinds (:data:`MEAN_KINDS`); ``const``, ``softplus``, ``clip``
and ``exp`` make the std of V-RACER (softplus of a parameter vector), of the fixed-sigma
heads (a buffer) and of the squashed Gaussians (exp of the clipped log sigma outputs).

This module imports no torch: :func:`copied` and :func:`viewed` take anything with torch's
``detach().numpy()``, so that actor ranks read the ops without the learner's stack.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

OP_ARRAYS: dict[str, tuple[str, ...]] = {
    "normalize": ("mean", "inv_std"), "gru": ("w_ih", "b_ih", "w_hh", "b_hh"),
    "lstm": ("w_ih", "b_ih", "w_hh", "b_hh"), "linear": ("w", "b"), "softsign": (),
    "relu": (), "tanh": (), "renorm": ("mean", "var", "scale", "bias"), "take": (),
    "const": ("value",), "softplus": (), "clip": (), "exp": ()}
"""Each op's arrays, in the order :class:`Op` holds them (module docstring)."""

MEAN_KINDS = ("normalize", "gru", "lstm", "linear", "softsign", "relu", "tanh", "renorm",
              "take")
"""The kinds a policy's outputs and mean are made of: what the export writes and reads."""


@dataclass(frozen=True)
class Op:
    """One operation (module docstring): ``kind`` one of :data:`OP_ARRAYS`, its float32
    ``arrays`` in that table's order, and its integer or float ``attrs``."""

    kind: str
    arrays: tuple[np.ndarray, ...] = ()
    attrs: dict[str, int | float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in OP_ARRAYS or len(self.arrays) != len(OP_ARRAYS[self.kind]):
            raise ValueError(f"op {self.kind!r} with {len(self.arrays)} arrays: allowed are "
                             f"{', '.join(f'{k} ({len(v)})' for k, v in OP_ARRAYS.items())}")


Arrays = Callable[..., tuple[np.ndarray, ...]]
"""How an op holds its tensors: :func:`copied` (an export) or :func:`viewed` (a numpy forward,
and an actor's program)."""


def copied(*tensors: torch.Tensor) -> tuple[np.ndarray, ...]:
    """float32 copies of parameters or buffers (a description does not follow later loads)."""
    return tuple(np.array(t.detach().numpy(), np.float32, order="C") for t in tensors)


def viewed(*tensors: torch.Tensor) -> tuple[np.ndarray, ...]:
    """numpy views of parameters or buffers (a numpy forward follows every load)."""
    return tuple(t.detach().numpy() for t in tensors)
