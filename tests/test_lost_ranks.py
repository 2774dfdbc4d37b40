"""Ranks lost mid-run (issue 38, point 2), on one host: under ``mpirun --with-ft ulfm`` (Open
MPI's User-Level Failure Mitigation) an actor rank killed with SIGKILL is reported by MPI to
its learner, which checkpoints without that team and ends the job with a stop record that
names the lost rank; ``--restart`` with one team fewer resumes from that checkpoint and
loses no episode written before it. The same over three "hosts", with a team's solver rank
lost: tests/test_hosts.py. Serial pass; mpirun as a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from mpi_launch import mpi_env, mpirun_exe, wait_for_step

from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.report.build import write_run_report
from hpc_refer.report.schema import STOP_LINE, log_messages
from hpc_refer.report.starts import starts

pytestmark = pytest.mark.mpi_skip

SMALL = ["--replay.learn-start", "200", "--replay.size", "2000", f"--{VRacer.name}.batch",
         "16", f"--{VRacer.name}.hidden", "16", "--chunk-len", "100", "--compile", "off",
         "--log-every", "100", "--checkpoint-every", "1000000"]
"""No periodic checkpoint: the one at the stop is written after the loss (one at the same
step, written before it, would stand instead and hold every team's part)."""


def rank_pid(run_dir: Path, rank: int) -> int | None:
    """The pid of hpc_refer's rank ``rank`` of the run into ``run_dir`` (Open MPI sets
    OMPI_COMM_WORLD_RANK in each rank's environment)."""
    for entry in Path("/proc").iterdir():
        try:
            if str(run_dir).encode() not in (entry / "cmdline").read_bytes():
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in environ:
            return int(entry.name)
    return None


def kill_rank(run_dir: Path, rank: int) -> None:
    pid = rank_pid(run_dir, rank)
    assert pid is not None, f"rank {rank} runs"
    os.kill(pid, signal.SIGKILL)


def stop_of_lost_ranks(proc: subprocess.Popen, run_dir: Path, step: int,
                       kill: Callable[[], None], lost: str) -> int:
    """Once the job ``proc`` reached ``step``, ``kill`` ranks of it; assert that the job
    failed with a stop record (state.txt and one stop line of log.txt) that names the lost
    ranks, ``lost`` (``"4 (host-c)"``: a rank and the start of its host); the step it
    stopped at."""
    try:
        wait_for_step(proc, run_dir, step)
        kill()
        out, _ = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode != 0, out[-3000:]
    state = (run_dir / "state.txt").read_text()
    assert state.startswith(f"failed: MPI ranks lost: {lost}"), state
    assert "processes died or their host went down" in state
    (stop,) = [m for line in log_messages(run_dir / "log.txt") if (m := STOP_LINE.match(line))]
    assert lost in stop["why"]
    return int(stop["step"])


def test_a_killed_actor_rank_stops_the_run_with_a_record_naming_it_and_a_restart_resumes(
        in_tmp):
    run_dir = in_tmp / "r"
    proc = subprocess.Popen(
        [mpirun_exe(), "--with-ft", "ulfm", "-n", "4", sys.executable, "-m",
         "hpc_refer.run", "--env", "Pendulum-v1", "--steps", "1000000", *SMALL,
         "--run-dir", str(run_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=mpi_env())
    stopped = stop_of_lost_ranks(proc, run_dir, 1000, lambda: kill_rank(run_dir, 2), "2 (")
    last = run_dir / "checkpoints" / f"step-{stopped:012d}"
    machine = json.loads((run_dir / "machine.json").read_text())[-1]
    assert machine["mpi_library"].startswith("Open MPI v5"), machine  # ULFM's
    assert sorted(p.name for p in last.iterdir()) == [
        "actor-0.h5", "actor-2.h5", "learner-0.h5", "manifest.json"], "no part of team 1"
    before = (run_dir / "episodes.csv").read_text().splitlines()

    more = subprocess.run([mpirun_exe(), "-n", "3", sys.executable, "-m", "hpc_refer.run",
                           "--restart", str(run_dir), "--steps", str(stopped + 600)],
                          capture_output=True, text=True, timeout=300, env=mpi_env(),
                          check=False)
    assert more.returncode == 0, more.stderr[-3000:]
    assert (run_dir / "state.txt").read_text() == "finished\n"
    after = (run_dir / "episodes.csv").read_text().splitlines()
    assert after[:len(before)] == before and len(after) > len(before)
    first, second = starts((run_dir / "log.txt").read_text().splitlines())
    assert first.ended.startswith("stopped: MPI ranks lost: 2 (")
    assert (first.last_step, second.from_step, second.ended) == (stopped, stopped, "finished")
    assert "0 steps taken again" in write_run_report(run_dir).read_text()
