"""Issue 25, points 1, 2 and 5, end to end: a short env_step_timeout never costs finished work
(the rebuild after a fault is timed by env_build_timeout, not inside the call the watchdog
watches); a solver that cannot start stops the run at once in one line, on every rank; a
solver that a reset brings back is never rebuilt, alone or as a team (serial pass; mpirun as
a subprocess)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_launch import HERE, mpi_env, mpirun_exe
from output_lines import lines_with

from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.run.main import main as run_main

pytestmark = pytest.mark.mpi_skip

SMALL = ["--replay.size", "2000", "--replay.learn-start", "200", f"--{VRacer.name}.batch", "16",
         f"--{VRacer.name}.hidden", "16,16", "--log-every", "200", "--chunk-len", "50"]

ERROR = "hpc_refer.run: error:"
"""hpc_refer's error lines begin so (under mpirun, Open MPI's abort banner of dashes may
precede or follow one on the same line: tests/output_lines.py)."""

SCALED_WATCHDOG = """\
import sys
from hpc_refer.envs import supervision
from hpc_refer.run.main import main
supervision.MARGIN = 0.5  # the watchdog's 5 s, scaled tenfold down as the solver's times are
sys.exit(main(sys.argv[1:]))
"""


def builds(run_dir: Path, rank: int = 0) -> int:
    """Constructions of the solver on team rank ``rank`` (fault_envs.count_build)."""
    path = run_dir / f"builds-{rank}"
    return len(path.read_text().splitlines()) if path.exists() else 0


def last_record(run_dir: Path) -> dict:
    return json.loads((run_dir / "train.jsonl").read_text().splitlines()[-1])


def episodes(run_dir: Path) -> list[dict]:
    with (run_dir / "episodes.csv").open() as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("fault", ["sleep", "shape"])
def test_a_slow_constructor_and_a_short_step_timeout_lose_no_episode(in_tmp, fault):
    """Issue 25's report scaled down tenfold: constructor 1.5 s, a step of 1 s (or a state of
    the wrong shape) at step 120 (two episodes done), env_step_timeout 0.2 s, the watchdog's
    margin 0.5 s (its limit 2 x 0.2 + 0.5 = 0.9 s, shorter than the rebuild). The fault is
    counted, the rebuild is held to env_build_timeout, and the run finishes with its episodes
    and its final checkpoint."""
    proc = subprocess.run(
        [sys.executable, "-c", SCALED_WATCHDOG, "--env", "fault_envs:SlowBuild",
         "--env.fault", fault, "--steps", "300", "--run-dir", "r", "--env-step-timeout", "0.2",
         "--env-build-timeout", "5", *SMALL],
        capture_output=True, text=True, timeout=240, env=mpi_env(), check=False)
    run_dir = in_tmp / "r"
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "stuck" not in proc.stderr
    assert last_record(run_dir)["solver_faults"] == 1 and builds(run_dir) == 2
    assert [int(e["length"]) for e in episodes(run_dir)] == [50] * 5
    assert list((run_dir / "checkpoints").glob("step-*"))
    assert (run_dir / "state.txt").read_text().startswith("finished")


@pytest.mark.parametrize(("solver", "flags", "built", "message"), [
    ("ResetNeedsInflow", [], 1, "env 0 (ResetNeedsInflow).reset: raised KeyError: "
                                "'inflow_profile' (its first reset: the solver cannot start)"),
    ("ConstructorNeedsInflow", [], 1, "env 0 (ConstructorNeedsInflow).__init__: raised "
                                      "KeyError: 'inflow_profile' (the solver cannot start)"),
    ("SlowBuild", ["--env-build-timeout", "0.5"], 0,
     "env 0 (SlowBuild).__init__: no answer within run.env_build_timeout = 0.5 s (the solver "
     "cannot start)"),
])
def test_a_solver_that_cannot_start_stops_the_run_at_once_in_one_line(
        in_tmp, monkeypatch, capsys, solver, flags, built, message):
    """One process: no fault counted, no second construction, one error line, no traceback on
    the terminal and no --restart hint for a run that never took a step; a constructor past
    --env-build-timeout is interrupted (before it counts its build)."""
    monkeypatch.syspath_prepend(str(HERE))
    assert run_main(["--env", f"fault_envs:{solver}", "--steps", "400", "--run-dir", "r",
                     *flags, *SMALL]) == 1
    out, err = capsys.readouterr()
    assert lines_with(err, ERROR) == [f"hpc_refer.run: error: {message}"]
    assert "Traceback" not in err and "--restart" not in out + err
    assert builds(in_tmp / "r") == built
    assert (in_tmp / "r" / "state.txt").read_text().startswith("failed")


def test_the_traceback_of_a_solver_that_cannot_start_is_in_log_txt(in_tmp, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    assert run_main(["--env", "fault_envs:ResetNeedsInflow", "--steps", "400", "--run-dir", "r",
                     *SMALL]) == 1
    log = (in_tmp / "r" / "log.txt").read_text()
    assert "Traceback (most recent call last)" in log
    assert 'self.inflow = self.params["inflow_profile"]' in log
    assert (in_tmp / "r" / "state.txt").read_text().startswith(
        "failed: env 0 (ResetNeedsInflow).reset: raised KeyError")


@pytest.mark.parametrize(("ranks", "per_env", "where"), [(2, 1, ""), (3, 2, " on team rank 1")])
def test_under_mpirun_a_solver_that_cannot_start_stops_every_rank_in_one_line(
        in_tmp, ranks, per_env, where):
    """1 learner and one environment of one rank, or a team of two whose rank 1 raises (its
    error text travels to the actor): the job ends at once (MPI_Abort), one line, no retry."""
    exe = mpirun_exe()
    proc = subprocess.run(
        [exe, "-n", str(ranks), sys.executable, "-m", "hpc_refer.run", "--env",
         "fault_envs:ResetNeedsInflow", "--env.on_rank", str(per_env - 1), "--ranks-per-env",
         str(per_env), "--steps", "400", "--run-dir", "r", *SMALL],
        capture_output=True, text=True, timeout=240, env=mpi_env(), check=False)
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-3000:])
    assert lines_with(proc.stderr, ERROR) == [
        f"hpc_refer.run: error: env 0 (ResetNeedsInflow).reset{where}: raised KeyError: "
        f"'inflow_profile' (its first reset: the solver cannot start)"], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "--restart" not in proc.stdout + proc.stderr
    assert [builds(in_tmp / "r", rank) for rank in range(per_env)] == [1] * per_env


def test_a_solver_that_recovers_by_reset_is_built_once_and_trains(in_tmp, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    assert run_main(["--env", "fault_envs:Recovers", "--steps", "400", "--run-dir", "r",
                     *SMALL]) == 0
    last = last_record(in_tmp / "r")
    assert last["solver_faults"] >= 400 // 37 and last["grad_step"] > 0
    assert builds(in_tmp / "r") == 1


def test_a_team_that_recovers_by_reset_is_built_once_on_every_rank(in_tmp):
    """mpirun -n 3: 1 learner and a team of 2 whose rank 1 raises at every 37th step: the
    faults are counted, and neither rank constructs its solver again."""
    exe = mpirun_exe()
    proc = subprocess.run(
        [exe, "-n", "3", sys.executable, "-m", "hpc_refer.run", "--env", "fault_envs:Recovers",
         "--ranks-per-env", "2", "--steps", "400", "--run-dir", "r", *SMALL],
        capture_output=True, text=True, timeout=240, env=mpi_env(), check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = last_record(in_tmp / "r")
    assert last["solver_faults"] >= 400 // 37 and last["grad_step"] > 0
    assert [builds(in_tmp / "r", rank) for rank in (0, 1)] == [1, 1]
    assert "solver fault 1, episode ended and environment reset: env 0 (Recovers).step on " \
           "team rank 1: raised FloatingPointError: CFL condition violated" in proc.stderr
