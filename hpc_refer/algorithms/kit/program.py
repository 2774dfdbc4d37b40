"""A behaviour policy in numpy, without torch: the ops of :mod:`~hpc_refer.algorithms.kit.ops`
interpreted (:func:`run_ops`), what actors sample from at every environment step, and the
program an actor rank receives (:class:`Program`), so that a rank that only steps a solver
never imports the learner's stack (torch alone is about 140 MB of private memory a rank).

:class:`NumpyBehaviour` runs a policy's three op lists on a row r = [s, c] (the state part s
of ``obs_dim`` values, the carry c of a recurrent policy): outputs y, c' = outputs(s, c), then
m = mean(y), sigma = std(y); it returns (m, sigma, c'). Its arrays are numpy views, either of
the torch module's parameters and buffers (the learner's side: the forward follows every
in-place load) or of one flat float32 vector (an actor's copy).

:class:`Program` is that description with each array given as a place in the policy's flat
vector, the concatenation of its state dict in order (what
:func:`~hpc_refer.algorithms.kit.networks.flat_state` sends to actors at each release): an
offset, a shape and strides, all in elements (a transposed weight is a strided place). It is
built once from views of the module (:meth:`Program.of`) and pickles in a few hundred bytes
plus the initial parameters; :meth:`Program.bind` gives the actor its forward on its own flat
vector, so that loading new parameters is one copy into that vector.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from hpc_refer.algorithms.kit.ops import Op

UNIFORM_STD = 0.0
"""The ``mu_std`` an actor stores for a step of the uniform warm-up (``replay.warmup =
uniform``): a Gaussian's std is never 0 (the policies floor it at exp(-20)), so the value
marks the rows whose behaviour is
:func:`~hpc_refer.algorithms.kit.networks.uniform_behaviour`'s, not a Gaussian."""
UNIFORM_U_BOUND = 1.0 - 1e-6
"""The largest |a| a squashed uniform warm-up step takes (its u = atanh(a) stays finite)."""


def _sigmoid(v: np.ndarray) -> np.ndarray:
    """sigma(v) = (1 + tanh(v / 2)) / 2 (no overflow for large |v|)."""
    return 0.5 * (1.0 + np.tanh(0.5 * v))


