"""Shared fixtures: one torch thread, and tests that write files run in a temporary cwd; the
``--mpi-expect`` option of the MPI passes (mpi_expect.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from mpi_expect import pytest_addoption, pytest_configure

from hpc_refer.report.clock import CLOCK

torch.set_num_threads(1)


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run the test in a fresh temporary directory (MuJoCo writes MUJOCO_LOG.TXT to cwd)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def run_clock(monkeypatch) -> Callable[[Callable[[], float]], None]:
    """Make the run's clock (:data:`hpc_refer.report.clock.CLOCK`) read the time a test gives
    (``run_clock(source)``: seconds, from now the run's time 0 until a run starts it); its
    own source and origin come back after the test."""
    def use(source: Callable[[], float]) -> None:
        monkeypatch.setattr(CLOCK, "source", source)
        monkeypatch.setattr(CLOCK, "_origin", source())

    return use


__all__ = ["in_tmp", "pytest_addoption", "pytest_configure", "run_clock"]
