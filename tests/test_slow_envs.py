"""Slow environments that never wait for each other (issue 38, point 7; BENCHMARKS 23 at 56
teams and 8 learners): under mpirun, a team whose solver is 4x slower than another's does not
hold the faster one back, though the two teams' learners sum their counters in every
iteration (serial pass; mpirun as a subprocess); and the idle learner's bounded wait.

The solver is bench/sleeping_solver.py (steps that sleep), loaded as
``bench.sleeping_solver:SleepingSolver`` with the repository on PYTHONPATH; it logs each
step, from which the steps of each team are counted. No assertion reads a duration."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mpi_launch import mpi_env, mpirun_exe

from hpc_refer.loop.learner_loop import wait_for_message

pytestmark = pytest.mark.mpi_skip

REPOSITORY = Path(__file__).resolve().parents[1]
STEPS = 300


def team_steps(run_dir: Path, teams: int) -> list[int]:
    """The steps each team's solver logged (bench/sleeping_solver.py: a line per step)."""
    return [len((run_dir / "sleeping" / f"env-{e}.csv").read_text().splitlines())
            for e in range(teams)]


def test_a_slow_team_does_not_hold_back_a_fast_one(in_tmp):
    """mpirun -n 4: two learners, one team each; team 0's steps take 4x as long as team
    1's (80-320 ms against 20-80 ms), episodes of 5 steps, no training. Each learner's
    iteration sums the counters of both, so a learner that blocked until its own (slow)
    actor sent its next episode would hold the reply to the fast team for as long: the fast
    team then took about as many steps as the slow one. Unheld, it takes about 4x as many
    (asserted: at least 2x, wide enough for a busy machine's actor overheads)."""
    env = mpi_env()
    env["PYTHONPATH"] = f"{REPOSITORY}{os.pathsep}{env['PYTHONPATH']}"
    done = subprocess.run(
        [mpirun_exe(), "-n", "4", sys.executable, "-m", "hpc_refer.run", "--learners", "2",
         "--env", "bench.sleeping_solver:SleepingSolver", "--env.lo", "0.02", "--env.hi",
         "0.08", "--env.slow_env", "0", "--env.slow_factor", "4", "--env.episode_len", "5",
         "--steps", str(STEPS), "--replay.learn-start", "100000", "--vracer.batch", "16",
         "--vracer.hidden", "8,8", "--run-dir", "r"],
        capture_output=True, text=True, timeout=400, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    slow, fast = team_steps(in_tmp / "r", 2)
    assert slow + fast == STEPS
    assert fast >= 2 * slow, (
        f"the fast team took {fast} steps, the 4x slower one {slow}: held back by it")


class Channel:
    """A learner side whose poll answers None ``empty`` times, then a message."""

    def __init__(self, empty: int) -> None:
        self.empty, self.polls = empty, 0

    def poll(self, block: bool) -> object | None:
        assert not block, "the bounded wait never blocks in the channel"
        self.polls += 1
        return "message" if self.polls > self.empty else None


def test_the_idle_wait_returns_the_first_message_or_nothing_at_its_deadline():
    channel = Channel(empty=3)
    assert wait_for_message(channel, time.perf_counter() + 3600, pause=0) == "message"  # type: ignore[arg-type]
    assert channel.polls == 4
    past = Channel(empty=10)
    assert wait_for_message(past, time.perf_counter() - 1, pause=0) is None  # type: ignore[arg-type]
    assert past.polls == 1, "a deadline passed: one look, then the reduction"