def _cell(op: Op, x: np.ndarray, carry: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The GRU or LSTM step of :class:`~hpc_refer.algorithms.kit.recurrent.RecurrentCell`:
    (h', carry')."""
    wi, bi, wh, bh = op.arrays
    w = int(op.attrs["width"])
    h = carry[..., :w]
    gx, gh = x @ wi + bi, h @ wh + bh
    if op.kind == "lstm":
        g = gx + gh
        c = _sigmoid(g[..., w:2 * w]) * carry[..., w:] + _sigmoid(g[..., :w]) * np.tanh(
            g[..., 2 * w:3 * w])
        h_new = _sigmoid(g[..., 3 * w:]) * np.tanh(c)
        return h_new, np.concatenate([h_new, c], axis=-1)
    r = _sigmoid(gx[..., :w] + gh[..., :w])
    z = _sigmoid(gx[..., w:2 * w] + gh[..., w:2 * w])
    n = np.tanh(gx[..., 2 * w:] + r * gh[..., 2 * w:])
    h_new = (1.0 - z) * n + z * h
    return h_new, h_new


def run_ops(ops: Sequence[Op], x: np.ndarray,
            carry: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """x (and c) after ``ops`` in order (:mod:`~hpc_refer.algorithms.kit.ops`' table), over
    the last axis of x [..., D]; ``carry`` [..., carry_dim] for a cell. The input is never
    written; an activation after a linear map works in place on the map's new array (an
    actor calls this once per solver step, where each temporary costs)."""
    owned = False  # whether x is an array this call made (safe to update in place)
    for op in ops:
        kind = op.kind
        if kind == "linear":
            x = x @ op.arrays[0]
            x += op.arrays[1]
            owned = True
            continue
        if kind == "softsign":
            denominator = np.abs(x)
            denominator += 1.0
            if owned:
                x /= denominator
            else:
                x = x / denominator
        elif kind == "relu":
            x = np.maximum(x, 0.0, out=x) if owned else np.maximum(x, 0.0)
        elif kind == "normalize":
            x = (x - op.arrays[0]) * op.arrays[1]
        elif kind in ("gru", "lstm"):
            assert carry is not None, f"a {kind} op needs the carry"
            h, carry = _cell(op, x, carry)
            x = np.concatenate([x, h], axis=-1)
        elif kind == "renorm":
            mean, var, scale, bias = op.arrays
            x = scale * ((x - mean) / np.sqrt(var + np.float32(op.attrs["eps"]))) + bias
        elif kind == "take":
            start = int(op.attrs["start"])
            x = x[..., start:start + int(op.attrs["count"])]
        elif kind == "tanh":
            x = np.tanh(x)
        elif kind == "const":
            x = op.arrays[0]
        elif kind == "softplus":
            x = np.logaddexp(np.float32(0.0), x)
        elif kind == "clip":
            x = np.clip(x, op.attrs["low"], op.attrs["high"])
        elif kind == "exp":
            x = np.exp(x)
        else:  # (Op validates its kind: a kind of the table without a meaning here)
            raise AssertionError(f"op {kind!r} has no numpy meaning")
        owned = False
    return x, carry


Step = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]
"""rows -> (mean, std, carry after the step)."""


@dataclass(frozen=True)
class NumpyBehaviour:
    """A behaviour policy's forward in numpy (module docstring): rows [..., obs_dim +
    carry_dim] -> (mean [..., A], std, carry after the step), the std of shape [A]
    (state-independent) or as the mean's."""

    obs_dim: int
    carry_dim: int
    outputs: tuple[Op, ...]
    mean: tuple[Op, ...]
    std: tuple[Op, ...]

    def __call__(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        d = self.obs_dim
        c = rows[..., d:]
        y, carry = run_ops(self.outputs, rows[..., :d], c if self.carry_dim else None)
        mean, _ = run_ops(self.mean, y)
        std, _ = run_ops(self.std, y)
        if mean.ndim < rows.ndim:  # a constant mean, one per row all the same
            mean = np.broadcast_to(mean, (*rows.shape[:-1], mean.shape[-1]))
        return mean, std, c if carry is None else carry

    def policy(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mean, std) alone."""
        return self(rows)[:2]


@dataclass(frozen=True)
class Place:
    """Where an op's array lies in a flat vector: ``offset``, ``shape`` and ``strides``, in
    elements."""

    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    def view(self, flat: np.ndarray) -> np.ndarray:
        """The array as a view of ``flat`` (read-only: an actor writes only the vector)."""
        last = self.offset + sum((n - 1) * s for n, s in zip(self.shape, self.strides,
                                                             strict=True))
        if self.offset < 0 or (min(self.shape, default=1) > 0 and last >= flat.size):
            raise ValueError(f"an array at {self} lies outside the policy vector of "
                             f"{flat.size} values")
        return np.lib.stride_tricks.as_strided(
            flat[self.offset:], self.shape, tuple(s * flat.itemsize for s in self.strides),
            writeable=False)


PlacedOp = tuple[str, tuple[Place, ...], dict[str, int | float]]
"""An op with its arrays as places: (kind, places, attrs)."""


Tensors = Sequence[tuple[int, int, int]]
"""The policy's state dict in order, each tensor as (address of its first element, element
count, bytes per element): what :meth:`Program.of` locates the views in."""


@dataclass(frozen=True)
class Program:
    """A behaviour policy as an actor rank receives it (module docstring): the structure of
    :class:`NumpyBehaviour` with every array a :class:`Place` in the flat vector of
    ``size`` values, and ``params``, the vector the policy starts with."""

    obs_dim: int
    carry_dim: int
    outputs: tuple[PlacedOp, ...]
    mean: tuple[PlacedOp, ...]
    std: tuple[PlacedOp, ...]
    params: np.ndarray

    @property
    def size(self) -> int:
        """Values of the flat vector."""
        return int(self.params.size)

    @classmethod
    def of(cls, behaviour: NumpyBehaviour, tensors: Tensors, params: np.ndarray) -> Program:
        """The program of ``behaviour``, whose arrays are views of the contiguous tensors
        ``tensors`` (the state dict whose flat vector is ``params``)."""
        starts = np.cumsum([0, *(n for _, n, _ in tensors)])
        if starts[-1] != params.size:
            raise ValueError(f"the state dict holds {starts[-1]} values and the flat vector "
                             f"{params.size}")

        def place(array: np.ndarray) -> Place:
            address = array.__array_interface__["data"][0]
            for k, (first, n, itemsize) in enumerate(tensors):
                if first <= address < first + n * itemsize:
                    if array.itemsize != itemsize or any(s % itemsize for s in array.strides):
                        break
                    return Place(int(starts[k]) + (address - first) // itemsize, array.shape,
                                 tuple(s // itemsize for s in array.strides))
            raise ValueError(f"an op's array of shape {array.shape} is no view of the "
                             f"policy's parameters or buffers (an array a program cannot "
                             f"carry: describe it as a const op of a buffer)")

        def placed(ops: Sequence[Op]) -> tuple[PlacedOp, ...]:
            return tuple((op.kind, tuple(place(a) for a in op.arrays), dict(op.attrs))
                         for op in ops)

        return cls(behaviour.obs_dim, behaviour.carry_dim, placed(behaviour.outputs),
                   placed(behaviour.mean), placed(behaviour.std),
                   np.array(params, np.float32, order="C"))

    def bind(self, flat: np.ndarray) -> NumpyBehaviour:
        """The forward on views of ``flat`` (float32, :attr:`size` values): it follows every
        write into ``flat``."""
        if flat.dtype != np.float32 or flat.shape != (self.size,):
            raise ValueError(f"a policy vector of {self.size} float32 values is needed, got "
                             f"{flat.dtype} {flat.shape}")

        def ops(placed: tuple[PlacedOp, ...]) -> tuple[Op, ...]:
            return tuple(Op(kind, tuple(p.view(flat) for p in places), attrs)
                         for kind, places, attrs in placed)

        return NumpyBehaviour(self.obs_dim, self.carry_dim, ops(self.outputs), ops(self.mean),
                              ops(self.std))
