"""Single-step updates of every learner against the spec's formulas (table 2.3, lambda = 0).

Inputs: x = (1,1,0,0,0,0), x' = (0,1,1,0,0,0), w = (.5,.25,1,0,0,0), h = (.5,0,.25,0,0,.5),
R = 0, rho = 2, alpha = 1/2, eta = 1/4, so v = 0.75, v' = 1.25, h^T x = 0.5, delta = 0.375,
W = rho delta = 0.75 and T = rho (R + g v') - v = 1.5. Each learner holds two settings:
column 0 is WHOLE, column 1 TARGET. The options of ambiguities A1 (``Corrections``) and A5
(``FollowOn``) are checked the same way, with literal values where the formula is new.
"""

import numpy as np
import pytest

from hpc_refer.prediction.algorithms import (
    ABTD,
    GTD,
    GTD2,
    HTD,
    Choices,
    Corrections,
    EmphaticTD,
    EmphaticTDBeta,
    FollowOn,
    Learner,
    OffPolicyTD,
    Placement,
    ProximalGTD2,
    Step,
    TreeBackup,
    Vtrace,
    VtraceClipped,
)
from hpc_refer.prediction.algorithms.base import dot
from hpc_refer.prediction.algorithms.gradient import GradientLearner

G = 0.9
X = np.array([1.0, 1, 0, 0, 0, 0])
XN = np.array([0.0, 1, 1, 0, 0, 0])
W0 = np.array([0.5, 0.25, 1, 0, 0, 0])
H0 = np.array([0.5, 0.0, 0.25, 0, 0, 0.5])
R, RHO, ALPHA, ETA = 0.0, 2.0, 0.5, 0.25
V, VN, HX = W0 @ X, W0 @ XN, H0 @ X
ERRORS = {"WHOLE": RHO * (R + G * VN - V), "TARGET": RHO * (R + G * VN) - V}


def make_step(x: np.ndarray = X, x_next: np.ndarray = XN, reward: float = R, rho: float = RHO,
              pi: float = 1.0, mu: float = 0.5, cont: float = 1.0) -> Step:
    def scalar(value: float) -> np.ndarray:
        return np.array([[value]])

    return Step(x[None, :, None], x_next[None, :, None], scalar(reward), scalar(rho), scalar(pi),
                scalar(mu), scalar(cont))


def make(cls: type[Learner], extra: float | None = None, lam: float = 0.0,
         choices: Choices | None = None) -> Learner:
    learner = cls(1, 6, np.full(2, ALPHA), np.array([0.0, 1.0]),
                  None if extra is None else np.full(2, extra), lam=lam, choices=choices)
    learner.w[:] = W0[None, :, None]
    if isinstance(learner, GradientLearner):
        learner.h[:] = H0[None, :, None]
    return learner


def secondary(learner: Learner) -> np.ndarray:
    assert isinstance(learner, GradientLearner)
    return learner.h


def advance(learner: Learner, step: Step) -> None:
    learner.update(step, dot(learner.w, step.x), dot(learner.w, step.x_next))


def column(array: np.ndarray, placement: str) -> np.ndarray:
    return array[0, :, Placement[placement]]


PLACEMENTS = ("WHOLE", "TARGET")


def test_td_literal_values() -> None:
    learner = make(OffPolicyTD)
    advance(learner, make_step())
    # WHOLE: w + 0.5 * 0.75 x; TARGET: w + 0.5 * 1.5 x.
    np.testing.assert_allclose(column(learner.w, "WHOLE"), [0.875, 0.625, 1, 0, 0, 0])
    np.testing.assert_allclose(column(learner.w, "TARGET"), [1.25, 1.0, 1, 0, 0, 0])


