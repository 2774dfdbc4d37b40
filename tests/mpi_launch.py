"""Launching processes from the serial test pass: the environment Open MPI 5 needs here
(root, two oversubscribed cores, no busy polling), the mpirun of this interpreter's venv, and
Python snippets in a fresh interpreter."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def mpi_env() -> dict[str, str]:
    """os.environ plus the venv on PATH, tests/ on PYTHONPATH and Open MPI's settings."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=f"{HERE}{os.pathsep}{env.get('PYTHONPATH', '')}",
        OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        PRTE_ALLOW_RUN_AS_ROOT="1", PRTE_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe", OMPI_MCA_btl="^ofi",
        OMPI_MCA_mpi_yield_when_idle="1",
    )
    return env


def mpirun_exe() -> str:
    """The mpirun to use (the test is skipped without one)."""
    exe = shutil.which("mpirun", path=mpi_env()["PATH"])
    if exe is None:
        pytest.skip("no mpirun")
    return exe


def run_snippet(script: str) -> str:
    """Run ``script`` in a fresh interpreter (a clean module and warning state); assert it
    succeeded and return its stdout and stderr together."""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def wait_for_step(proc: subprocess.Popen, run_dir: Path, step: int,
                  timeout: float = 400.0) -> None:
    """Wait until a progress line of ``run_dir``'s log.txt reaches ``step`` (``proc``, the
    job, must run meanwhile)."""
    from hpc_refer.report.schema import STEP_LINE, log_messages

    log = run_dir / "log.txt"
    deadline = time.monotonic() + timeout
    while not any(int(m["step"]) >= step for line in (log_messages(log) if log.is_file() else [])
                  if (m := STEP_LINE.match(line))):
        assert proc.poll() is None, f"the job ended ({proc.returncode}) before step {step}"
        assert time.monotonic() < deadline, f"no progress to step {step} in {timeout:.0f} s"
        time.sleep(0.2)
