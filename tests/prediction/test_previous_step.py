"""Previous-step terms of the trace learners, against the spec's formulas (lambda != 0).

``test_updates.py`` checks single steps at lambda = 0, where no factor of step t-1 survives. Here
each learner runs a short stream -- an optional terminating step, then one episode of three steps
A -> B -> C -> D -- with a different rho_t, pi_t and mu_t (rho_t = pi_t / mu_t) on every step and
lambda = 0.8, so that every "previous step" factor of spec 2.2 differs from the current one
(line numbers: ``/work/shared/specs/offpolicy-prediction.md``):

* Emphatic TD(lambda) / TD(lambda, beta) (item 6, lines 122-126):
  ``F_t = beta rho_{t-1} F_{t-1} + 1`` (three steps, so that F_{t-1} != 1 at the last one),
  ``M_t = lambda + (1-lambda) F_t``, ``z_t = rho_t (M_t x_t + g lambda z_{t-1})`` (z_{t-1}
  carries rho_{t-1});
* Tree Backup (item 7, lines 127-128): ``z_t = g lambda pi_{t-1} z_{t-1} + x_t``;
* V-trace as coded (item 8, lines 129-131): ``z_t = min(1, rho_{t-1}) g lambda z_{t-1} + x_t``;
* ABTD(zeta) (item 9, lines 132-137): ``nu_t = min(xi, 1/max(pi_t, mu_t))``,
  ``z_t = x_t + g nu_{t-1} pi_{t-1} z_{t-1}``;
* V-trace, README form (ambiguity A3, lines 130-131, 160, 199-203):
  ``z_t = min(1, rho_t) (g lambda z_{t-1} + x_t)`` (z_{t-1} carries min(1, rho_{t-1}));
* Off-policy TD(lambda) (item 1, line 110), for completeness:
  ``z_t = rho_t (g lambda z_{t-1} + x_t)`` (z_{t-1} carries rho_{t-1}).

Placement (spec table 2.3, lines 146-165): every product "ratio times TD error" becomes psi_t,
WHOLE ``psi = rho_t delta_t``, TARGET ``psi = rho_t (R + g w^T x') - w^T x``. TB, V-trace and ABTD
weight the error only (``w += alpha rho_t delta_t z_t``), so TARGET is ``w += alpha psi_t z_t``
exactly as in the table. For TD and Emphatic TD the ratio rho_t sits inside the trace,
``delta_t z_t = (rho_t delta_t) e_t`` with ``e_t = z_t / rho_t``; the table's rule then reads
``w += alpha T_t e_t``, the trace recursion itself (and the rho_{t-1} it carries) being the same in
both placements. For lambda > 0 that is the table's rule carried over, not a formula of any source
(spec section 2.3, last paragraph, and ambiguity A1).

Episode boundary (spec 2.1, lines 102-104): at an episode start z := 0, F := 1, previous
rho / pi / nu := 0 (TB, V-trace and ABTD do not zero z; their zero previous factor cuts it). The
``after-terminal`` cases run a terminating transition with rho = 2, pi = 1 first, which the
episode must not see (except through w).

The references below are plain numpy loops written from those formulas, one per algorithm; they
keep their own previous-step variables and compute v, v' with the weights before each update.
"""

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pytest

from hpc_refer.prediction.algorithms import (
    ABTD,
    Choices,
    EmphaticTD,
    EmphaticTDBeta,
    FollowOn,
    Learner,
    OffPolicyTD,
    Placement,
    Step,
    TreeBackup,
    Vtrace,
    VtraceClipped,
)
from hpc_refer.prediction.algorithms.base import dot

G = 0.9
W0 = np.array([0.5, 0.25, 1, 0, 0, 0])
ALPHA = 0.5
PLACEMENTS = ("WHOLE", "TARGET")
LAM = 0.8
BETA = 0.4
ZETA = 0.7  # xi = 1.4: nu_t is 1/max(pi, mu) on steps A and C, xi on step B.
XI_0, XI_MAX = 1.0, 2.0  # ABTD's task constants on Collision (spec 2.2 item 9)