@pytest.mark.parametrize("cls", [OffPolicyTD, TreeBackup, Vtrace, EmphaticTD])
@pytest.mark.parametrize("placement", PLACEMENTS)
def test_error_only_learners(cls: type[Learner], placement: str) -> None:
    """w += a psi x on the first step of an episode (F_0 = 1, traces z = x)."""
    learner = make(cls)
    advance(learner, make_step(cont=0.0))
    np.testing.assert_allclose(column(learner.w, placement), W0 + ALPHA * ERRORS[placement] * X)


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_gtd(placement: str) -> None:
    learner = make(GTD, ETA)
    advance(learner, make_step())
    psi = ERRORS[placement]
    np.testing.assert_allclose(column(learner.w, placement),
                               W0 + ALPHA * (psi * X - G * RHO * HX * XN))
    np.testing.assert_allclose(column(secondary(learner), placement),
                               H0 + ETA * ALPHA * (psi * X - HX * X))


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_gtd2(placement: str) -> None:
    learner = make(GTD2, ETA)
    advance(learner, make_step())
    psi = ERRORS[placement]
    np.testing.assert_allclose(column(learner.w, placement),
                               W0 + ALPHA * (HX * X - G * RHO * HX * XN))
    np.testing.assert_allclose(column(secondary(learner), placement),
                               H0 + ETA * ALPHA * (psi * X - HX * X))


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_htd(placement: str) -> None:
    learner = make(HTD, ETA)
    advance(learner, make_step())
    psi, diff = ERRORS[placement], X - G * XN
    np.testing.assert_allclose(column(learner.w, placement),
                               W0 + ALPHA * (psi * X + (RHO - 1) * HX * diff))
    np.testing.assert_allclose(column(secondary(learner), placement),
                               H0 + ETA * ALPHA * (psi * X - HX * diff))


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_proximal_gtd2(placement: str) -> None:
    learner = make(ProximalGTD2, ETA)
    advance(learner, make_step())
    a_h = ETA * ALPHA
    h_mid = H0 + a_h * (ERRORS[placement] * X - HX * X)
    w_mid = W0 + ALPHA * (HX * X - G * RHO * HX * XN)
    v_mid, vn_mid = w_mid @ X, w_mid @ XN
    psi_mid = (RHO * (R + G * vn_mid - v_mid) if placement == "WHOLE"
               else RHO * (R + G * vn_mid) - v_mid)
    hm_x = h_mid @ X
    np.testing.assert_allclose(column(learner.w, placement),
                               W0 + ALPHA * (hm_x * X - G * RHO * hm_x * XN))
    np.testing.assert_allclose(column(secondary(learner), placement),
                               H0 + a_h * (psi_mid * X - hm_x * X))


@pytest.mark.parametrize(("cls", "beta", "followon", "F1"), [
    (EmphaticTD, None, FollowOn.BETA, G * RHO + 1.0),
    (EmphaticTD, None, FollowOn.BETA_GAMMA, 2.8),  # ETD(lambda): g rho F + 1 under both readings
    (EmphaticTDBeta, 0.4, FollowOn.BETA, 0.4 * RHO + 1.0),
    (EmphaticTDBeta, 0.4, FollowOn.BETA_GAMMA, 1.72),  # A5 alternative: 0.4 * 0.9 * 2 + 1
])
@pytest.mark.parametrize("placement", PLACEMENTS)
def test_emphatic_follow_on(cls: type[Learner], beta: float | None, followon: FollowOn,
                            F1: float, placement: str) -> None:
    """Second step of an episode: F_1 = beta rho_0 F_0 + 1 (A5 alternative: beta g rho_0 F_0 + 1),
    w += a F_1 psi x."""
    learner = make(cls, beta, choices=Choices(followon=followon))
    advance(learner, make_step(x=XN, x_next=X, cont=0.0, rho=RHO))
    w1 = column(learner.w, placement).copy()
    advance(learner, make_step())
    v, vn = w1 @ X, w1 @ XN
    psi = RHO * (R + G * vn - v) if placement == "WHOLE" else RHO * (R + G * vn) - v
    np.testing.assert_allclose(column(learner.w, placement), w1 + ALPHA * F1 * psi * X)


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_abtd_trace(placement: str) -> None:
    """z_1 = x_1 + g nu_0 pi_0 x_0 with nu_0 = min(2 zeta, 1/max(pi_0, mu_0)) = min(0.6, 1)."""
    learner = make(ABTD, 0.3)
    advance(learner, make_step(x=XN, x_next=X, cont=0.0, pi=1.0, mu=0.5))
    w1 = column(learner.w, placement).copy()
    advance(learner, make_step())
    z1 = X + G * 0.6 * 1.0 * XN
    v, vn = w1 @ X, w1 @ XN
    psi = RHO * (R + G * vn - v) if placement == "WHOLE" else RHO * (R + G * vn) - v
    np.testing.assert_allclose(column(learner.w, placement), w1 + ALPHA * psi * z1)


