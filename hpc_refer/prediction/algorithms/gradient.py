"""The gradient-TD family: GTD(lambda) (= TDC), GTD2(lambda), HTD(lambda), Proximal GTD2(lambda).

Spec 2.2 items 2-5. ``h`` is the secondary weight vector ([R]'s ``v``) with step size
``alpha_h = eta alpha``. Every product rho_t delta_t (written ``delta_t z_t = (rho_t delta_t) e_t``)
becomes psi_t e_t; by default the ratio inside the gradient-correction terms (``z_t^T h``) stays in
both placements (spec table 2.3). The alternatives of ambiguity A1 for TARGET settings, moving the
ratio onto x' or dropping it there, are :class:`base.Corrections`. Updates use the pre-update w
and h unless stated.
"""

from __future__ import annotations

import numpy as np

from hpc_refer.prediction.algorithms.base import (
    Choices,
    Corrections,
    Learner,
    Placement,
    Step,
    dot,
    is_error,
    td_error,
)
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
    """Shared state of the gradient-TD family: w, h, the IS trace z, and alpha_h = eta alpha.

    Ambiguity A1 per setting (:class:`base.Corrections`): ``rho_on_target`` is False where the
    corrections drop the ratio (NO_RHO under TARGET), ``rho_on_x`` is False where the ratio leaves
    the x part of HTD's ``(x - g x')`` (TARGET_ONLY and NO_RHO under TARGET).
    """

    extra = "eta"

    def __init__(self, n_runs: int, n_features: int, alpha: np.ndarray, kappa: np.ndarray,
                 extra: np.ndarray | None = None, lam: float = 0.0,
                 choices: Choices | None = None) -> None:
        super().__init__(n_runs, n_features, alpha, kappa, extra, lam, choices)
        assert self.param is not None
        self.alpha_h = self.param * self.alpha
        self.h = self.zeros()
        self.trace = RatioTrace(lam, self.w)
        target = self.kappa == float(Placement.TARGET)
        self.rho_on_target = ~(target & (self.corrections == Corrections.NO_RHO))
        self.rho_on_x = ~target | (self.corrections == Corrections.KEEP_RHO)

    def correction_dot(self, zh: np.ndarray, e: np.ndarray, h: np.ndarray) -> np.ndarray:
        """The trace product of the corrections: ``zh = z_t^T h = rho_t e_t^T h``, or ``e_t^T h``
        in the settings without the ratio there (NO_RHO under TARGET)."""
        if self.rho_on_target.all():
            return zh
        return np.where(self.rho_on_target, zh, dot(e, h))

    def errors(self, step: Step, v: np.ndarray, v_next: np.ndarray) -> tuple[np.ndarray, ...]:
        """psi_t, e_t and z_t of this step (advances the trace)."""
        psi = is_error(td_error(step.reward, v, v_next), step.rho, v, self.kappa)
        e = self.trace.pre_ratio(step.x, step.cont, step.rho)
        return psi, e, self.trace.current(e, step.rho)


class GTD(GradientLearner):
    """GTD(lambda) = TDC(lambda): w += alpha (delta z - g (1-lambda) (z^T h) x'),
    h += alpha_h (delta z - (h^T x) x); delta z -> psi e in both (placement).

    NO_RHO under TARGET: z^T h -> e^T h in the w update (lambda = 0: ``g (h^T x) x'``)."""

    name = "gtd"
    label = "GTD"

    def update(self, step: Step, v: np.ndarray, v_next: np.ndarray) -> None:
        psi, e, z = self.errors(step, v, v_next)
        hx, zh = dot(self.h, step.x), self.correction_dot(dot(z, self.h), e, self.h)
        self.w += self.alpha * tdc_direction(psi, e, zh, step.x_next, self.lam)
        self.h += self.alpha_h * secondary_direction(psi, e, hx, step.x)


class GTD2(GradientLearner):
    """GTD2(lambda): w += alpha ((h^T x) x - g (1-lambda) (z^T h) x'), h as GTD.

    The placement acts only through the h update; NO_RHO under TARGET: z^T h -> e^T h in the
    w update."""

    name = "gtd2"
    label = "GTD2"

    def update(self, step: Step, v: np.ndarray, v_next: np.ndarray) -> None:
        psi, e, z = self.errors(step, v, v_next)
        hx, zh = dot(self.h, step.x), self.correction_dot(dot(z, self.h), e, self.h)
        self.w += self.alpha * gtd2_direction(hx, zh, step.x, step.x_next, self.lam)
        self.h += self.alpha_h * secondary_direction(psi, e, hx, step.x)


