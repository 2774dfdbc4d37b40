"""The Makefile lets the user pick the torch build (issue 14, point 5): PyPI's plain
``torch==2.13.0`` is the CUDA build on an ordinary Linux machine, so a CPU-only machine asks
for PyTorch's CPU index, and a cluster's own torch is kept with ``TORCH=none``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make")


def dry_install(torch: str) -> subprocess.CompletedProcess:
    """``make -n -B install TORCH=<torch>``: the commands it would run, none run."""
    return subprocess.run(["make", "-n", "-B", "install", f"TORCH={torch}", "VENV=/nonexistent"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_cpu_takes_pytorchs_cpu_index():
    out = dry_install("cpu").stdout
    assert "pip install -q torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in out


def test_index_takes_the_configured_index():
    out = dry_install("index").stdout
    assert "pip install -q torch==2.13.0\n" in out and "--index-url" not in out


def test_none_keeps_the_systems_torch():
    out = dry_install("none").stdout
    assert "venv --system-site-packages" in out and "pip install -q torch" not in out


def test_an_unknown_choice_names_the_allowed_ones():
    done = dry_install("gpu")
    assert done.returncode != 0
    assert "TORCH = gpu is invalid: allowed values are index, cpu, none" in done.stderr