def test_episode_start_cuts_traces() -> None:
    """After a terminal transition (x' = 0), c = 0 makes every trace restart at x."""
    zero = np.zeros(6)
    cases: list[tuple[type[Learner], float | None, float]] = [
        (OffPolicyTD, None, 0.9), (TreeBackup, None, 0.9), (ABTD, 1.0, 0.0),
        (EmphaticTD, None, 0.5)]
    for cls, extra, lam in cases:
        cut, fresh = make(cls, extra, lam), make(cls, extra, lam)
        advance(cut, make_step(x_next=zero))
        cut.w[:] = W0[None, :, None]
        advance(cut, make_step(cont=0.0))
        advance(fresh, make_step(cont=0.0))
        np.testing.assert_allclose(cut.w, fresh.w, err_msg=cls.name)


@pytest.mark.parametrize("rho", [0.5, 2.0])
@pytest.mark.parametrize("placement", PLACEMENTS)
def test_vtrace_clipped_variant(placement: str, rho: float) -> None:
    """Ambiguity A3 alternative: c = min(1, rho); WHOLE c delta x, TARGET (c (R + g v') - v) x."""
    learner = make(VtraceClipped)
    advance(learner, make_step(rho=rho))
    c = min(1.0, rho)
    psi = c * (R + G * VN - V) if placement == "WHOLE" else c * (R + G * VN) - V
    np.testing.assert_allclose(column(learner.w, placement), W0 + ALPHA * psi * X)


def _corrected(cls: type[Learner], corrections: Corrections, lam: float = 0.0) -> Learner:
    return make(cls, ETA, lam, Choices(corrections=corrections))


# A1 alternatives at lambda = 0, TARGET column (psi = T = 1.5, h^T x = 0.5, rho = 2), by hand:
# TARGET_ONLY moves the ratio onto x' (HTD's correction -g (rho-1)(h^T x) x' = -0.45 x'; the
# GTD-family correction g rho (h^T x) x' = 0.9 x' already has it there); NO_RHO drops it
# (g (h^T x) x' = 0.45 x'; HTD's (rho-1)-correction vanishes).
A1_TARGET: dict[tuple[type[Learner], Corrections], tuple[list[float], list[float]]] = {
    (GTD, Corrections.TARGET_ONLY): ([1.25, 0.55, 0.55, 0, 0, 0], [0.625, 0.125, 0.25, 0, 0, 0.5]),
    (GTD, Corrections.NO_RHO): ([1.25, 0.775, 0.775, 0, 0, 0], [0.625, 0.125, 0.25, 0, 0, 0.5]),
    (GTD2, Corrections.TARGET_ONLY): ([0.75, 0.05, 0.55, 0, 0, 0], [0.625, 0.125, 0.25, 0, 0, 0.5]),
    (GTD2, Corrections.NO_RHO): ([0.75, 0.275, 0.775, 0, 0, 0], [0.625, 0.125, 0.25, 0, 0, 0.5]),
    (HTD, Corrections.TARGET_ONLY): ([1.25, 0.775, 0.775, 0, 0, 0],
                                     [0.625, 0.18125, 0.30625, 0, 0, 0.5]),
    (HTD, Corrections.NO_RHO): ([1.25, 1.0, 1.0, 0, 0, 0], [0.625, 0.18125, 0.30625, 0, 0, 0.5]),
}


@pytest.mark.parametrize(("cls", "corrections"), list(A1_TARGET),
                         ids=lambda v: getattr(v, "name", str(v)))
def test_a1_alternatives_literal(cls: type[Learner], corrections: Corrections) -> None:
    """TARGET column against the hand values; the WHOLE column is [R]'s update whatever the
    option (the same as with the default)."""
    learner, default = _corrected(cls, corrections), make(cls, ETA)
    advance(learner, make_step())
    advance(default, make_step())
    w, h = A1_TARGET[cls, corrections]
    np.testing.assert_allclose(column(learner.w, "TARGET"), w)
    np.testing.assert_allclose(column(secondary(learner), "TARGET"), h)
    np.testing.assert_array_equal(column(learner.w, "WHOLE"), column(default.w, "WHOLE"))
    np.testing.assert_array_equal(column(secondary(learner), "WHOLE"),
                                  column(secondary(default), "WHOLE"))


