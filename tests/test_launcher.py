"""No silent singletons (issue 38, point 3): a COMM_WORLD of one rank under a launcher that
announced more stops the run at once with one line naming the launcher's count, the world's
and the launch lines to try; a one-process run where no launcher announced more starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from output_lines import one_line_with

from hpc_refer.parallel.world import launcher_mismatch

pytestmark = pytest.mark.mpi_skip


@pytest.mark.parametrize(("environ", "words"), [
    ({"SLURM_STEP_NUM_TASKS": "4"}, "srun started 4 processes (SLURM_STEP_NUM_TASKS=4)"),
    ({"SLURM_NTASKS": "8", "SLURM_STEP_ID": "0"}, "srun started 8 processes (SLURM_NTASKS=8)"),
    ({"OMPI_COMM_WORLD_SIZE": "3"}, "Open MPI's mpirun started 3 processes"),
    ({"PMI_SIZE": "2"}, "a PMI launcher (MPICH's mpiexec, or srun --mpi=pmi2) started 2"),
])
def test_a_launcher_that_announced_more_is_named(environ, words):
    message = launcher_mismatch(1, environ, "Open MPI v5.0.8")
    assert message is not None and message.startswith(words), message
    assert "this MPI world holds 1 rank" in message and "(mpi4py uses Open MPI v5.0.8)" in message
    assert "srun --mpi=pmix" in message and "srun --mpi=pmi2" in message


@pytest.mark.parametrize("environ", [
    {},                                                    # no launcher
    {"SLURM_NTASKS": "8"},                                 # a batch script, not a step
    {"SLURM_NTASKS": "8", "SLURM_STEP_ID": "4294967294"},  # Slurm's batch step
    {"SLURM_STEP_NUM_TASKS": "1", "OMPI_COMM_WORLD_SIZE": "1"},
    {"PMI_SIZE": "x"},
])
def test_a_single_process_where_none_announced_more_starts(environ):
    assert launcher_mismatch(1, environ) is None


def test_a_world_of_several_ranks_is_never_a_singleton():
    assert launcher_mismatch(4, {"SLURM_STEP_NUM_TASKS": "4"}) is None


@pytest.mark.parametrize("tool", ["run", "evaluate"])
def test_the_tools_stop_at_once_with_one_line(tool, in_tmp):
    """``python -m hpc_refer.run`` (or ``evaluate``) as one of 4 srun tasks whose MPI did not
    join them: exit 2 before any run directory exists, the error in one line."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "PRTE_", "PMI_", "SLURM_"))}
    args = (["--env", "Pendulum-v1", "--steps", "100", "--run-dir", "r"] if tool == "run"
            else ["r"])
    done = subprocess.run([sys.executable, "-m", f"hpc_refer.{tool}", *args], cwd=in_tmp,
                          env={**env, "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_ID": "0"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    line = one_line_with(done.stderr, f"hpc_refer.{tool}: error: ")
    assert "srun started 4 processes (SLURM_STEP_NUM_TASKS=4) but this MPI world holds 1" in line
    assert not (in_tmp / "r").exists()
