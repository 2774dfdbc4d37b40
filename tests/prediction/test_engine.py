"""Whole runs: the reference value, the lambda = 0 equalities, vectorised = single-run."""

import numpy as np
import pytest
from tolerances import F64

from hpc_refer.prediction.algorithms import STUDY, Choices, Learner, learner_class
from hpc_refer.prediction.engine import Errors, final_window, make_batch, run_learner
from hpc_refer.prediction.task import state_weighting

D_MU = state_weighting()


def run(cls: type[Learner], runs: list[int], steps: int, alpha: np.ndarray, kappa: np.ndarray,
        extra: np.ndarray | None = None, lam: float = 0.0, curves: bool = True,
        choices: Choices | None = None) -> Errors:
    batch = make_batch(runs, steps)
    learner = cls(len(runs), 6, alpha, kappa, extra, lam=lam, choices=choices)
    return run_learner(learner, batch, D_MU, record_curves=curves)


def test_reference_unit_value() -> None:
    """[R]'s unit test: TD(lambda=0.9), alpha = 2^-9, seed 0, features 0, RMSVE at step 19,999."""
    errors = run(learner_class("td"), [0], 20_000, np.array([2.0**-9]), np.zeros(1), lam=0.9)
    assert errors.curves is not None
    assert errors.curves[0, 0, 0] == pytest.approx(0.6890804616377058, abs=1e-15)
    assert errors.curves[19_999, 0, 0] == pytest.approx(0.08319472840990755, abs=1e-7)
    assert errors.auc[0, 0] == pytest.approx(errors.curves[:, 0, 0].mean(), rel=1e-12)
    assert final_window(20_000) == 201
    assert errors.final[0, 0] == pytest.approx(errors.curves[-201:, 0, 0].mean(), rel=1e-12)


def test_lambda_zero_equalities() -> None:
    """TB(0) = V-trace(0) as coded = ABTD(0) = ETD(0, beta = 0) = TD(0), both placements."""
    alpha = np.tile(2.0 ** -np.arange(0, 12, 2), 2)
    kappa = np.repeat([0.0, 1.0], 6)
    zeros = np.zeros_like(alpha)
    reference = run(learner_class("td"), [0, 1, 2], 2000, alpha, kappa).curves
    assert reference is not None and np.isfinite(reference).any()
    for name, extra in [("tb", None), ("vtrace", None), ("abtd", zeros), ("etdlb", zeros)]:
        curves = run(learner_class(name), [0, 1, 2], 2000, alpha, kappa, extra).curves
        # Other algorithms' code, equal in exact arithmetic at lambda = 0: float64 round-off.
        np.testing.assert_allclose(curves, reference, err_msg=name, **F64)
    emphatic = run(learner_class("etd"), [0, 1, 2], 2000, alpha, kappa).curves
    assert emphatic is not None and not np.array_equal(emphatic, reference, equal_nan=True)


@pytest.mark.parametrize("lam", [0.0, 0.6])
@pytest.mark.parametrize("cls", STUDY, ids=lambda cls: cls.name)
def test_vectorised_equals_single_runs(cls: type[Learner], lam: float) -> None:
    """One batch over runs x settings gives each lane's single-run result (to rounding: BLAS
    may order the six-term sums of a batched product differently from a single one)."""
    runs, steps = [0, 1, 2], 250
    alpha = np.tile(np.array([2.0**-1, 2.0**-4]), 4)
    kappa = np.tile(np.repeat([0.0, 1.0], 2), 2)
    extra = None if cls.extra is None else np.repeat([0.2, 1.0], 4)
    batch = run(cls, runs, steps, alpha, kappa, extra, lam)
    assert batch.curves is not None
    for p in range(alpha.size):
        for i, r in enumerate(runs):
            single = run(cls, [r], steps, alpha[p:p + 1], kappa[p:p + 1],
                         None if extra is None else extra[p:p + 1], lam)
            assert single.curves is not None
            np.testing.assert_allclose(batch.curves[:, i, p], single.curves[:, 0, 0],
                                       rtol=1e-12, atol=0)
            np.testing.assert_allclose(batch.auc[i, p], single.auc[0, 0], rtol=1e-12, atol=0)


@pytest.mark.parametrize("name", ["gtd", "gtd2", "pgtd2", "htd", "etdlb"])
def test_mixed_options_equal_single_runs(name: str) -> None:
    """Lanes with different A1 / A5 options in one batch: each equals its single run."""
    cls, runs, steps = learner_class(name), [0, 1], 200
    kappa = np.repeat([0.0, 1.0], 3)
    codes = np.tile([0, 1, 2], 2)
    alpha, extra = np.full(6, 2.0**-3), np.full(6, 0.6 if cls.extra == "beta" else 2.0)
    choices = Choices(corrections=codes, followon=codes % 2)
    batch = run(cls, runs, steps, alpha, kappa, extra, 0.6, choices=choices)
    assert batch.curves is not None
    for p in range(alpha.size):
        single = run(cls, runs, steps, alpha[p:p + 1], kappa[p:p + 1], extra[p:p + 1], 0.6,
                     choices=Choices(corrections=codes[p], followon=codes[p] % 2))
        assert single.curves is not None
        np.testing.assert_allclose(batch.curves[:, :, p], single.curves[:, :, 0], rtol=1e-12,
                                   atol=0)
