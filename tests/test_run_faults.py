"""Solver faults end to end (issue 10): a faulty Python solver never poisons the metrics, one
that keeps failing stops the run with a checkpoint and a message naming it, one that stops
answering costs one timeout, never a hang (serial pass; mpirun as a subprocess)."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from mpi_launch import HERE, mpi_env, mpirun_exe
from output_lines import one_error_line, one_line_with

from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.run.main import main as run_main

pytestmark = pytest.mark.mpi_skip

SMALL = ["--replay.size", "2000", "--replay.learn-start", "200", f"--{VRacer.name}.batch", "16",
         f"--{VRacer.name}.hidden", "16,16", "--log-every", "200", "--chunk-len", "50"]


def records(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "train.jsonl").read_text().splitlines()]


def all_finite(run_dir: Path) -> bool:
    """No NaN or inf anywhere in train.jsonl and episodes.csv."""
    values = [x for r in records(run_dir) for v in r.values()
              for x in (v if isinstance(v, list) else [v])]  # rho_hist is a list of counts
    with (run_dir / "episodes.csv").open() as f:
        values += [float(v) for row in csv.DictReader(f) for v in row.values()]
    return bool(np.isfinite(np.array(values, float)).all())


def test_nan_states_are_counted_faults_and_never_reach_the_metrics(in_tmp, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    assert run_main(["--env", "fault_envs:NaNEvery37", "--steps", "800", "--run-dir", "r",
                     *SMALL]) == 0
    last = records(in_tmp / "r")[-1]
    assert last["solver_faults"] >= 800 // 37 - 1 and last["grad_step"] > 0
    assert all_finite(in_tmp / "r")
    assert (in_tmp / "r" / "state.txt").read_text() == "finished\n"


def test_a_sleeping_step_is_one_fault_and_the_run_goes_on(in_tmp, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(HERE))
    assert run_main(["--env", "fault_envs:SleepsOnce", "--steps", "400", "--run-dir", "r",
                     "--env-step-timeout", "0.5", *SMALL]) == 0
    assert records(in_tmp / "r")[-1]["solver_faults"] == 1
    assert "no answer within run.env_step_timeout = 0.5 s" in capsys.readouterr().err


def test_faults_in_a_row_checkpoint_and_stop_the_run_naming_the_environment(
        in_tmp, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(HERE))
    assert run_main(["--env", "fault_envs:AlwaysRaises", "--steps", "400", "--run-dir", "r",
                     "--max-env-failures", "3", *SMALL]) == 1
    line = one_line_with(capsys.readouterr().err, "hpc_refer.run: error:")
    assert "AlwaysRaises" in line and "env 0" in line
    run_dir = in_tmp / "r"
    reason = line.removeprefix("hpc_refer.run: error: ")
    assert (run_dir / "state.txt").read_text() == f"failed: {reason}\n"
    assert f"error: run failed: {reason}\n" in (run_dir / "log.txt").read_text()
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-000000000000"]
    assert all_finite(run_dir)


def test_a_team_rank_that_stops_answering_stops_the_run_with_a_checkpoint(in_tmp):
    """mpirun -n 3: 1 learner and one team of 2 ranks whose rank 1 hangs in Python: the
    actor's wait times out, the run checkpoints, says which environment and ends the job."""
    exe = mpirun_exe()
    proc = subprocess.run(
        [exe, "-n", "3", sys.executable, "-m", "hpc_refer.run", "--env",
         "fault_envs:RankOneHangs", "--ranks-per-env", "2", "--steps", "2000",
         "--run-dir", "r", "--env-step-timeout", "2", *SMALL],
        capture_output=True, text=True, timeout=240, env=mpi_env(), check=False)
    assert proc.returncode != 0
    # (mpirun may print its banner of dashes on the same line, right after the message)
    line = one_line_with(proc.stderr, "hpc_refer.run: error:")
    assert "env 0" in line, proc.stderr[-3000:]
    run_dir = in_tmp / "r"
    reason = line.removeprefix("hpc_refer.run: error: ")
    assert (run_dir / "state.txt").read_text() == f"failed: {reason}\n"
    assert list((run_dir / "checkpoints").glob("step-*"))


@pytest.mark.parametrize("mode, message", [
    ("silent", "no HELLO within run.env_step_timeout = 2 s"),
    ("stall 30", "no answer to ACTION within run.env_step_timeout = 2 s"),
])
def test_an_external_solver_that_stops_answering_ends_the_run_in_one_line(
        in_tmp, mode, message):
    """A spawned solver that never says HELLO is a start-up error; one that stops answering
    mid-run fails the environment: the run checkpoints and ends (exit 1), naming it."""
    exe = mpirun_exe()
    pidfile = in_tmp / "solver.pid"
    spec = f"external:-n 1 {sys.executable} {HERE / 'stuck_solver.py'} {pidfile} {mode}"
    state = in_tmp / "r" / "state.txt"
    proc = subprocess.Popen(
        [exe, "-n", "1", sys.executable, "-m", "hpc_refer.run", "--env", spec,
         "--steps", "400", "--run-dir", "r", "--env-step-timeout", "2", *SMALL],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mpi_env())
    try:
        # hpc_refer ends by itself; Open MPI's mpirun then still waits for the spawned
        # program (MPI_Abort does not end a spawned job), which the test kills.
        deadline = time.monotonic() + 90
        while not (state.exists() and state.read_text().startswith("failed: ")):
            assert proc.poll() is None and time.monotonic() < deadline, "no failure recorded"
            time.sleep(0.2)
    finally:
        if pidfile.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, out[-2000:] + err[-2000:]
    line = one_error_line(err, "hpc_refer.run: error:")
    assert message in line, err[-3000:]
    assert message in state.read_text()