XA = np.array([1.0, 1, 0, 0, 0, 0])
XB = np.array([0.0, 1, 1, 0, 0, 0])
XC = np.array([0.0, 0, 1, 1, 0, 1])
XD = np.array([1.0, 0, 0, 1, 1, 0])
ZERO = np.zeros(6)


class Transition(NamedTuple):
    x: np.ndarray
    x_next: np.ndarray
    reward: float
    pi: float
    mu: float
    cont: float

    @property
    def rho(self) -> float:
        return self.pi / self.mu


# rho = 0.5, 2, 0.75: rho_{t-1} != rho_t on every step; min(1, rho) is 0.5, 1 (clipped), 0.75;
# pi = 0.4, 0.7, 0.6 (!= 1, so a dropped pi_{t-1} shows).
EPISODE = (
    Transition(XA, XB, 0.0, pi=0.4, mu=0.8, cont=0.0),
    Transition(XB, XC, 1.0, pi=0.7, mu=0.35, cont=1.0),
    Transition(XC, XD, 0.0, pi=0.6, mu=0.8, cont=1.0),
)
#: A terminating transition (x' = 0) before the episode: rho = 2, pi = 1, nu = 1/max(1, .5) = 1.
WARMUP = Transition(XD, ZERO, 1.0, pi=1.0, mu=0.5, cont=0.0)


def psi(t: Transition, w: np.ndarray, placement: str, ratio: float) -> float:
    """Table 2.3: WHOLE ratio (R + g v' - v), TARGET ratio (R + g v') - v (pre-update w)."""
    v, v_next = w @ t.x, w @ t.x_next
    if placement == "WHOLE":
        return ratio * (t.reward + G * v_next - v)
    return ratio * (t.reward + G * v_next) - v


def delta(t: Transition, w: np.ndarray) -> float:
    """Spec 2.1: delta_t = R + g w^T x' - w^T x."""
    return t.reward + G * (w @ t.x_next) - w @ t.x


# ---- references (spec 2.2, items 1, 6, 7, 8, 9 and ambiguity A3) --------------------------------


def ref_emphatic(stream: list[Transition], placement: str, beta: float) -> np.ndarray:
    """Spec 2.2 item 6: F_t = beta rho_{t-1} F_{t-1} + 1 (rho_{-1} = 0, F = 1 at an episode
    start), M_t = lambda + (1-lambda) F_t, z_t = rho_t (M_t x + g lambda z_{t-1}),
    w += alpha delta_t z_t; TARGET: w += alpha T_t (M_t x + g lambda z_{t-1})."""
    w, z, F, rho_prev = W0.copy(), ZERO.copy(), 1.0, 0.0
    for t in stream:
        if t.cont == 0.0:
            z, F, rho_prev = ZERO.copy(), 1.0, 0.0
        F = beta * rho_prev * F + 1.0
        M = LAM + (1.0 - LAM) * F
        e = M * t.x + G * LAM * z
        z_new = t.rho * e
        if placement == "WHOLE":
            w = w + ALPHA * delta(t, w) * z_new
        else:
            w = w + ALPHA * psi(t, w, "TARGET", t.rho) * e
        z, rho_prev = z_new, t.rho
    return w


def ref_td(stream: list[Transition], placement: str) -> np.ndarray:
    """Spec 2.2 item 1: z_t = rho_t (g lambda z_{t-1} + x_t), w += alpha delta_t z_t;
    TARGET: w += alpha T_t (g lambda z_{t-1} + x_t)."""
    w, z = W0.copy(), ZERO.copy()
    for t in stream:
        if t.cont == 0.0:
            z = ZERO.copy()
        e = G * LAM * z + t.x
        z_new = t.rho * e
        if placement == "WHOLE":
            w = w + ALPHA * delta(t, w) * z_new
        else:
            w = w + ALPHA * psi(t, w, "TARGET", t.rho) * e
        z = z_new
    return w


def ref_tree_backup(stream: list[Transition], placement: str) -> np.ndarray:
    """Spec 2.2 item 7: z_t = g lambda pi_{t-1} z_{t-1} + x_t (pi_{-1} = 0),
    w += alpha rho_t delta_t z_t -> alpha psi_t z_t."""
    w, z, pi_prev = W0.copy(), ZERO.copy(), 0.0
    for t in stream:
        if t.cont == 0.0:
            pi_prev = 0.0
        z = G * LAM * pi_prev * z + t.x
        w = w + ALPHA * psi(t, w, placement, t.rho) * z
        pi_prev = t.pi
    return w


