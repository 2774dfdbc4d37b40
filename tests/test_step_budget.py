"""The per-release step budget (issue 14): under mpirun a run ends at exactly ``run.steps``
environment steps, not a chunk per actor beyond it (serial pass; mpirun as a subprocess),
and the grant rule that keeps the sum of the budgets within what remains."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_launch import mpi_env, mpirun_exe

from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.loop.learner_loop import grant_steps
from hpc_refer.report.schema import log_messages

pytestmark = pytest.mark.mpi_skip

KS = ["--env", "KS", "--chunk-len", "1000", "--log-every", "500", "--replay.learn-start",
      "500", "--replay.size", "4000", f"--{VRacer.name}.batch", "32",
      f"--{VRacer.name}.hidden", "16,16"]


def test_budgets_share_what_remains_and_never_exceed_it():
    # Plenty left: a whole chunk each, on every learner.
    assert grant_steps(10_000, (2, 1), 0, 1000) == [1000, 1000]
    assert grant_steps(10_000, (2, 1), 1, 1000) == [1000]
    # Near the end: equal shares, the odd steps to the first actors in learner order.
    assert grant_steps(1502, (2, 1), 0, 1000) == [501, 501]
    assert grant_steps(1502, (2, 1), 1, 1000) == [500]
    # Less left than actors wait: some get nothing (they keep waiting).
    assert grant_steps(1, (1, 2), 1, 1000) == [0, 0]
    assert grant_steps(1, (1, 2), 0, 1000) == [1]
    assert grant_steps(0, (3,), 0, 1000) == [0, 0, 0]
    assert grant_steps(-5, (1,), 0, 1000) == [0]
    assert grant_steps(7, (0, 2), 0, 1000) == []
    for remaining in range(0, 40):
        for waiting in ((1,), (3,), (2, 0), (1, 4), (3, 2, 5)):
            grants = [g for rank in range(len(waiting))
                      for g in grant_steps(remaining, waiting, rank, 4)]
            assert len(grants) == sum(waiting)
            assert sum(grants) == min(remaining, 4 * sum(waiting))
            assert max(grants) - min(grants) <= 1 or max(grants) == 4


def last_record(run_dir: Path) -> dict:
    return json.loads((run_dir / "train.jsonl").read_text().splitlines()[-1])


def last_progress(run_dir: Path) -> str:
    return [x for x in log_messages(run_dir / "log.txt") if x.startswith("steps ")][-1]


def mpirun(n: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([mpirun_exe(), "-n", str(n), sys.executable, "-m", "hpc_refer.run",
                           *args], capture_output=True, text=True, timeout=400,
                          env=mpi_env(), check=False)


def test_two_actors_stop_at_exactly_the_steps_asked_for(in_tmp):
    """mpirun -n 3: 1 learner, 2 actors of 1000-step chunks, 3000 steps: without budgets
    the second actor's last chunk took the run to 4000."""
    done = mpirun(3, *KS, "--steps", "3000", "--run-dir", "r")
    assert done.returncode == 0, done.stderr[-3000:]
    assert last_record(in_tmp / "r")["env_step"] == 3000
    assert "steps 3000/3000 (100.0%)" in last_progress(in_tmp / "r")
    records = [json.loads(x) for x in (in_tmp / "r" / "train.jsonl").read_text().splitlines()]
    busy = [r["learner_busy"] for r in records]
    assert all(0.0 <= b <= 1.0 for b in busy), busy
    assert busy[0] < 1.0, f"before training starts the learner waits for its actors: {busy}"


def test_two_learners_stop_at_exactly_the_steps_asked_for_and_after_a_restart(in_tmp):
    """mpirun -n 4 (2 learners, one actor each): exact at 3000, and exact again when the
    run is continued from its checkpoint to 4700 (budgets are granted anew)."""
    done = mpirun(4, *KS, "--learners", "2", "--steps", "3000", "--run-dir", "r",
                  "--checkpoint-every", "1000")
    assert done.returncode == 0, done.stderr[-3000:]
    assert last_record(in_tmp / "r")["env_step"] == 3000
    assert "steps 3000/3000 (100.0%)" in last_progress(in_tmp / "r")
    assert (in_tmp / "r" / "checkpoints" / "step-000000003000").is_dir()
    more = mpirun(4, "--restart", "r", "--steps", "4700", "--learners", "2")
    assert more.returncode == 0, more.stderr[-3000:]
    assert last_record(in_tmp / "r")["env_step"] == 4700
    assert "steps 4700/4700 (100.0%)" in last_progress(in_tmp / "r")
