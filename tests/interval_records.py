"""Interval records (lines of train.jsonl) for tests that write or read run directories."""

from __future__ import annotations

from typing import Any

from hpc_refer.report.schema import IntervalRecord


def interval_record(env_step: int, **fields: Any) -> IntervalRecord:
    """A record at ``env_step`` of a run before training (no gradient step, no statistic, an
    empty rho histogram), the given ``fields`` replaced."""
    values: dict[str, Any] = {
        "grad_step": 0, "env_steps_per_s": 1.0, "grad_steps_per_s": 0.0, "learner_busy": 0.0,
        "beta": 0.0, "c_max": 5.0, "lr": 1e-4, "far_fraction": 0.0, "stored": env_step,
        "reward_scale": 1.0, "solver_faults": 0, "rho_hist": (), **fields}
    return IntervalRecord(env_step=env_step, **values)
