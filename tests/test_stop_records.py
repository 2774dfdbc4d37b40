"""Reasons on disk (issue 25, point 3): every stop writes why to state.txt (``finished``,
``preempted: signal <n>``, ``failed: <reason>``) and log.txt, from the rank that knows it (under
mpirun the rank that meets an error, whichever it is), one stop record per start; the resume
hint repeats the launch line (point 8).

Signals (one process and mpirun) are in tests/test_restart.py, failed environments in
tests/test_run_faults.py; a run killed without a stop record in tests/test_run_lock.py."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_launch import mpi_env, mpirun_exe

from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.config.resolve import Config
from hpc_refer.report.metrics import RunDirectory, record_stop
from hpc_refer.report.schema import LOG_LINE, RunState, read_state
from hpc_refer.run.main import main as run_main
from hpc_refer.run.main import restart_flags, resume_command

pytestmark = pytest.mark.mpi_skip

SMALL = ["--replay.size", "2000", "--replay.learn-start", "200", f"--{VRacer.name}.batch", "16",
         f"--{VRacer.name}.hidden", "16,16", "--log-every", "200", "--chunk-len", "50"]


def log_lines(path: Path) -> list[str]:
    """log.txt's lines without their time (``[rank] message``; other lines as they are)."""
    return [f"[{m['rank']}] {m['message']}" if (m := LOG_LINE.match(line)) else line
            for line in path.read_text().splitlines()]


def test_the_state_line_reads_back_and_names_what_is_allowed(tmp_path):
    assert RunState.parse("preempted: signal 10\n") == RunState("preempted", "signal 10")
    assert RunState.parse("finished") == RunState("finished")  # as written before reasons
    assert RunState.of("failed", "env 0: no\n  answer").line() == "failed: env 0: no answer"
    with pytest.raises(ValueError, match="'paused' is invalid: allowed are running, "
                                         "preempted, finished, failed"):
        RunState.parse("paused: by hand")
    assert read_state(tmp_path / "state.txt") is None
    (tmp_path / "state.txt").write_text("stopped\n")
    with pytest.raises(ValueError, match=r"state\.txt: state = 'stopped' is invalid"):
        read_state(tmp_path / "state.txt")


def test_the_first_stop_of_a_start_stands_and_every_stop_is_logged(tmp_path):
    """Rank 3 fails first (its traceback and its line in log.txt, its reason in state.txt);
    rank 0's later stop (say, the SIGTERM of the job's abort) is logged but cannot hide it;
    the next start clears the claim."""
    run = RunDirectory(tmp_path / "r", Config())
    run.set_state("running")
    assert record_stop(run.path, 3, "failed", "rank 3 (actor): RuntimeError: boom",
                       "Traceback (most recent call last):\nRuntimeError: boom\n")
    run.set_state("preempted", "signal 15")
    assert (run.path / "state.txt").read_text() == "failed: rank 3 (actor): RuntimeError: boom\n"
    assert log_lines(run.path / "log.txt")[-4:] == [
        "[3] error: Traceback (most recent call last):", "RuntimeError: boom",
        "[3] error: run failed: rank 3 (actor): RuntimeError: boom",
        "[0] run preempted: signal 15 (state.txt keeps the stop recorded first)"]
    run.set_state("running")
    run.set_state("finished")
    assert (run.path / "state.txt").read_text() == "finished\n"
    assert log_lines(run.path / "log.txt")[-1] == "[0] run finished"
    with pytest.raises(ValueError, match="'running' is not a stop"):
        record_stop(run.path, 0, "running")
    run.close()


def test_an_error_in_one_process_is_recorded_with_its_traceback(in_tmp, monkeypatch):
    import run_envs

    monkeypatch.setattr(run_envs.MetricRaises, "episodes", 0)
    with pytest.raises(RuntimeError, match="energy diverged"):
        run_main(["--env", "run_envs:MetricRaises", "--steps", "400", "--run-dir", "r",
                  *SMALL])
    run_dir = in_tmp / "r"
    assert (run_dir / "state.txt").read_text() == (
        "failed: rank 0 (learner+actor): RuntimeError: energy diverged\n")
    log = log_lines(run_dir / "log.txt")
    assert log[-1] == "[0] error: run failed: rank 0 (learner+actor): RuntimeError: energy diverged"
    assert "[0] error: Traceback (most recent call last):" in log


def test_the_actor_rank_that_fails_records_why_under_mpirun(in_tmp):
    """mpirun -n 2: the actor (rank 1) meets the error and aborts the job; it, not rank 0
    (which owns the run directory and is killed by the abort), writes the stop record."""
    proc = subprocess.run(
        [mpirun_exe(), "-n", "2", sys.executable, "-m", "hpc_refer.run", "--env",
         "run_envs:MetricRaises", "--steps", "2000", "--run-dir", "r", *SMALL],
        capture_output=True, text=True, timeout=300, env=mpi_env(), cwd=in_tmp, check=False)
    assert proc.returncode != 0
    assert "hpc_refer.run: rank 1 (actor) failed:" in proc.stderr, proc.stderr[-3000:]
    run_dir = in_tmp / "r"
    reason = "rank 1 (actor): RuntimeError: energy diverged"
    assert (run_dir / "state.txt").read_text() == f"failed: {reason}\n"
    log = log_lines(run_dir / "log.txt")
    assert f"[1] error: run failed: {reason}" in log
    assert "[1] error: Traceback (most recent call last):" in log


def test_a_state_txt_edited_by_hand_is_said_and_the_restart_goes_on(in_tmp):
    assert run_main(["--env", "Pendulum-v1", "--steps", "200", "--run-dir", "r", *SMALL]) == 0
    (in_tmp / "r" / "state.txt").write_text("done by hand\n")
    assert run_main(["--restart", "r", "--steps", "400"]) == 0
    assert "warning: r/state.txt: state = 'done by hand' is invalid" in (
        in_tmp / "r" / "log.txt").read_text()
    assert (in_tmp / "r" / "state.txt").read_text() == "finished\n"


def test_the_resume_hint_repeats_the_launch_line():
    parser = argparse.ArgumentParser()
    for flag in ("--steps", "--env", "--learners", "--log-every"):
        parser.add_argument(flag, dest="run." + flag[2:].replace("-", "_"),
                            default=argparse.SUPPRESS)
    args = parser.parse_args(["--log-every", "500", "--env", "Hopper-v5", "--learners", "2",
                              "--steps", "1e6"])
    flags = restart_flags(args)  # what config.toml holds anyway (--env) is left out
    assert flags == ("--log-every", "500", "--learners", "2", "--steps", "1e6")
    assert resume_command(Path("runs/my run"), 8, flags) == (
        "mpirun -n 8 python -m hpc_refer.run --restart 'runs/my run' --log-every 500 "
        "--learners 2 --steps 1e6")
    assert resume_command(Path("r"), 1, ()) == "python -m hpc_refer.run --restart r"
    assert resume_command(Path("r"), 3, (), apps=2).endswith(
        "--restart r : <the solver's part of the launch line>")
