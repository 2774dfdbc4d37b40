"""Honest clocks (issue 25, point 4): an episode's ``wall_s`` is when it ended, measured on
the actor that ran it and carried with its record to the learner that writes episodes.csv;
the run's clock continues across a restart (the checkpoint stores the elapsed time); the
report's per-rank throughput follows from them.

The runs use ``run_envs:Ticking`` (Diffusion1D: episodes of 50 steps) with a run clock that
advances with the actor's steps only (0.004 s each), so every episode's end time and every
rate is known exactly, whatever the machine's load."""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi_launch import mpi_env, mpirun_exe
from run_envs import SECONDS_PER_STEP, Ticking, ticking_time

from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.loop import checkpoint
from hpc_refer.loop.learner_loop import episode_times_and_agents
from hpc_refer.report.build import Run, _rank_rates
from hpc_refer.report.records import (
    TRUNCATED,
    Chunk,
    ChunkHeader,
    EpisodeRecord,
    LoggedEpisode,
    episodes_from,
    episodes_tree,
    pack_episodes,
    unpack_episodes,
)
from hpc_refer.run.main import main as run_main

pytestmark = pytest.mark.mpi_skip

SMALL = ["--replay.size", "2000", "--replay.learn-start", "200", f"--{VRacer.name}.batch", "16",
         f"--{VRacer.name}.hidden", "16,16", "--log-every", "200", "--chunk-len", "50"]
EPISODE = 50
"""Steps of a Ticking (Diffusion1D) episode."""


def episodes(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "episodes.csv").open() as f:
        return list(csv.DictReader(f))


def test_an_episode_s_end_time_travels_with_its_record():
    """Through the chunk header of an actor rank's message, an evaluation round's message,
    and the unlogged episodes of a checkpoint (one written before the field: nan, through
    the learner loop's upgrade)."""
    record = EpisodeRecord(-3.5, 50, (0.7, 0.1), 12.345)
    chunk = Chunk(np.zeros((51, 2), np.float32), np.zeros((50, 1), np.float32),
                  np.zeros(50, np.float32), np.zeros((50, 1), np.float32),
                  np.ones((50, 1), np.float32), TRUNCATED)
    assert ChunkHeader.unpack(ChunkHeader.of(chunk, record, 3, True).pack()).episode == record
    assert unpack_episodes(pack_episodes([record, record._replace(wall_s=13.0)])) == (
        record, record._replace(wall_s=13.0))
    logged = [LoggedEpisode(400, 2, -3.5, 50, (0.7, 0.1), 12.345)]
    assert episodes_from(episodes_tree(logged)) == logged
    old = {k: v for k, v in episodes_tree(logged).items() if k != "wall_s"}
    upgraded = episode_times_and_agents({"episodes": old, "evals": episodes_tree([])})
    (restored,) = episodes_from(upgraded["episodes"])
    assert restored[:5] == logged[0][:5] and math.isnan(restored.wall_s)


def test_episode_end_times_continue_across_a_restart_and_rate_each_rank(
        in_tmp, monkeypatch, run_clock):
    """One process, 400 steps then resumed to 800: the k-th episode ends at its 50 k-th
    step, 0.2 k s on the clock, in both parts (the resumed clock starts at the checkpoint's
    elapsed time), and the report's rate of the actor is the clock's 250 steps/s."""
    monkeypatch.setattr(Ticking, "steps", 0)
    run_clock(ticking_time)
    assert run_main(["--env", "run_envs:Ticking", "--steps", "400", "--run-dir", "r",
                     *SMALL]) == 0
    manifest = checkpoint.verify(checkpoint.latest(in_tmp / "r"))
    assert manifest["meta"]["wall_s"] == pytest.approx(400 * SECONDS_PER_STEP)
    assert run_main(["--restart", "r", "--steps", "800"]) == 0
    rows = episodes(in_tmp / "r")
    assert [int(e["length"]) for e in rows] == [EPISODE] * 16
    ends = [EPISODE * k * SECONDS_PER_STEP for k in range(1, 17)]
    assert [float(e["wall_s"]) for e in rows] == pytest.approx(ends)
    assert _rank_rates(Run(in_tmp / "r")) == {0: pytest.approx(1 / SECONDS_PER_STEP)}


def test_each_actor_rank_stamps_its_own_episodes_under_mpirun(in_tmp):
    """mpirun -n 3 (one learner, two actors), each rank's clock driven by its own steps: the
    episodes of each actor end on its clock at 0.2 k s, whenever its learner writes them,
    and the report gives each actor rank 250 steps/s."""
    proc = subprocess.run(
        [mpirun_exe(), "-n", "3", sys.executable, "-m", "hpc_refer.run", "--env",
         "run_envs:Ticking", "--steps", "1000", "--run-dir", "r", *SMALL],
        capture_output=True, text=True, timeout=300, env={**mpi_env(), "TICKING_CLOCK": "1"},
        cwd=in_tmp, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = episodes(in_tmp / "r")
    for rank in (1, 2):
        mine = [float(e["wall_s"]) for e in rows if int(e["rank"]) == rank]
        assert len(mine) >= 4, rows
        assert mine == pytest.approx([EPISODE * k * SECONDS_PER_STEP
                                      for k in range(1, len(mine) + 1)])
    assert _rank_rates(Run(in_tmp / "r")) == {1: pytest.approx(1 / SECONDS_PER_STEP),
                                             2: pytest.approx(1 / SECONDS_PER_STEP)}
