"""Shared fixtures: one torch thread, and tests that write files run in a temporary cwd; the
``--mpi-expect`` option of the MPI passes (mpi_expect.py)."""

from __future__ import annotations

import pytest
import torch
from mpi_expect import pytest_addoption, pytest_configure

torch.set_num_threads(1)


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run the test in a fresh temporary directory (MuJoCo writes MUJOCO_LOG.TXT to cwd)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


__all__ = ["in_tmp", "pytest_addoption", "pytest_configure"]
