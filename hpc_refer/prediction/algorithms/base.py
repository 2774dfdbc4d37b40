"""Shared pieces of the ten learners: array layout, the IS-ratio placement, the TD error.

Array layout (everything vectorised over runs and settings):

* per run and feature: ``(R, d, 1)`` -- feature vectors ``x = x(S_t)``, ``x' = x(S_{t+1})``;
* per run: ``(R, 1)`` -- reward ``R``, ``rho_t``, ``pi_t``, ``mu_t``, the episode flag ``cont``;
* per setting: ``(P,)`` -- step size ``alpha``, placement ``kappa``, eta / beta / zeta, the
  ambiguity options of :class:`Choices`;
* per run and setting: ``(R, P)`` -- values, TD errors; ``(R, d, P)`` -- weights and traces.

``R = P = 1`` is a single run with a single setting; the same code serves both.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, TypeVar

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


_E = TypeVar("_E", bound=enum.Enum)


class Corrections(enum.IntEnum):
    """Ambiguity A1: the ratio in the gradient-correction terms of GTD, GTD2, HTD, Proximal GTD2.

    Notation of spec 2.1-2.3: ``e_t = g lambda z_{t-1} + x_t`` is the trace before this step's
    ratio, ``z_t = rho_t e_t``, ``zb_t = g lambda zb_{t-1} + x_t`` HTD's trace without IS. Only
    TARGET settings (kappa = 1) are affected; WHOLE settings always use [R]'s corrections.

    KEEP_RHO (``keep-rho``, the spec's table 2.3, default): the corrections of WHOLE,
      GTD / GTD2 / PGTD2 ``g (1-lambda) (z_t^T h) x'``, HTD ``(x - g x') ((z_t - zb_t)^T h)``;
      at lambda = 0: ``g rho (h^T x) x'`` and ``(rho - 1) (h^T x) (x - g x')``.
    TARGET_ONLY (``target-only``): the ratio is moved onto the target in the corrections exactly as
      in the TD error, ``rho_t (x - g x') -> (x - g rho_t x')``. HTD's w-correction becomes
      ``(x - g rho_t x') (e_t^T h) - (x - g x') (zb_t^T h)``, at lambda = 0
      ``-g (rho - 1) (h^T x) x'``: the sample of ``(A_T - A_mu)^T h`` with the TARGET error's
      matrix ``A_T = E[e (x - g rho x')^T]``, as [R]'s is of ``(A_W - A_mu)^T h``,
      ``A_W = E[z (x - g x')^T]``. The GTD / GTD2 / PGTD2 correction
      ``g (1-lambda) rho_t (e_t^T h) x'`` already has its ratio on the target feature x' only; it
      is also the x' part of ``A_T^T h = C h - g (1-lambda) E[rho x' e^T] h``, so it is unchanged.
    NO_RHO (``no-rho``): the ratio appears in the TD target only, none in the corrections:
      ``z_t -> e_t`` there, GTD / GTD2 / PGTD2 ``g (1-lambda) (e_t^T h) x'`` (lambda = 0:
      ``g (h^T x) x'``), HTD ``(x - g x') ((e_t - zb_t)^T h)`` (lambda = 0: zero, so HTD(0)'s w
      update is TD(0)'s).
    """

    KEEP_RHO = 0
    TARGET_ONLY = 1
    NO_RHO = 2

    @property
    def option(self) -> str:
        """The command-line name (``keep-rho``, ``target-only``, ``no-rho``)."""
        return option_name(self)

    @classmethod
    def parse(cls, text: str) -> Corrections:
        return parse_option(cls, "target-corrections", text)


class FollowOn(enum.IntEnum):
    """Ambiguity A5: the decay of Emphatic TD(lambda, beta)'s follow-on trace.

    BETA (``beta``, the spec's choice, [R], default): ``F_t = beta rho_{t-1} F_{t-1} + 1``.
    BETA_GAMMA (``beta-gamma``): ``F_t = beta g_t rho_{t-1} F_{t-1} + 1`` with the transition
      discount ``g_t = g = 0.9`` of the non-terminating step S_{t-1} -> S_t (after a terminating one
      F restarts at 1 in both).
    Emphatic TD(lambda) is unaffected: its ``F_t = g rho_{t-1} F_{t-1} + 1`` is beta = g under BETA
    and beta = 1 under BETA_GAMMA.
    """

    BETA = 0
    BETA_GAMMA = 1

    @property
    def option(self) -> str:
        """The command-line name (``beta``, ``beta-gamma``)."""
        return option_name(self)

    @classmethod
    def parse(cls, text: str) -> FollowOn:
        return parse_option(cls, "followon-discount", text)


def option_name(member: enum.Enum) -> str:
    """``KEEP_RHO -> keep-rho``."""
    return member.name.lower().replace("_", "-")


def parse_option(cls: type[_E], field: str, text: str) -> _E:
    """The member of ``cls`` named ``text`` (:func:`option_name`); a ValueError naming ``field``."""
    for member in cls:
        if option_name(member) == text:
            return member
    allowed = ", ".join(option_name(m) for m in cls)
    raise ValueError(f"{field}: unknown {text!r}; allowed: {allowed}")


@dataclass(frozen=True)
class Choices:
    """The options of the spec's ambiguities, one code per setting (``(P,)``) or one for all."""

    corrections: np.ndarray | int = Corrections.KEEP_RHO
    followon: np.ndarray | int = FollowOn.BETA


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
    ``(R, d, P)``, starting at zero. ``corrections`` and ``followon`` are the per-setting codes of
    :class:`Corrections` and :class:`FollowOn` (used by the learners they concern).
    """

    name: ClassVar[str]
    label: ClassVar[str]
    extra: ClassVar[str | None] = None

    def __init__(self, n_runs: int, n_features: int, alpha: np.ndarray, kappa: np.ndarray,
                 extra: np.ndarray | None = None, lam: float = 0.0,
                 choices: Choices | None = None) -> None:
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
        choices = choices or Choices()
        self.corrections = self._codes(Corrections, choices.corrections)
        self.followon = self._codes(FollowOn, choices.followon)
        self.w = np.zeros((n_runs, n_features, self.alpha.size))

    def _codes(self, kind: type[enum.IntEnum], codes: np.ndarray | int) -> np.ndarray:
        """``codes`` as a ``(P,)`` int array; a ValueError unless all are members of ``kind``."""
        array = np.broadcast_to(np.asarray(codes, dtype=int), self.alpha.shape)
        if not np.isin(array, [int(m) for m in kind]).all():
            raise ValueError(f"{kind.__name__}: codes {np.unique(array).tolist()} not all in "
                             f"{[int(m) for m in kind]}")
        return array

    def zeros(self) -> np.ndarray:
        """A new zero vector per run and setting, shaped like ``w``."""
        return np.zeros_like(self.w)

    @abstractmethod
    def update(self, step: Step, v: np.ndarray, v_next: np.ndarray) -> None:
        """Apply one step given ``v = w^T x`` and ``v_next = w^T x'`` (each ``(R, P)``)."""
