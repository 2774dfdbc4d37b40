"""Vectorised simulation: many runs times many settings of one learner, stepped together in time.

The behaviour streams are simulated once per run seed (:func:`task.simulate`); every setting of
every algorithm then replays them. Time is the only Python loop; each step is a handful of numpy
operations on ``(runs, d, settings)`` arrays. The RMSVE is measured at every step before the
update (spec 1.4); by default only its per-run summaries are kept (AUC = mean over all steps,
final = mean over the last ``int(0.01 N) + 1`` steps), optionally the whole curves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from hpc_refer.prediction.algorithms import Learner, Step
from hpc_refer.prediction.task import N_STATES, feature_matrix, rmsve, simulate


@dataclass(frozen=True)
class Batch:
    """The behaviour streams of R runs, time-major ``(T, R)``, and their (R, 9, d) features."""

    features: np.ndarray
    state: np.ndarray
    next_state: np.ndarray
    reward: np.ndarray
    rho: np.ndarray
    pi: np.ndarray
    mu: np.ndarray
    cont: np.ndarray

    @property
    def n_runs(self) -> int:
        return int(self.features.shape[0])

    @property
    def steps(self) -> int:
        return int(self.state.shape[0])

    def step(self, t: int) -> Step:
        """Step t of every run, shaped for broadcasting against (R, d, P) arrays."""
        runs = np.arange(self.n_runs)
        return Step(
            x=self.features[runs, self.state[t]][:, :, None],
            x_next=self.features[runs, self.next_state[t]][:, :, None],
            reward=self.reward[t][:, None], rho=self.rho[t][:, None], pi=self.pi[t][:, None],
            mu=self.mu[t][:, None], cont=self.cont[t][:, None],
        )


def make_batch(runs: Sequence[int] | np.ndarray, steps: int, seed_offset: int = 0) -> Batch:
    """Streams of the given runs: run r uses seed ``r + seed_offset`` and feature slice r."""
    trajs = [simulate(r + seed_offset, steps) for r in runs]

    def stack(field: str) -> np.ndarray:
        return np.stack([getattr(tr, field) for tr in trajs], axis=1)

    return Batch(
        features=np.stack([feature_matrix(r) for r in runs]),
        state=stack("state"), next_state=stack("next_state"), reward=stack("reward"),
        rho=stack("rho"), pi=stack("pi"), mu=stack("mu"), cont=stack("cont"),
    )


def final_window(steps: int) -> int:
    """Number of last steps averaged for the final error: int(0.01 N) + 1 (201 for N = 20,000)."""
    return int(0.01 * steps) + 1


@dataclass(frozen=True)
class Errors:
    """RMSVE summaries per run and setting, shape (R, P); ``curves`` (T, R, P) when recorded."""

    auc: np.ndarray
    final: np.ndarray
    curves: np.ndarray | None = None


def run_learner(learner: Learner, batch: Batch, d_mu: np.ndarray, record_curves: bool = False,
                progress: Callable[[int], None] | None = None) -> Errors:
    """Replay ``batch`` through ``learner`` (all its settings at once) and measure the RMSVE.

    At each step t: values of all states V = Phi w, RMSVE_t from V, then the update with
    ``v = V[S_t]`` and ``v_next = V[S_{t+1}]`` (the terminal row of Phi is zero).
    ``progress(t)`` is called every 1,000 steps.
    """
    steps, n_runs = batch.steps, batch.n_runs
    n_final = final_window(steps)
    runs = np.arange(n_runs)
    shape = (n_runs, learner.alpha.size)
    auc, final = np.zeros(shape), np.zeros(shape)
    curves = np.empty((steps, *shape)) if record_curves else None
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(steps):
            values = batch.features @ learner.w
            err = rmsve(values[:, :N_STATES], d_mu)
            auc += err
            if t >= steps - n_final:
                final += err
            if curves is not None:
                curves[t] = err
            learner.update(batch.step(t), values[runs, batch.state[t]],
                           values[runs, batch.next_state[t]])
            if progress is not None and ((t + 1) % 1000 == 0 or t + 1 == steps):
                progress(t + 1)
    return Errors(auc / steps, final / n_final, curves)