def ref_vtrace(stream: list[Transition], placement: str) -> np.ndarray:
    """Spec 2.2 item 8 (as coded): z_t = min(1, rho_{t-1}) g lambda z_{t-1} + x_t (rho_{-1} = 0),
    w += alpha rho_t delta_t z_t -> alpha psi_t z_t (the current rho_t not clipped)."""
    w, z, rho_prev = W0.copy(), ZERO.copy(), 0.0
    for t in stream:
        if t.cont == 0.0:
            rho_prev = 0.0
        z = min(1.0, rho_prev) * G * LAM * z + t.x
        w = w + ALPHA * psi(t, w, placement, t.rho) * z
        rho_prev = t.rho
    return w


def ref_vtrace_clipped(stream: list[Transition], placement: str) -> np.ndarray:
    """Ambiguity A3 (README form): z_t = min(1, rho_t) (g lambda z_{t-1} + x_t),
    w += alpha delta_t z_t; TARGET (table 2.3, clipped row): c_t (R + g v') - v with
    c_t = min(1, rho_t), times g lambda z_{t-1} + x_t."""
    w, z = W0.copy(), ZERO.copy()
    for t in stream:
        if t.cont == 0.0:
            z = ZERO.copy()
        c = min(1.0, t.rho)
        e = G * LAM * z + t.x
        z_new = c * e
        if placement == "WHOLE":
            w = w + ALPHA * delta(t, w) * z_new
        else:
            w = w + ALPHA * psi(t, w, "TARGET", c) * e
        z = z_new
    return w


def ref_abtd(stream: list[Transition], placement: str) -> np.ndarray:
    """Spec 2.2 item 9: xi = 2 zeta xi0 + max(0, 2 zeta - 1)(xi_max - 2 xi0),
    nu_t = min(xi, 1/max(pi_t, mu_t)), z_t = x_t + g nu_{t-1} pi_{t-1} z_{t-1}
    (nu_{-1} = pi_{-1} = 0), w += alpha rho_t delta_t z_t -> alpha psi_t z_t. No lambda."""
    xi = 2 * ZETA * XI_0 + max(0.0, 2 * ZETA - 1) * (XI_MAX - 2 * XI_0)
    w, z, nu_prev, pi_prev = W0.copy(), ZERO.copy(), 0.0, 0.0
    for t in stream:
        if t.cont == 0.0:
            nu_prev, pi_prev = 0.0, 0.0
        z = t.x + G * nu_prev * pi_prev * z
        w = w + ALPHA * psi(t, w, placement, t.rho) * z
        nu_prev, pi_prev = min(xi, 1.0 / max(t.pi, t.mu)), t.pi
    return w


Reference = Callable[[list[Transition], str], np.ndarray]


class Case(NamedTuple):
    cls: type[Learner]
    extra: float | None
    followon: FollowOn
    reference: Reference


CASES: dict[str, Case] = {
    "etd": Case(EmphaticTD, None, FollowOn.BETA, lambda s, p: ref_emphatic(s, p, G)),
    # ETD(lambda) under the A5 alternative: beta = 1 times g_t, the same F.
    "etd-beta-gamma": Case(EmphaticTD, None, FollowOn.BETA_GAMMA,
                           lambda s, p: ref_emphatic(s, p, G)),
    "etdlb": Case(EmphaticTDBeta, BETA, FollowOn.BETA, lambda s, p: ref_emphatic(s, p, BETA)),
    # A5 alternative: F_t = beta g rho_{t-1} F_{t-1} + 1.
    "etdlb-beta-gamma": Case(EmphaticTDBeta, BETA, FollowOn.BETA_GAMMA,
                             lambda s, p: ref_emphatic(s, p, BETA * G)),
    "td": Case(OffPolicyTD, None, FollowOn.BETA, ref_td),
    "tb": Case(TreeBackup, None, FollowOn.BETA, ref_tree_backup),
    "vtrace": Case(Vtrace, None, FollowOn.BETA, ref_vtrace),
    "vtrace-clipped": Case(VtraceClipped, None, FollowOn.BETA, ref_vtrace_clipped),
    # ABTD has no lambda (spec 2.2 item 9); the learner is built with LAM anyway and must ignore it.
    "abtd": Case(ABTD, ZETA, FollowOn.BETA, ref_abtd),
}


