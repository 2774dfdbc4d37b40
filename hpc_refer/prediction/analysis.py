"""Summaries and the selection rule of the study (spec section 3)."""

from __future__ import annotations

import numpy as np

#: Mean errors above the initial RMSVE (0.68908...; [R] hard-codes 0.68910), NaN or inf count as
#: diverged and are replaced by this value before any minimum is taken.
DIVERGENCE_THRESHOLD = 0.68910
DIVERGED = 2.0


def mean_se(values: np.ndarray, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """Mean over ``axis`` and its standard error std(ddof=1) / sqrt(n) (0 for a single run)."""
    n = values.shape[axis]
    with np.errstate(invalid="ignore", over="ignore"):
        mean = values.mean(axis=axis)
        se = values.std(axis=axis, ddof=1) / np.sqrt(n) if n > 1 else np.zeros_like(mean)
    return mean, se


def replace_diverged(mean: np.ndarray) -> np.ndarray:
    """NaN, inf and values above :data:`DIVERGENCE_THRESHOLD` become :data:`DIVERGED` (2.0)."""
    return np.where(np.isfinite(mean) & (mean <= DIVERGENCE_THRESHOLD), mean, DIVERGED)


def select_best(auc: np.ndarray) -> tuple[int, int]:
    """(extra index, alpha index) of the smallest mean AUC; ``auc`` is (extra, alpha, run).

    Means are taken over runs, diverged ones replaced (:func:`replace_diverged`); ties go to the
    first minimum with alpha ascending, then the third parameter ascending.
    """
    score = replace_diverged(mean_se(auc)[0])
    a, e = np.unravel_index(np.argmin(score.T), score.T.shape)
    return int(e), int(a)


def sensitivity(auc: np.ndarray, extra_index: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean AUC (diverged replaced) and its standard error over alpha for one third-parameter
    value; ``auc`` is (extra, alpha, run)."""
    mean, se = mean_se(auc[extra_index])
    return replace_diverged(mean), se


def half_depth_width(curve: np.ndarray, best: float) -> int:
    """Number of step sizes whose mean AUC is at most halfway between ``best`` and the initial
    error, i.e. that get at least half of the best improvement: the width of a sensitivity curve."""
    return int(np.sum(curve <= 0.5 * (best + DIVERGENCE_THRESHOLD)))
