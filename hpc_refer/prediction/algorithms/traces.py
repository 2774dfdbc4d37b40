"""Learners whose traces use pi or clipped ratios: Tree Backup, V-trace, ABTD (spec 2.2 items 7-9).

In all three the ratio rho_t multiplies only the TD error, ``w += alpha rho_t delta_t z_t``, so the
placement is exactly ``w += alpha psi_t z_t`` (spec table 2.3). The "previous step" factors are zero
at an episode start (``c_t = 0``), which cuts the trace as [R]'s resets do.
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np

from hpc_refer.prediction.algorithms.base import Choices, Learner, Step, is_error, td_error
from hpc_refer.prediction.algorithms.td import OffPolicyTD, semi_gradient_step
from hpc_refer.prediction.task import GAMMA

#: ABTD's task constants on Collision (``Tasks/EightStateCollision.py``): xi_0 = 1, xi_max = 2.
XI_0 = 1.0
XI_MAX = 2.0


def decayed_trace(z: np.ndarray, x: np.ndarray, decay: np.ndarray) -> np.ndarray:
    """z_t = decay_t z_{t-1} + x_t."""
    return decay[:, None] * z + x


class _ErrorTraceLearner(Learner):
    """w += alpha psi_t z_t with z_t = g c_t k_t z_{t-1} + x_t; subclasses give the factor k_t."""

    def __init__(self, n_runs: int, n_features: int, alpha: np.ndarray, kappa: np.ndarray,
                 extra: np.ndarray | None = None, lam: float = 0.0,
                 choices: Choices | None = None) -> None:
        super().__init__(n_runs, n_features, alpha, kappa, extra, lam, choices)
        self.z = np.zeros((n_runs, n_features, 1))

    @abstractmethod
    def trace_factor(self, step: Step) -> np.ndarray:
        """k_t, the trace decay of this step before g and the episode flag."""

    def update(self, step: Step, v: np.ndarray, v_next: np.ndarray) -> None:
        psi = is_error(td_error(step.reward, v, v_next), step.rho, v, self.kappa)
        self.z = decayed_trace(self.z, step.x, GAMMA * step.cont * self.trace_factor(step))
        semi_gradient_step(self.w, self.alpha, psi, self.z)


class TreeBackup(_ErrorTraceLearner):
    """Tree Backup(lambda), prediction variant: z_t = g lambda pi_{t-1} z_{t-1} + x_t,
    w += alpha rho_t delta_t z_t (pi_{-1} = 0 at an episode start)."""

    name = "tb"
    label = "Tree Backup"

    def __init__(self, n_runs: int, n_features: int, alpha: np.ndarray, kappa: np.ndarray,
                 extra: np.ndarray | None = None, lam: float = 0.0,
                 choices: Choices | None = None) -> None:
        super().__init__(n_runs, n_features, alpha, kappa, extra, lam, choices)
        self.pi_prev = np.zeros((n_runs, 1))

    def trace_factor(self, step: Step) -> np.ndarray:
        factor, self.pi_prev = self.lam * self.pi_prev, step.pi
        return factor


class Vtrace(_ErrorTraceLearner):
    """V-trace(lambda) as coded in [R]: z_t = min(1, rho_{t-1}) g lambda z_{t-1} + x_t,
    w += alpha rho_t delta_t z_t, the current rho_t not clipped (spec ambiguity A3).
    See :class:`VtraceClipped` for the README's form."""

    name = "vtrace"
    label = "V-trace"

    def __init__(self, n_runs: int, n_features: int, alpha: np.ndarray, kappa: np.ndarray,
                 extra: np.ndarray | None = None, lam: float = 0.0,
                 choices: Choices | None = None) -> None:
        super().__init__(n_runs, n_features, alpha, kappa, extra, lam, choices)
        self.rho_prev = np.zeros((n_runs, 1))

    def trace_factor(self, step: Step) -> np.ndarray:
        factor, self.rho_prev = self.lam * np.minimum(1.0, self.rho_prev), step.rho
        return factor


class VtraceClipped(OffPolicyTD):
    """V-trace(lambda) in the README's (IMPALA) form, the alternative of ambiguity A3:
    z_t = min(1, rho_t) (g lambda z_{t-1} + x_t), w += alpha delta_t z_t, i.e. Off-policy TD(lambda)
    with the clipped ratio c_t = min(1, rho_t); TARGET: c_t (R + g w^T x') - w^T x."""

    name = "vtrace-clipped"
    label = "V-trace (clipped)"

    def ratio(self, step: Step) -> np.ndarray:
        return np.minimum(1.0, step.rho)


def abtd_xi(zeta: np.ndarray) -> np.ndarray:
    """xi(zeta) = 2 zeta xi_0 + max(0, 2 zeta - 1)(xi_max - 2 xi_0) (= 2 zeta on Collision)."""
    return 2.0 * zeta * XI_0 + np.maximum(0.0, 2.0 * zeta - 1.0) * (XI_MAX - 2.0 * XI_0)


def abtd_nu(xi: np.ndarray, pi: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """nu_t = min(xi, 1 / max(pi_t, mu_t))."""
    return np.minimum(xi, 1.0 / np.maximum(pi, mu))


class ABTD(Learner):
    """ABTD(zeta): z_t = x_t + g nu_{t-1} pi_{t-1} z_{t-1}, w += alpha rho_t delta_t z_t
    (nu_{-1} = pi_{-1} = 0 at an episode start). No lambda: zeta sets the bootstrapping;
    zeta = 0 is TD(0), all zeta >= 0.5 coincide on this task."""

    name = "abtd"
    label = "ABTD(ζ)"
    extra = "zeta"

    def __init__(self, n_runs: int, n_features: int, alpha: np.ndarray, kappa: np.ndarray,
                 extra: np.ndarray | None = None, lam: float = 0.0,
                 choices: Choices | None = None) -> None:
        super().__init__(n_runs, n_features, alpha, kappa, extra, lam, choices)
        assert self.param is not None
        self.xi = abtd_xi(self.param)
        self.nu_pi_prev = np.zeros((n_runs, self.alpha.size))
        self.z = self.zeros()

    def update(self, step: Step, v: np.ndarray, v_next: np.ndarray) -> None:
        psi = is_error(td_error(step.reward, v, v_next), step.rho, v, self.kappa)
        self.z = decayed_trace(self.z, step.x, GAMMA * step.cont * self.nu_pi_prev)
        self.nu_pi_prev = abtd_nu(self.xi, step.pi, step.mu) * step.pi
        semi_gradient_step(self.w, self.alpha, psi, self.z)
