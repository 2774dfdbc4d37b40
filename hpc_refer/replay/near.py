"""The near-policy rule of ReF-ER (Novati & Koumoutsakos 2019, Sec. 3), written once.

A stored transition k is near-policy iff

    1 / c_max < rho_k < c_max,

and far-policy otherwise. rho_k is a float32 number (the replay's column, the loss's tensor),
so the rule is decided in float32: :meth:`NearBounds.of` rounds the two thresholds to float32
once, on the host, and every path compares rho with those same two numbers -- the loss in
torch (eager, or compiled with the bounds as 0-d tensors;
:func:`hpc_refer.algorithms.kit.refer.near_policy`), the replay's counts in numpy (:func:`is_far`)
and its numba kernels (``far_lo``, ``far_hi``).
So the far-policy count kept incrementally by the replay, its recount, and the Rule 1 mask of a
step agree at the boundary (rho exactly at a threshold is far-policy everywhere).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class NearBounds(NamedTuple):
    """The near-policy interval (low, high) = (1/c_max, c_max) as float32 values (Python
    floats, or 0-d tensors holding them inside a compiled graph)."""

    low: float
    high: float

    @classmethod
    def of(cls, c_max: float) -> NearBounds:
        """The bounds of ``c_max``: float32(1 / c_max) (the division in float64) and
        float32(c_max)."""
        return cls(float(np.float32(1.0 / c_max)), float(np.float32(c_max)))


def is_far(rho: np.ndarray, bounds: NearBounds) -> np.ndarray:
    """Far-policy mask of float32 ``rho``: rho <= low or rho >= high (numpy)."""
    rho = np.asarray(rho, np.float32)
    return (rho <= np.float32(bounds.low)) | (rho >= np.float32(bounds.high))
