"""Off-policy TD(lambda) and the two Emphatic TD learners (spec 2.2 items 1 and 6).

Placement: every product rho_t delta_t becomes psi_t (:func:`base.is_error`). With the trace
written as ``z_t = rho_t e_t``, ``e_t = g lambda z_{t-1} + x_t`` (the trace before this step's
ratio), [R]'s ``alpha delta_t z_t = alpha (rho_t delta_t) e_t``, so both placements read
``w += alpha psi_t e_t``. At lambda = 0 this is the spec's table 2.3 exactly; for lambda > 0 it is
our extension of the same rule (no source defines TARGET with traces, ambiguity A1).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from hpc_refer.prediction.algorithms.base import (
    Choices,
    FollowOn,
    Learner,
    Step,
    is_error,
    td_error,
)
from hpc_refer.prediction.task import GAMMA


class RatioTrace:
    """Accumulating trace, ratio applied last: e_t = g lambda c_t z_{t-1} + x_t, z_t = rho_t e_t.

    ``c_t = 0`` at an episode start (the reset of z); at lambda = 0 no state is kept: e_t = x_t.
    """

    def __init__(self, lam: float, like: np.ndarray) -> None:
        self.decay = GAMMA * lam
        self.z: np.ndarray | None = np.zeros_like(like) if lam else None

    def pre_ratio(self, x: np.ndarray, cont: np.ndarray, rho: np.ndarray,
                  scale: np.ndarray | None = None) -> np.ndarray:
        """Advance the trace; return e_t = g lambda c_t z_{t-1} + scale x_t (scale: ETD's M_t)."""
        e = x if scale is None else scale[:, None, :] * x
        if self.z is not None:
            e = self.decay * cont[:, None] * self.z + e
            self.z = rho[:, None] * e
        return e

    def current(self, e: np.ndarray, rho: np.ndarray) -> np.ndarray:
        """z_t = rho_t e_t for the e_t just returned by :meth:`pre_ratio`."""
        return rho[:, None] * e if self.z is None else self.z


def semi_gradient_step(w: np.ndarray, alpha: np.ndarray, psi: np.ndarray, e: np.ndarray) -> None:
    """w <- w + alpha psi_t e_t (in place); with WHOLE this is [R]'s w + alpha delta_t z_t."""
    w += (alpha * psi)[:, None, :] * e


class OffPolicyTD(Learner):
    """Off-policy TD(lambda): z_t = rho_t (g lambda z_{t-1} + x_t), w += alpha delta_t z_t (WHOLE).

    Both placements: w += alpha psi_t e_t with psi_t from :func:`base.is_error`.
    """

    name = "td"
    label = "Off-policy TD"

    def __init__(self, n_runs: int, n_features: int, alpha: np.ndarray, kappa: np.ndarray,
                 extra: np.ndarray | None = None, lam: float = 0.0,
                 choices: Choices | None = None) -> None:
        super().__init__(n_runs, n_features, alpha, kappa, extra, lam, choices)
        self.trace = RatioTrace(lam, self.w)

    def ratio(self, step: Step) -> np.ndarray:
        """The ratio the learner applies: rho_t = pi_t / mu_t."""
        return step.rho

    def update(self, step: Step, v: np.ndarray, v_next: np.ndarray) -> None:
        rho = self.ratio(step)
        psi = is_error(td_error(step.reward, v, v_next), rho, v, self.kappa)
        e = self.trace.pre_ratio(step.x, step.cont, rho)
        semi_gradient_step(self.w, self.alpha, psi, e)


def follow_on(F: np.ndarray, decay: np.ndarray, cont: np.ndarray,
              rho_prev: np.ndarray) -> np.ndarray:
    """F_t = decay c_t rho_{t-1} F_{t-1} + 1 (interest 1; F_0 = 1 at every episode start)."""
    return decay * (cont * rho_prev) * F + 1.0


def emphasis(F: np.ndarray, lam: float) -> np.ndarray:
    """M_t = lambda + (1 - lambda) F_t."""
    return lam + (1.0 - lam) * F


class EmphaticTDBeta(Learner):
    """Emphatic TD(lambda, beta): F_t = beta rho_{t-1} F_{t-1} + 1, M_t = lambda + (1-lambda) F_t,
    z_t = rho_t (M_t x_t + g lambda z_{t-1}), w += alpha delta_t z_t (WHOLE); psi_t e_t in general.

    beta = 0 gives F = 1, i.e. exactly Off-policy TD(lambda). Ambiguity A5 (:class:`base.FollowOn`):
    settings with ``followon = BETA_GAMMA`` decay F by beta g_t = 0.9 beta instead of beta.
    """

    name = "etdlb"
    label = "Emphatic TD(λ,β)"
    extra: ClassVar[str | None] = "beta"

    def __init__(self, n_runs: int, n_features: int, alpha: np.ndarray, kappa: np.ndarray,
                 extra: np.ndarray | None = None, lam: float = 0.0,
                 choices: Choices | None = None) -> None:
        super().__init__(n_runs, n_features, alpha, kappa, extra, lam, choices)
        self.F = np.ones((n_runs, self.alpha.size))
        self.rho_prev = np.zeros((n_runs, 1))
        self.trace = RatioTrace(lam, self.w)

    def decay(self) -> np.ndarray:
        """The follow-on decay of each setting: beta (BETA) or beta g_t = 0.9 beta (BETA_GAMMA)."""
        assert self.param is not None
        return np.where(self.followon == FollowOn.BETA_GAMMA, self.param * GAMMA, self.param)

    def update(self, step: Step, v: np.ndarray, v_next: np.ndarray) -> None:
        self.F = follow_on(self.F, self.decay(), step.cont, self.rho_prev)
        self.rho_prev = step.rho
        psi = is_error(td_error(step.reward, v, v_next), step.rho, v, self.kappa)
        e = self.trace.pre_ratio(step.x, step.cont, step.rho, scale=emphasis(self.F, self.lam))
        semi_gradient_step(self.w, self.alpha, psi, e)


class EmphaticTD(EmphaticTDBeta):
    """Emphatic TD(lambda): Emphatic TD(lambda, beta) with the follow-on decay fixed to g = 0.9,
    F_t = g rho_{t-1} F_{t-1} + 1, under either :class:`base.FollowOn` reading (beta = g, or
    beta = 1 times g_t)."""

    name = "etd"
    label = "Emphatic TD(λ)"
    extra = None

    def decay(self) -> np.ndarray:
        return np.full_like(self.alpha, GAMMA)