# Learners and Steps built as in test_updates.py: one run, two settings, column 0 WHOLE and
# column 1 TARGET, w starting at W0.


def make_step(t: Transition) -> Step:
    def scalar(value: float) -> np.ndarray:
        return np.array([[value]])

    return Step(t.x[None, :, None], t.x_next[None, :, None], scalar(t.reward), scalar(t.rho),
                scalar(t.pi), scalar(t.mu), scalar(t.cont))


def make(case: Case) -> Learner:
    learner = case.cls(1, 6, np.full(2, ALPHA), np.array([0.0, 1.0]),
                       None if case.extra is None else np.full(2, case.extra), lam=LAM,
                       choices=Choices(followon=case.followon))
    learner.w[:] = W0[None, :, None]
    return learner


def column(array: np.ndarray, placement: str) -> np.ndarray:
    return array[0, :, Placement[placement]]


def run(case: Case, stream: list[Transition]) -> Learner:
    learner = make(case)
    for t in stream:
        step = make_step(t)
        learner.update(step, dot(learner.w, step.x), dot(learner.w, step.x_next))
    return learner


@pytest.mark.parametrize("warmup", [False, True], ids=["fresh", "after-terminal"])
@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("name", list(CASES))
def test_previous_step_terms(name: str, placement: str, warmup: bool) -> None:
    """Weights after each step of the episode against the reference, both placement columns."""
    case = CASES[name]
    prefix = [WARMUP] if warmup else []
    for n in range(1, len(EPISODE) + 1):
        stream = prefix + list(EPISODE[:n])
        learner = run(case, stream)
        np.testing.assert_allclose(column(learner.w, placement), case.reference(stream, placement),
                                   rtol=1e-12, atol=1e-12, err_msg=f"{name}, after {n} step(s)")


def test_abtd_nu_values() -> None:
    """The nu_t the ABTD case relies on (xi = 1.4): 1/max(.4, .8) = 1.25, min(1.4, 1/.7) = 1.4,
    1/max(.6, .8) = 1.25, so nu_{t-1} pi_{t-1} = 0.5 then 0.98 -- neither 0 nor 1 nor pi_t nu_t."""
    xi = 2 * ZETA * XI_0 + max(0.0, 2 * ZETA - 1) * (XI_MAX - 2 * XI_0)
    nus = [min(xi, 1.0 / max(t.pi, t.mu)) for t in EPISODE]
    np.testing.assert_allclose(nus, [1.25, 1.4, 1.25])
    np.testing.assert_allclose([n * t.pi for n, t in zip(nus, EPISODE, strict=True)],
                               [0.5, 0.98, 0.75])


def test_tree_backup_literal() -> None:
    """Hand numbers for two steps of Tree Backup, WHOLE (alpha 1/2, g 0.9, lambda 0.8).

    Step A (z_0 = x_A, rho 0.5): v = .75, v' = 1.25, delta = .375, psi = .1875,
    w_1 = w_0 + .09375 x_A = (.59375, .34375, 1, 0, 0, 0).
    Step B (pi_0 = 0.4, rho 2, R = 1): z_1 = .9 * .8 * .4 x_A + x_B = (.288, 1.288, 1, 0, 0, 0);
    v = 1.34375, v' = 1, delta = 1 + .9 - 1.34375 = .55625, psi = 1.1125,
    w_2 = w_1 + .55625 z_1 (with pi_1 = 0.7 in place of pi_0, z_1 would be .504 x_A + x_B).
    """
    learner = run(CASES["tb"], list(EPISODE[:2]))
    z1 = np.array([0.288, 1.288, 1, 0, 0, 0])
    w1 = np.array([0.59375, 0.34375, 1, 0, 0, 0])
    np.testing.assert_allclose(column(learner.w, "WHOLE"), w1 + 0.55625 * z1, rtol=1e-12)
