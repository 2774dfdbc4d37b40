"""The study's protocol: parameter grids, the sweep over runs split across MPI ranks, the re-run.

Work split: rank k simulates and learns the runs ``np.array_split(range(runs), size)[k]`` for
every algorithm and every setting; each lane (run, setting) is independent, so the gathered
result is the serial one. Rank 0 selects the best setting per algorithm and placement
(:func:`analysis.select_best`), broadcasts it, and all ranks re-run it on seeds ``runs + r``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hpc_refer.prediction.algorithms import (
    STUDY,
    Choices,
    Corrections,
    FollowOn,
    Learner,
    Placement,
    learner_class,
)
from hpc_refer.prediction.analysis import mean_se, select_best
from hpc_refer.prediction.engine import Errors, make_batch, run_learner
from hpc_refer.prediction.task import N_STORED_RUNS, DMuChoice, state_weighting

#: lambda or zeta in {0, 0.1, 0.2, 0.3, 0.5, 0.9, 1} plus 1 - 2^-x for x = 2..6, ascending.
ZETAS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 0.875, 0.9, 0.9375, 0.96875, 0.984375, 1.0)
BETAS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def _check_grid(name: str, values: Sequence[float], low: float, high: float) -> None:
    """Raise a one-line ValueError unless ``values`` is a non-empty, duplicate-free subset of
    [low, high]."""
    if not values:
        raise ValueError(f"{name}: empty grid; give at least one value in [{low:g}, {high:g}]")
    bad = [v for v in values if not low <= v <= high]
    if bad:
        raise ValueError(f"{name}: {bad[0]:g} outside the allowed range [{low:g}, {high:g}]")
    if len(set(values)) != len(values):
        raise ValueError(f"{name}: duplicate values in {list(values)}; each value once")


@dataclass(frozen=True)
class SweepConfig:
    """Everything that defines a sweep; defaults are the study's full protocol.

    ``target_corrections`` (ambiguity A1, :class:`Corrections`: keep-rho, target-only, no-rho) and
    ``followon_discount`` (A5, :class:`FollowOn`: beta, beta-gamma) hold the command-line names.
    """

    algorithms: tuple[str, ...] = tuple(cls.name for cls in STUDY)
    placements: tuple[Placement, ...] = (Placement.WHOLE, Placement.TARGET)
    alpha_exponents: tuple[int, ...] = tuple(range(19))
    eta_exponents: tuple[int, ...] = tuple(range(-6, 9))
    betas: tuple[float, ...] = BETAS
    zetas: tuple[float, ...] = ZETAS
    lam: float = 0.0
    runs: int = 50
    steps: int = 20_000
    rerun: bool = True
    d_mu: DMuChoice = "stored"
    target_corrections: str = Corrections.KEEP_RHO.option
    followon_discount: str = FollowOn.BETA.option

    def __post_init__(self) -> None:
        if not self.algorithms:
            raise ValueError("algorithms: empty; allowed: all or a list of known names")
        for name in self.algorithms:
            learner_class(name)
        if len(set(self.algorithms)) != len(self.algorithms):
            raise ValueError("algorithms: each name once")
        if not self.placements or len(set(self.placements)) != len(self.placements):
            raise ValueError("placements: give WHOLE, TARGET or both, each once")
        _check_grid("alpha-exponents", self.alpha_exponents, 0, 40)
        _check_grid("eta-exponents", self.eta_exponents, -30, 30)
        _check_grid("betas", self.betas, 0.0, 1.0)
        _check_grid("zetas", self.zetas, 0.0, 1.0)
        _check_grid("lambda", (self.lam,), 0.0, 1.0)
        if not 1 <= self.runs <= N_STORED_RUNS:
            raise ValueError(f"runs: {self.runs} not in 1..{N_STORED_RUNS} (stored feature sets)")
        if self.steps < 1:
            raise ValueError(f"steps: {self.steps}; must be a positive integer")
        state_weighting(self.d_mu)
        self.choices()

    def choices(self) -> Choices:
        """The ambiguity options every learner of the sweep gets (the same for all settings)."""
        return Choices(Corrections.parse(self.target_corrections),
                       FollowOn.parse(self.followon_discount))

    def alphas(self) -> np.ndarray:
        """alpha = 2^-x, in ascending order (the tie-break order of the selection)."""
        return 2.0 ** -np.array(sorted(self.alpha_exponents, reverse=True), dtype=float)

    def extra_values(self, cls: type[Learner]) -> np.ndarray | None:
        """The grid of the third parameter of ``cls`` (eta = 2^x, beta, zeta), or None."""
        grids = {"eta": 2.0 ** np.array(sorted(self.eta_exponents), dtype=float),
                 "beta": np.array(sorted(self.betas)), "zeta": np.array(sorted(self.zetas))}
        return None if cls.extra is None else grids[cls.extra]

    def grid_shape(self, cls: type[Learner]) -> tuple[int, int, int]:
        """(placements, third-parameter values or 1, alphas)."""
        extra = self.extra_values(cls)
        return len(self.placements), 1 if extra is None else extra.size, self.alphas().size

    def settings(self, cls: type[Learner]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Flat (alpha, kappa, extra) arrays of all settings, in C order of :meth:`grid_shape`."""
        shape = self.grid_shape(cls)
        kappa = np.array([float(p) for p in self.placements])
        k, e, a = np.meshgrid(np.arange(shape[0]), np.arange(shape[1]), np.arange(shape[2]),
                              indexing="ij")
        extra = self.extra_values(cls)
        return (self.alphas()[a.ravel()], kappa[k.ravel()],
                None if extra is None else extra[e.ravel()])