@pytest.mark.parametrize("corrections", [Corrections.TARGET_ONLY, Corrections.NO_RHO])
def test_a1_proximal_gtd2(corrections: Corrections) -> None:
    """PGTD2's corrections g rho (h^T x) x' and g rho (h_mid^T x) x' (w_mid, w_new): unchanged by
    TARGET_ONLY, rho -> 1 with NO_RHO; h_mid and h_new as in the default."""
    learner = _corrected(ProximalGTD2, corrections)
    advance(learner, make_step())
    ratio = RHO if corrections == Corrections.TARGET_ONLY else 1.0
    a_h = ETA * ALPHA
    h_mid = H0 + a_h * (ERRORS["TARGET"] * X - HX * X)
    w_mid = W0 + ALPHA * (HX * X - G * ratio * HX * XN)
    psi_mid = RHO * (R + G * (w_mid @ XN)) - w_mid @ X
    hm_x = h_mid @ X
    np.testing.assert_allclose(column(learner.w, "TARGET"),
                               W0 + ALPHA * (hm_x * X - G * ratio * hm_x * XN))
    np.testing.assert_allclose(column(secondary(learner), "TARGET"),
                               H0 + a_h * (psi_mid * X - hm_x * X))


@pytest.mark.parametrize("corrections", list(Corrections))
def test_a1_with_traces(corrections: Corrections) -> None:
    """lambda = 0.5, second step of an episode (rho_0 = 0.5, rho_1 = 2): e = g lambda z_0 + x,
    z = rho e, zb = g lambda zb_0 + x; TARGET column of GTD and HTD against the formulas of
    :class:`Corrections` with e != z and zb."""
    lam, rho0 = 0.5, 0.5
    e = X + G * lam * rho0 * XN
    z, zb = RHO * e, X + G * lam * XN
    c = {Corrections.KEEP_RHO: z, Corrections.TARGET_ONLY: z, Corrections.NO_RHO: e}[corrections]
    T, diff = ERRORS["TARGET"], X - G * XN
    htd_corr = {Corrections.KEEP_RHO: diff * ((z - zb) @ H0),
                Corrections.TARGET_ONLY: (X - G * RHO * XN) * (e @ H0) - diff * (zb @ H0),
                Corrections.NO_RHO: diff * ((e - zb) @ H0)}[corrections]
    expected: dict[type[Learner], np.ndarray] = {
        GTD: W0 + ALPHA * (T * e - G * (1 - lam) * (c @ H0) * XN),
        HTD: W0 + ALPHA * (T * e + htd_corr)}
    for cls, w in expected.items():
        learner = _corrected(cls, corrections, lam)
        advance(learner, make_step(x=XN, x_next=X, cont=0.0, rho=rho0))
        learner.w[:] = W0[None, :, None]
        secondary(learner)[:] = H0[None, :, None]
        advance(learner, make_step())
        np.testing.assert_allclose(column(learner.w, "TARGET"), w, err_msg=cls.name)


def test_option_names_and_codes() -> None:
    assert [c.option for c in Corrections] == ["keep-rho", "target-only", "no-rho"]
    assert FollowOn.parse("beta-gamma") is FollowOn.BETA_GAMMA
    with pytest.raises(ValueError, match=r"^target-corrections: unknown 'drop'; allowed: keep-rho"):
        Corrections.parse("drop")
    with pytest.raises(ValueError, match=r"^Corrections: codes"):
        GTD(1, 6, np.ones(2), np.zeros(2), np.ones(2), choices=Choices(corrections=3))


def test_learner_argument_checks() -> None:
    with pytest.raises(ValueError, match="eta"):
        GTD(1, 6, np.ones(2), np.zeros(2))
    with pytest.raises(ValueError, match="same length"):
        OffPolicyTD(1, 6, np.ones(2), np.zeros(3))
    with pytest.raises(ValueError, match="allowed: WHOLE, TARGET"):
        Placement.parse("middle")