class HTD(GradientLearner):
    """HTD(lambda), with a second trace without IS, zb_t = g lambda zb_{t-1} + x_t:
    w += alpha (delta z + (x - g x') ((z - zb)^T h)), h += alpha_h (delta z - (x - g x') (h^T zb)).

    At lambda = 0, (z - zb)^T h = (rho - 1) h^T x. delta z -> psi e in both updates.

    Ambiguity A1 under TARGET: with ``(z - zb)^T h = (e - zb)^T h + (rho - 1) e^T h``, the
    w-correction is ``(x - g x') ((e - zb)^T h) + (rho - 1) (e^T h) (a x - g b x')`` with
    (a, b) = (1, 1) for KEEP_RHO, (0, 1) for TARGET_ONLY (``(x - g rho x') e^T h - (x - g x')
    zb^T h``; lambda = 0: ``-g (rho - 1) (h^T x) x'``) and (0, 0) for NO_RHO. The h update has no
    ratio outside psi e and is the same in all three."""

    name = "htd"
    label = "HTD"

    def __init__(self, n_runs: int, n_features: int, alpha: np.ndarray, kappa: np.ndarray,
                 extra: np.ndarray | None = None, lam: float = 0.0,
                 choices: Choices | None = None) -> None:
        super().__init__(n_runs, n_features, alpha, kappa, extra, lam, choices)
        self.plain = RatioTrace(lam, self.w)

    def update(self, step: Step, v: np.ndarray, v_next: np.ndarray) -> None:
        psi, e, z = self.errors(step, v, v_next)
        zb = self.plain.pre_ratio(step.x, step.cont, np.ones_like(step.rho))
        diff = step.x - GAMMA * step.x_next
        h_zb = dot(zb, self.h)
        correction = (dot(z, self.h) - h_zb)[:, None, :] * diff
        if not self.rho_on_x.all():
            eh = dot(e, self.h)
            moved = (eh - h_zb)[:, None, :] * diff + ((step.rho - 1.0) * eh)[:, None, :] * (
                self.rho_on_x * step.x - GAMMA * self.rho_on_target * step.x_next)
            correction = np.where(self.rho_on_x, correction, moved)
        psi_e = psi[:, None, :] * e
        self.w += self.alpha * (psi_e + correction)
        self.h += self.alpha_h * (psi_e - h_zb[:, None, :] * diff)


class ProximalGTD2(GradientLearner):
    """Proximal GTD2(lambda), one extragradient (mirror-prox) step:
    h_mid = h + alpha_h (delta z - (h^T x) x);
    w_mid = w + alpha ((h^T x) x - g (1-lambda)(z^T h) x');
    w_new = w + alpha ((h_mid^T x) x - g (1-lambda)(z^T h_mid) x');
    h_new = h + alpha_h (delta_mid z - (h_mid^T x) x), delta_mid the TD error of w_mid.
    delta z -> psi e and delta_mid z -> psi_mid e (placement); NO_RHO under TARGET: z^T h -> e^T h
    and z^T h_mid -> e^T h_mid in w_mid and w_new."""

    name = "pgtd2"
    label = "Proximal GTD2"

    def update(self, step: Step, v: np.ndarray, v_next: np.ndarray) -> None:
        psi, e, z = self.errors(step, v, v_next)
        x, x_next = step.x, step.x_next
        hx, zh = dot(self.h, x), self.correction_dot(dot(z, self.h), e, self.h)
        h_mid = self.h + self.alpha_h * secondary_direction(psi, e, hx, x)
        w_mid = self.w + self.alpha * gtd2_direction(hx, zh, x, x_next, self.lam)
        v_mid, v_next_mid = dot(w_mid, x), dot(w_mid, x_next)
        psi_mid = is_error(td_error(step.reward, v_mid, v_next_mid), step.rho, v_mid, self.kappa)
        h_mid_x = dot(h_mid, x)
        self.w += self.alpha * gtd2_direction(
            h_mid_x, self.correction_dot(dot(z, h_mid), e, h_mid), x, x_next, self.lam)
        self.h += self.alpha_h * secondary_direction(psi_mid, e, h_mid_x, x)