@dataclass(frozen=True)
class Collective:
    """The collective operations the sweep needs; the default is a single serial process."""

    rank: int = 0
    size: int = 1
    gather: Callable[[Any], list[Any] | None] = field(default=lambda obj: [obj])
    bcast: Callable[[Any], Any] = field(default=lambda obj: obj)

    @classmethod
    def world(cls) -> Collective:
        """COMM_WORLD through :mod:`hpc_refer.parallel` (the only module importing mpi4py)."""
        from hpc_refer.parallel import world

        rank, size = world.world_rank_size()
        return cls(rank, size, world.gather_object, world.bcast_object)

    def my_runs(self, runs: int) -> np.ndarray:
        """The run indices of this rank: a contiguous block of range(runs)."""
        return np.array_split(np.arange(runs), self.size)[self.rank]


@dataclass
class Rerun:
    """The best setting per placement re-run on fresh seeds: ``best`` (placement, 2) holds the
    (extra, alpha) grid indices; auc/final are (placement, run), curve_* are (placement, step)."""

    best: np.ndarray
    auc: np.ndarray
    final: np.ndarray
    curve_mean: np.ndarray
    curve_se: np.ndarray

    @classmethod
    def from_errors(cls, best: np.ndarray, errors: Errors) -> Rerun:
        """Summarise merged re-run errors (curves (step, run, placement)) over runs."""
        assert errors.curves is not None
        mean, se = mean_se(errors.curves, axis=1)
        return cls(best, errors.auc.T, errors.final.T, mean.T, se.T)


@dataclass
class AlgorithmResult:
    """Summaries of one algorithm; auc and final are indexed (placement, extra, alpha, run)."""

    auc: np.ndarray
    final: np.ndarray
    seconds: float
    rerun: Rerun | None = None


@dataclass
class SweepResult:
    """A finished sweep as rank 0 holds it (written by :func:`results.write`)."""

    config: SweepConfig
    algorithms: dict[str, AlgorithmResult]
    ranks: int
    seconds: float


Logger = Callable[[str], None]


def _merge(parts: list[Errors]) -> Errors:
    """Concatenate per-rank Errors along the run axis (rank order = run order)."""
    curves = None if parts[0].curves is None else np.concatenate([p.curves for p in parts], 1)
    return Errors(np.concatenate([p.auc for p in parts]), np.concatenate([p.final for p in parts]),
                  curves)


def _learn(cls: type[Learner], config: SweepConfig, runs: np.ndarray, seed_offset: int,
           settings: tuple[np.ndarray, np.ndarray, np.ndarray | None], record_curves: bool,
           progress: Callable[[int], None]) -> Errors:
    batch = make_batch(runs, config.steps, seed_offset)
    alpha, kappa, extra = settings
    learner = cls(len(runs), batch.features.shape[2], alpha, kappa, extra, lam=config.lam,
                  choices=config.choices())
    return run_learner(learner, batch, state_weighting(config.d_mu), record_curves, progress)


def run_sweep(config: SweepConfig, comm: Collective | None = None,
              log: Logger | None = None) -> SweepResult | None:
    """Run the sweep (and the re-run of the best settings); rank 0 returns the result.

    ``log`` receives rank 0's progress lines (None: silent).
    """
    comm = comm or Collective()
    if comm.size > config.runs:
        raise ValueError(f"runs: {config.runs} runs cannot be split over {comm.size} ranks; "
                         f"use at most {config.runs} ranks")
    say = log if (log is not None and comm.rank == 0) else None
    runs = comm.my_runs(config.runs)
    start = time.perf_counter()
    results: dict[str, AlgorithmResult] = {}
    for i, name in enumerate(config.algorithms, 1):
        cls = learner_class(name)
        shape = config.grid_shape(cls)
        tag = f"sweep {name} ({i}/{len(config.algorithms)}, {np.prod(shape)} settings)"
        t0 = time.perf_counter()
        local = _learn(cls, config, runs, 0, config.settings(cls), False,
                       _progress(say, tag, config.steps, start))
        parts = comm.gather(local)
        if parts is not None:
            merged = _merge(parts)
            results[name] = AlgorithmResult(
                merged.auc.T.reshape(*shape, config.runs),
                merged.final.T.reshape(*shape, config.runs), time.perf_counter() - t0)
    if config.rerun:
        _rerun(config, comm, results, runs, say, start)
    if comm.rank != 0:
        return None
    return SweepResult(config, results, comm.size, time.perf_counter() - start)


def _rerun(config: SweepConfig, comm: Collective, results: dict[str, AlgorithmResult],
           runs: np.ndarray, say: Logger | None, start: float) -> None:
    """Re-run each algorithm's best setting per placement on seeds ``config.runs + r``."""
    best = comm.bcast({name: np.array([select_best(res.auc[k]) for k in range(res.auc.shape[0])])
                       for name, res in results.items()} if comm.rank == 0 else None)
    for name in config.algorithms:
        cls = learner_class(name)
        alpha, kappa, extra = config.settings(cls)
        flat = np.ravel_multi_index(
            (np.arange(len(config.placements)), best[name][:, 0], best[name][:, 1]),
            config.grid_shape(cls))
        chosen = (alpha[flat], kappa[flat], None if extra is None else extra[flat])
        local = _learn(cls, config, runs, config.runs, chosen, True,
                       _progress(say, f"re-run {name}", config.steps, start))
        parts = comm.gather(local)
        if parts is not None:
            results[name].rerun = Rerun.from_errors(best[name], _merge(parts))


def _progress(say: Logger | None, tag: str, steps: int, start: float) -> Callable[[int], None]:
    def report(t: int) -> None:
        if say is not None and (t % 5000 == 0 or t == steps):
            say(f"[prediction] {tag}: step {t}/{steps}, {time.perf_counter() - start:.0f} s")

    return report
