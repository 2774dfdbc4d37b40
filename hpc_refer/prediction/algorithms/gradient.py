"""The gradient-TD family: GTD(lambda) (= TDC), GTD2(lambda), HTD(lambda), Proximal GTD2(lambda).

Spec 2.2 items 2-5. ``h`` is the secondary weight vector ([R]'s ``v``) with step size
``alpha_h = eta alpha``. Every product rho_t delta_t (written ``delta_t z_t = (rho_t delta_t) e_t``)
becomes psi_t e_t; the ratio inside the gradient-correction terms (``z_t^T h``) stays in both
placements (spec table 2.3, ambiguity A1). Updates use the pre-update w and h unless stated.
"""

from __future__ import annotations

import numpy as np

from hpc_refer.prediction.algorithms.base import Learner, Step, dot, is_error, td_error
from hpc_refer.prediction.algorithms.td import RatioTrace
from hpc_refer.prediction.task import GAMMA


def secondary_direction(psi: np.ndarray, e: np.ndarray, hx: np.ndarray,
                        x: np.ndarray) -> np.ndarray:
    """psi_t e_t - (h^T x) x  (WHOLE: delta_t z_t - (h^T x) x), the h-update of GTD, GTD2, PGTD2."""
    return psi[:, None, :] * e - hx[:, None, :] * x


def tdc_direction(psi: np.ndarray, e: np.ndarray, zh: np.ndarray, x_next: np.ndarray,
                  lam: float) -> np.ndarray:
    """psi_t e_t - g (1 - lambda) (z_t^T h) x'  (WHOLE: delta_t z_t - g (1-lambda) (z^T h) x')."""
    return psi[:, None, :] * e - (GAMMA * (1.0 - lam)) * zh[:, None, :] * x_next


def gtd2_direction(hx: np.ndarray, zh: np.ndarray, x: np.ndarray, x_next: np.ndarray,
                   lam: float) -> np.ndarray:
    """(h^T x) x - g (1 - lambda) (z_t^T h) x', the w-update of GTD2 and Proximal GTD2."""
    return hx[:, None, :] * x - (GAMMA * (1.0 - lam)) * zh[:, None, :] * x_next


class GradientLearner(Learner):
    """Shared state of the gradient-TD family: w, h, the IS trace z, and alpha_h = eta alpha."""

    extra = "eta"

    def __init__(self, n_runs: int, n_features: int, alpha: np.ndarray, kappa: np.ndarray,
                 extra: np.ndarray | None = None, lam: float = 0.0) -> None:
        super().__init__(n_runs, n_features, alpha, kappa, extra, lam)
        assert self.param is not None
        self.alpha_h = self.param * self.alpha
        self.h = self.zeros()
        self.trace = RatioTrace(lam, self.w)

    def errors(self, step: Step, v: np.ndarray, v_next: np.ndarray) -> tuple[np.ndarray, ...]:
        """psi_t, e_t and z_t of this step (advances the trace)."""
        psi = is_error(td_error(step.reward, v, v_next), step.rho, v, self.kappa)
        e = self.trace.pre_ratio(step.x, step.cont, step.rho)
        return psi, e, self.trace.current(e, step.rho)


class GTD(GradientLearner):
    """GTD(lambda) = TDC(lambda): w += alpha (delta z - g (1-lambda) (z^T h) x'),
    h += alpha_h (delta z - (h^T x) x); delta z -> psi e in both (placement)."""

    name = "gtd"
    label = "GTD"

    def update(self, step: Step, v: np.ndarray, v_next: np.ndarray) -> None:
        psi, e, z = self.errors(step, v, v_next)
        hx, zh = dot(self.h, step.x), dot(z, self.h)
        self.w += self.alpha * tdc_direction(psi, e, zh, step.x_next, self.lam)
        self.h += self.alpha_h * secondary_direction(psi, e, hx, step.x)


class GTD2(GradientLearner):
    """GTD2(lambda): w += alpha ((h^T x) x - g (1-lambda) (z^T h) x'), h as GTD.

    The placement acts only through the h update."""

    name = "gtd2"
    label = "GTD2"

    def update(self, step: Step, v: np.ndarray, v_next: np.ndarray) -> None:
        psi, e, z = self.errors(step, v, v_next)
        hx, zh = dot(self.h, step.x), dot(z, self.h)
        self.w += self.alpha * gtd2_direction(hx, zh, step.x, step.x_next, self.lam)
        self.h += self.alpha_h * secondary_direction(psi, e, hx, step.x)


class HTD(GradientLearner):
    """HTD(lambda), with a second trace without IS, zb_t = g lambda zb_{t-1} + x_t:
    w += alpha (delta z + (x - g x') ((z - zb)^T h)), h += alpha_h (delta z - (x - g x') (h^T zb)).

    At lambda = 0, (z - zb)^T h = (rho - 1) h^T x. delta z -> psi e in both updates."""

    name = "htd"
    label = "HTD"

    def __init__(self, n_runs: int, n_features: int, alpha: np.ndarray, kappa: np.ndarray,
                 extra: np.ndarray | None = None, lam: float = 0.0) -> None:
        super().__init__(n_runs, n_features, alpha, kappa, extra, lam)
        self.plain = RatioTrace(lam, self.w)

    def update(self, step: Step, v: np.ndarray, v_next: np.ndarray) -> None:
        psi, e, z = self.errors(step, v, v_next)
        zb = self.plain.pre_ratio(step.x, step.cont, np.ones_like(step.rho))
        diff = step.x - GAMMA * step.x_next
        h_zb = dot(zb, self.h)
        corr = dot(z, self.h) - h_zb
        psi_e = psi[:, None, :] * e
        self.w += self.alpha * (psi_e + corr[:, None, :] * diff)
        self.h += self.alpha_h * (psi_e - h_zb[:, None, :] * diff)


class ProximalGTD2(GradientLearner):
    """Proximal GTD2(lambda), one extragradient (mirror-prox) step:
    h_mid = h + alpha_h (delta z - (h^T x) x);
    w_mid = w + alpha ((h^T x) x - g (1-lambda)(z^T h) x');
    w_new = w + alpha ((h_mid^T x) x - g (1-lambda)(z^T h_mid) x');
    h_new = h + alpha_h (delta_mid z - (h_mid^T x) x), delta_mid the TD error of w_mid.
    delta z -> psi e and delta_mid z -> psi_mid e (placement)."""

    name = "pgtd2"
    label = "Proximal GTD2"

    def update(self, step: Step, v: np.ndarray, v_next: np.ndarray) -> None:
        psi, e, z = self.errors(step, v, v_next)
        x, x_next = step.x, step.x_next
        hx, zh = dot(self.h, x), dot(z, self.h)
        h_mid = self.h + self.alpha_h * secondary_direction(psi, e, hx, x)
        w_mid = self.w + self.alpha * gtd2_direction(hx, zh, x, x_next, self.lam)
        v_mid, v_next_mid = dot(w_mid, x), dot(w_mid, x_next)
        psi_mid = is_error(td_error(step.reward, v_mid, v_next_mid), step.rho, v_mid, self.kappa)
        h_mid_x = dot(h_mid, x)
        self.w += self.alpha * gtd2_direction(h_mid_x, dot(z, h_mid), x, x_next, self.lam)
        self.h += self.alpha_h * secondary_direction(psi_mid, e, h_mid_x, x)
