"""Shared pieces of the ten learners: array layout, the IS-ratio placement, the TD error.

Array layout (everything vectorised over runs and settings):

* per run and feature: ``(R, d, 1)`` -- feature vectors ``x = x(S_t)``, ``x' = x(S_{t+1})``;
* per run: ``(R, 1)`` -- reward ``R``, ``rho_t``, ``pi_t``, ``mu_t``, the episode flag ``cont``;
* per setting: ``(P,)`` -- step size ``alpha``, placement ``kappa``, eta / beta / zeta;
* per run and setting: ``(R, P)`` -- values, TD errors; ``(R, d, P)`` -- weights and traces.

``R = P = 1`` is a single run with a single setting; the same code serves both.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from hpc_refer.prediction.task import GAMMA


class Placement(enum.IntEnum):
    """Where the importance-sampling ratio rho_t multiplies the TD error.

    WHOLE:  rho_t (R + g v(S') - v(S))   -- the reference code, the abstract's equation 4;
    TARGET: rho_t (R + g v(S')) - v(S)   -- per-decision IS, the abstract's equation 3.
    The integer value is kappa in ``psi = rho delta + kappa (rho - 1) v(S)``.
    """

    WHOLE = 0
    TARGET = 1

    @classmethod
    def parse(cls, name: str) -> Placement:
        """Placement from its case-insensitive name; a clear ValueError otherwise."""
        try:
            return cls[name.upper()]
        except KeyError:
            allowed = ", ".join(p.name for p in cls)
            raise ValueError(f"placement: unknown {name!r}; allowed: {allowed}") from None


@dataclass(frozen=True)
class Step:
    """One transition of every run in the batch (see the module docstring for shapes)."""

    x: np.ndarray
    x_next: np.ndarray
    reward: np.ndarray
    rho: np.ndarray
    pi: np.ndarray
    mu: np.ndarray
    cont: np.ndarray


def dot(u: np.ndarray, x: np.ndarray) -> np.ndarray:
    """u^T x over the feature axis: ``(R, d, P) . (R, d, P or 1) -> (R, P)``."""
    return np.einsum("rdp,rdp->rp", u, x)


def td_error(reward: np.ndarray, v: np.ndarray, v_next: np.ndarray) -> np.ndarray:
    """delta_t = R_{t+1} + g w^T x' - w^T x (weights before this step's update)."""
    return reward + GAMMA * v_next - v


def is_error(delta: np.ndarray, rho: np.ndarray, v: np.ndarray, kappa: np.ndarray) -> np.ndarray:
    """The IS-corrected TD error psi_t that replaces every product rho_t * delta_t.

    WHOLE (kappa = 0):  psi = W_t = rho_t delta_t;
    TARGET (kappa = 1): psi = T_t = rho_t (R + g w^T x') - w^T x = W_t + (rho_t - 1) w^T x.
    The difference (rho_t - 1) w^T x has zero mean under mu: WHOLE is TARGET plus a control variate.
    """
    return rho * delta + kappa * ((rho - 1.0) * v)


class Learner(ABC):
    """A linear off-policy prediction learner for ``n_runs`` runs times ``P`` settings.

    Subclasses define ``name`` (CLI key), ``label`` (for tables and plots), ``extra`` (the name of
    their third parameter, or None) and :meth:`update`. ``w`` is the main weight vector, shape
    ``(R, d, P)``, starting at zero.
    """

    name: ClassVar[str]
    label: ClassVar[str]
    extra: ClassVar[str | None] = None

    def __init__(self, n_runs: int, n_features: int, alpha: np.ndarray, kappa: np.ndarray,
                 extra: np.ndarray | None = None, lam: float = 0.0) -> None:
        self.alpha = np.asarray(alpha, dtype=float)
        self.kappa = np.asarray(kappa, dtype=float)
        if self.alpha.shape != self.kappa.shape or self.alpha.ndim != 1:
            raise ValueError("alpha and kappa must be 1-D arrays of the same length")
        if (self.extra is None) != (extra is None):
            raise ValueError(f"{self.name}: third parameter {self.extra!r} expected")
        self.param = None if extra is None else np.asarray(extra, dtype=float)
        if self.param is not None and self.param.shape != self.alpha.shape:
            raise ValueError(f"{self.name}: {self.extra} must have the shape of alpha")
        self.lam = float(lam)
        self.w = np.zeros((n_runs, n_features, self.alpha.size))

    def zeros(self) -> np.ndarray:
        """A new zero vector per run and setting, shaped like ``w``."""
        return np.zeros_like(self.w)

    @abstractmethod
    def update(self, step: Step, v: np.ndarray, v_next: np.ndarray) -> None:
        """Apply one step given ``v = w^T x`` and ``v_next = w^T x'`` (each ``(R, P)``)."""
